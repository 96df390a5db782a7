"""The walk of one application of a ``RedactionPolicy`` over a value: strings, mappings, lists, objects.

``walk(value, path)`` runs the rules that apply at ``path`` (RFC 6901 pointers over the event's
provider-neutral view) over every string in ``value``, and over the text inside it: JSON text
(tool-call arguments) and base64 text (``redaction_encoded``). A whole-field ``remove`` rule drops a
field (``REMOVED``). When every rule applies everywhere (the usual policy of detectors), paths need
not be followed and ``_plain`` walks instead, looking strings up in what the pass and the policy
have already read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from . import pointers
from .redaction_apply import MIN_WHOLE, renamed
from .redaction_encoded import through_blob, through_data_url
from .redaction_objects import BIG_NUMBER, PLAIN_KEYS, fields, number_text, printed, rebuilt, through_text
from .redaction_raw import ThroughView
from .redaction_rules import Rule

REMOVED: Any = object()  # a field a whole-field ``remove`` rule dropped
_MAX_DEPTH = 64
_SCALARS = frozenset({int, float, bool, type(None)})
_BIG = BIG_NUMBER
_SMALL = -BIG_NUMBER  # a constant: ``-_BIG`` in a comparison would make a new int each time


def _every_value(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object with each value it holds: a key given more than once (``{"to": "jane@...", "to": "x"}``) holds
    the list of its values, where ``json.loads`` keeps only the last and the text would go out as it was with the
    others unread. Under the key itself, so a rule naming the key reaches each. With it, a decoder costs about what
    ``json.loads`` does on tool-call arguments (callgrind: -10% at 40 bytes, +15% at 190), 1.4x on 3 KB of 50
    small objects."""
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    values: dict[str, list[Any]] = {}
    for key, value in pairs:
        values.setdefault(key, []).append(value)
    return {key: found[0] if len(found) == 1 else found for key, found in values.items()}


_DECODER = json.JSONDecoder(object_pairs_hook=_every_value)
_JSON_SPACE = " \t\n\r"  # what JSON allows before a document


def _opens_json(text: str) -> bool:
    """Whether ``text``, whose first character is whitespace, opens a JSON object or array after it."""
    return text.lstrip(_JSON_SPACE)[:1] in ("{", "[")


def kept(value: Any) -> Any:
    return None if value is REMOVED else value


_MESSAGES = ("request", "messages")


def _bare_content(item: Any) -> bool:
    """Whether a conversation's item is no message but the content of one: a text, or a part (Gemini's
    ``contents`` may be given so; the SDK sends them as a user's message)."""
    if type(item) is str:
        return True
    data = item if isinstance(item, Mapping) else fields(item)
    return isinstance(data, Mapping) and "role" not in data and "parts" not in data and "text" in data


class Walk(ThroughView):
    """A pass's walk over values (see the module docstring); ``Pass`` adds the events' views to it."""

    __slots__ = ()

    def walk(self, value: Any, path: pointers.Path, depth: int = 0) -> Any:
        if self.simple and (not path or path[0] != "metadata"):
            return self._plain(value, depth)
        kind = type(value)
        if kind is str:
            return self.text(value, path, depth)
        if kind is int or kind is float:
            return self._number(value, path, depth)
        if value is None or kind is bool:
            return value
        if depth > _MAX_DEPTH:  # deeper than the walk goes: read as the text a sink prints for it
            return through_text(value, lambda text: self.text(text, path, depth))
        whole_remove = self._removes(path) if self.policy._removals else None
        if whole_remove is not None:
            self._count(whole_remove, 1)
            self._forget(value)
            return REMOVED
        if kind is dict or isinstance(value, Mapping):
            out: dict[Any, Any] | None = None
            names: dict[Any, Any] | None = None
            for k, v in value.items():
                key = k if type(k) is str else str(k)
                if path == ("metadata",) and key.startswith("relay.") and not self._named((*path, key)):
                    continue  # the relay's own keys (kinds, ids, counts) are not content
                if key == "parts" and len(path) == 3 and path[1] == "messages" and path[0] == "request":
                    key = "content"  # a Gemini message's content is its parts: /request/messages/*/content names them
                new = self.walk(v, (*path, key), depth + 1)
                if new is not v:
                    if out is None:
                        out = dict(value)
                    if new is REMOVED:
                        del out[k]
                        continue
                    out[k] = new
                new_key = self.key_of(k, path)
                if new_key is not k:
                    names = names or {}
                    names[k] = new_key
            result = value if out is None else out
            if ("data" in value or "blob" in value) and depth < _MAX_DEPTH:
                result = self._blob(value, result, path, depth)
            return renamed(result, names) if names else result
        if kind is list or kind is tuple:
            items: list[Any] | None = None
            removed = False
            bare = path == _MESSAGES  # a conversation may be given as bare texts or parts (Gemini's ``contents``)
            for i, v in enumerate(value):
                if bare and _bare_content(v):
                    new = self.walk(v, (*path, str(i), "content"), depth + 1)
                else:
                    new = self.walk(v, (*path, str(i)), depth + 1)
                if new is not v:
                    if items is None:
                        items = list(value)
                    items[i] = new
                    removed = removed or new is REMOVED
            if items is None:
                return value
            if removed:
                items = [v for v in items if v is not REMOVED]
            return items if kind is list else tuple(items)
        data = fields(value)  # an SDK or framework object, a str subclass, a set: what it holds, as data
        if data is not None:
            new = self.walk(data, path, depth + 1)
            if new is not data:
                return rebuilt(value, data, new)
            if not printed(value):
                return value
        return through_text(value, lambda text: self.text(text, path, depth))

    def _plain(self, value: Any, depth: int) -> Any:
        """``walk`` for a simple pass: no path to follow, and no field removed whole."""
        kind = type(value)
        if kind is str:
            if len(value) < self.floor or not value:
                return value
            first = value[0]
            if (first == "{" or first == "[" or (first <= " " and _opens_json(value))) and depth < _MAX_DEPTH:
                walked = self._json(value, (), depth)
                if walked is not None:
                    return walked
            elif first == "d" and value[:5] == "data:" and depth < _MAX_DEPTH:
                walked = self._data_url(value, (), depth)
                if walked is not None:
                    return walked
            known = self.leaves.get(value)
            if known is not None:
                self._recount(value)
                return known
            if value in self.policy._clean_texts:  # read before, nothing found in it (``redaction_raw._clean``)
                self.leaves[value] = value  # the kwargs hold it too: their walk passes over it
                return value
            return self._memoized(self.rules, value)
        if value is None or kind is bool:
            return value
        if kind is int or kind is float:
            text = number_text(value)
            if text is None:
                return value
            new_text = self._plain(text, depth)
            return value if new_text == text else new_text
        if depth > _MAX_DEPTH:
            return self._plain_as_text(value)
        # The strings of a container are looked up inline: most were met before (the same message in the
        # view and the kwargs, the same roles in every message) and come back as they were.
        leaves, floor, rules = self.leaves, self.floor, self.rules
        # A list (the messages) is not asked ``isinstance`` against the ABC: that runs Python code of ``abc``.
        if kind is dict or (kind is not list and kind is not tuple and isinstance(value, Mapping)):
            out: dict[Any, Any] | None = None
            names: dict[Any, Any] | None = None
            flat = True
            policy = self.policy
            key_floor, clean_keys = policy._key_floor, policy._clean_keys
            memo, clean = policy._memo, policy._clean_texts
            for k, v in value.items():
                if (
                    k not in clean_keys  # first: most keys are field names, read before
                    and (
                        (type(k) is str and len(k) >= key_floor)
                        or (type(k) is int and not _SMALL < k < _BIG)
                        or type(k) not in PLAIN_KEYS  # a tuple key
                    )
                ) and (new_key := self.key_of(k, ())) is not k:  # other keys than str are read as text: ``key_of``
                    names = names or {}
                    names[k] = new_key
                kind = type(v)
                if kind is str:
                    if len(v) < floor:
                        continue
                    known = leaves.get(v)
                    if known is v:
                        continue
                    first = v[0]
                    if (
                        known is None and first != "{" and first != "[" and first > " "
                        and (first != "d" or v[:5] != "data:")
                    ):  # fmt: skip
                        if v in clean:  # read before, nothing found in it (``redaction_raw._clean``)
                            leaves[v] = v  # the kwargs hold it too: their walk passes over it
                            continue
                        seen = memo.get(v)
                        if seen is not None and not seen[1]:
                            # Inline, ``_memoized``'s commonest case: a string read before, nothing found in it.
                            new = leaves[v] = seen[0]
                            self._clean(v)
                        else:
                            new = self._memoized(rules, v)
                    else:
                        new = self._plain(v, depth + 1)
                elif kind in _SCALARS:
                    if v is None or _SMALL < v < _BIG:  # a bool too; a big number is read as text (``number_text``)
                        continue
                    new = self._plain(v, depth + 1)
                else:
                    new = self._plain(v, depth + 1)
                    flat = False
                if new is not v:
                    if out is None:
                        out = dict(value)
                    out[k] = new
            result = value if out is None else out
            if ("data" in value or "blob" in value) and depth < _MAX_DEPTH:
                result = self._blob(value, result, (), depth)
            if names:
                result = renamed(result, names)
            if flat:
                # Only strings and numbers: the raw walk (the kwargs hold the same message dicts) would
                # make the same of it, so it is remembered for that walk.
                self.done[id(value)] = (value, result)
            return result
        if kind is list or kind is tuple:
            items: list[Any] | None = None
            for i, v in enumerate(value):
                item_kind = type(v)
                if item_kind is str:
                    if len(v) < floor or leaves.get(v) is v:
                        continue
                elif item_kind in _SCALARS and (v is None or _SMALL < v < _BIG):
                    continue
                new = self._plain(v, depth + 1)
                if new is not v:
                    if items is None:
                        items = list(value)
                    items[i] = new
            if items is None:
                return value
            return items if kind is list else tuple(items)
        data = fields(value)
        if data is not None:
            new = self._plain(data, depth + 1)
            if new is not data:
                return rebuilt(value, data, new)
            if not printed(value):
                return value
        return self._plain_as_text(value)

    def _number(self, value: float, path: pointers.Path, depth: int) -> Any:
        """A number, read as its text when it is big enough to hold a value (``number_text``) or a rule names its
        path (a whole-field rule acts on a number too); the number itself when no rule changed that text."""
        text = number_text(value)
        if text is None:
            if self.policy._all_pathless or not self._named(path):
                return value
            text = str(value)
        new = self.text(text, path, depth)
        return value if new == text else new

    def _plain_as_text(self, value: Any) -> Any:
        # Its own method: a closure in ``_plain`` would make every call of it allocate a cell for ``self``.
        return through_text(value, lambda text: self._memoized(self.rules, text))

    def _blob(self, value: Mapping[Any, Any], walked: Any, path: pointers.Path, depth: int) -> Any:
        """``walked`` with the base64 text ``value`` carries (``redaction_encoded``) redacted as its field."""
        if path or not self.simple:
            return through_blob(
                value, walked, lambda key, text: self.walk(text, (*path, str(key)), depth + 1),
                lambda key: any(r.whole and (not r.parsed_paths or r.applies((*path, str(key)))) for r in self.rules),
            )  # fmt: skip
        return through_blob(value, walked, lambda key, text: self._plain(text, depth + 1), self._any_whole)

    def _data_url(self, url: str, path: pointers.Path, depth: int) -> str | None:
        """A ``data:`` URL of text with its text redacted; None when it is not one or nothing changed."""
        if path or not self.simple:
            new = through_data_url(url, lambda text: self.walk(text, path, depth + 1))
        else:
            new = through_data_url(url, lambda text: self._plain(text, depth + 1))
        if new is not None:
            self.leaves[url] = new
        return new

    def _json(self, text: str, path: pointers.Path, depth: int) -> str | None:
        """JSON text (tool-call arguments and the like) walked as what it holds; None when it is not JSON."""
        try:
            parsed = _DECODER.decode(text)
        except ValueError:
            parsed = None
        if not isinstance(parsed, (dict, list)):
            return None
        new = self.walk(parsed, path, depth + 1)
        if new is parsed:
            return text
        dumped = json.dumps(kept(new), ensure_ascii=False)
        self.leaves[text] = dumped
        return dumped

    def _removes(self, path: pointers.Path) -> Rule | None:
        """A whole-field ``remove`` rule naming exactly this path (or a pattern of it)."""
        for rule in self.policy._removals:
            if rule in self.rules:
                for pattern in rule.parsed_paths:
                    if len(pattern) == len(path) and pointers.covers(pattern, path):
                        return rule
        return None

    def _named(self, path: pointers.Path) -> bool:
        if self.policy._all_pathless:  # the usual policy of detectors: no rule names a path
            return False
        return any(rule.parsed_paths and rule.applies(path) for rule in self.rules)

    def _forget(self, value: Any, depth: int = 0) -> None:
        """A removed field's strings become empty wherever else they appear (the SDK's own objects)."""
        if type(value) is str:
            self.leaves[value] = ""
            if len(value) >= MIN_WHOLE:
                self.pairs[value] = ""
        elif depth > _MAX_DEPTH or value is None:
            return
        elif isinstance(value, Mapping):
            for v in value.values():
                self._forget(v, depth + 1)
        elif isinstance(value, (list, tuple)):
            for v in value:
                self._forget(v, depth + 1)
        else:  # an SDK object (a Gemini ``Content`` or ``Part`` given as a message): the strings it holds
            data = fields(value)
            if data is not None and data is not value:
                self._forget(data, depth + 1)

    def text(self, text: str, path: pointers.Path, depth: int) -> Any:
        if path and path[0] == "metadata" and len(path) == 2 and path[1].startswith("relay.") and not self._named(path):
            return text
        if not text:
            return text
        rule = self._removes(path) if self.policy._removals else None
        if rule is not None:
            self._count(rule, 1)
            self._forget(text)
            self.whole(text, "")
            return REMOVED
        first = text[0]
        if (first == "{" or first == "[" or (first <= " " and _opens_json(text))) and depth < _MAX_DEPTH:
            # Tool-call arguments and similar JSON text: the strings inside are reached too.
            walked = self._json(text, path, depth)
            if walked is not None:
                return walked
        elif first == "d" and text[:5] == "data:" and depth < _MAX_DEPTH:
            walked = self._data_url(text, path, depth)
            if walked is not None:
                return walked
        policy = self.policy
        pathless = policy._all_pathless or self.anywhere
        if pathless:
            known = self.leaves.get(text)
            if known is not None:  # the same string met again (a system prompt is also the first message)
                self._recount(text)
                return known
            if not self.anywhere:
                return self._memoized(self.rules, text)
            rules: Any = self.rules
        else:
            rules = [r for r in self.rules if not r.parsed_paths or r.applies(path)]
        result = self._run(rules, text)
        self.leaves[text] = result
        return result
