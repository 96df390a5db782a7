"""A caller's metadata (a scope's, a mark's, a tool's, a model call's) holds no credential in any record.

The core blanked credential keys and remembered client keys in a scope's input and output and a mark's data,
but took metadata as given: the events, the JSONL file and the ATOF trajectory wrote it whole, and the OTel
exporter made a mark's metadata its span event's attributes with content capture off.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import LLMRequest, calls, redaction
from relay_runtime.events import FIELDS
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.integrations.trajectory import AtofExporter
from relay_runtime.jsonl import JsonlWriter
from tests.otel_support import Pipeline

KEY = "sk-remembered-Qw3rTy7uIo"
TOKEN = "ghp_metadataToken0123456789"
PASSWORD = "pw-metadata-AsDfGhJk"


@pytest.fixture(autouse=True)
def _fresh_secrets() -> Iterator[None]:
    redaction.forget_secrets()
    redaction.remember_secret(KEY)
    yield
    redaction.forget_secrets()


def _answer(request: LLMRequest) -> dict[str, Any]:
    return {"id": "r-1", "model": "m", "choices": [{"message": {"content": "hi"}}]}


def test_a_callers_metadata_is_recorded_without_its_credentials(relay_turn, relay_events, tmp_path: Path) -> None:
    relay, _turn = relay_turn
    jsonl = JsonlWriter(tmp_path / "events.jsonl")
    relay.subscribers.register(jsonl, name="test.jsonl")
    pipeline = Pipeline()
    otel = OTelExporter(pipeline.tracer_provider, capture_content=False).attach(relay)
    atof_text = io.StringIO()
    atof = AtofExporter(stream=atof_text).attach(relay)
    given = {"note": f"key {KEY}", "github_token": TOKEN, "password": PASSWORD, "user": "ada"}

    with relay.scope.scope("step", metadata=dict(given)) as step:
        relay.scope.mark("checkpoint", {"n": 1}, metadata=dict(given))
        relay.tools.execute("lookup", {"q": "x"}, lambda args: "found", metadata=dict(given))
        calls.execute_current(LLMRequest({}, {"model": "m"}), _answer, name="openai", metadata=dict(given))
        relay.llm.execute("openai", LLMRequest({}, {"model": "m"}), _answer, metadata=dict(given))
    relay.scope.end(relay.scope.push("late", attach=False), metadata=dict(given))
    assert step.ended
    relay.subscribers.deregister("test.jsonl")
    jsonl.close()
    otel.shutdown()
    assert atof.shutdown()

    assert relay_events.starts(name="step")[0].metadata == {
        "note": f"key {redaction.REDACTED}", "github_token": redaction.REDACTED,
        "password": redaction.REDACTED, "user": "ada",
    }  # fmt: skip
    spans = [
        (s.name, dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events]) for s in pipeline.finished()
    ]
    texts = {
        "events": " ".join(repr(getattr(e, name)) for e in relay_events for name in FIELDS),
        "jsonl": (tmp_path / "events.jsonl").read_text(),
        "spans (capture off)": repr(spans),
        "atof": atof_text.getvalue(),
    }
    for where, text in texts.items():
        for secret in (KEY, TOKEN, PASSWORD):
            assert secret not in text, f"{secret!r} is in {where}"
    assert given["password"] == PASSWORD  # the caller's dict is never edited
