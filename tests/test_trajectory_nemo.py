"""The same turn through NeMo Relay's exporters and ours: ATOF lines and ATIF trajectories compared field by field.

Ids and timestamps aside. Our scope tree is deeper (a turn and a logical call between the
conversation and its LLM calls, one LLM scope per attempt): projected onto NeMo's (those
scopes dropped, the failed attempt the execution intercept retried too, since NeMo records
one LLM scope for the call), the lines must say the same thing in the same order.
"""

from __future__ import annotations

from typing import Any

import pytest
from trajectory_support import CALL, MODES, TOOL_RESULT, run_nemo, run_ours

from relay_runtime import session
from relay_runtime.integrations.trajectory import validate_atif


@pytest.fixture(autouse=True)
def clean_sessions():
    session.reset_for_tests()
    yield
    session.reset_for_tests()


def _project(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our lines as NeMo's tree would have them: turn and logical-call scopes dropped, failed attempts too."""
    dropped: dict[str, str | None] = {}
    parents = {line["uuid"]: line["parent_uuid"] for line in lines if line["kind"] == "scope"}
    for line in lines:
        if line["kind"] != "scope" or line["scope_category"] != "end":
            continue
        kind = (line["metadata"] or {}).get("relay.kind")
        if kind in ("turn", "logical_llm_call") or (
            kind == "llm_attempt" and line["metadata"]["relay.outcome"] != "success"
        ):
            dropped[line["uuid"]] = parents[line["uuid"]]

    def parent_of(uuid: str | None) -> str | None:
        while uuid in dropped:
            uuid = dropped[uuid]
        return uuid

    return [{**line, "parent_uuid": parent_of(line["parent_uuid"])} for line in lines if line["uuid"] not in dropped]


def _shape(lines: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What each line says, with the parent named by the position of its start line instead of its uuid."""
    position = {
        line["uuid"]: i for i, line in enumerate(lines) if line["kind"] == "scope" and line["scope_category"] == "start"
    }
    shape = []
    for line in lines:
        profile = line["category_profile"] or {}
        response = profile.get("annotated_response") or {}
        shape.append(
            (
                line["atof_version"],
                line["kind"],
                line.get("scope_category"),
                line["name"],
                line["category"],
                position.get(line["parent_uuid"]),  # None for a root: NeMo's hidden root, our None
                position.get(line["propagation_root_uuid"]),
                profile.get("tool_call_id"),
                profile.get("model_name"),
                response.get("model"),
                sorted(line) == sorted(_FIELDS[line["kind"]]),
            )
        )
    return shape


_FIELDS = {
    "scope": [
        "atof_version", "attributes", "category", "category_profile", "data", "data_schema", "kind", "metadata",
        "name", "parent_uuid", "propagation_root_uuid", "scope_category", "timestamp", "uuid",
    ],
    "mark": [
        "atof_version", "category", "category_profile", "data", "data_schema", "kind", "metadata", "name",
        "parent_uuid", "propagation_root_uuid", "timestamp", "uuid",
    ],
}  # fmt: skip


def _messages(line: dict[str, Any]) -> list[tuple[str, Any]]:
    annotated = (line["category_profile"] or {}).get("annotated_request") or {}
    return [(m.get("role"), m.get("content")) for m in annotated.get("messages") or []]


def _comparable_step(step: dict[str, Any]) -> dict[str, Any]:
    """A step's content: ids and timestamps aside (NeMo's extra holds its own bookkeeping)."""
    out = {k: v for k, v in step.items() if k not in ("timestamp", "extra")}
    if "metrics" in out:  # the token counts (NeMo copies the provider's other usage details into metrics.extra)
        metrics = out["metrics"]
        out["metrics"] = {k: v for k, v in metrics.items() if k != "extra"}
        out["metrics"]["total_tokens"] = metrics["extra"]["total_tokens"]
    if "observation" in out:
        out["observation"] = {
            "results": [
                {
                    "source_call_id": r.get("source_call_id"),
                    "content": r.get("content"),
                    "tool_result": (r.get("extra") or {}).get("tool_result"),
                }
                for r in out["observation"]["results"]
            ]
        }
    return out


@pytest.mark.parametrize("mode", MODES)
def test_atof_lines_match_nemo_relay(mode, tmp_path):
    _, nemo_lines = run_nemo(mode, tmp_path)
    ours = run_ours(mode)
    projected = _project(ours.atof_lines)
    # NeMo Relay names its own hidden root (the conversation scope's parent) as the propagation root
    # of a streamed call's end line, and the conversation scope on every other line; ours always the latter.
    hidden, top = nemo_lines[0]["parent_uuid"], nemo_lines[0]["uuid"]
    nemo_lines = [{**line, "propagation_root_uuid": top} if line["propagation_root_uuid"] == hidden else line
                  for line in nemo_lines]  # fmt: skip
    assert _shape(projected) == _shape(nemo_lines)
    # The LLM scopes carry the same conversation in their normalized request.
    ours_llm = [line for line in projected if line["category"] == "llm" and line["scope_category"] == "start"]
    nemo_llm = [line for line in nemo_lines if line["category"] == "llm" and line["scope_category"] == "start"]
    assert [_messages(line)[:2] for line in ours_llm] == [_messages(line)[:2] for line in nemo_llm]
    # The tool's start and end data: its arguments, then its result.
    tool = [line["data"] for line in projected if line["category"] == "tool"]
    assert (
        tool == [line["data"] for line in nemo_lines if line["category"] == "tool"] == [{"city": "Paris"}, TOOL_RESULT]
    )
    # And what ours adds: every scope of the deeper tree, parent links pointing at them.
    kinds = [
        (line["metadata"] or {}).get("relay.kind") for line in ours.atof_lines if line.get("scope_category") == "start"
    ]
    assert kinds == ["conversation", "turn", "logical_llm_call", "llm_attempt", "llm_attempt", "tool",
                     "logical_llm_call", "llm_attempt"]  # fmt: skip
    by_uuid = {line["uuid"]: line for line in ours.atof_lines}
    for line in ours.atof_lines:
        if line["parent_uuid"] is not None:
            assert line["parent_uuid"] in by_uuid
            assert line["propagation_root_uuid"] == ours.atof_lines[0]["uuid"]


@pytest.mark.parametrize("mode", MODES)
def test_atif_trajectory_matches_nemo_relay(mode, tmp_path):
    nemo, _ = run_nemo(mode, tmp_path)
    ours = run_ours(mode).atif.export()
    assert validate_atif(ours) == []
    assert validate_atif(nemo) == []  # our validator takes NeMo's own output
    for key in ("schema_version", "session_id", "trajectory_id", "agent", "final_metrics"):
        assert ours[key] == nemo[key], key
    assert [_comparable_step(s) for s in ours["steps"]] == [_comparable_step(s) for s in nemo["steps"]]
    # Spelled out, so a change on both sides cannot pass unnoticed.
    assert [s["source"] for s in ours["steps"]] == ["user", "agent", "agent"]
    assert ours["steps"][1]["tool_calls"] == [
        {"tool_call_id": CALL["id"], "function_name": "weather", "arguments": {"city": "Paris"}}
    ]
    assert ours["steps"][1]["observation"]["results"][0]["source_call_id"] == CALL["id"]
    assert ours["steps"][2]["metrics"]["cached_tokens"] == 32
    assert ours["final_metrics"] == {
        "total_prompt_tokens": 115,
        "total_completion_tokens": 20,
        "total_cached_tokens": 32,
        "total_steps": 3,
    }
    # What NeMo cannot see, ours keeps in the step's extra: the failed attempt the intercept retried.
    extra = ours["steps"][1]["extra"]
    assert extra["attempts"] == 2
    assert extra["failed_attempts"] == [
        {
            "outcome": "failed",
            "error_type": "InternalServerError",
            "error_message": "Error code: 500 - scripted failure",
        }
    ]
    assert ours["steps"][2]["extra"]["attempts"] == 1
