"""The SDK's ``SpanContext`` read and made as the tuple it is, where a span is started on every call.

``SpanContext(...)`` runs a Python ``__new__`` taking keywords, and each of its properties is a Python call;
the tuple itself, built or read by position, costs neither. ``holds()`` (``HOLDS``, asked once at import) says
whether the SDK still makes that tuple (these fields, in this order, the validity worked out as ``is_valid``
here); where it does not, callers build and read span contexts the SDK's way.
"""

from __future__ import annotations

from typing import Final

from opentelemetry.trace import SpanContext, TraceFlags, TraceState

TRACE_ID: Final = 0
SPAN_ID: Final = 1
IS_REMOTE: Final = 2
FLAGS: Final = 3
TRACE_STATE: Final = 4
IS_VALID: Final = 5
MAX_TRACE_ID: Final = 2**128 - 1
MAX_SPAN_ID: Final = 2**64 - 1
new_tuple = tuple.__new__
# Every trace-flags byte made once: a server continues a remote parent on every request.
TRACE_FLAGS = tuple(TraceFlags(bits) for bits in range(256))


def holds() -> bool:
    """Whether the SDK makes span contexts as this module builds them and reads them (by these positions)."""
    state = TraceState([("k", "v")])
    made = SpanContext(0xAB, 0xCD, is_remote=True, trace_flags=TraceFlags(3), trace_state=state)
    by_name = (made.trace_id, made.span_id, made.is_remote, made.trace_flags, made.trace_state, made.is_valid)
    by_position = tuple(made[i] for i in (TRACE_ID, SPAN_ID, IS_REMOTE, FLAGS, TRACE_STATE, IS_VALID))
    return by_name == by_position and made == new_tuple(SpanContext, (0xAB, 0xCD, True, TRACE_FLAGS[3], state, True))


HOLDS: Final = holds()
