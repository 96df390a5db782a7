"""A recorded call's answers as the policy's whole-field rules made them (``Rule("redact", paths=["/response/text"])``).

Detector and pattern rules find their values in any string, so a cassette's stored HTTP bodies go through them
as they are (``policy.redact_answers``). A whole-field rule acts on a field of the provider-neutral view, which the
provider's bodies do not hold in the view's layout: a chat completion's ``choices[0].message.content``, an
Anthropic answer's text blocks, a stream's text in pieces over its events. So what the rules made of the answer is
taken from the attempt's end event, which reads the view (``RedactionPolicy._answer_changes``: each string of the
answer a rule changed -> what it became, and each tool call's arguments held as an object -> what they became), and
put where the stored answer holds it:

- the strings at one place of the answer (``groups``: a path with list positions left out, so the events of a
  stream and the blocks of a message are taken together, and a stream event's kind) are read in order as one text;
  a changed string found there starting and ending where pieces do gets its replacement in its first piece, the
  rest of it blanked (``spread``), so the SDK still joins the pieces into the redacted text; an Anthropic block's
  start that already carries text (or thinking) is that block's first piece (``_opening``);
- a run of pieces that is JSON text (tool-call arguments, whole in a body or in fragments over stream events) is read
  as the JSON it is: each string (or number) in it that a rule changed is replaced, and the run written whole in its
  first piece; arguments a body holds as an object (Anthropic's ``input``) are replaced by what the rules made of them;
- a field a ``remove`` rule dropped becomes an empty string (``{}`` / ``[]`` where it was a JSON object or array: the
  arguments of a tool call), which the SDK parses as it would the field's absence of content.

A stream's copies of the whole text (the Responses API's ``response.output_text.done`` and ``response.completed``)
are places of their own, replaced as the deltas are. The answer's vocabulary fields (``_VOCABULARY``: roles, kinds,
finish reasons) are never the model's words and are not read, so a one-word answer ("stop") leaves them as they are.
An SDK call whose attempt's end was not read (nothing observed it) is not written at all (``unread_message``),
nor is one whose answer as it would be written still holds a changed value (``verify``: a layout not known here).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..attempt import current_attempt
from ..redaction_apply import MIN_WHOLE
from ..redaction_streams import spread

if TYPE_CHECKING:
    from ..redaction_policy import AnswerChanges, RedactionPolicy

_MAX_DEPTH = 32
# Fields whose values are the API's words (what kind of thing, whose turn, why it ended), never the model's.
_VOCABULARY = frozenset({"role", "type", "object", "finish_reason", "stop_reason", "status", "event"})
# Where stored answers hold no text: bytes as base64 (audio, images, a body that is not UTF-8).
_BINARY = frozenset({"$bytes", "base64"})
_STREAMS = frozenset({"events", "session"})  # where a recorded answer holds a stream, one item per event
# An Anthropic stream's block start, which may carry the opening of a text (or thinking) block its deltas go on.
_OPENING, _DELTA = "content_block_start", "content_block_delta"
_OPENED = frozenset({"text", "thinking"})
# A JSON run is looked for over at most this many pieces and characters from where it opens.
_MAX_RUN_PIECES = 20_000
_MAX_RUN_CHARS = 4 * 1024 * 1024
_WAITING: Any = object()  # an attempt whose end has not been read yet
_FAILED: Any = object()  # the policy failed on the attempt's end: what its rules made of the answer is unknown

Path = tuple[Any, ...]


class Rewrites:
    """What the whole-field rules made of the answer of each call one cassette session records, by call.

    A call is watched when it begins recording (``watch``): its LLM attempt's end event, read by the policy,
    hands over its answer's changed strings (``RedactionPolicy.answer_waiters``). Calls are dicts of the session's
    own (``Cassette.new``), kept alive by it: known by identity.
    """

    def __init__(self) -> None:
        self._changes: dict[int, Any] = {}
        self._waiting: list[tuple[RedactionPolicy, str]] = []

    def watch(self, policy: RedactionPolicy, call: dict[str, Any]) -> None:
        """``call``, recording now under ``policy`` (whole-field rules on the answer), awaits its attempt's end."""
        key = id(call)
        self._changes[key] = _WAITING
        attempt = current_attempt()
        if attempt is None or attempt.relay.redaction.policy is not policy:
            return  # no attempt reads the answer: ``unread`` says so when the call is written

        def ended(changes: AnswerChanges | None) -> None:
            self._changes[key] = _FAILED if changes is None else changes

        uuid = attempt.handle.uuid
        policy.answer_waiters[uuid] = ended
        self._waiting.append((policy, uuid))

    def close(self) -> None:
        """Stop waiting for the attempts' ends (the session is being written): one that comes later is not read."""
        for policy, uuid in self._waiting:
            policy.answer_waiters.pop(uuid, None)
        self._waiting = []

    def unread(self, call: dict[str, Any]) -> bool:
        """Whether ``call`` is a watched SDK call whose answer no attempt end has told the rules' changes of."""
        found = self._changes.get(id(call))
        return (found is _WAITING or found is _FAILED) and "http" in call

    def of(self, call: dict[str, Any]) -> AnswerChanges | None:
        """What the rules made of ``call``'s answer, or None when it is not known here."""
        found = self._changes.get(id(call))
        return found if isinstance(found, tuple) else None


def unread_message(path: Any, number: int) -> str:
    return (
        f"cassette {path}: this session's call #{number} was recorded under a redaction policy with whole-field "
        "rules on the answer, but no end of its LLM attempt was read, so what those rules make of the answer is "
        "unknown: it is not written as the provider gave it. The answer is read at its attempt's end event: record "
        "with a subscriber taking scope ends (any sink: a Recorder, the journal, an exporter) in a managed turn (a "
        "call nothing manages has no attempt), and read each stream to its end, or close it, inside the use()"
    )


def rewritten(call: dict[str, Any], changes: AnswerChanges) -> dict[str, Any]:
    """``call`` with each string of its answers (all but its request) that ``changes`` names replaced (see above),
    and each tool call's arguments held as an object (Anthropic's ``input``, Gemini's ``args``) as the rules made it."""
    strings = {old: _as_removed(old) if new == "" else new for old, new in changes[0].items() if old}
    answers = {k: v for k, v in call.items() if k != "request"}
    edits: list[tuple[Path, Any]] = list(_object_edits(answers, (), changes[1], 0)) if changes[1] else []
    if strings:
        skip = {path for path, _ in edits}
        for pieces in groups(answers, skip):
            edits.extend(_group_edits(pieces, strings))
    if not edits:
        return call
    out = copy.deepcopy(call)
    for path, new in edits:
        _set(out, path, copy.deepcopy(new))
    return out


def _object_edits(value: Any, path: Path, objects: list[tuple[Any, Any]], depth: int) -> Iterator[tuple[Path, Any]]:
    """Where ``value`` holds one of ``objects``' originals (a tool call's arguments as an object): its redacted form
    there, numbers and all (a whole-field rule acts on a number as on its text)."""
    if depth > _MAX_DEPTH or not isinstance(value, dict | list):
        return
    for old, new in objects:
        if value == old:
            yield path, new
            return
    for key, item in value.items() if isinstance(value, dict) else enumerate(value):
        yield from _object_edits(item, (*path, key), objects, depth + 1)


def _as_removed(old: str) -> str:
    """What stands for a removed field: nothing, in the form its JSON text had (tool-call arguments stay JSON)."""
    head = old.lstrip()[:1]
    if head in ("{", "["):
        try:
            return "{}" if isinstance(json.loads(old), dict) else "[]"
        except ValueError:
            pass
    return ""


def groups(value: Any, skip: set[Path]) -> list[list[tuple[Path, str]]]:
    """The strings of ``value`` but those under ``skip``, by place: a place is a path with list positions left out
    (the events of a stream, the blocks of a message) and the kinds of stream events on the way; each in order."""
    found: dict[tuple[str, ...], list[tuple[Path, str]]] = {}
    for path, place, text in _strings(value, (), (), 0, skip):
        found.setdefault(place, []).append((path, text))
    return list(found.values())


def _strings(
    value: Any, path: Path, place: tuple[str, ...], depth: int, skip: set[Path], event: bool = False
) -> Iterator[tuple[Path, tuple[str, ...], str]]:
    if isinstance(value, str):
        yield path, place, value
    elif depth > _MAX_DEPTH or (skip and path in skip):
        return
    elif isinstance(value, dict):
        if event:  # a stream's event: its kind (SSE ``event:``, its data's ``type``) tells its fields apart
            data = value.get("data")
            kinds = (value.get("event"), data.get("type") if isinstance(data, dict) else None)
            if _OPENING in kinds and isinstance(data, dict):
                yield from _opening(value, data, path, place, kinds, depth, skip)
                return
            place = (*place, *(f"@{kind}" for kind in kinds if isinstance(kind, str)))
        for k, v in value.items():
            if k not in _VOCABULARY and k not in _BINARY:
                yield from _strings(v, (*path, k), (*place, str(k)), depth + 1, skip)
    elif isinstance(value, list):
        events = bool(path) and path[-1] in _STREAMS
        for i, v in enumerate(value):
            yield from _strings(v, (*path, i), place, depth + 1, skip, events)


def _opening(
    event: dict[str, Any],
    data: dict[str, Any],
    path: Path,
    place: tuple[str, ...],
    kinds: tuple[Any, ...],
    depth: int,
    skip: set[Path],
) -> Iterator[tuple[Path, tuple[str, ...], str]]:
    """An Anthropic block's start: the text (or thinking) it may already carry is the first piece of that block's
    text, so it is placed with the deltas that follow (as the SDK joins them); its other fields are its own."""
    block = data.get("content_block")
    own = (*place, *(f"@{kind}" for kind in kinds if isinstance(kind, str)))
    field = block.get("type") if isinstance(block, dict) else None
    if isinstance(block, dict) and isinstance(field, str) and field in _OPENED and isinstance(block.get(field), str):
        at = (*path, "data", "content_block", field)
        if not (skip and at in skip):
            as_delta = (f"@{_DELTA}" if kind == _OPENING else f"@{kind}" for kind in kinds if isinstance(kind, str))
            yield at, (*place, *as_delta, "data", "delta", field), block[field]
        data = {**data, "content_block": {k: v for k, v in block.items() if k != field}}
    for k, v in {**event, "data": data}.items():
        if k not in _VOCABULARY and k not in _BINARY:
            yield from _strings(v, (*path, k), (*own, str(k)), depth + 1, skip)


def _group_edits(found: list[tuple[Path, str]], changes: Mapping[str, str]) -> Iterator[tuple[Path, str]]:
    """The pieces of one place (``groups``) to change, in three steps, each on what the ones before left: changed
    strings that are whole pieces or runs of them (a field's text), JSON text holding changed strings (arguments),
    then long changed strings wherever they stand (``_claimed``)."""
    pieces = [text for _, text in found]
    joined = "".join(pieces)
    starts: list[int] = []
    at = 0
    for piece in pieces:
        starts.append(at)
        at += len(piece)
    bounds = set(starts) | {at}
    claimed = _claimed(joined, bounds, changes, [], loose=False)
    covered = _covered(starts, pieces, claimed)
    runs = list(_json_runs(pieces, covered, changes))
    taken = [(starts[first], starts[last] + len(pieces[last]), "") for first, last, _ in runs]
    claimed += _claimed(joined, bounds, changes, claimed + taken, loose=True)
    claimed.sort()
    new_pieces = spread(pieces, joined, claimed) if claimed else list(pieces)
    for first, last, text in runs:
        new_pieces[first] = text
        for i in range(first + 1, last + 1):
            new_pieces[i] = ""
    for (path, old), new in zip(found, new_pieces, strict=True):
        if new != old:
            yield path, new


def _claimed(
    joined: str, bounds: set[int], changes: Mapping[str, str], taken: list[tuple[int, int, str]], *, loose: bool
) -> list[tuple[int, int, str]]:
    """The spans of ``joined`` that are a changed string whole, longest first, overlapping neither each other nor
    ``taken``; in order.

    Not ``loose``: those that start and end where pieces do (a piece's text, a message's blocks, a stream's
    deltas). ``loose``: those long enough (``MIN_WHOLE``, as where the events' own objects are redacted through the
    view) to be that value wherever they stand: inside a longer string, or over pieces that hold more than the
    field. A short one ("Yes") only where it is a field's whole text, not wherever those letters happen to stand.
    """
    spans: list[tuple[int, int, str]] = []
    for old in sorted(changes, key=len, reverse=True):
        if loose and len(old) < MIN_WHOLE:
            continue
        start = joined.find(old)
        while start != -1:
            end = start + len(old)
            if (
                (loose or (start in bounds and end in bounds))
                and all(end <= s or start >= e for s, e, _ in spans)
                and all(end <= s or start >= e for s, e, _ in taken)
            ):
                spans.append((start, end, changes[old]))
            start = joined.find(old, start + 1)
    spans.sort()
    return spans


def _covered(starts: list[int], pieces: list[str], claimed: list[tuple[int, int, str]]) -> list[bool]:
    """Which pieces a claimed span took (or began in)."""
    out = []
    for start, piece in zip(starts, pieces, strict=True):
        end = start + len(piece)
        out.append(any((s < end and e > start) or s == start for s, e, _ in claimed))
    return out


def _json_runs(pieces: list[str], covered: list[bool], changes: Mapping[str, str]) -> Iterator[tuple[int, int, str]]:
    """Runs of pieces (first, last) not otherwise replaced whose join is JSON text holding a changed string, with
    that text rewritten: the JSON of a tool call's arguments, in one piece or in fragments over stream events."""
    i, n = 0, len(pieces)
    while i < n:
        if covered[i] or pieces[i].lstrip()[:1] not in ("{", "["):
            i += 1
            continue
        text = ""
        for j in range(i, min(n, i + _MAX_RUN_PIECES)):
            if covered[j] or len(text) > _MAX_RUN_CHARS:
                break
            text += pieces[j]
            try:
                parsed = json.loads(text)
            except ValueError:
                continue
            new = replaced_in(parsed, changes, 0)
            if new is not parsed:
                yield i, j, json.dumps(new, ensure_ascii=False)
            i = j
            break
        i += 1


def replaced_in(value: Any, changes: Mapping[str, str], depth: int) -> Any:
    """Parsed JSON with each string ``changes`` names replaced (JSON text inside it read too); itself if none is."""
    if isinstance(value, str):
        new = changes.get(value)
        if new is not None:
            return new
        if value.lstrip()[:1] in ("{", "[") and depth < _MAX_DEPTH:
            try:
                parsed = json.loads(value)
            except ValueError:
                return value
            inner = replaced_in(parsed, changes, depth + 1)
            return value if inner is parsed else json.dumps(inner, ensure_ascii=False)
        return value
    if type(value) is int or type(value) is float:  # a whole-field rule acts on a number as on its text
        new = changes.get(str(value))
        return value if new is None else new
    if depth > _MAX_DEPTH:
        return value
    if isinstance(value, dict):
        out = {k: replaced_in(v, changes, depth + 1) for k, v in value.items()}
        return value if all(out[k] is v for k, v in value.items()) else out
    if isinstance(value, list):
        items = [replaced_in(v, changes, depth + 1) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def _set(value: Any, path: Path, new: str) -> None:
    for step in path[:-1]:
        value = value[step]
    value[path[-1]] = new
