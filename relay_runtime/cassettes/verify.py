"""The last look at a call before it is written: its stored answers hold none of what the whole-field rules changed.

``answers.rewritten`` puts what the rules made of an answer where it knows the provider's bodies hold it. A layout
it does not know (a field a provider adds, an event that echoes the text, a body holding it JSON-escaped inside a
longer string) would keep the original, silently: so the call as it is about to be written (after every rewrite,
the policy's span rules, the scrubbing and the ``redact=`` hook) is read again for each value a rule changed, and a
call still holding one is not written (``Cassette.written`` raises; a save writes nothing).

Read as the rewrite reads (``answers.groups``: the strings at one place of the answer, a stream's pieces joined):

- a value of ``MIN_WHOLE`` characters or more, wherever it stands: as written, and JSON-escaped either way
  (``ensure_ascii`` on and off, and once more for JSON text held in a string);
- a shorter one only where it is a field's whole text (a run of pieces starting and ending where pieces do), or a
  whole string or number of JSON text there: "Yes" inside a longer text is not the answer;
- a tool call's arguments held as an object: the original object anywhere.

A chat completion or Gemini answer with more than one choice fails too: the answer's view, which the rules read,
holds the first only, so what they make of the others is not known and they would be stored as the provider wrote
them. Vocabulary fields (roles, finish reasons) are the API's words, not read, as the rewrite does not read them;
a body stored as base64 (not UTF-8) is searched as bytes for the long values.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..redaction_apply import MIN_WHOLE
from . import answers

if TYPE_CHECKING:
    from ..redaction_policy import AnswerChanges

SEVERAL_CHOICES = "several choices"
_CHOICES = frozenset({"choices", "candidates"})
_HASHED = re.compile(r"\[[\w.-]+:[0-9a-f]{16}\]")
_MAX_DEPTH = 32
_MAX_JSON_CHARS = 4 * 1024 * 1024  # JSON text is looked for over at most this many characters from where it opens


def unhonoured(call: dict[str, Any], changes: AnswerChanges) -> str | None:
    """Which kind of whole-field rule ``call``'s stored answers (all but its request) do not honour: the action
    (``remove``, ``hash``, ...) of a changed value they still hold, ``SEVERAL_CHOICES``; None when they honour all."""
    stored = {k: v for k, v in call.items() if k != "request"}
    if _several_choices(stored):
        return SEVERAL_CHOICES
    for old, new in changes[1]:
        if old and _holds_object(stored, old, 0):
            return "remove" if not new else "rule on a tool call's arguments"
    # A value its own replacement holds (a mask keeping every character) is one the rule leaves visible.
    values = {old: new for old, new in changes[0].items() if old and old not in new}
    if not values:
        return None
    long = {old: _forms(old) for old in values if len(old) >= MIN_WHOLE}
    short = {old: new for old, new in values.items() if len(old) < MIN_WHOLE}
    kept = _in_bytes(stored, long) if long else None
    if kept is not None:
        return _kind(values[kept])
    for found in answers.groups(stored, set()):
        pieces = [text for _, text in found]
        joined = "".join(pieces)
        for old, forms in long.items():
            if any(form in joined for form in forms):
                return _kind(values[old])
        if short:
            kept = _short_kept(pieces, joined, short)
            if kept is not None:
                return _kind(values[kept])
    return None


def message(path: Any, number: int, kind: str) -> str:
    """Why call ``number`` of this session is not written; never the value itself (the message is logged)."""
    head = f"cassette {path}: this session's call #{number} was recorded under a redaction policy with whole-field "
    if kind == SEVERAL_CHOICES:
        return (
            f"{head}rules on the answer, and its answer holds more than one choice (n > 1, candidate_count > 1): the "
            "rules read the first only, so what they make of the others is unknown and it is not written. Record "
            "calls asking for one choice under such a policy"
        )
    return (
        f"{head}rules on the answer, and a value a whole-field {kind} rule changed is still in its stored answer, "
        "where the cassette's rewrite did not reach it (a layout of the provider's answer it does not know): it is "
        "not written. Report the provider's answer shape; record without that rule meanwhile"
    )


def _kind(new: str) -> str:
    if new == "":
        return "remove"
    if _HASHED.fullmatch(new):
        return "hash"
    return "redact" if new.startswith("[REDACTED") else "redact, mask or regex_replace"


def _forms(old: str) -> set[str]:
    """``old`` as a string's text may hold it: as it is, JSON-escaped either way, and escaped twice (JSON text in a
    string that JSON text holds)."""
    once = {json.dumps(old, ensure_ascii=ascii)[1:-1] for ascii in (False, True)}
    twice = {json.dumps(form, ensure_ascii=ascii)[1:-1] for form in once for ascii in (False, True)}
    return {old, *once, *twice}


def _short_kept(pieces: list[str], joined: str, short: Mapping[str, str]) -> str | None:
    """A short changed value that is the whole text of a run of ``pieces``, or a whole string or number of JSON text
    opening where a piece does; None when there is none."""
    bounds: list[int] = []
    at = 0
    for piece in pieces:
        bounds.append(at)
        at += len(piece)
    edges = {*bounds, at}
    for old in short:
        start = joined.find(old)
        while start != -1:
            if start in edges and start + len(old) in edges:
                return old
            start = joined.find(old, start + 1)
    decoder = json.JSONDecoder()
    end = 0
    for start, piece in zip(bounds, pieces, strict=True):
        if start < end:
            continue  # inside JSON text already read
        text = piece.lstrip()
        if text[:1] not in ("{", "["):
            continue
        start += len(piece) - len(text)
        try:
            parsed, end = decoder.raw_decode(joined[start : start + _MAX_JSON_CHARS])
        except ValueError:
            continue
        end += start
        for old in short:
            if answers.replaced_in(parsed, {old: short[old]}, 0) is not parsed:
                return old
    return None


def _exchanges(stored: dict[str, Any]) -> list[dict[str, Any]]:
    tries = stored.get("http")
    return [t for t in tries if isinstance(t, dict)] if isinstance(tries, list) else []


def _several_choices(stored: dict[str, Any]) -> bool:
    """Whether an HTTP answer holds a chat completion's (or Gemini answer's) choice past the first: a body's list
    of them, or a stream chunk's choice whose index is not 0. Only at the top of a body or an event's data: a tool
    call's arguments (an object) may have a ``choices`` field of its own."""
    for exchange in _exchanges(stored):
        events = exchange.get("events")
        tops = [e.get("data") for e in events if isinstance(e, dict)] if isinstance(events, list) else []
        for top in (exchange.get("body"), *tops):
            for key in _CHOICES:
                found = top.get(key) if isinstance(top, dict) else None
                if isinstance(found, list) and (len(found) > 1 or any(_later(c) for c in found)):
                    return True
    return False


def _later(choice: Any) -> bool:
    index = choice.get("index") if isinstance(choice, dict) else None
    return type(index) is int and index > 0


def _in_bytes(stored: dict[str, Any], long: Mapping[str, set[str]]) -> str | None:
    """A long changed value in a body stored as base64 (not UTF-8: no string the rewrite reads holds it)."""
    for exchange in _exchanges(stored):
        encoded = exchange.get("base64")
        if not isinstance(encoded, str):
            continue
        try:
            raw = base64.b64decode(encoded)
        except ValueError:
            continue
        for old, forms in long.items():
            if any(form.encode("utf-8", "surrogatepass") in raw for form in forms):
                return old
    return None


def _holds_object(value: Any, old: Any, depth: int) -> bool:
    if value == old:
        return True
    if depth > _MAX_DEPTH:
        return False
    if isinstance(value, dict):
        return any(_holds_object(v, old, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_holds_object(v, old, depth + 1) for v in value)
    return False
