"""ATIF v1.7 trajectories from trajectory records (``records.py``), live or read back from the journal.

Steps, as NeMo Relay's ``AtifExporter`` writes them for the same run:

- a ``user`` step for each user message a logical call's first attempt sends that no earlier
  request of the conversation sent (system prompts and tool results are not user steps); a request
  continuing a conversation the provider keeps (``previous_response_id``) sends new ones only;
- an ``agent`` step for each logical call: its final attempt's model, text, reasoning, tool
  calls and token metrics (the model, text and tool calls of the answer an execution intercept gave when
  the provider failed: a fallback, ``extra.fallback``). Failed and retried attempts are no steps of their
  own: the step's ``extra`` counts them (``attempts``, ``wasted_tokens``, ``wasted_cost_usd``), with the logical
  call's id, so nothing is lost (``final_metrics.total_cost_usd``, the real cost, counts them too);
- each tool's result as an ``observation`` of the agent step whose tool call it answers (by the
  call's id; without one, by name and arguments, as NeMo does, the calls taken in the order their tools
  began; with no arguments known either, by name in the newest step that called tools). A tool that
  ended before the call asking for it (run as soon as its call streamed in) waits for that call's step;
- a tool result only a later request carries (no tool scope saw the tool run: an Agents SDK handoff, a
  loop running its tools in plain code) as an ``observation`` of the step that asked for it, read from
  the first request that sends it (``said``);
- a tool at which the framework paused the run (its scope's output ``{"control_flow": ...}``) as a
  ``system`` step saying so: it answers no call; the resumed run's call of the tool does.

An attempt priced after its end (its answer came after its turn ended it) counts in its step when the
charge comes (``late_charge``): as the step's ``cost_usd`` when it is the step's final attempt, else in
``wasted_cost_usd``; ``final_metrics.total_cost_usd`` counts it either way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from relay_runtime.tools import control_flow_of

from .plain import rfc3339
from .records import ATTEMPT, CALL, LATE_CHARGE, TOOL, TOOL_END, TURN, TURN_END
from .said import tool_results, user_messages
from .step_metrics import TOTALS, final_attempt, metrics_of, prompt_tokens, usage_of, usd

SCHEMA_VERSION = "ATIF-v1.7"


def _arguments(raw: Any) -> dict[str, Any]:
    """A tool call's arguments as the object ATIF requires, as NeMo Relay writes them: text that is not
    JSON (a stream cut mid-call, a model's slip) under ``raw``, JSON that is no object under ``value``."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {"raw": raw}
    return raw if isinstance(raw, dict) else {"value": raw}


@dataclass(eq=False)
class _Call:
    """A logical call's attempts, gathered until the call ends (or the build does)."""

    id: str
    attempts: list[dict[str, Any]] = field(default_factory=list)
    step: dict[str, Any] | None = None


class TrajectoryBuilder:
    """Folds one conversation's records, in order, into ATIF steps."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self._calls: dict[str, _Call] = {}
        self._tools: dict[str, dict[str, Any]] = {}
        self._open_turns: set[str] = set()
        self._dropped_rows = 0
        self._answered: set[str] = set()  # tool call ids an observation already answers (or will: ``_claims``)
        self._claims: dict[str, str] = {}  # tool scope uuid -> the call id it answers, taken when it began
        # Each tool call's step by the call's id, and the newest step that called tools: where a result a request
        # sends is looked up (``_unanswered``), in one step however long the conversation.
        self._asked: dict[str, dict[str, Any]] = {}
        # Results of tool calls no step has asked for yet, by the call's id: the agent ran the tool as soon as
        # its call had streamed in, before the call ended. With where a step of their own would go, if none asks.
        self._early: dict[str, tuple[int, dict[str, Any], dict[str, Any]]] = {}
        self._last_asking: dict[str, Any] | None = None
        self._call_of: dict[str, _Call] = {}  # attempt id -> its call, for a charge that comes after it ended

    # -- records -------------------------------------------------------------------------

    def add(self, record: dict[str, Any]) -> None:
        kind = record.get("k")
        dropped = record.get("dropped_rows")
        if type(dropped) is int and dropped > 0:
            self._dropped_rows += dropped  # what the journal lost of a run: its steps may be missing
        if kind == ATTEMPT:
            self._attempt(record)
        elif kind == CALL:
            self._call_end(record)
        elif kind == TOOL:
            self._tools[record["id"]] = record
            self._claim(record)
        elif kind == TOOL_END:
            self._tool_end(record)
        elif kind == TURN:
            self._open_turns.add(record["id"])
        elif kind == TURN_END:
            self._open_turns.discard(record["id"])
        elif kind == LATE_CHARGE:
            self._late_charge(record)

    def add_all(self, records: Iterable[dict[str, Any]]) -> TrajectoryBuilder:
        for record in records:
            self.add(record)
        return self

    @property
    def incomplete(self) -> bool:
        return bool(self._open_turns) or self._dropped_rows > 0

    def _step(self, step: dict[str, Any], at: int | None = None) -> dict[str, Any]:
        """``step`` numbered and added last, or inserted ``at`` an index (the caller numbers the steps again)."""
        if step.get("timestamp") is None:
            step.pop("timestamp", None)
        if step.get("model_name") is None:
            step.pop("model_name", None)
        step = {"step_id": len(self.steps) + 1, **step}
        if at is None:
            self.steps.append(step)
        else:
            self.steps.insert(at, step)
        return step

    def _attempt(self, record: dict[str, Any]) -> None:
        parent = record["id"] if record.get("orphan") else record.get("parent") or record["id"]
        call = self._calls.get(parent)
        if call is None:
            call = self._calls[parent] = _Call(parent)
            # The user's words and the tools' results come with the call's first request; its retries send
            # them again.
            self._results_sent(record)
            for text in user_messages(record.get("said") or record.get("req")):
                start = record.get("start")
                self._step({"timestamp": rfc3339(start) if isinstance(start, int) else None, "source": "user",
                            "message": text})  # fmt: skip
        call.attempts.append(record)
        self._call_of[record["id"]] = call
        if parent == record["id"]:
            self._call_end({"k": CALL, "id": parent, "outcome": record.get("outcome")})

    def _late_charge(self, record: dict[str, Any]) -> None:
        """An attempt's cost that came after its end: on its record (a copy: the records are the caller's), and on
        its step when the step is made already."""
        call = self._call_of.get(record["id"])
        cost = record.get("cost")
        if call is None or not isinstance(cost, dict):
            return
        for index, attempt in enumerate(call.attempts):
            if attempt["id"] == record["id"]:
                before = usd(attempt) or 0.0
                call.attempts[index] = attempt = {**attempt, "cost": cost}
                break
        else:
            return
        step = call.step
        added = (usd(attempt) or 0.0) - before
        if step is None or not added:
            return  # the step, made when the call ends, reads the attempt's record
        if attempt is final_attempt(call.attempts):
            metrics = step.setdefault("metrics", {})
            metrics["cost_usd"] = metrics.get("cost_usd", 0.0) + added
        else:
            extra = step.setdefault("extra", {})
            extra["wasted_cost_usd"] = extra.get("wasted_cost_usd", 0.0) + added

    def _results_sent(self, record: dict[str, Any]) -> None:
        """The results a call's first request sends for tool calls no tool scope answered (an Agents SDK
        handoff, which the SDK answers itself; tools a loop runs in plain code): observations of the steps
        that asked for them, read from the request (from its view, when its kwargs hold the conversation in a
        body: ``said``), so that no step's tool call goes unanswered."""
        for call_id, name, text in tool_results(record.get("said") or record.get("req")):
            answering = self._unanswered(call_id, name)
            if answering is None:
                continue
            step, answered = answering
            result: dict[str, Any] = {"source_call_id": answered}
            if text is not None:
                result["content"] = text
            result["extra"] = {"read_from": "request", "event_uuid": record["id"]}
            step.setdefault("observation", {"results": []})["results"].append(result)
            self._answered.add(answered)

    def _unanswered(self, call_id: Any, name: Any) -> tuple[dict[str, Any], str] | None:
        """The step holding the tool call ``call_id`` when nothing answered it yet; with no id (a Gemini
        function response may carry none), the first unanswered call of ``name`` in the newest step that
        called tools."""
        if isinstance(call_id, str):
            step = self._asked.get(call_id)
            return (step, call_id) if step is not None and call_id not in self._answered else None
        step = self._last_asking
        if step is None or not name:
            return None
        for call in step.get("tool_calls") or ():
            if call["function_name"] == name and call["tool_call_id"] not in self._answered:
                return step, call["tool_call_id"]
        return None

    def _call_end(self, record: dict[str, Any]) -> None:
        call = self._calls.get(record["id"])
        if call is None or call.step is not None or not call.attempts:
            return
        attempts = call.attempts
        final = final_attempt(attempts)
        answer = record.get("answer")
        # An execution intercept answered in place of the provider (which failed, or whose answer it did not keep):
        # the step says what the agent got, unless a later attempt of the call answered after it.
        served = final.get("outcome") == "success"
        if isinstance(answer, dict) and (not served or answer.get("after") == final.get("id")):
            response = answer
        else:
            response = final.get("resp") or {}
        end = final.get("end")
        step: dict[str, Any] = {
            "timestamp": rfc3339(end) if isinstance(end, int) else None,
            "source": "agent",
            "model_name": response.get("model") or final.get("model_name") or (record.get("meta") or {}).get("model"),
            "message": response.get("text") or "",
        }
        if final.get("reasoning"):
            step["reasoning_content"] = final["reasoning"]
        calls = response.get("tool_calls") or []
        if calls:
            step["tool_calls"] = [
                {
                    "tool_call_id": c.get("id") or f"call_{record['id'][:8]}_{i}",
                    "function_name": c.get("name") or "",
                    "arguments": _arguments(c.get("arguments")),
                }
                for i, c in enumerate(calls)
                if isinstance(c, dict)
            ]
        metrics = metrics_of(final)
        if metrics is not None:
            step["metrics"] = metrics
        step["llm_call_count"] = 1
        extra: dict[str, Any] = {"logical_call_id": record["id"], "attempts": len(attempts)}
        outcome = record.get("outcome") or final.get("outcome")
        if outcome and outcome != "success":
            extra["outcome"] = outcome
        meta = final.get("meta") or {}
        if meta.get("call_role"):
            extra["call_role"] = meta["call_role"]
        if meta.get("api_request_id"):
            extra["api_request_id"] = meta["api_request_id"]
        wasted = [a for a in attempts if a is not final]
        if wasted:
            extra["failed_attempts"] = [
                {k: v for k, v in (("outcome", a.get("outcome")), ("error_type", (a.get("error") or {}).get("type")),
                                   ("error_message", (a.get("error") or {}).get("message"))) if v is not None}
                for a in wasted
            ]  # fmt: skip
            tokens = sum((prompt_tokens(a, u := usage_of(a)) or 0) + u.get("output_tokens", 0) for a in wasted)
            if tokens:
                extra["wasted_tokens"] = tokens
            cost = sum(usd(a) or 0 for a in wasted)
            if cost:
                extra["wasted_cost_usd"] = cost
        if final.get("error"):
            extra["error"] = final["error"]
        fallback = (record.get("meta") or {}).get("fallback")
        if fallback:
            extra["fallback"] = fallback  # the execution intercept that answered instead of the provider
        if any(a.get("truncated") for a in attempts):
            extra["truncated"] = True
        step["extra"] = extra
        call.step = self._step(step)
        if calls:
            self._last_asking = call.step
            for asked in call.step.get("tool_calls") or ():
                self._asked[asked["tool_call_id"]] = call.step
                early = self._early.pop(asked["tool_call_id"], None) if self._early else None
                if early is not None:
                    result = {"source_call_id": asked["tool_call_id"], **early[2]}
                    call.step.setdefault("observation", {"results": []})["results"].append(result)

    def _tool_end(self, record: dict[str, Any]) -> None:
        started = self._tools.pop(record["id"], {})
        name, args = started.get("name"), started.get("args")
        claimed = self._claims.pop(record["id"], None)
        paused = control_flow_of(record.get("result")) if record.get("outcome") == "success" else None
        if paused is not None:
            if claimed is not None or isinstance(started.get("tool_call_id"), str):
                self._answered.discard(claimed or started["tool_call_id"])  # the resumed run's call answers it
            self._paused(record, started, paused)
            return
        call_id = claimed or started.get("tool_call_id")
        answering = self._answering(call_id, name, args)
        result: dict[str, Any] = {"source_call_id": answering[1]} if answering is not None else {}
        value = record.get("result")
        if isinstance(value, str):
            result["content"] = value
        extra: dict[str, Any] = {
            "event_name": name,
            "event_uuid": record["id"],
            "parent_event_uuid": started.get("parent"),
        }
        if value is not None and not isinstance(value, str):
            extra["tool_result"] = value
        if record.get("error"):
            extra["error"] = record["error"]
            result.setdefault("content", record["error"].get("message") or "")
        if record.get("outcome") and record["outcome"] != "success":
            extra["outcome"] = record["outcome"]
        if record.get("truncated") or started.get("truncated"):
            extra["truncated"] = True
        result["extra"] = extra
        if answering is not None:
            step, call_id = answering
            step.setdefault("observation", {"results": []})["results"].append(result)
            self._answered.add(call_id)
            return
        if isinstance(call_id, str):
            # Its call's id, but no step asked for it yet: the call that did may still be open.
            self._early[call_id] = (len(self.steps), record, result)
            return
        self._unasked(record, name, result)

    def _unasked(self, record: dict[str, Any], name: Any, result: dict[str, Any], at: int | None = None) -> None:
        """A tool nobody asked for (no agent step named it): a step of its own, so nothing is lost."""
        end = record.get("end")
        self._step({"timestamp": rfc3339(end) if isinstance(end, int) else None, "source": "system",
                    "message": f"tool {name}", "observation": {"results": [result]}}, at)  # fmt: skip

    def _paused(self, record: dict[str, Any], started: dict[str, Any], control_flow: str) -> None:
        """A tool at which the framework paused the run (LangGraph's ``interrupt()`` asking a human, in the
        tool or in an approval intercept): it has no result yet, so it answers no tool call (the resumed
        run's call of it does); a system step says where the run paused."""
        end = record.get("end")
        extra = {"control_flow": control_flow, "event_name": started.get("name"), "event_uuid": record["id"],
                 "parent_event_uuid": started.get("parent")}  # fmt: skip
        if isinstance(started.get("tool_call_id"), str):
            extra["tool_call_id"] = started["tool_call_id"]
        self._step({"timestamp": rfc3339(end) if isinstance(end, int) else None, "source": "system",
                    "message": f"tool {started.get('name')} paused ({control_flow})", "extra": extra})  # fmt: skip

    def _claim(self, record: dict[str, Any]) -> None:
        """A tool that began without its call's id takes the call it answers now, in the order the tools began
        (the order the agent runs a step's calls in): their ends may come in any order. With no arguments
        either (the Agents SDK's function spans hold them only from after their start), by name alone, in
        the newest step that called tools."""
        if isinstance(record.get("tool_call_id"), str):
            self._answered.add(record["tool_call_id"])  # its end answers it, not a later request's copy
            return
        name, args = record.get("name"), record.get("args")
        for step in reversed(self.steps):
            calls = step.get("tool_calls")
            if not calls:
                continue
            for call in calls:
                if (
                    call["function_name"] == name
                    and (args is None or call["arguments"] == args)
                    and call["tool_call_id"] not in self._answered
                ):
                    self._claims[record["id"]] = call["tool_call_id"]
                    self._answered.add(call["tool_call_id"])
                    return
            if args is None:
                return

    def _answering(self, call_id: Any, name: Any, args: Any) -> tuple[dict[str, Any], str] | None:
        """The agent step whose tool call a result answers, newest first, and that call's id."""
        if isinstance(call_id, str):
            step = self._asked.get(call_id)  # the newest step that asked for it
            return (step, call_id) if step is not None else None
        answered = self._answered
        for step in reversed(self.steps):
            for call in step.get("tool_calls") or ():
                if call["function_name"] == name and call["arguments"] == args and call["tool_call_id"] not in answered:
                    return step, call["tool_call_id"]
        return None

    # -- the trajectory --------------------------------------------------------------------

    def finish(self) -> None:
        """Calls still open (their turn is running, or the record of their end was lost) become steps now."""
        for call in list(self._calls.values()):
            if call.step is None and call.attempts:
                self._call_end({"k": CALL, "id": call.id, "outcome": None})
        if self._early:
            # Results whose call no step asked for: steps of their own, where they ended (later ones first, so
            # each index still means what it did).
            early = sorted(self._early.values(), key=lambda item: item[0])
            self._early.clear()
            for at, record, result in reversed(early):
                self._unasked(record, result["extra"]["event_name"], result, at)
            for number, step in enumerate(self.steps, 1):
                step["step_id"] = number

    def trajectory(
        self,
        session_id: str,
        *,
        agent_name: str = "agent",
        agent_version: str = "0",
        model_name: str | None = None,
        tool_definitions: list[Any] | None = None,
        extra: Any = None,
    ) -> dict[str, Any]:
        self.finish()
        agent: dict[str, Any] = {"name": agent_name, "version": agent_version}
        if model_name is not None:
            agent["model_name"] = model_name
        if tool_definitions is not None:
            agent["tool_definitions"] = tool_definitions
        if extra is not None:
            agent["extra"] = extra
        totals: dict[str, Any] = {}
        for step in self.steps:
            metrics = step.get("metrics") or {}
            for key, total in TOTALS:
                if key in metrics:
                    totals[total] = totals.get(total, 0) + metrics[key]
            # The attempts a step stands for beside its final one (retried, outrun) were paid for too: the total
            # is the trajectory's real cost, as the journal's summary and the turn's roll-up count it.
            wasted = (step.get("extra") or {}).get("wasted_cost_usd")
            if wasted:
                totals["total_cost_usd"] = totals.get("total_cost_usd", 0) + wasted
        totals["total_steps"] = len(self.steps)
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "session_id": session_id,
            "trajectory_id": session_id,
            "agent": agent,
            "steps": self.steps,
            "final_metrics": totals,
        }
        if self.incomplete:
            out["extra"] = {"incomplete": True}
            if self._dropped_rows:
                out["extra"]["dropped_rows"] = self._dropped_rows
        return out
