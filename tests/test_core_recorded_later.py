"""A scope's input and output are blanked when first read, for the subscribers that read them.

Blanking walks the whole value (a tool's arguments and result, a chain's input), and most subscribers
never read it (a span exporter without content capture): the event holds it as ``Recorded`` and the
walk runs on first read, once, whichever thread reads first. What any reader sees is what an eager
walk gave: credentials blanked, the caller's own objects untouched. An LLM attempt's request (its
headers and kwargs, its tools' results in the conversation) is recorded the same way.
"""

from __future__ import annotations

import pickle
import threading
from typing import Any

import pytest
from core_support import new_relay

from relay_runtime import Event, LLMRequest, ScopeType, tool_results
from relay_runtime import scopes as scopes_module
from relay_runtime.events import SCOPE_START
from relay_runtime.redaction import REDACTED

KEY = "sk-live-0123456789abcdefghijklmnop"


def _tool_events(output: Any = None) -> tuple[Any, list[Event], dict[str, Any], dict[str, Any]]:
    relay, rec = new_relay()
    args = {"user": "ada", "api_key": KEY}
    result = output if output is not None else {"opened": True, "account": {"api_key": KEY}}
    handle = relay.scope.push("open_account", ScopeType.TOOL, input=args)
    relay.scope.pop(handle, output=result)
    return relay, rec.events, args, result


def test_a_tool_scope_records_its_arguments_and_result_blanked_and_leaves_the_callers_own() -> None:
    _relay, (start, end), args, result = _tool_events()
    assert start.input == {"user": "ada", "api_key": REDACTED}
    assert end.output == {"opened": True, "account": {"api_key": REDACTED}}
    assert start.input is start.input and end.output is end.output  # walked once, then kept
    assert args["api_key"] == KEY and result["account"]["api_key"] == KEY
    written = repr(start.to_dict()) + repr(end.to_dict())
    assert KEY not in written and "ada" in written


def test_the_walk_runs_only_for_a_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[Any] = []
    real = scopes_module.redact_value

    def counting(value: Any) -> Any:
        walked.append(value)
        return real(value)

    monkeypatch.setattr(scopes_module, "redact_value", counting)
    _relay, (start, end), args, result = _tool_events()
    assert walked == []  # the recorder holds the events; nobody has read input or output yet
    assert end.output["account"]["api_key"] == REDACTED
    assert walked == [result]
    assert start.input["api_key"] == REDACTED and start.input["user"] == "ada"
    assert walked == [result, args]


def test_threads_reading_one_event_at_once_all_get_the_one_value() -> None:
    _relay, (_start, end), _args, _result = _tool_events()
    seen: list[Any] = []
    barrier = threading.Barrier(8)

    def read() -> None:
        barrier.wait()
        seen.append(end.output)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and all(v is seen[0] for v in seen)
    assert seen[0]["account"]["api_key"] == REDACTED


def test_an_output_telling_its_outcome_still_ends_the_scope_with_it() -> None:
    relay, rec = new_relay()
    handle = relay.scope.push("step")
    relay.scope.pop(handle, output={"outcome": "cancelled", "api_key": KEY})
    end = rec.events[-1]
    assert end.outcome == "cancelled"
    assert end.output == {"outcome": "cancelled", "api_key": REDACTED}


def test_a_tool_result_held_as_text_has_its_credential_values_blanked() -> None:
    _relay, (_start, end), _args, _result = _tool_events(output=f'{{"user": "ada", "api_key": "{KEY}"}}')
    assert KEY not in end.output and "ada" in end.output


def test_an_event_pickled_before_anyone_read_it_unpickles_blanked() -> None:
    _relay, (start, end), _args, _result = _tool_events()
    again_start, again_end = pickle.loads(pickle.dumps((start, end)))
    assert again_start.input["api_key"] == REDACTED
    assert again_end.output["account"]["api_key"] == REDACTED
    assert KEY not in pickle.dumps((again_start.to_dict(), again_end.to_dict())).decode("latin-1")


def test_an_event_built_by_hand_keeps_what_it_was_given() -> None:
    event = Event("mark", "u", None, "t", "m", None, 1, input={"api_key": KEY}, output="x")
    assert event.input == {"api_key": KEY} and event.output == "x"  # a caller's own event is its own record
    event.output = {"changed": True}
    assert event.output == {"changed": True}


# -- an LLM attempt's request ---------------------------------------------------------------------

TOOL_RESULT = f"user='ada' api_key='{KEY}'"


def _attempt_start(relay: Any, rec: Any) -> Event:
    content = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "user", "content": "open my account"},
            {"role": "tool", "tool_call_id": "c1", "content": TOOL_RESULT},
        ],
    }
    relay.llm.execute("openai", LLMRequest({"Authorization": f"Bearer {KEY}"}, content), lambda request: {"ok": True})
    return next(e for e in rec.events if e.kind == SCOPE_START and e.provider == "openai")


def test_an_attempts_request_is_walked_only_for_a_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[Any] = []
    real = tool_results._holds_results

    def counting(items: list[Any]) -> bool:
        walked.append(items)
        return real(items)

    monkeypatch.setattr(tool_results, "_holds_results", counting)
    relay, rec = new_relay()
    start = _attempt_start(relay, rec)
    assert walked == []  # recorded, not read: the conversation was not walked
    recorded = start.input
    assert len(walked) == 1 and start.input is recorded  # walked once, then kept
    assert recorded["headers"]["Authorization"] == REDACTED
    messages = recorded["content"]["messages"]
    assert messages[0] == {"role": "user", "content": "open my account"}
    assert KEY not in messages[1]["content"] and "ada" in messages[1]["content"]
    assert KEY not in repr(start.to_dict()) and KEY not in repr(pickle.loads(pickle.dumps(start)).to_dict())


def test_an_attempts_request_that_cannot_be_walked_is_withheld_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(items: list[Any]) -> bool:
        raise RuntimeError("odd conversation")

    monkeypatch.setattr(tool_results, "_holds_results", broken)
    relay, rec = new_relay()
    start = _attempt_start(relay, rec)
    assert start.input == {"headers": {}, "content": REDACTED}
    assert relay.diagnostics()["bookkeeping_errors"] == 1
    assert KEY not in repr(start.to_dict())
