"""A tool's result carried back to the model holds no credential in a cassette, and the conversation replays.

A tool returning an object with an ``api_key`` is sent back to the model as ``str(result)`` inside the
conversation, which the credential scrub leaves alone as content: the cassette recording that call wrote
the key to a file that is committed. The tools' results are stored blanked (``tool_results``), and matched
blanked, so the same conversation replays whatever key the tool returned this run. Real SDK clients over
the mock transport to record, clients that refuse the network to replay; no redaction policy installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import adapters, cassettes
from tests.cassette_support import APIS, Offline

KEY = "sk-issued-0123456789abcdef"
OTHER_KEY = "sk-reissued-fedcba9876543210"  # what the same tool returns on another run
ASK = {"role": "user", "content": "Open an account for ada"}


def result(key: str) -> str:
    return f"user='ada' api_key='{key}'"  # what the SDKs send back of a pydantic result: str(result)


def conversation(api: str, key: str) -> dict[str, Any]:
    """The call after the tool ran, in ``api``'s shape: its result is the last thing in the conversation."""
    text = result(key)
    if api == "chat":
        call = {"id": "call-1", "type": "function", "function": {"name": "open_account", "arguments": "{}"}}
        answer = {"role": "tool", "tool_call_id": "call-1", "content": text}
        messages = [ASK, {"role": "assistant", "content": None, "tool_calls": [call]}, answer]
        return {**APIS[api].kwargs, "messages": messages}
    if api == "responses":
        call = {"type": "function_call", "call_id": "c-1", "name": "open_account", "arguments": "{}"}
        items = [ASK, call, {"type": "function_call_output", "call_id": "c-1", "output": text}]
        return {**APIS[api].kwargs, "input": items}
    use = {"type": "tool_use", "id": "tu-1", "name": "open_account", "input": {}}
    results = [
        {"type": "tool_result", "tool_use_id": "tu-1", "content": text},
        {"type": "tool_result", "tool_use_id": "tu-1", "content": [{"type": "text", "text": text}]},
    ]
    messages = [ASK, {"role": "assistant", "content": [use]}, {"role": "user", "content": results}]
    return {**APIS[api].kwargs, "messages": messages}


def replayed(api: str, path: Path, kwargs: dict[str, Any]) -> str:
    offline = Offline()
    client, _ = offline.clients(APIS[api].sdk)
    with cassettes.use(path):
        answer = adapters.complete(client, kwargs, api_mode=APIS[api].api_mode)
    assert offline.requests == []
    if api == "chat":
        return str(answer.choices[0].message.content)
    return str(answer.output_text if api == "responses" else answer.content[0].text)


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
def test_a_tool_result_with_a_key_is_recorded_blanked_and_replays(tmp_path: Path, api: str) -> None:
    path = tmp_path / "c.json"
    live = APIS[api].scripted(APIS[api].reply("Opened."))
    with cassettes.use(path, mode="record"):
        adapters.complete(live.client, conversation(api, KEY), api_mode=APIS[api].api_mode)
    assert KEY in live.script.requests[0].content.decode()  # the provider got the result as it was
    data = path.read_bytes()
    for form in (KEY, json.dumps(KEY)[1:-1], json.dumps(KEY, ensure_ascii=True)[1:-1]):
        assert form.encode() not in data
    assert b"api_key='[redacted]'" in data and b"user='ada'" in data  # the rest of the result is kept

    assert replayed(api, path, conversation(api, KEY)) == "Opened."
    # The same conversation with only the blanked value changed is the same request: it replays too.
    assert replayed(api, path, conversation(api, OTHER_KEY)) == "Opened."


def test_a_cassette_written_before_results_were_blanked_still_replays(tmp_path: Path) -> None:
    """The recorded side is normalised as the live one is: a file holding the key (recorded before) matches."""
    path = tmp_path / "c.json"
    live = APIS["chat"].scripted(APIS["chat"].reply("Opened."))
    with cassettes.use(path, mode="record"):
        adapters.complete(live.client, conversation("chat", KEY))
    document = json.loads(path.read_text())
    document["calls"][0]["request"]["messages"][2]["content"] = result(KEY)
    path.write_text(json.dumps(document))
    assert replayed("chat", path, conversation("chat", OTHER_KEY)) == "Opened."
