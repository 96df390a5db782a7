"""A redaction policy reaches values held in objects, not only in strings, mappings and lists: a field a
model's dump leaves out (a subclass's own field under a field declared as its base), a ``str``
subclass, a set, bytes, an object known only by its printed text, values nested deeper than the walk
goes, a card number written as a number, a model's computed field and an object with ``items()`` (which
the sinks write as their dump and their items). Each of these once reached the events (and through them
the sinks) unredacted."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pydantic
import pytest

from relay_runtime import Recorder, Relay, ScopeType, adapters, cassettes, redaction, session
from relay_runtime.adapters import testing
from relay_runtime.events import SCOPE_END, new_event
from relay_runtime.integrations.trajectory import AtifExporter
from relay_runtime.jsonl import JsonlWriter, event_json
from relay_runtime.redaction import RedactionPolicy, Rule
from relay_runtime.redaction_policy import RULES_KEY
from relay_runtime.types import AnnotatedLLMResponse

EMAIL = "jane.doe@example.com"
REDACTED = "[REDACTED:email]"


class Message(pydantic.BaseModel):
    content: str


class ToolMessage(Message):
    tool_args: dict[str, Any]  # a subclass's own field: not in a dump of a field declared ``Message``


class Generation(pydantic.BaseModel):
    message: Message
    text: str = ""


class Extra(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    id: str


class Text(str):
    """A ``str`` subclass, as LangChain's ``TextAccessor``."""


@dataclasses.dataclass
class Found:
    who: str


class Shown:
    """An object of no known shape that prints what it holds."""

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Shown({self.value!r})"


class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    __str__ = __repr__


def _policy() -> RedactionPolicy:
    return RedactionPolicy([Rule("redact", detector="email")])


def _through(relay: Relay, value: Any) -> Any:
    """``value`` as a subscriber sees it as a function scope's input under the policy."""
    seen = Recorder()
    relay.subscribers.register(seen)
    relay.redaction.use(_policy())
    with relay.scope.scope("step", ScopeType.FUNCTION, input={"value": value}):
        pass
    event = seen.events[0]
    assert EMAIL not in repr(event.input) and EMAIL not in event_json(event)
    return event.input["value"]


def _nested(depth: int) -> Any:
    value: Any = {"email": EMAIL}
    for _ in range(depth):
        value = {"down": value}
    return value


def test_a_subclass_field_the_dump_leaves_out_is_redacted_in_a_scope() -> None:
    generation = Generation(message=ToolMessage(content="look up", tool_args={"email": EMAIL}))
    assert EMAIL not in json.dumps(generation.model_dump())  # the dump does not show it: the walk must not trust it
    out = _through(Relay(), generation)
    assert type(out) is Generation and out.message.tool_args == {"email": REDACTED}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (Text(f"mail {EMAIL}"), f"mail {REDACTED}"),
        ({EMAIL, "other"}, {REDACTED, "other"}),
        (f"mail {EMAIL}".encode(), f"mail {REDACTED}".encode()),
        (Found(EMAIL), Found(REDACTED)),
        (Shown(EMAIL), f"Shown('{REDACTED}')"),
        (Extra(id="x", note=EMAIL), None),
    ],
    ids=["str-subclass", "set", "bytes", "dataclass", "printed-object", "pydantic-extra"],
)
def test_values_in_objects_of_every_shape_are_redacted(value: Any, expected: Any) -> None:
    out = _through(Relay(), value)
    if expected is not None:
        assert out == expected


def test_values_nested_deeper_than_the_walk_goes_are_not_passed_on_whole() -> None:
    out = _through(Relay(), _nested(100))
    shown = repr(out)
    # The policy's marker, or the core's credential walk's (it stops deeper than 64 and blanks what is below).
    assert EMAIL not in shown and (REDACTED in shown or redaction.REDACTED in shown)


def test_json_text_nested_deeper_than_the_walk_goes_is_redacted() -> None:
    relay = Relay()
    seen = Recorder()
    relay.subscribers.register(seen)
    relay.redaction.use(_policy())
    relay.tools.execute("lookup", {"query": json.dumps(_nested(100))}, lambda args: "done")
    assert EMAIL not in event_json(seen.events[0]) and seen.events[0].metadata[RULES_KEY]


def test_an_object_that_cannot_be_printed_is_not_passed_on() -> None:
    relay = Relay()
    seen = Recorder()
    relay.subscribers.register(seen)
    relay.redaction.use(_policy())
    with relay.scope.scope("step", ScopeType.FUNCTION, input={"value": Unprintable(), "who": EMAIL}):
        pass
    assert seen.events[0].input == {"value": "[unprintable Unprintable]", "who": REDACTED}


def test_code_objects_pass_as_they_are() -> None:
    relay = Relay()
    seen = Recorder()
    relay.subscribers.register(seen)
    relay.redaction.use(_policy())
    with relay.scope.scope("step", ScopeType.FUNCTION, input={"tool": _policy, "kind": Found, "who": EMAIL}):
        pass
    assert seen.events[0].input["tool"] is _policy and seen.events[0].input["kind"] is Found


def test_an_llm_answer_object_is_rebuilt_as_its_own_type_with_its_hidden_fields_redacted() -> None:
    """The raw walk (an LLM scope's SDK object, through what the view changed) reads the instance's fields."""
    answer = Generation(message=ToolMessage(content="", tool_args={"email": EMAIL}), text=Text(f"to {EMAIL}"))
    response = AnnotatedLLMResponse(tool_calls=[{"id": "c", "name": "lookup", "arguments": {"email": EMAIL}}])
    event = new_event(
        SCOPE_END, "u", "p", "t", "openai", "llm", 2, 1, None, answer, {},
        annotated_response=response, outcome="success",
    )  # fmt: skip
    out = _policy().redact_event(event)
    assert type(out.output) is Generation and type(out.output.message) is ToolMessage
    assert out.output.message.tool_args == {"email": REDACTED} and out.output.text == f"to {REDACTED}"
    assert answer.message.tool_args == {"email": EMAIL}  # the caller's object is left as it was
    assert EMAIL not in repr(out.output)


def test_a_list_stays_a_list_and_a_tuple_a_tuple() -> None:
    out = _through(Relay(), {"list": ["x", EMAIL], "tuple": ("x", EMAIL)})
    assert out == {"list": ["x", REDACTED], "tuple": ("x", REDACTED)}


def test_binary_bytes_are_left_as_they_are() -> None:
    image = b"\x89PNG\r\n\x1a\n\xff\xfe" + EMAIL.encode()  # not UTF-8: data, not text
    relay = Relay()
    seen = Recorder()
    relay.subscribers.register(seen)
    relay.redaction.use(_policy())
    with relay.scope.scope("step", ScopeType.FUNCTION, input={"image": image, "who": EMAIL}):
        pass
    assert seen.events[0].input == {"image": image, "who": REDACTED}


class Answer(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    text: str


def test_an_answer_objects_field_names_are_kept_and_its_extra_field_names_are_read() -> None:
    """The raw walk reads every value of an SDK object, but only the names of its extra fields: the declared
    names are the SDK's code (a rule whose pattern matches one leaves it, and the object keeps its type),
    while an extra field's name came from the provider, as its value did."""
    policy = RedactionPolicy([Rule("redact", detector="email"), Rule("regex_replace", pattern="text", replacement="X")])
    plain = Answer(text=f"text to {EMAIL}")
    out = policy.redact_event(_answer_event(plain)).output
    assert type(out) is Answer and out.text == f"X to {REDACTED}"
    extra = Answer(text="hi", **{EMAIL: "seen"})
    out = policy.redact_event(_answer_event(extra)).output
    assert out == {"text": "hi", REDACTED: "seen"}  # a renamed field: no longer the object, its data


def _answer_event(answer: Any) -> Any:
    return new_event(SCOPE_END, "u", "p", "t", "openai", "llm", 2, 1, None, answer, {}, outcome="success")


CARD = 4111111111111111
CARD_REDACTED = "[REDACTED:credit_card]"


def _sinks(relay: Relay, tmp_path: Path) -> tuple[AtifExporter, Path]:
    """An ATIF trajectory and a JSONL file of the turn's events (the ``relay_turn`` fixture's session)."""
    atif = AtifExporter(agent_name="agent").attach(session.SESSION_COORDINATOR)
    jsonl = tmp_path / "events.jsonl"
    relay.subscribers.register(JsonlWriter(jsonl), name="jsonl")
    return atif, jsonl


def test_a_card_number_written_as_a_number_is_redacted_in_every_sink(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path
) -> None:
    """A JSON number in the model's tool-call arguments, an int in a tool's arguments and a float in its result:
    13 digits or more are read as the text a sink writes for them."""
    session.SESSION_COORDINATOR.redaction.use(RedactionPolicy([Rule("redact", detector="credit_card")]))
    relay, _ = relay_turn
    atif, jsonl = _sinks(relay, tmp_path)
    call = {"id": "c1", "name": "pay", "arguments": json.dumps({"card_number": CARD, "amount": 12})}
    scripted = testing.scripted_openai(testing.json_reply(testing.chat_completion_body(None, tool_calls=[call])))
    cassette = tmp_path / "cassette.json"
    with cassettes.use(cassette, mode="record"):
        adapters.complete(scripted.client, {"model": "gpt-x", "messages": [{"role": "user", "content": "pay"}]})
    relay.tools.execute("pay", {"card_number": CARD, "cards": [CARD], "amount": 12}, lambda args: {"card": float(CARD)})

    (end,) = relay_events.ends(scope_type="llm")
    arguments = json.loads(end.annotated_response.tool_calls[0]["arguments"])
    assert arguments == {"card_number": CARD_REDACTED, "amount": 12}  # small numbers stay numbers
    (start,) = relay_events.starts(scope_type="tool")
    assert start.input == {"card_number": CARD_REDACTED, "cards": [CARD_REDACTED], "amount": 12}
    (tool_end,) = relay_events.ends(scope_type="tool")
    assert tool_end.output == {"card": CARD_REDACTED}
    events = "\n".join(event_json(e) + repr(e.annotated_response) + repr(e.output) for e in relay_events.events)
    for where, text in (
        ("events", events), ("JSONL", jsonl.read_text()), ("ATIF", atif.export_json("session-1")),
        ("cassette", cassette.read_text()),
    ):  # fmt: skip
        assert str(CARD) not in text, where


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        (Rule("remove", paths=["/tool/arguments/pin"]), {"card": CARD_REDACTED}),
        (Rule("redact", paths=["/tool/arguments/pin"]), {"pin": "[REDACTED]", "card": CARD_REDACTED}),
        (Rule("mask", paths=["/tool/arguments/card"], unmasked_suffix=4), {"pin": 1234, "card": "************1111"}),
    ],
    ids=["remove", "redact", "mask"],
)
def test_a_rule_naming_a_numbers_path_acts_on_it(rule: Rule, expected: dict[str, Any]) -> None:
    relay = Relay()
    seen = Recorder()
    relay.subscribers.register(seen)
    relay.redaction.use(RedactionPolicy([rule, Rule("redact", detector="credit_card")]))
    relay.tools.execute("pay", {"pin": 1234, "card": CARD}, lambda args: "ok")
    assert seen.events[0].input == expected


class Contact(pydantic.BaseModel):
    first: str
    last: str
    domain: str

    @pydantic.computed_field  # type: ignore[prop-decorator]
    @property
    def email(self) -> str:
        """In no field of the instance, but in its dump, which the sinks write."""
        return f"{self.first}.{self.last}@{self.domain}"


class Row:
    """An object the JSONL sink writes as ``dict(row.items())``; its printed text shows nothing."""

    def __init__(self, **values: Any) -> None:
        self._values = values

    def items(self) -> Any:
        return self._values.items()


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (Contact(first="jane", last="doe", domain="example.com"),
         {"first": "jane", "last": "doe", "domain": "example.com", "email": REDACTED}),
        (Row(email=EMAIL, n=2), {"email": REDACTED, "n": 2}),
    ],
    ids=["computed-field", "items"],
)  # fmt: skip
def test_what_the_sinks_write_of_a_tool_result_object_is_read(
    result: Any, expected: Any, relay_turn: Any, relay_events: Recorder, tmp_path: Path
) -> None:
    """The event holds the redacted data in place of the object (a computed field cannot be set on it)."""
    session.SESSION_COORDINATOR.redaction.use(_policy())
    relay, _ = relay_turn
    atif, jsonl = _sinks(relay, tmp_path)
    relay.tools.execute("lookup", {"q": "jane"}, lambda args: result)
    (end,) = relay_events.ends(scope_type="tool")
    assert end.output == expected and end.metadata[RULES_KEY] == {"redact:email": 1}
    events = "\n".join(event_json(e) + repr(e.output) for e in relay_events.events)
    for where, text in (("events", events), ("JSONL", jsonl.read_text()), ("ATIF", atif.export_json("session-1"))):
        assert EMAIL not in text, where


def test_a_model_with_computed_fields_nothing_changes_in_stays_itself() -> None:
    contact = Contact(first="jane", last="doe", domain="example.org")
    relay = Relay()
    seen = Recorder()
    relay.subscribers.register(seen)
    relay.redaction.use(RedactionPolicy([Rule("redact", detector="credit_card")]))
    relay.tools.execute("lookup", {"q": "jane"}, lambda args: contact)
    assert seen.events[1].output is contact


class Twice(pydantic.BaseModel):
    reference: str
    note: str


def test_a_value_replaced_inside_a_string_the_answer_object_holds_twice_is_replaced_in_both() -> None:
    """The view's card is replaced inside the SDK object's strings too, where the rules alone find nothing (the
    number glued to a reference); the same string in a second field is changed as in the first."""
    card = "4111 1111 1111 1111"
    glued = f"ref{card}x"
    response = AnnotatedLLMResponse(output_text=f"card {card} on file")
    event = new_event(
        SCOPE_END, "u", "p", "t", "openai", "llm", 2, 1, None, Twice(reference=glued, note=glued), {},
        annotated_response=response, outcome="success",
    )  # fmt: skip
    out = RedactionPolicy([Rule("redact", detector="credit_card")]).redact_event(event).output
    assert card not in repr(out)
    assert out.reference == out.note == "ref[REDACTED:credit_card]x"
