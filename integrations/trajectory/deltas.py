"""A conversation's requests as deltas: each attempt's request against the earlier one it extends.

A trajectory record holds a request as what changed since an earlier request of the same conversation
(``base``, how many of its messages it ``keep``s, the ``new`` ones, and the kwargs it ``set``s or
``drop``s), so a row holds a call's new messages only, never the history again; ``rebuild_request``
puts the kwargs back together.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .plain import plain

_LINES = 16  # lines of one conversation a new request is compared with (see History)
_LEAVES = 8  # the latest requests of a line that no later request extends
CONVERSATION_KEYS = ("messages", "input", "contents")  # contents: google-genai
# Kwargs naming a conversation the provider keeps (the Responses API's): a request with one sends new items only.
_HELD_BY_PROVIDER = ("previous_response_id", "conversation")


def _common(old: list[Any], new: list[Any]) -> int:
    n = min(len(old), len(new))
    i = 0
    while i < n and (old[i] is new[i] or old[i] == new[i]):
        i += 1
    return i


def conversation_key(content: dict[str, Any]) -> str | None:
    """The kwarg holding the conversation as a list (``messages``; ``input`` for the Responses API)."""
    for key in CONVERSATION_KEYS:
        if isinstance(content.get(key), list):
            return key
    return None


def request_delta(candidates: Iterable[tuple[str, dict[str, Any]]], content: dict[str, Any]) -> dict[str, Any]:
    """``content`` as a delta against the candidate (newest first) it shares most messages with (exact to
    rebuild), and the candidate chosen as its base (None: no message in common)."""
    key = conversation_key(content)
    messages: list[Any] = content[key] if key is not None else []
    # Its messages all new, however like an earlier request's: a user who says "yes" again is heard again.
    # (Truth, not "is not None": the SDKs pass NotGiven / Omit, both false, for a kwarg not sent.)
    fresh = any(content.get(name) for name in _HELD_BY_PROVIDER)
    best: tuple[str, dict[str, Any]] | None = None
    keep = 0
    for attempt_id, candidate in candidates:
        old = candidate.get(key) if key is not None else None
        shared = _common(old, messages) if isinstance(old, list) and not fresh else 0
        if best is None or shared > keep:
            best, keep = (attempt_id, candidate), shared
        if key is None or fresh or shared == len(messages):
            break
    delta: dict[str, Any] = {"base": None, "keep": 0}
    earlier: dict[str, Any] = {}
    if best is not None and (key is None or fresh or keep > 0):
        delta["base"], earlier = best
        delta["keep"] = keep
    if key is not None:
        delta["key"] = key
        delta["new"] = plain(messages[keep if delta["base"] else 0 :], keys=False)
    # A conversation given as one text or one message (``input="..."``) is what this request says, however like
    # an earlier one's: always set, so the user's words are read from each request that sends them (``said``).
    delta["set"] = plain(
        {
            k: v
            for k, v in content.items()
            if k != key and (k not in earlier or earlier[k] != v or k in CONVERSATION_KEYS)
        },
        keys=False,
    )
    drop = sorted(k for k in earlier if k not in content and k != key)
    if drop:
        delta["drop"] = drop
    return delta


@dataclass(eq=False)
class _Line:
    first: Any  # the message its requests open with
    leaves: deque[tuple[str, dict[str, Any]]] = field(default_factory=lambda: deque(maxlen=_LEAVES))
    # The request that opened the line, then the latest that extended it: the agent's loop, kept apart from
    # the leaves, which side calls opening as the loop does would push out.
    trunk: tuple[str, dict[str, Any]] | None = None


class History:
    """A conversation's earlier requests, that a new one is written as a delta against.

    Grouped in lines by the message they open with: an agent's loop and the side calls it makes in
    between (a summarizer per document, a judge) open differently, so however many side calls come
    between two requests of the loop, the loop's last one is still at hand, and the user's earlier
    words are not taken for new ones. Bounded: ``_LINES`` lines (least recently used dropped) of
    ``_LEAVES`` requests each (a request that extends one takes its place), and each line's trunk: side
    calls that open as the loop does (its system prompt) may outnumber the leaves, never push it out.
    """

    __slots__ = ("_last", "_lines")

    def __init__(self) -> None:
        self._lines: list[_Line] = []  # least recently used first
        self._last: tuple[str, dict[str, Any]] | None = None  # for a request that holds no conversation

    def delta(self, attempt_id: str, content: dict[str, Any]) -> dict[str, Any]:
        """``content`` (attempt ``attempt_id``'s request) as a delta against an earlier request; it is kept
        to compare later ones with."""
        key = conversation_key(content)
        messages = content[key] if key is not None else None
        line = self._line(messages[0]) if messages else None
        if line is not None:
            candidates = list(reversed(line.leaves))
            trunk = line.trunk
            if trunk is not None and all(leaf is not trunk for leaf in candidates):
                candidates.append(trunk)  # last: a leaf sharing as much is the newer request
            delta = request_delta(candidates, content)
        else:
            delta = request_delta([self._last] if self._last is not None else [], content)
        entry = (attempt_id, content)
        self._last = entry
        if key is None or not messages:
            return delta
        if line is None:
            line = _Line(messages[0], trunk=entry)
            if len(self._lines) >= _LINES:
                del self._lines[0]
        else:
            self._lines.remove(line)
            base = delta["base"]
            trunk = line.trunk
            if trunk is not None and trunk[0] == base and delta["keep"] == len(trunk[1].get(key) or ()):
                line.trunk = entry
            # The request its base was, sent again or extended: this one stands for both from now on.
            for leaf in line.leaves:
                if leaf[0] == base and delta["keep"] == len(leaf[1].get(key) or ()):
                    line.leaves.remove(leaf)
                    break
        line.leaves.append(entry)
        self._lines.append(line)
        return delta

    def _line(self, first: Any) -> _Line | None:
        for line in reversed(self._lines):
            if line.first is first or line.first == first:
                return line
        return None


def rebuild_request(delta: dict[str, Any], requests: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The kwargs ``request_delta`` described, given the requests rebuilt so far by attempt id.

    None when its base is missing (an earlier run that is not at hand).
    """
    base_id = delta.get("base")
    base: dict[str, Any] = {}
    if base_id is not None:
        found = requests.get(base_id)
        if found is None:
            return None
        base = found
    key = delta.get("key")
    dropped = set(delta.get("drop") or ())
    base_key = conversation_key(base)
    out = {k: v for k, v in base.items() if k not in dropped and k != base_key}
    out.update(delta.get("set") or {})
    if key is not None:
        old = base.get(key)
        kept = list(old[: delta.get("keep") or 0]) if isinstance(old, list) else []
        out[key] = kept + list(delta.get("new") or [])
    return out
