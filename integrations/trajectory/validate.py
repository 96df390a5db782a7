"""``validate_atif``: an ATIF v1.7 trajectory checked field by field; each error names its JSON path."""

from __future__ import annotations

import json
import math
import re
import reprlib
from typing import Any

from .plain import parse_rfc3339

_SOURCES = ("user", "agent", "system")
_AGENT_ONLY = ("model_name", "reasoning_content", "tool_calls", "metrics", "llm_call_count")
_STEP_FIELDS = frozenset(
    {"step_id", "timestamp", "source", "message", "model_name", "reasoning_content", "tool_calls",
     "observation", "metrics", "llm_call_count", "extra", "reasoning_effort", "is_copied_context"}
)  # fmt: skip
_METRIC_INTS = ("prompt_tokens", "completion_tokens", "cached_tokens")
_FINAL_INTS = ("total_prompt_tokens", "total_completion_tokens", "total_cached_tokens", "total_steps")


def _is_int(value: Any) -> bool:
    return type(value) is int


def _is_number(value: Any) -> bool:
    # NaN and the infinities are not JSON numbers: other readers refuse the file.
    return type(value) is int or (type(value) is float and math.isfinite(value))


# RFC 3339's date-time, ASCII digits only: Python's fromisoformat also takes basic forms (20260101T000000Z),
# offsets without a colon and any Unicode digit, which other languages' readers refuse.
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)
# A version and nothing else: it is printed back ("valid ATIF (ATIF-v1.7, ...)"), so no text may ride on it.
_VERSION = re.compile(r"ATIF-v1\.[0-9]{1,4}")
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_shown = reprlib.Repr()
_shown.maxstring = _shown.maxother = 80


def _member(path: str, key: Any) -> str:
    """The JSON path of ``key`` under ``path``; a key of the file's own making is quoted and escaped, so
    a hostile one (a newline and a forged "valid" line, terminal escapes) cannot write the report."""
    if isinstance(key, str) and _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}"
    text = json.dumps(key)
    return f"{path}[{text[:80] + '...' if len(text) > 80 else text}]"


def _is_rfc3339(value: Any) -> bool:
    return isinstance(value, str) and _RFC3339.fullmatch(value) is not None and parse_rfc3339(value) is not None


def show(value: Any) -> str:
    """A value in an error message: escaped (``repr``) and bounded."""
    return _shown.repr(value)


class _Errors:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(f"{path}: {message}")

    def string(self, obj: dict[str, Any], key: str, path: str, *, required: bool = False, empty: bool = True) -> None:
        if key not in obj:
            if required:
                self.add(f"{path}.{key}", "is required")
            return
        value = obj[key]
        if not isinstance(value, str):
            self.add(f"{path}.{key}", f"must be a string, got {type(value).__name__}")
        elif not empty and not value:
            self.add(f"{path}.{key}", "must not be empty")

    def count(self, obj: dict[str, Any], key: str, path: str) -> None:
        if key in obj and not (_is_int(obj[key]) and obj[key] >= 0):
            self.add(f"{path}.{key}", f"must be a whole number >= 0, got {show(obj[key])}")

    def mapping(self, obj: dict[str, Any], key: str, path: str) -> dict[str, Any] | None:
        if key not in obj:
            return None
        if not isinstance(obj[key], dict):
            self.add(f"{path}.{key}", f"must be an object, got {type(obj[key]).__name__}")
            return None
        return obj[key]


def validate_atif(obj: Any) -> list[str]:
    """Every way ``obj`` departs from ATIF v1.7 (an empty list: valid).

    Checks required fields and their types, step ids increasing from 1, sources, tool calls
    and metrics, and that every observation's ``source_call_id`` names a tool call of its step
    or of an earlier one.
    """
    errors = _Errors()
    if not isinstance(obj, dict):
        return [f"$: a trajectory must be a JSON object, got {type(obj).__name__}"]
    errors.string(obj, "schema_version", "$", required=True)
    version = obj.get("schema_version")
    if isinstance(version, str) and not _VERSION.fullmatch(version):
        errors.add("$.schema_version", f"must be an ATIF v1.x version such as 'ATIF-v1.7', got {show(version)}")
    errors.string(obj, "session_id", "$", required=True, empty=False)
    errors.string(obj, "trajectory_id", "$")
    errors.string(obj, "notes", "$")
    errors.mapping(obj, "extra", "$")
    if "agent" not in obj:
        errors.add("$.agent", "is required")
    agent = errors.mapping(obj, "agent", "$")
    if agent is not None:
        errors.string(agent, "name", "$.agent", required=True, empty=False)
        errors.string(agent, "version", "$.agent", required=True)
        errors.string(agent, "model_name", "$.agent")
        errors.mapping(agent, "extra", "$.agent")
        if "tool_definitions" in agent and not isinstance(agent["tool_definitions"], list):
            errors.add("$.agent.tool_definitions", "must be a list")
    steps = obj.get("steps")
    if "steps" not in obj:
        errors.add("$.steps", "is required")
    elif not isinstance(steps, list):
        errors.add("$.steps", f"must be a list, got {type(steps).__name__}")
        steps = None
    call_ids: set[str] = set()
    previous = 0
    for index, step in enumerate(steps or ()):
        path = f"$.steps[{index}]"
        if not isinstance(step, dict):
            errors.add(path, f"a step must be an object, got {type(step).__name__}")
            continue
        step_id = step.get("step_id")
        if "step_id" not in step:
            errors.add(f"{path}.step_id", "is required")
        elif type(step_id) is not int or step_id < 1:
            errors.add(f"{path}.step_id", f"must be a whole number >= 1, got {show(step_id)}")
        else:
            if step_id <= previous:
                errors.add(f"{path}.step_id", f"must increase: {step_id} follows {previous}")
            previous = step_id
        for key in step:
            if key not in _STEP_FIELDS:
                errors.add(_member(path, key), "is not a field of an ATIF step (put it under extra)")
        source = step.get("source")
        if "source" not in step:
            errors.add(f"{path}.source", "is required")
        elif source not in _SOURCES:
            errors.add(f"{path}.source", f"must be one of {', '.join(_SOURCES)}, got {show(source)}")
        if "message" not in step:
            errors.add(f"{path}.message", "is required")
        elif not isinstance(step["message"], (str, list)):
            errors.add(
                f"{path}.message", f"must be a string or a list of content parts, got {type(step['message']).__name__}"
            )
        if "timestamp" in step and step["timestamp"] is not None and not _is_rfc3339(step["timestamp"]):
            errors.add(f"{path}.timestamp", f"must be an RFC 3339 time with its offset, got {show(step['timestamp'])}")
        if source in ("user", "system"):
            for key in _AGENT_ONLY:
                if key in step:
                    errors.add(f"{path}.{key}", f"only agent steps have it (this step's source is {show(source)})")
        errors.string(step, "model_name", path)
        errors.string(step, "reasoning_content", path)
        errors.count(step, "llm_call_count", path)
        errors.mapping(step, "extra", path)
        calls = step.get("tool_calls")
        if "tool_calls" in step and not isinstance(calls, list):
            errors.add(f"{path}.tool_calls", "must be a list")
            calls = None
        for c, call in enumerate(calls or ()):
            cpath = f"{path}.tool_calls[{c}]"
            if not isinstance(call, dict):
                errors.add(cpath, "a tool call must be an object")
                continue
            errors.string(call, "tool_call_id", cpath, required=True, empty=False)
            errors.string(call, "function_name", cpath, required=True, empty=False)
            if "arguments" not in call:
                errors.add(f"{cpath}.arguments", "is required")
            elif not isinstance(call["arguments"], dict):
                errors.add(f"{cpath}.arguments", f"must be an object, got {type(call['arguments']).__name__}")
            if isinstance(call.get("tool_call_id"), str):
                call_ids.add(call["tool_call_id"])
        metrics = errors.mapping(step, "metrics", path)
        if metrics is not None:
            for key in _METRIC_INTS:
                errors.count(metrics, key, f"{path}.metrics")
            if "cost_usd" in metrics and not _is_number(metrics["cost_usd"]):
                errors.add(f"{path}.metrics.cost_usd", f"must be a number, got {show(metrics['cost_usd'])}")
            errors.mapping(metrics, "extra", f"{path}.metrics")
        observation = errors.mapping(step, "observation", path)
        if observation is not None:
            results = observation.get("results")
            if not isinstance(results, list):
                errors.add(f"{path}.observation.results", "is required and must be a list")
                results = []
            for r, result in enumerate(results):
                rpath = f"{path}.observation.results[{r}]"
                if not isinstance(result, dict):
                    errors.add(rpath, "a result must be an object")
                    continue
                source_call = result.get("source_call_id")
                if source_call is not None:
                    if not isinstance(source_call, str):
                        errors.add(f"{rpath}.source_call_id", f"must be a string, got {type(source_call).__name__}")
                    elif source_call not in call_ids:
                        errors.add(
                            f"{rpath}.source_call_id",
                            f"names no tool call of this or an earlier step: {show(source_call)}",
                        )
                if (
                    "content" in result
                    and result["content"] is not None
                    and not isinstance(result["content"], (str, list))
                ):
                    errors.add(
                        f"{rpath}.content",
                        f"must be a string or a list of content parts, got {type(result['content']).__name__}",
                    )
                errors.mapping(result, "extra", rpath)
    final = errors.mapping(obj, "final_metrics", "$")
    if final is not None:
        for key in _FINAL_INTS:
            errors.count(final, key, "$.final_metrics")
        if "total_cost_usd" in final and not _is_number(final["total_cost_usd"]):
            errors.add("$.final_metrics.total_cost_usd", f"must be a number, got {show(final['total_cost_usd'])}")
        if isinstance(steps, list) and _is_int(final.get("total_steps")) and final["total_steps"] != len(steps):
            errors.add(
                "$.final_metrics.total_steps", f"says {final['total_steps']} but the trajectory has {len(steps)} steps"
            )
    return errors.items
