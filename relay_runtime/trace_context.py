"""W3C trace context: continuing a trace that began in another process, and handing ours on.

A scope pushed with ``remote_parent=`` (a W3C ``traceparent``) is a root in this
process but continues the caller's trace: its ``trace_id`` is the remote one and
its start event's metadata carries ``relay.remote_parent`` (and
``relay.remote_tracestate`` when given), so every consumer sees where it hangs.

The other direction, ``carrier_for(handle)``, gives the headers a scope's
outgoing request should carry. Exporters that keep their own span ids (the
OTel exporter) register a provider, so the carrier names *their* span and a
server's span in another process joins that trace; with none registered, the
carrier is built from the scope's own ids, which are W3C-shaped already.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .scopes import ScopeHandle

REMOTE_PARENT = "relay.remote_parent"
REMOTE_TRACESTATE = "relay.remote_tracestate"

# version 00 as the spec fixes it; a later version may append fields after the flags.
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
_MAX_TRACESTATE = 512  # the spec's limit for what a vendor must propagate
_MAX_TRACESTATE_MEMBERS = 32
# Sampled and random-trace-id: the bits of trace-flags defined so far; the others a vendor MUST send as zero.
_KNOWN_FLAGS = 0x03
# A list-member of W3C tracestate: a key (simple, or tenant@system) '=' a value of printable ASCII
# without ',' and '=' that does not end in a space.
_KEY_CHARS = r"[a-z0-9_\-*/]"
_TRACESTATE_MEMBER = re.compile(
    rf"(?:[a-z]{_KEY_CHARS}{{0,255}}|[a-z0-9]{_KEY_CHARS}{{0,240}}@[a-z]{_KEY_CHARS}{{0,13}})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)


# ``-<flags>``, a traceparent's last field with its dash, for each value flags can hold: read from a table, where a
# format spec (``f"{n:02x}"``) costs every request's header several hundred nanoseconds more. The OTel exporter's
# headers are written with it too.
FLAGS_TEXT = {flags: f"-{flags:02x}" for flags in range(256)}


class TraceParent(str):
    """A parsed ``traceparent``: ``trace_id`` (32 hex), ``span_id`` (16 hex), ``flags`` (int).

    It is also the normalised header itself (a ``str``), so it goes wherever the header goes (a
    scope's ``relay.remote_parent`` metadata, a record) and whoever reads it there gets the parsed
    value back from ``parse_traceparent`` without parsing it again.
    """

    trace_id: str
    span_id: str
    flags: int

    def __new__(cls, trace_id: str, span_id: str, flags: int) -> TraceParent:
        self = super().__new__(cls, f"00-{trace_id}-{span_id}-{flags:02x}")
        self.trace_id = trace_id
        self.span_id = span_id
        self.flags = flags
        return self

    def __getnewargs__(self) -> tuple[str, str, int]:  # type: ignore[override]
        # Copied or pickled with its fields, not as the one string ``str`` would hand ``__new__``.
        return (self.trace_id, self.span_id, self.flags)

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 1)

    def header(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"TraceParent({self.header()!r})"


_new_str = str.__new__


def parse_traceparent(value: object) -> TraceParent | None:
    """The parsed header, or None for anything the W3C spec says to ignore (never raises)."""
    if type(value) is TraceParent:
        return value  # parsed already
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    match = _TRACEPARENT.match(text)
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    # Made here rather than through ``TraceParent(...)``: a server parses one per request, and a version
    # 00 header matched whole is its normalised form already (no second string built from its parts).
    parsed = _new_str(TraceParent, text if version == "00" else f"00-{trace_id}-{span_id}-{flags}")
    parsed.trace_id = trace_id
    parsed.span_id = span_id
    parsed.flags = int(flags, 16)
    return parsed


def require_traceparent(value: object) -> TraceParent:
    """``parse_traceparent`` for a caller's argument: a clear error instead of None."""
    parsed = parse_traceparent(value)
    if parsed is None:
        raise ValueError(f"remote_parent must be a W3C traceparent such as '00-<32 hex>-<16 hex>-01', got {value!r}")
    return parsed


def clean_tracestate(value: object) -> str | None:
    """A tracestate worth carrying on, or None: bounded, and W3C-shaped.

    The spec forbids passing on one that is not (an exporter drops it from the span): a scope's record
    must not claim a peer sent a tracestate it did not, nor keep whatever text a peer put there."""
    if not isinstance(value, str) or not value or len(value) > _MAX_TRACESTATE:
        return None
    keys: set[str] = set()
    for member in value.split(","):
        member = member.strip(" \t")  # optional white space around a member; an empty member is allowed
        if not member:
            continue
        if _TRACESTATE_MEMBER.fullmatch(member) is None:
            return None
        key = member[: member.index("=")]
        if key in keys or len(keys) == _MAX_TRACESTATE_MEMBERS:
            return None
        keys.add(key)
    return value if keys else None


# -- outgoing ---------------------------------------------------------------------------------

CarrierProvider = Callable[["ScopeHandle"], "dict[str, str] | None"]

# (provider, fresh): a fresh provider makes a new dict at every call, handed on without a copy.
_providers: tuple[tuple[CarrierProvider, bool], ...] = ()
_providers_lock = threading.Lock()


def register_carrier_provider(provider: CarrierProvider, *, fresh: bool = False) -> None:
    """``provider(handle)`` returns the propagation headers for that scope's span, or None if it has none.

    ``fresh``: it returns a new dict at every call, so ``carrier_for`` hands that one on; else a copy.
    """
    global _providers
    with _providers_lock:
        if all(p != provider for p, _ in _providers):
            _providers = (*_providers, (provider, fresh))


def unregister_carrier_provider(provider: CarrierProvider) -> bool:
    global _providers
    with _providers_lock:
        kept = tuple(entry for entry in _providers if entry[0] != provider)
        if len(kept) == len(_providers):
            return False
        _providers = kept
        return True


def own_traceparent(handle: ScopeHandle) -> str:
    """The scope's own ids as a traceparent: its trace id, and the first half of its uuid as the span.

    Sampled, unless its trace continues a remote parent that was not: that caller's decision holds."""
    return _own_traceparent(handle, _remote_root(handle))


def _own_traceparent(handle: ScopeHandle, root: Mapping[str, object]) -> str:
    remote = parse_traceparent(root.get(REMOTE_PARENT))
    flags = remote.flags & _KNOWN_FLAGS if remote is not None else 1
    return f"00-{handle.trace_id}-{handle.uuid[:16]}{FLAGS_TEXT[flags]}"


def _remote_root(handle: ScopeHandle) -> Mapping[str, object]:
    """The metadata of the root of ``handle``'s tree: where a remote parent is recorded, if it has one."""
    node = handle
    while node.parent is not None:
        node = node.parent
    md = node.metadata
    return md if isinstance(md, Mapping) else {}


def carrier_for(handle: ScopeHandle) -> dict[str, str]:
    """What a request made inside ``handle`` carries: the first provider's headers, else our own ids
    (with the tracestate of the remote parent the trace continues: W3C has a vendor hand it on).

    Always a dict of the caller's own: a provider's is copied unless it makes a new one per call."""
    for provider, fresh in _providers:
        try:
            carrier = provider(handle)
        except Exception:
            # A provider's failure costs its span the link, never the caller its request.
            continue
        if carrier and "traceparent" in carrier:
            return carrier if fresh and type(carrier) is dict else dict(carrier)
    root = _remote_root(handle)
    out = {"traceparent": _own_traceparent(handle, root)}
    state = root.get(REMOTE_TRACESTATE)
    if isinstance(state, str):
        out["tracestate"] = state
    return out
