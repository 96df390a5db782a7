"""Stream chunks redacted across their boundaries.

A provider streams a few characters at a time, so a value a rule finds (an e-mail, a card number, a
key) is nearly always split over two or more chunks, and no chunk alone holds it whole: redacted
chunk by chunk, its pieces would reach every sink that records deltas (the journal's token rows,
trajectories), to be joined again by anyone who reads them in order.

So while a policy has a rule that finds values inside the response's text, each stream's chunk
marks carry the text up to a point no value can still straddle, redacted, and hold back the rest:

- at least the last ``HOLD_CHARS`` characters, which a value with spaces in it (a phone or card
  number, a spaced IBAN) cannot outgrow (and nothing until ``STEP_CHARS`` more have come, so the
  held text is read once per step, not once per chunk);
- and the trailing word, however long, since a value without spaces (a key, a JWT, an e-mail
  address) may go on in the next chunk;
- and anything a rule's match over the held text begins before that point.

What is held goes out with a later chunk, or in one last chunk mark delivered just before the
attempt's end event (``redaction_install``). A stream's held text is bounded by ``MAX_HELD_CHARS``
(a longer word is cut there, redacted as far as it goes).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import conventions as cv
from .detectors import unclaimed
from .events import MARK, Event, new_event
from .ids import new_id
from .pointers import may_reach
from .redaction_rules import Rule
from .types import ChunkDelta

HOLD_CHARS = 128
# Text is let go once this much more than the hold has come: a scan of the held text per chunk of a few
# characters would cost more than the call.
STEP_CHARS = 64
MAX_HELD_CHARS = 16 * 1024  # past this a word (no key or token is this long) is let go: held text is copied per chunk
MAX_STREAMS = 4096  # streams held at once per subscriber list (one whose end is never seen must not pile up)
_STREAMED_PATHS = (("response", "text"), ("response", "reasoning"))


class Held:
    """What one stream's chunk marks have not carried yet: raw text, awaiting the chunks after it."""

    __slots__ = ("index", "reasoning", "text")

    def __init__(self) -> None:
        self.text = ""
        self.reasoning = ""
        self.index = 0  # the index the chunk mark after the last one seen would have


def released_mark(attempt: str, at: Event, held: Held, delta: ChunkDelta, metadata: dict[str, Any] | None) -> Event:
    """The chunk mark of the stream of ``attempt`` carrying ``delta``, what ``held`` held, delivered just before
    ``at`` (the attempt's end, or its next chunk mark)."""
    data = {"index": held.index, "delta": delta, "chunk": None, "released": True}
    return new_event(MARK, new_id(), attempt, at.trace_id, cv.CHUNK, None, at.timestamp, data=data, metadata=metadata)


def released_as_held(attempt: str, at: Event, held: Held) -> Event | None:
    """``RedactionPolicy.released`` with no policy left (it was removed mid-stream): the held text as it came,
    in a chunk mark of its own before the stream's end ``at``."""
    if not held.text and not held.reasoning:
        return None
    delta = ChunkDelta(text=held.text, reasoning=held.reasoning)
    held.text = held.reasoning = ""
    return released_mark(attempt, at, held, delta, None)


def carried_by(mark: Event, held: Held) -> Event:
    """The stream's next chunk ``mark`` with the text ``held`` held (its policy removed mid-stream) put before its
    own: a mark of its own would take the index ``mark`` has, and a chunk index must name one mark."""
    data = mark.data
    if (not held.text and not held.reasoning) or not isinstance(data, dict):
        return mark
    delta = data.get("delta")
    if isinstance(delta, ChunkDelta):
        merged = ChunkDelta(
            text=held.text + delta.text, reasoning=held.reasoning + delta.reasoning, model=delta.model,
            extra_chars=delta.extra_chars,
        )  # fmt: skip
    else:  # a chunk that said nothing (a finish reason, usage): it carries the held text alone
        merged = ChunkDelta(text=held.text, reasoning=held.reasoning)
    held.text = held.reasoning = ""
    return new_event(
        mark.kind, mark.uuid, mark.parent_uuid, mark.trace_id, mark.name, mark.scope_type, mark.timestamp,
        data={**data, "delta": merged, "released": True}, metadata=mark.metadata,
    )  # fmt: skip


def hold_of(holds: dict[Any, Held], key: Any) -> Held:
    """The hold of the stream ``key`` in ``holds``, new if it has none; the table keeps ``MAX_STREAMS``
    (a stream whose end is never seen must not pile up: the oldest goes)."""
    held = holds.get(key)
    if held is None:
        if len(holds) >= MAX_STREAMS:
            try:
                del holds[next(iter(holds))]
            except (StopIteration, RuntimeError, KeyError):
                pass  # another thread's stream changed the table meanwhile: next time
        held = holds[key] = Held()
    return held


def streamed_rules(rules: Iterable[Rule]) -> tuple[Rule, ...]:
    """The rules that find values inside a response's text or reasoning (whole-field rules act on each
    chunk's delta as a whole, so they need nothing held)."""
    return tuple(r for r in rules if not r.whole and any(r.applies(path) for path in _STREAMED_PATHS))


# What an SDK chunk holds beside the delta's text and reasoning: pieces of the answer's other fields (a tool
# call's name and its arguments, as JSON fragments) that the answer's end event carries whole.
_PIECE_PATHS = (("response", "tool_calls"),)


def pieces_ruled(rules: Iterable[Rule]) -> bool:
    """Whether a rule acts on what a chunk's SDK object holds beside the delta's text (a rule on every string,
    or one reaching a tool call's arguments): a piece of an argument is no field a rule can judge, so each
    chunk mark's SDK chunk is reduced to its kind (``chunk_kind``) even when no text is held back."""
    return any(
        not r.parsed_paths or any(may_reach(pattern, path) for pattern in r.parsed_paths for path in _PIECE_PATHS)
        for r in rules
    )


def settled(rules: tuple[Rule, ...], text: str) -> int:
    """How much of ``text`` (a stream's held text and its new delta) can go out now: nothing after it
    can join a value that begins before it."""
    n = len(text)
    if n < HOLD_CHARS + STEP_CHARS:
        return 0
    at = n - HOLD_CHARS
    if n <= MAX_HELD_CHARS:
        last = text.rsplit(None, 1)
        word = len(last[-1]) if last and not text[-1].isspace() else 0
        at = min(at, n - word)
    if at <= 0:
        return 0
    spans = [span if isinstance(span, tuple) else span.span() for rule in rules for span in rule.spans(text)]
    moved = True
    while moved:  # a match that straddles the point moves it back to where the match begins
        moved = False
        for start, end in spans:
            if start < at < end:
                at = start
                moved = True
    return at


def redact_across(rules: tuple[Rule, ...], key: bytes | None, pieces: list[str]) -> list[str]:
    """``pieces`` (one stream's text, in order) with each value a rule finds in their join replaced: its
    replacement goes in the piece where the value begins, and the rest of it leaves the pieces after.

    For what is stored piece by piece (a cassette's recorded stream events), where no piece alone may
    hold a value whole. Where two values overlap, the one that begins first wins the overlap, as in every
    other record (``detectors.unclaimed``).
    """
    joined = "".join(pieces)
    hits: list[tuple[int, int, int, Any]] = []
    for index, rule in enumerate(rules):
        for span in rule.spans(joined):
            start, end = span if isinstance(span, tuple) else span.span()
            if end > start:
                hits.append((start, index, end, None if isinstance(span, tuple) else span))
    if not hits:
        return pieces
    hits.sort(key=lambda hit: (hit[0], hit[1]))
    kept: list[tuple[int, int, str]] = []
    for start, (_, index, end, match) in unclaimed(hits):
        rule = rules[index]
        new = rule.constant if rule.constant is not None else rule.replace(joined[start:end], match, key)
        kept.append((start, end, new))
    return spread(pieces, joined, kept)


def spread(pieces: list[str], joined: str, kept: list[tuple[int, int, str]]) -> list[str]:
    """``pieces`` (whose join is ``joined``) with each span of ``kept`` (start, end, replacement; in order, not
    overlapping) replaced: the replacement in the piece where the span begins, the rest of it out of those after."""
    out: list[str] = []
    begin = 0
    for piece in pieces:
        stop = begin + len(piece)
        parts: list[str] = []
        at = begin
        for start, end, new in kept:
            if end <= begin or start >= stop:
                continue
            if start > at:
                parts.append(joined[at:start])
            if start >= begin:
                parts.append(new)
            at = max(at, min(end, stop))
        parts.append(joined[at:stop])
        out.append("".join(parts))
        begin = stop
    return out


_KIND_FIELDS = ("object", "type", "event")


def chunk_kind(chunk: Any) -> dict[str, str] | None:
    """What kind of chunk an SDK chunk was (its ``object`` / ``type`` / ``event``), and nothing it said."""
    if chunk is None:
        return None
    kind: dict[str, str] = {}
    for name in _KIND_FIELDS:
        value = chunk.get(name) if isinstance(chunk, dict) else getattr(chunk, name, None)
        if isinstance(value, str) and value and len(value) <= 64:
            kind[name] = value
    return kind or None
