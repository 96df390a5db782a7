"""The raw walk's fast paths give what its general path gives.

The walk of the SDK's own objects passes over inline a string the policy read before and found nothing
in, when no value the view replaced is in it (asked in C); the view's walk takes such a string from the
policy's memo inline too. A policy whose memo forgets everything takes the general path for every
string: on tricky inputs (a value the detectors miss in one field but the view replaced, JSON-escaped
values, an encoded value, a value split across fields, nested SDK objects, keys) both must agree, and
agree with what the rules say.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import pydantic
import pytest

from relay_runtime.redaction import RedactionPolicy, Rule
from relay_runtime.redaction_pass import Pass

CARD = "4111 1111 1111 1111"
EMAIL = "jane.doe@example.com"
SECRET = 'pass="hunter2"'  # a value JSON escapes: found in the view, written escaped in JSON text


class Forgetful(OrderedDict):  # type: ignore[type-arg]
    """A memo that never holds anything: every string goes the general way."""

    def get(self, key: Any, default: Any = None) -> Any:
        return default


class Delta(pydantic.BaseModel):
    content: str | None = None
    role: str = "assistant"
    notes: list[str] = []


class Choice(pydantic.BaseModel):
    index: int = 0
    finish_reason: str = "stop"
    delta: Delta
    extra: dict[str, Any] = {}


class Answer(pydantic.BaseModel):
    id: str = "chatcmpl-1"
    object: str = "chat.completion"
    choices: list[Choice]
    usage: dict[str, int] | None = None


def _policy() -> RedactionPolicy:
    return RedactionPolicy(
        [
            Rule("redact", detector="email"),
            Rule("redact", detector="credit_card"),
            Rule("redact", detector="phone"),
            Rule("redact", name="passwords", pattern=r'pass="[^"]+"'),
        ]
    )


def _answer() -> Answer:
    escaped = json.dumps({"cmd": SECRET, "to": EMAIL})  # the secret escaped: pass=\"hunter2\"
    return Answer(
        choices=[
            Choice(
                delta=Delta(
                    # The detector misses the card glued to a letter; the view replaced it, so it goes here too.
                    content="ref A" + CARD,
                    notes=["stop", "A" + CARD, escaped, "4111 1111", "1111 1111", "jane.doe%40example.com"],
                ),
                extra={EMAIL: "key", "stop": "A" + CARD, "assistant": escaped, "clean": "nothing here"},
            ),
            Choice(index=1, delta=Delta(content="The export job times out.")),
        ],
        usage={"prompt_tokens": 5},
    )


def _walked(policy: RedactionPolicy, answer: Any) -> Any:
    p = Pass(policy)
    # The view: the values it replaces become pairs, looked for in every string of the SDK's objects.
    view = p.walk([{"role": "user", "content": f"card {CARD}, mail {EMAIL}, and {SECRET}"}], ("request", "messages"))
    assert CARD not in json.dumps(view) and SECRET not in json.dumps(view)
    return p.raw(answer, scan=True), dict(p.counts)


def test_the_fast_paths_agree_with_the_general_path_on_tricky_inputs() -> None:
    fast, general = _policy(), _policy()
    general._memo = Forgetful()
    answer = _answer()
    # Thrice on the fast policy: the second walk finds the SDK's vocabulary in the memo (the fast path) and
    # notes it as clean, the third asks the policy's set of clean texts.
    _walked(fast, answer)
    assert fast._memo.get("stop") is not None and fast._memo.get("ref A" + CARD) is not None
    second, second_counts = _walked(fast, answer)
    assert {"stop", "assistant", "chat.completion", "A" + CARD} <= fast._clean_texts
    assert not general._clean_texts  # a memo that forgets notes nothing as clean
    got, counts = _walked(fast, answer)
    want, want_counts = _walked(general, answer)
    assert got.model_dump() == want.model_dump() == second.model_dump()
    assert counts == want_counts == second_counts
    dumped = json.dumps(got.model_dump())
    assert CARD not in dumped and EMAIL not in dumped and "hunter2" not in dumped
    notes = got.choices[0].delta.notes
    assert notes[0] == "stop" and notes[1] == "A[REDACTED:credit_card]"
    assert json.loads(notes[2]) == {"cmd": "[REDACTED]", "to": "[REDACTED:email]"}
    assert notes[3:5] == ["4111 1111", "1111 1111"]  # a value split across fields is no value
    assert notes[5] == "[REDACTED:email]"  # found in the decoded copy
    assert got.choices[0].delta.content == "ref A[REDACTED:credit_card]"
    assert got.choices[1] is answer.choices[1]  # nothing in it changed: the same object
    assert "[REDACTED:email]" in got.choices[0].extra and got.choices[0].extra["stop"] == "A[REDACTED:credit_card]"


def test_the_views_memo_shortcut_counts_and_replaces_as_the_rules_do() -> None:
    fast, general = _policy(), _policy()
    general._memo = Forgetful()
    messages = [
        {"role": "system", "content": "You are a support assistant."},
        {"role": "user", "content": f"write to {EMAIL}"},
    ]
    for policy in (fast, fast, fast, general):
        p = Pass(policy)
        walked = p.walk(messages, ("request", "messages"))
        assert walked[0] is messages[0]  # nothing found in it: the same dict
        assert walked[1]["content"] == "write to [REDACTED:email]"
        assert p.counts == {"redact:email": 1}


def test_a_clean_text_is_still_read_through_what_this_pass_replaced() -> None:
    """A string the policy notes as clean (``_clean_texts``: the rules found nothing in it) is passed over only
    when this pass knows nothing else of it: a value replaced elsewhere in it is still replaced, and what the
    pass made of it (a whole-field rule's piece, a JSON text read as an object) still stands."""
    policy = _policy()
    text = "ref A" + CARD  # the detector misses the card glued to a letter
    for _ in range(2):
        assert Pass(policy).raw({"note": text}, scan=True) == {"note": text}
    assert text in policy._clean_texts
    p = Pass(policy)
    p.walk(f"card {CARD}", ("request", "messages", "0", "content"))  # the view replaces the card: a pair
    assert p.raw({"note": text}, scan=True) == {"note": "ref A[REDACTED:credit_card]"}
    assert p.raw([text], scan=True) == ["ref A[REDACTED:credit_card]"]
    p = Pass(policy)
    p.leaves["stop"] = "[blanked]"  # what this pass made of it (a piece of an answer a whole-field rule blanked)
    for _ in range(2):
        Pass(policy).raw({"finish_reason": "stop"}, scan=True)
    assert "stop" in policy._clean_texts
    assert p.raw({"finish_reason": "stop"}, scan=True) == {"finish_reason": "[blanked]"}
    assert p.raw(["stop"], scan=True) == ["[blanked]"]


def test_clean_texts_hold_no_data_url_and_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from relay_runtime import redaction_raw

    monkeypatch.setattr(redaction_raw, "_CLEAN_TEXTS", 50)
    policy = _policy()
    url = "data:text/plain;base64,aGVsbG8gd29ybGQ="  # "hello world": nothing found in it, but read decoded each time
    long_text = "nothing to find here. " * 20
    for _ in range(3):
        Pass(policy).raw({"a": url, "b": long_text, "c": "chat.completion"}, scan=True)
        Pass(policy).walk({"a": url, "b": long_text}, ("request", "params"))
    assert "chat.completion" in policy._clean_texts
    assert url not in policy._clean_texts and long_text not in policy._clean_texts
    texts = [f"vocabulary word {i}" for i in range(60)]
    for _ in range(2):
        Pass(policy).raw(texts, scan=True)
    assert len(policy._clean_texts) == 50
    assert Pass(policy).raw(texts, scan=True) == texts  # the others the memo still answers for


class Details(pydantic.BaseModel, extra="allow"):
    reasoning_tokens: int | None = 0
    audio_tokens: int | None = None


class Usage(pydantic.BaseModel):
    prompt_tokens: int = 0
    details: Details | None = None


class Reply(pydantic.BaseModel):
    usage: Usage
    choices: list[Usage]


class Node(pydantic.BaseModel):
    text: str = ""
    child: Node | None = None


def test_sdk_objects_inside_sdk_objects_are_read_whole() -> None:
    """An SDK object met inside another (a field's value, a list's item) is walked straight from the walk of its
    holder once its class is known (``ThroughView._model``): what the walk makes of it is what ``_raw`` made. An
    object of empty fields is passed over only when it has no extra fields; a value the class does not declare
    (``model_construct``, no validation) is still read; an object nested deeper than the walk goes is read as
    its text."""
    policy = _policy()
    constructed = Usage.model_construct(
        prompt_tokens=f"mail {EMAIL}", details=Details.model_construct(reasoning_tokens=4111111111111111)
    )
    reply = Reply(usage=Usage(details=Details(note=f"to {EMAIL}")), choices=[constructed, Usage(details=Details())])
    deep = Node(text="top")
    for _ in range(40):  # 80 levels of objects and their fields: beyond the walk's 64
        deep = Node(child=deep)
    deep = Node(child=Node(child=deep, text=f"card {CARD}"))
    inner = deep
    while inner.child is not None:
        inner = inner.child
    inner.text = f"write to {EMAIL}"
    for _ in range(3):  # the classes are met before from the second walk on
        got = Pass(policy).raw(reply, scan=True)
        assert got.usage.details.model_extra == {"note": "to [REDACTED:email]"}
        assert got.choices[0].prompt_tokens == "mail [REDACTED:email]"
        assert got.choices[0].details.reasoning_tokens == "[REDACTED:credit_card]"
        assert got.choices[1] is reply.choices[1]  # nothing in it: the same object
        walked = Pass(policy).raw(deep, scan=True)
        assert walked.child.text == "card [REDACTED:credit_card]"
        assert EMAIL not in repr(walked) and "[REDACTED:email]" in repr(walked)
