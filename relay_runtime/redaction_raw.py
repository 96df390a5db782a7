"""The SDK's own request kwargs and response objects, redacted through what a pass changed in the view.

A ``Pass`` walks the provider-neutral view of an event and keeps what its rules changed (whole
strings, and the spans inside them); ``ThroughView`` then changes each of those values wherever it
appears in the SDK's own objects (JSON-escaped too), and with ``scan`` has the pathless rules read
the strings the view did not hold. An SDK object comes back as its own type.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from .redaction_apply import Application, renamed
from .redaction_encoded import through_blob, through_data_url
from .redaction_objects import (
    BIG_NUMBER,
    MODEL,
    PLAIN_KEYS,
    fields,
    is_mapping,
    key_text,
    known_shape,
    model_state,
    number_text,
    printed,
    rebuilt,
    through_text,
)

_MAX_DEPTH = 64
_SCALARS = frozenset({int, float, bool, type(None)})  # numbers of 13 digits or more are read (``number_text``)
_BIG = BIG_NUMBER
_SMALL = -BIG_NUMBER  # a constant: ``-_BIG`` in a comparison would make a new int each time
# The kinds whose false values (None, 0, 0.0, False, "", [], (), {}) come back from ``_raw`` as they were.
_EMPTY_KINDS = frozenset({type(None), bool, int, float, str, list, tuple, dict})
# A policy's ``_clean_texts``: at most so many strings, of at most so many characters (ids and vocabulary).
_CLEAN_TEXTS = 4096
_CLEAN_TEXT_LEN = 256


class ThroughView(Application):
    """The raw walk of a pass (see the module docstring)."""

    __slots__ = ()

    def raw(self, value: Any, *, scan: bool = False) -> Any:
        """``value`` with every string the view's rules changed replaced wherever it appears; with
        ``scan``, the pathless rules also read the strings the view did not hold."""
        if value is None:
            return value
        if not scan and not self.pairs and not any(k != v for k, v in self.leaves.items()):
            return value
        return self._raw(value, 0, scan)

    def _scan(self, text: str) -> str:
        if self.policy._all_pathless:
            return self._memoized(self.rules, text)
        result = self._run(self.policy._pathless, text)
        self.leaves[text] = result
        return result

    def _through_pairs(self, text: str) -> str:
        """``text`` with each value the view's rules replaced (``pairs``) replaced in it too, JSON-escaped too."""
        pairs = self.pairs
        slashed = "\\" in text
        if not slashed and not any(map(text.__contains__, pairs)):
            # The common case (no value replaced elsewhere is in it, and no escape that may hide one), asked in C
            # rather than pair by pair: the loop below would change nothing.
            return text
        result = text
        # Whether the text holds a backslash is asked again only when a replacement changed it.
        for old, new in pairs.items():
            if old in result:
                result = result.replace(old, new)
                slashed = "\\" in result
            elif slashed:  # JSON text held as a string: the value may be escaped in it
                # Written either way json.dumps writes it: by default (``ensure_ascii``) "ü" is "\\u00fc" there.
                for ascii_only in (False, True):
                    escaped = json.dumps(old, ensure_ascii=ascii_only)[1:-1]
                    if escaped != old and escaped in result:
                        result = result.replace(escaped, json.dumps(new, ensure_ascii=ascii_only)[1:-1])
                        slashed = "\\" in result
        return result

    def _raw_key(self, key: Any, scan: bool) -> Any:
        """A key of the SDK's own objects: each value the view's rules changed is changed in it too, and with
        ``scan`` the rules that find values read it (see ``key_of``). A key every such rule has read and left
        as it was (``policy._clean_keys``: the SDK's field names) is not looked at again."""
        if type(key) is not str:  # a big int key or a tuple key, read as the text a sink writes for it
            text = key_text(key)
            if text is None:
                return key
            new_text = self._raw_key(text, scan)
            return key if new_text == text else new_text
        result = self._through_pairs(self.key_of(key, ()) if scan else key)
        return key if result == key else result

    def _raw(self, value: Any, depth: int, scan: bool) -> Any:
        kind = type(value)
        if kind is str:
            known = self.leaves.get(value)
            if known is not None:
                return known
            if len(value) < self.floor:  # nothing any rule finds, nor any value a rule replaced, fits in it
                return value
            if scan and value in self.policy._clean_texts and self.simple:
                result = value  # the SDK's vocabulary, read before (``_clean_texts``): no data URL either
            elif (
                value.startswith("data:") and depth < _MAX_DEPTH and (encoded := self._raw_data_url(value, depth, scan))
            ):
                return encoded
            elif not scan or not value:
                result = value
            elif (memo := self.policy._memo.get(value)) is not None and not memo[1] and self.simple:
                # Inline, the common case of ``_memoized``: a string the rules read before and found nothing in.
                self.leaves[value] = result = value
                if value[:5] != "data:":
                    self._clean(value)
            else:
                result = self._scan(value)
            pairs = self.pairs
            if not pairs or ("\\" not in result and not any(map(result.__contains__, pairs))):
                return result  # ``_through_pairs``' common case, without the call
            final = self._through_pairs(result)
            if final is not result:
                # A value replaced elsewhere, inside this string: kept as what the string became, since the walks
                # pass over a string ``leaves`` holds as it was (the same string in another field of the object).
                self.leaves[value] = final
            return final
        if kind in _SCALARS:
            if value is None or _SMALL < value < _BIG:  # a bool too
                return value
            text = number_text(value)  # a card number as a JSON number: read as the text a sink writes
            if text is None:
                return value
            new_text = self._raw(text, depth, scan)
            return value if new_text == text else new_text
        if depth > _MAX_DEPTH:  # deeper than the walk goes: read as the text a sink prints for it
            return self._as_text(value, depth)
        if kind is dict or kind is MappingProxyType:
            done = self.done.get(id(value))
            if done is not None and done[0] is value:  # walked in the view already (a message the kwargs share)
                return done[1]
            return self._mapping(value, depth, scan, True)
        if kind is list or kind is tuple:
            return self._items(value, kind, depth, scan)
        if known_shape(kind) == MODEL:  # ``model_state`` inline, for the class already met (the SDK's models)
            state = getattr(value, "__dict__", None)
            if type(state) is dict:
                return self._model(value, state, depth, scan)
        else:
            state = model_state(value)
            if state is not None:
                return self._model(value, state, depth, scan)
        if is_mapping(kind):
            return self._mapping(value, depth, scan, True)
        data = fields(value)  # a dataclass, a str subclass, bytes, a set, a model with computed fields
        if data is not None:
            new = self._raw(data, depth + 1, scan)
            if new is not data:
                return rebuilt(value, data, new)
            if not printed(value):
                return value
        return self._as_text(value, depth)

    def _model(self, value: Any, state: dict[str, Any], depth: int, scan: bool) -> Any:
        """An SDK object (a pydantic model) at ``depth``, holding ``state``: its field names are the SDK's, its extra
        fields' names are data. The walks of objects and lists call it for an object of a model class met before
        (``known_shape``), rather than ``_raw``: a response is a tree of such objects (a completion, its choices, their
        message, its usage and the usage's details), and ``_raw`` would ask each of them what kind it is again."""
        values = state.values()
        if not any(values) and _EMPTY_KINDS.issuperset(map(type, values)):
            # An object of absent fields (usage details of None and 0): every value is None, a zero, False, "" or
            # an empty container, which no rule and no replaced value fits in. Asked in C, not value by value.
            new = state
        else:
            new = self._mapping(state, depth + 1, scan, False)
        extra = getattr(value, "__pydantic_extra__", None)
        if extra:
            new_extra = self._mapping(extra, depth + 1, scan, True)
            if new is not state or new_extra is not extra:
                return rebuilt(value, {**state, **extra}, {**new, **new_extra})
        return value if new is state else rebuilt(value, state, new)

    def _any_whole(self, key: Any) -> bool:
        """Whether a rule of the pass acts on whole strings, with no path to tell which field it meant: what it
        made of a base64 payload stands (``redaction_encoded.through_blob``)."""
        return any(r.whole for r in self.rules)

    def _raw_data_url(self, url: str, depth: int, scan: bool) -> str | None:
        """A data URL of text (``redaction_encoded``), its text walked; None when it is not one or is unchanged."""
        return through_data_url(url, lambda text: self._raw(text, depth + 1, scan))

    def _as_text(self, value: Any, depth: int) -> Any:
        # Its own method, as ``_raw_data_url``: a closure in ``_raw`` would make every call of it allocate cells.
        return through_text(value, lambda text: self._raw(text, depth, True))

    def _mapping(self, value: Mapping[Any, Any], depth: int, scan: bool, keys: bool) -> Any:
        """``keys``: whether the mapping's keys are data (a model's field names are not)."""
        out: dict[Any, Any] | None = None
        names: dict[Any, Any] | None = None
        leaves, floor, pairs = self.leaves, self.floor, self.pairs
        memo = self.policy._memo if scan and self.simple else None
        clean = self.policy._clean_texts
        # Keys can change only when the rules read them (``scan``) or the view replaced a value.
        read_keys = keys and (scan or bool(pairs))
        if read_keys:  # an SDK object's own fields (most of what is walked) have no keys to read
            key_floor, clean_keys = self.policy._key_floor, self.policy._clean_keys
        for k, v in value.items():
            if (
                read_keys
                and k not in clean_keys  # first: most keys are the SDK's field names, read before
                and (
                    (type(k) is str and len(k) >= key_floor)
                    or (type(k) is int and not _SMALL < k < _BIG)  # read as text: ``_raw_key``
                    or type(k) not in PLAIN_KEYS  # a tuple key, read as its printed text
                )
                and (new_key := self._raw_key(k, scan)) is not k
            ):  # fmt: skip
                names = names or {}
                names[k] = new_key
            # Inline: None (most of an SDK object's fields) and small numbers always come back as they were,
            # and most strings do. None first: it is the commonest, and the cheapest to ask about.
            if v is None:
                continue
            kind = type(v)
            if kind is str:
                if len(v) < floor:
                    continue
                known = leaves.get(v)
                if known is v:
                    continue
                if known is None and memo is not None:
                    # Inline, ``_raw``'s commonest case (the SDK's vocabulary: roles, finish reasons, object kinds):
                    # a string read before, nothing found in it, and none of the values replaced elsewhere.
                    cleaned = v in clean  # read before by the walks (``_clean``): no memo entry to ask
                    if (
                        (cleaned or ((seen := memo.get(v)) is not None and not seen[1] and v[:5] != "data:"))
                        and (not pairs or ("\\" not in v and not any(map(v.__contains__, pairs))))
                    ):  # fmt: skip
                        if not cleaned:
                            leaves[v] = v
                            self._clean(v)
                        continue
            elif kind in _SCALARS and _SMALL < v < _BIG:  # a bool too
                continue
            if (
                known_shape(kind) == MODEL
                and depth < _MAX_DEPTH
                and type(state := getattr(v, "__dict__", None)) is dict
            ):
                new = self._model(v, state, depth + 1, scan)  # what ``_raw`` does with it, asked fewer questions
            else:
                new = self._raw(v, depth + 1, scan)
            if new is not v:
                if out is None:
                    out = dict(value)
                out[k] = new
        result = value if out is None else out
        if ("data" in value or "blob" in value) and depth < _MAX_DEPTH:
            result = through_blob(value, result, lambda key, text: self._raw(text, depth + 1, scan), self._any_whole)
        return renamed(result, names) if names else result

    def _clean(self, text: str) -> None:
        """Note ``text`` (no data URL), read again and left as it was by the rules, in ``policy._clean_texts``."""
        clean = self.policy._clean_texts
        if len(text) <= _CLEAN_TEXT_LEN and len(clean) < _CLEAN_TEXTS:
            clean.add(text)  # whole: no lock needed

    def _items(self, value: list[Any] | tuple[Any, ...], kind: type, depth: int, scan: bool) -> Any:
        items: list[Any] | None = None
        done_by_id, leaves, floor = self.done, self.leaves, self.floor
        for i, v in enumerate(value):
            if v is None:
                continue
            item_kind = type(v)
            if item_kind in _SCALARS and _SMALL < v < _BIG:
                continue
            if item_kind is str:
                if len(v) < floor or leaves.get(v) is v:
                    continue
                new = self._raw(v, depth + 1, scan)
            elif (done := done_by_id.get(id(v))) is not None and done[0] is v:
                new = done[1]
            elif (
                known_shape(item_kind) == MODEL
                and depth < _MAX_DEPTH
                and type(state := getattr(v, "__dict__", None)) is dict
            ):
                new = self._model(v, state, depth + 1, scan)  # a list of the SDK's objects (a completion's choices)
            else:
                new = self._raw(v, depth + 1, scan)
            if new is not v:
                if items is None:
                    items = list(value)
                items[i] = new
        if items is None:
            return value
        return items if kind is list else tuple(items)
