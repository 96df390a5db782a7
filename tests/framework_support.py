"""Helpers for the framework integration tests: the framework packages, scripted models, scope outlines."""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from relay_runtime import Recorder
from relay_runtime import conventions as cv
from relay_runtime.integrations.otel import OTelExporter


def need(module: str) -> Any:
    """Import a framework package; skip without it locally, fail under CI=true (the extra is installed there)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        message = f"{module} is not installed (pip install -e '.[frameworks]'): {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


def outline(events: Recorder, *, skip: tuple[str, ...] = ()) -> list[str]:
    """The ended scopes as an indented outline, in start order: ``"  tool weather failed"``.

    Scopes named in ``skip`` are left out with what is under them (the conversation above the turn).
    """
    starts = {e.uuid: e for e in events.starts()}
    ends = {e.uuid: e for e in events.ends()}
    children: dict[str | None, list[str]] = {}
    for uuid, start in starts.items():
        parent = start.parent_uuid if start.parent_uuid in starts else None
        children.setdefault(parent, []).append(uuid)
    lines: list[str] = []

    def walk(uuid: str, depth: int) -> None:
        start = starts[uuid]
        if start.name in skip:
            for child in children.get(uuid, []):
                walk(child, depth)
            return
        end = ends.get(uuid)
        lines.append(f"{'  ' * depth}{start.scope_type} {start.name} {end.outcome if end else 'open'}")
        for child in children.get(uuid, []):
            walk(child, depth + 1)

    for root in children.get(None, []):
        walk(root, 0)
    return lines


def attempts(events: Recorder) -> list[Any]:
    return events.ends(relay_kind=cv.ATTEMPT)


def logical_calls(events: Recorder) -> list[Any]:
    return events.ends(relay_kind=cv.LOGICAL_CALL)


def tool_call_body(name: str, args: dict[str, Any], call_id: str = "call-1") -> dict[str, Any]:
    """A chat completion asking for one tool call."""
    from relay_runtime.adapters import testing as t

    return t.chat_completion_body(
        None, finish_reason="tool_calls", tool_calls=[{"id": call_id, "name": name, "arguments": json.dumps(args)}]
    )


@pytest.fixture
def otel_spans(relay_turn: Any) -> Iterator[InMemorySpanExporter]:
    """The spans our OTel exporter makes of the turn's relay (a real SDK pipeline, kept in memory)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    relay, _turn = relay_turn
    exporter = OTelExporter(provider).attach(relay)
    try:
        yield memory
    finally:
        exporter.detach()


@contextmanager
def only_our_agents_processor() -> Iterator[Any]:
    """The OpenAI Agents SDK with no trace processor but the ones a test adds (the SDK's default one would
    export to OpenAI); afterwards ours taken off, the adapters uninstrumented and the SDK's own put back.
    Yields the ``agents`` package."""
    from relay_runtime import adapters
    from relay_runtime.integrations import openai_agents

    agents = need("agents")
    saved = agents.tracing.get_trace_provider()._multi_processor._processors
    agents.set_tracing_disabled(False)
    agents.set_trace_processors([])
    try:
        yield agents
    finally:
        openai_agents.uninstrument()
        adapters.uninstrument()
        agents.set_default_openai_client(None, use_for_tracing=False)
        agents.set_trace_processors(list(saved))
