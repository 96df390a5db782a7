"""The redaction policies in force, for the library's own log lines.

A log line belongs to no event, so no path says which of a policy's rules apply to it: every
policy installed on a relay now (``relay.redaction.use``) reads it with the rules that find values,
whatever their paths (``RedactionPolicy.redact_spans``), as it reads a stored answer. Its message
and the traceback it carries get what the events get (``redaction._scrubbed_record`` calls in).
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .redaction_policy import RedactionPolicy

_lock = threading.Lock()
# Each relay's subscriber list -> the policy installed on it. Held weakly: a relay gone takes its entry along.
_installed: weakref.WeakKeyDictionary[object, RedactionPolicy] = weakref.WeakKeyDictionary()


def installed(subscribers: object, policy: RedactionPolicy | None) -> None:
    """``policy`` is now the one of ``subscribers``' relay (None: it has none)."""
    with _lock:
        if policy is None:
            _installed.pop(subscribers, None)
        else:
            _installed[subscribers] = policy


def any_in_force() -> bool:
    return bool(_installed)


def redacted(text: str) -> str:
    """``text`` as every policy in force would record it; a policy that fails on it leaves it to the others."""
    with _lock:
        policies = list({id(p): p for p in _installed.values()}.values())  # one policy on many relays reads once
    for policy in policies:
        try:
            out = policy.redact_spans(text)
        except Exception:  # a log line must never fail: the next policy still reads it
            continue
        if isinstance(out, str):
            text = out
    return text
