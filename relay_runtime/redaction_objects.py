"""What an object holds, for the redaction walks: the values they cannot read as data themselves.

The walks read strings, numbers, mappings, lists and tuples. Anything else an event carries
still reaches the sinks: as its fields (the JSONL file and the journal dump a model or a
dataclass), or as its text (OTel attributes print it with ``str()``, the JSONL fallback with
``repr()``). This module hands the walks that content, so that no rule misses it:

- a ``str`` subclass (LangChain's ``TextAccessor``): its text;
- a pydantic model: its fields as the instance holds them, and its extra fields. Not
  ``model_dump()``: that serializes each field by its declared type, so a subclass's own fields
  (an ``AIMessage``'s tool calls in a field declared ``BaseMessage``) are not in the dump. A model
  with computed fields has the entries only its dump holds read too: the sinks write that dump, and a
  computed e-mail built from other fields is in no field;
- an object with ``items()`` (not a mapping): ``dict(value.items())``, as the JSONL sink writes it,
  and its printed text, as the other sinks write it;
- a dataclass: its fields; a set: its items; bytes: their text, when they are UTF-8 (else binary data,
  left as it is);
- anything else: the text a sink would print for it (``through_text``). An object whose text
  holds something a rule changes is passed on as that text, redacted: its fields are unknown,
  so the object itself cannot be.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from typing import Any

# Objects whose text is code's, never data (a class, a function, a module), and binary data (an image's
# bytes, which ``fields`` reads when they are UTF-8 text): their printed text is not scanned.
_NOT_TEXT = (
    type, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType,
    bytes, bytearray, memoryview,
)  # fmt: skip


# A number of 13 digits or more is read as the text a sink writes for it: a card number (13 to 19 digits)
# passed as a JSON number or a Python int is still a card number. Smaller ones (counts, tokens, prices,
# timestamps in seconds) hold nothing a rule finds, and are passed on at the cost of one comparison.
BIG_NUMBER = 10**12


def number_text(value: int | float) -> str | None:
    """The text the rules read for ``value`` (an int or a float), or None when it is too small to hold a value
    (NaN included). An integral float reads as the int it is (``4111111111111111.0`` as its card number)."""
    if not (value >= BIG_NUMBER or value <= -BIG_NUMBER):
        return None
    if type(value) is int:
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value)  # a fraction (or infinity): as json.dumps writes it


# A mapping key of these types is one JSON writes as itself (a number, true, null), or a string.
PLAIN_KEYS = frozenset({str, int, float, bool, type(None)})


def key_text(key: Any) -> str | None:
    """The text a sink writes for a mapping key that is not a ``str``, for the rules to read: a big int's digits
    (JSON writes it so), any other hashable's printed form (a tuple or a frozenset keying a dict: a sink that
    cannot write the key as JSON prints the mapping, key and all); None for a key that holds no value a rule
    finds (a small number, a float, a bool, None) or that cannot be printed."""
    kind = type(key)
    if kind in PLAIN_KEYS:
        return number_text(key) if kind is int else None
    try:
        return str(key)
    except Exception:
        return None


_MAPPING, _MODEL, _DUMPED, _DATACLASS, _TEXT, _BYTES, _SET, _ITEMS, _UNKNOWN = range(9)
_MAX_SHAPES = 4096  # classes a process meets are few; a bound keeps classes made at run time from growing it
_shapes: dict[type, int] = {}
MODEL = _MODEL
known_shape = _shapes.get  # a class's shape when ``_shape`` has met it (None when not yet): no Python call


def _shape(kind: type) -> int:
    """Which of ``fields``' cases a class falls in: asked once per class, since ``isinstance`` against
    the ABCs and the attribute lookups cost more than the walk of the object itself."""
    shape = _shapes.get(kind)
    if shape is not None:
        return shape
    if issubclass(kind, str):
        shape = _TEXT
    elif issubclass(kind, Mapping):
        shape = _MAPPING
    elif issubclass(kind, (bytes, bytearray)):
        shape = _BYTES
    elif callable(getattr(kind, "model_dump", None)):
        computed = getattr(kind, "model_computed_fields", None)  # pydantic 2's; the class's, not an instance's
        shape = _DUMPED if isinstance(computed, dict) and computed else _MODEL
    elif dataclasses.is_dataclass(kind):
        shape = _DATACLASS
    elif issubclass(kind, (set, frozenset)):
        shape = _SET
    elif callable(getattr(kind, "items", None)):
        shape = _ITEMS
    else:
        shape = _UNKNOWN
    if len(_shapes) < _MAX_SHAPES:
        _shapes[kind] = shape
    return shape


def is_mapping(kind: type) -> bool:
    """``issubclass(kind, Mapping)`` for a class that is not ``str``, remembered."""
    return _shape(kind) == _MAPPING


def model_state(value: Any) -> dict[str, Any] | None:
    """The dict a pydantic model instance holds its declared fields in (its keys are the class's field
    names: code, not data); None for anything else. Its extra fields are in ``__pydantic_extra__``."""
    if _shapes.get(type(value)) != _MODEL and _shape(type(value)) != _MODEL:
        return None
    state = getattr(value, "__dict__", None)
    return state if type(state) is dict else None


def fields(value: Any) -> Any:
    """``value``'s content as plain data (a ``str``, a ``dict`` or a ``list``); None when it has no known shape.

    A model's fields come back as the very dict the instance holds when it has no extra fields: the
    walks copy a mapping before they change it, never write into it.
    """
    shape = _shape(type(value))
    if shape == _MODEL:
        state = getattr(value, "__dict__", None)
        if type(state) is not dict:
            return None
        extra = getattr(value, "__pydantic_extra__", None)
        return {**state, **extra} if extra else state
    if shape == _DUMPED:
        return _dumped(value)
    if shape == _ITEMS:
        try:
            return dict(value.items())
        except Exception:  # not pairs after all: the object is read by its printed text
            return None
    if shape == _TEXT:
        return str.__str__(value)  # the text, as an exact str
    if shape == _BYTES:
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if shape == _DATACLASS:
        return {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
    if shape == _SET:
        return list(value)
    return None


def _dumped(value: Any) -> dict[str, Any] | None:
    """A model with computed fields: its fields as the instance holds them (``fields``), with what only its dump
    holds beside them (the computed fields)."""
    state = getattr(value, "__dict__", None)
    if type(state) is not dict:
        return None
    extra = getattr(value, "__pydantic_extra__", None)
    data = {**state, **extra} if extra else dict(state)
    try:
        dump = value.model_dump(mode="json")
    except Exception:  # a computed field that fails: no sink can dump it either, and its repr is read instead
        return None
    if isinstance(dump, dict):
        for key, dumped in dump.items():
            if key not in data:
                data[key] = dumped
    return data


def printed(value: Any) -> bool:
    """Whether a sink may also print ``value`` (``str()``, ``repr()``) when its ``fields`` held nothing a rule changed:
    an object with ``items()`` is data to the JSONL sink but text to the others."""
    return _shapes.get(type(value)) == _ITEMS


def rebuilt(value: Any, old: Any, new: Any) -> Any:
    """``value`` with what the walk changed in its ``fields`` (``old``, now ``new``), as its own type where it can
    be remade; else the changed data itself, which the sinks print the same way."""
    if isinstance(value, (bytes, bytearray)) and isinstance(new, str):
        return new.encode("utf-8")
    if isinstance(value, (set, frozenset)) and isinstance(new, list):
        try:
            return type(value)(new)
        except TypeError:  # an item the walk made unhashable
            return new
    if not isinstance(old, dict) or not isinstance(new, dict) or _shapes.get(type(value)) in (_DUMPED, _ITEMS):
        return new  # a computed field cannot be set (the model would compute it again), nor an object's items
    changes = {k: v for k, v in new.items() if k not in old or old[k] is not v}
    removed = [k for k in old if k not in new]
    try:
        if callable(getattr(value, "model_copy", None)) and not removed:
            return value.model_copy(update=changes)
        if dataclasses.is_dataclass(value) and not isinstance(value, type) and not removed:
            return dataclasses.replace(value, **changes)
    except Exception:  # a field that cannot be set so: the data, not the object holding the value
        return new
    return new


def through_text(value: Any, redact: Callable[[str], Any]) -> Any:
    """``value`` itself when neither text a sink prints for it (``str()``, ``repr()``) holds anything
    ``redact`` changes; else that text, redacted. An object that cannot be printed is not passed on."""
    if isinstance(value, _NOT_TEXT):
        return value
    try:
        text = str(value)
        shown = repr(value)
    except Exception:
        return f"[unprintable {type(value).__name__}]"
    for candidate in (text, shown) if shown != text else (text,):
        new = redact(candidate)
        if new is not candidate and new != candidate:
            return new
    return value
