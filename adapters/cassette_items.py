"""A replayed stream's items, built from their recorded JSON as the SDK's own parser builds them, only faster.

A live stream's SDK parses each event's JSON in Python, then builds the item: a
union (and anything under a union) by a lax validation in Python, a model class by a
recursive construct in Python, without validation. That is most of what replaying a
stream costs. The item class's compiled validator does the same faster:

- an item the SDK validates (a union of events, or any item of a client that
  validates responses) is validated lax by it too: the same validation, from the
  JSON's text instead of its parsed dict;
- an item the SDK constructs is validated strictly: for JSON that already has the
  declared types that is what construct keeps, and strict validation refuses the
  rest (an unknown finish reason, a number sent as a string). The levels construct
  builds differ from validated ones in one known way (unknown keys are not in
  ``model_fields_set``), put right after validation; a type whose construct could
  differ in any other way (aliases, defaults other than None, validators, typed
  extras, floats, dates) keeps to the SDK's parser altogether.

Whatever the validator refuses is built by the SDK's own parser, as live.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Callable
from typing import Any

import pydantic
import pydantic_core
from pydantic_core import PydanticUndefined

NOT_BUILT: Any = object()
_JSON = json.JSONEncoder()  # escapes all but ASCII, so any string survives


def json_text(data: Any) -> bytes:
    """Recorded JSON data as JSON text again: what the SDK would have read, for ``json.loads`` to give it back.

    The compiled encoder is several times faster than the standard one; NaN and the
    infinities are written as the standard parser reads them, and a string the compiled
    encoder cannot write (a lone surrogate) falls to the standard encoder.
    """
    try:
        return pydantic_core.to_json(data, inf_nan_mode="constants")
    except pydantic_core.PydanticSerializationError:
        return _JSON.encode(data).encode("ascii")


# Per constructed level, its fields the SDK also constructs: (name, "model" | "list" | "dict", their levels).
Levels = tuple[tuple[str, str, "Levels"], ...]


class _NotAlike(Exception):
    """A type whose validated objects could differ from what the SDK's construct builds."""


class ItemBuilder:
    """Builds one SDK's stream items of one type from their JSON text; ``NOT_BUILT`` where the SDK must."""

    __slots__ = ("_strict", "_validate", "constructed")

    def __init__(self, validate: Callable[..., Any], constructed: Levels | None) -> None:
        self._validate = validate
        # None: the SDK validates the whole item (lax, as here); else it constructs it (strict here).
        self.constructed = constructed
        self._strict = None if constructed is None else True

    def build(self, raw: bytes) -> Any:
        try:
            item = self._validate(raw, strict=self._strict)
        except ValueError:  # a ValidationError (JSON the compiled parser refuses, a lone surrogate, is one too)
            return NOT_BUILT
        if self.constructed is not None:
            try:
                _as_constructed(item, self.constructed)
            except (AttributeError, KeyError, TypeError):  # a shape the levels did not foresee: the SDK's
                return NOT_BUILT
        return item


_BUILDERS: dict[tuple[Any, bool], ItemBuilder | None] = {}


def builder(item_type: Any, *, sdk_validates: bool) -> ItemBuilder | None:
    """The fast builder for ``item_type`` (cached), or None where the SDK's parser must build every item.

    ``sdk_validates``: the client validates responses (``_strict_response_validation``)
    instead of constructing them, so nothing is constructed.
    """
    key = (item_type, sdk_validates)
    try:
        return _BUILDERS[key]
    except KeyError:
        pass
    try:
        found: ItemBuilder | None = _make_builder(item_type, sdk_validates)
    except Exception:  # _NotAlike, or a type pydantic cannot build a validator for: the SDK's parser builds all
        found = None
    _BUILDERS[key] = found
    return found


def _make_builder(item_type: Any, sdk_validates: bool) -> ItemBuilder:
    base, metadata = _unwrap(item_type)
    if _is_model(base):
        if callable(getattr(base, "build", None)):
            raise _NotAlike(f"{base.__name__} builds itself")  # the SDK calls its build(), not construct
        if sdk_validates:
            return ItemBuilder(_validator(_core_schema(base)), None)
        constructed = _constructed_levels(base, ())
        schema = tag_unions(_core_schema(base))
        _check_unambiguous(schema)
        return ItemBuilder(pydantic_core.SchemaValidator(schema).validate_json, constructed)
    if typing.get_origin(base) in (typing.Union, types.UnionType):
        # The SDK validates a union as a whole, lax: for JSON of the variant its discriminator
        # names, no other variant validates (each requires its own value), so that one is picked.
        field = next((name for name in map(_discriminator, metadata) if name), None)
        variants = typing.get_args(base)
        if field is None or not all(map(_is_model, variants)):
            raise _NotAlike("a union without a discriminator field")
        union: Any = typing.Union[variants]  # noqa: UP007 - built from a tuple
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(
            typing.Annotated[union, pydantic.Field(discriminator=field)]
        )
        return ItemBuilder(_validator(adapter.core_schema), None)
    raise _NotAlike(f"{item_type!r} is neither a model nor a union of models")


def _validator(schema: Any) -> Callable[..., Any]:
    """The JSON validator of ``schema``, its unions of models told apart by their ``type`` as the SDK names them.

    Pydantic tries every member of such a union in turn (the SDKs name its discriminator
    in their own annotations, which pydantic does not read); where each member requires
    its own ``type`` value, only the member named by the JSON's ``type`` can validate, so
    going to it straight away gives the same object (and refuses the same JSON).
    """
    return pydantic_core.SchemaValidator(tag_unions(schema)).validate_json


def tag_unions(schema: Any) -> Any:
    definitions: dict[str, Any] = {}
    _collect_definitions(schema, definitions)
    return _tagged(schema, definitions)


def _collect_definitions(schema: Any, definitions: dict[str, Any]) -> None:
    if isinstance(schema, dict):
        if isinstance(schema.get("ref"), str):
            definitions[schema["ref"]] = schema
        for value in schema.values():
            _collect_definitions(value, definitions)
    elif isinstance(schema, list | tuple):
        for value in schema:
            _collect_definitions(value, definitions)


def _tagged(schema: Any, definitions: dict[str, Any]) -> Any:
    """A copy of ``schema`` with each union of models that each require their own ``type`` value tagged by it."""
    if isinstance(schema, list):
        return [_tagged(value, definitions) for value in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _tagged(value, definitions) for key, value in schema.items()}
    if out.get("type") != "union":
        return out
    choices = [choice if isinstance(choice, dict) else choice[0] for choice in out["choices"]]
    tags = [_required_type(choice, definitions) for choice in choices]
    if len(choices) < 2 or None in tags or len(set(tags)) != len(tags):
        return out
    tagged = {"type": "tagged-union", "choices": dict(zip(tags, choices, strict=True)), "discriminator": "type"}
    tagged.update({key: out[key] for key in ("ref", "metadata", "serialization") if key in out})
    return tagged


def _required_type(schema: dict[str, Any], definitions: dict[str, Any]) -> str | None:
    """The one string a model schema's required, unaliased ``type`` field must equal; None if it has none."""
    while schema.get("type") == "definition-ref":
        schema = definitions.get(str(schema.get("schema_ref")), {})
    fields = schema.get("schema", {}).get("fields") if schema.get("type") == "model" else None
    field = fields.get("type") if isinstance(fields, dict) else None
    if not isinstance(field, dict) or field.get("validation_alias") is not None:
        return None
    literal = field.get("schema", {})
    expected = literal.get("expected") if literal.get("type") == "literal" else None
    if not isinstance(expected, list) or len(expected) != 1 or not isinstance(expected[0], str):
        return None
    return expected[0]


def _core_schema(model: type[pydantic.BaseModel]) -> Any:
    if not model.__pydantic_complete__:
        model.model_rebuild()  # the SDKs defer building schemas to first use; constructing never uses them
    return model.__pydantic_core_schema__


# Schemas that never take a JSON object.
_NOT_OBJECTS = frozenset(
    {"none", "bool", "int", "float", "decimal", "str", "bytes", "date", "time", "datetime", "timedelta", "literal"}
    | {"enum", "uuid", "url", "list", "tuple", "set", "frozenset"}
)


def _check_unambiguous(schema: Any) -> None:
    """Refuse a union that more than one of its members could take a JSON object for.

    The SDK validates the unions of an item it constructs lax, this strictly. Where
    strict validation succeeds, lax picks the same member, as the member matched
    exactly outranks one only a lax conversion fits, except between members a JSON
    object may fill (models, dicts): there lax may prefer one that sets more fields.
    """
    definitions: dict[str, Any] = {}
    _collect_definitions(schema, definitions)

    def kind(choice: Any) -> Any:
        choice = choice if isinstance(choice, dict) else choice[0]
        while choice.get("type") in ("definition-ref", "nullable", "default"):
            ref = choice.get("schema_ref")
            choice = definitions.get(str(ref), {}) if ref is not None else choice.get("schema", {})
        return choice.get("type")

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "union":
                objects = [k for k in map(kind, node["choices"]) if k not in _NOT_OBJECTS]
                if len(objects) > 1:
                    raise _NotAlike(
                        f"a union of {', '.join(map(str, objects))}, which lax validation may tell apart otherwise"
                    )
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)


def _unwrap(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    if typing.get_origin(annotation) is typing.Annotated:
        base, *metadata = typing.get_args(annotation)
        return base, tuple(metadata)
    return annotation, ()


def _discriminator(metadata: Any) -> str | None:
    # The SDKs name it in their own annotation classes: ``discriminator`` or ``field_name``.
    for attribute in ("discriminator", "field_name"):
        name = getattr(metadata, attribute, None)
        if isinstance(name, str):
            return name
    return None


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel)


def _constructed_levels(model: type[pydantic.BaseModel], above: tuple[type, ...]) -> Levels:
    """The fields of ``model`` the SDK's construct recurses into (a model, a list or dict of one), checked."""
    if model in above:
        raise _NotAlike(f"{model.__name__} contains itself")
    _check_constructed(model)
    levels = []
    for name, field in model.model_fields.items():
        shape = _constructed_shape(field.annotation, f"{model.__name__}.{name}")
        if shape is not None:
            kind, inner = shape
            levels.append((name, kind, _constructed_levels(inner, (*above, model))))
    return tuple(levels)


# What construct keeps as given and strict validation of JSON also takes as it is.
_KEPT: frozenset[Any] = frozenset({str, int, bool, object, Any, type(None), list, dict})


def _constructed_shape(annotation: Any, where: str) -> tuple[str, type[pydantic.BaseModel]] | None:
    """How the SDK's construct builds a field: into a model, a list or a dict of models, or None (kept or validated).

    Refuses a type whose construct may differ from a strict validation of its JSON: a float
    (construct keeps an integer a float cannot hold exactly), a date or time (the SDK's own
    parser), a tuple or set (construct keeps the JSON list), a list of lists of models.
    """
    annotation, _ = _unwrap(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return None  # validated by the SDK (lax), which strict validation agrees with where it succeeds
    if _is_model(annotation):
        return "model", annotation
    if origin is typing.Literal or annotation in _KEPT:
        return None
    container = {list: ("list", 1), dict: ("dict", 2)}.get(origin)
    if container is not None and len(args) == container[1] and (origin is list or args[0] is str):
        inner = _constructed_shape(args[-1], where)
        if inner is None:
            return None
        if inner[0] == "model":
            return container[0], inner[1]
    raise _NotAlike(f"{where} is {annotation!r}, which the SDK's construct may build otherwise than validation")


def _check_constructed(model: type[pydantic.BaseModel]) -> None:
    """Refuse a level whose construct differs from a validation of well-typed JSON in more than ``fields_set``."""
    if model.model_config.get("extra") != "allow":
        raise _NotAlike(f"{model.__name__} does not keep unknown keys as construct does")
    decorators = model.__pydantic_decorators__
    if (
        decorators.validators
        or decorators.field_validators
        or decorators.root_validators
        or decorators.model_validators
    ):
        raise _NotAlike(f"{model.__name__} has validators, which construct skips")
    schema: Any = _core_schema(model)
    if schema.get("type") == "definitions":
        schema = schema["schema"]
    fields_schema = schema.get("schema") if schema.get("type") == "model" else None
    if not isinstance(fields_schema, dict) or fields_schema.get("type") != "model-fields":
        raise _NotAlike(f"{model.__name__} has a core schema this does not know")
    if fields_schema.get("extras_schema") is not None:
        raise _NotAlike(f"{model.__name__} types its unknown keys")
    for name, field in model.model_fields.items():
        if (field.alias or name) != name or field.validation_alias is not None:
            raise _NotAlike(f"{model.__name__}.{name} has an alias (construct keeps the key as an extra too)")
        if field.default_factory is not None or field.default not in (None, PydanticUndefined):
            raise _NotAlike(f"{model.__name__}.{name} has a default construct puts in place of null")


def _as_constructed(item: pydantic.BaseModel, levels: Levels) -> None:
    """Make a validated level look constructed: construct leaves unknown keys out of ``model_fields_set``."""
    extra = item.__pydantic_extra__
    if extra:
        item.__pydantic_fields_set__.difference_update(extra)
    for name, kind, inner in levels:
        value = item.__dict__[name]
        if value is None:
            continue  # a field left at its default (strict validation lets no null through for a model)
        if kind == "model":
            _as_constructed(value, inner)
        elif kind == "list":
            for element in value:
                _as_constructed(element, inner)
        else:
            for element in value.values():
                _as_constructed(element, inner)
