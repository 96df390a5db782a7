"""Scopes sharing one hints object get, from the plan their first starts made, the spans each would
get on its own: the same name, kind and attributes, and none carried over from another scope."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from otel_support import Pipeline, span_path  # noqa: F401  (every test here runs on both span paths)

from relay_runtime import Relay, ScopeType
from relay_runtime import conventions as cv
from relay_runtime.integrations.otel import OTelExporter, start_plans

pytestmark = pytest.mark.usefixtures("span_path")
TOOL = ScopeType.TOOL.value

HINTS: dict[str, Any] = {
    "name": "tools/call add",
    "kind": "client",
    "attributes": {"mcp.method.name": "tools/call", "gen_ai.tool.name": "add", "server.port": 443},
}


def _shape(span: ReadableSpan) -> tuple[str, Any, dict[str, Any]]:
    return span.name, span.kind, dict(span.attributes or {})


def _spans(scopes: list[tuple[str, str, dict[str, Any]]], hints: Any) -> list[tuple[str, Any, dict[str, Any]]]:
    """One span per (scope name, scope type, extra metadata), each scope carrying ``hints`` (None: a new copy each)."""
    pipeline = Pipeline()
    relay = Relay()
    exporter = OTelExporter(pipeline.tracer_provider).attach(relay)
    try:
        for name, scope_type, extra in scopes:
            given = hints if hints is not None else {**HINTS, "attributes": dict(HINTS["attributes"])}
            metadata = {**({cv.KIND: cv.TOOL} if scope_type == ScopeType.TOOL.value else {}), **extra}
            handle = relay.scope.push(name, scope_type, metadata={**metadata, cv.SPAN_HINTS: given})
            relay.scope.pop(handle)
    finally:
        exporter.detach()
    return [_shape(s) for s in pipeline.finished()]


SCOPES = [
    ("add", ScopeType.TOOL.value, {}),
    ("add", ScopeType.TOOL.value, {}),
    ("add", ScopeType.TOOL.value, {}),  # planned by now
    ("add", ScopeType.TOOL.value, {"tool_call_id": "call-1"}),  # an attribute of its own
    ("add", ScopeType.TOOL.value, {cv.TURN_ID: "t-9"}),  # relay.turn_id
    ("sub", ScopeType.TOOL.value, {}),  # another tool's name: gen_ai.tool.name of its own
    ("add", ScopeType.CUSTOM.value, {}),  # another role
    ("add", ScopeType.CUSTOM.value, {}),
    ("add", ScopeType.TOOL.value, {}),
]


def test_shared_hints_give_each_scope_the_span_it_would_get_alone() -> None:
    shared = _spans(SCOPES, HINTS)
    alone = _spans(SCOPES, None)
    assert shared == alone
    assert shared[3][2]["gen_ai.tool.call.id"] == "call-1"
    assert "gen_ai.tool.call.id" not in shared[4][2] and shared[4][2]["relay.turn_id"] == "t-9"


def test_a_plan_is_made_only_for_hints_seen_twice_and_is_bounded() -> None:
    plans = start_plans.StartPlans()
    pipeline = Pipeline()
    relay = Relay()
    exporter = OTelExporter(pipeline.tracer_provider).attach(relay)
    exporter._plans = plans
    try:
        for _ in range(start_plans.MAX_PLANS + 5):  # new hints each time (a server's, per request): no plan
            relay.scope.pop(
                relay.scope.push("add", ScopeType.TOOL.value, metadata={cv.KIND: cv.TOOL, cv.SPAN_HINTS: dict(HINTS)})
            )
        assert not plans.plans and len(plans._seen) <= start_plans.MAX_PLANS
        for _ in range(2):
            relay.scope.pop(
                relay.scope.push("add", ScopeType.TOOL.value, metadata={cv.KIND: cv.TOOL, cv.SPAN_HINTS: HINTS})
            )
        assert [plan[0] for plan in plans.plans.values()] == [HINTS]
    finally:
        exporter.detach()


def test_a_planned_start_whose_attributes_the_sdk_would_change_ends_as_the_sdk_would_end_it() -> None:
    # A list value (the SDK keeps a tuple) among the planned attributes: a plan that took them as given
    # would hand the processors the list.
    hints = {**HINTS, "attributes": {**HINTS["attributes"], "mcp.tags": ["a", "b"]}}
    for name, _kind, attributes in _spans(SCOPES, hints):
        assert attributes["mcp.tags"] == ("a", "b"), name
