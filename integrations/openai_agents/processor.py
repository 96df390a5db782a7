"""``RelayTraceProcessor``: the OpenAI Agents SDK's spans as relay scopes of the current turn.

A trace processor beside the SDK's own ones (``agents.add_trace_processor``): it only observes.

- ``agent`` spans are ``agent`` scopes (``invoke_agent`` in OTel); ``handoff``, ``guardrail`` and
  ``mcp_tools`` spans are ``function`` scopes (``handoff``, ``guardrail <name>``, ``mcp_list_tools``);
  a ``function`` span is a ``tool`` scope (of ``relay.kind`` tool, whose result trajectories and the
  journal take) unless the tool is one ``instrument()`` wrapped (its managed call is the scope then).
  Task, turn and custom spans open no scope: what is inside them nests under the scope around them.
- A tool call a tool input guardrail refused (``tool_spans``: the SDK marks no span) is a ``tool``
  scope ended failed with ``GuardrailRejected``, as a relay tool guardrail's refusal is: also for a
  wrapped tool (whose managed call never started) and for the processor alone.
- A span the SDK ends with no error while its task is being cancelled was cut short by the
  cancellation (the SDK records none for a ``CancelledError``): its scope ends cancelled; but a
  model span holding its completed response is a success, as the SDK's attempt is. A tool cancelled
  outside the run's teardown is one the SDK marks "Tool execution cancelled" (and goes on): cancelled
  too, as its managed call records it.
- ``response`` / ``generation`` spans are logical model calls under their agent's scope: the attempts
  ``adapters.instrument()`` makes for the SDK calls inside join them (never a second span); without
  it, the attempt is recorded from the span when it ends (the SDK puts the request on it only then), from
  the time it began: its start holds the request as sent (with ``trace_include_sensitive_data``, the
  SDK's default; none without), its end the model, usage, finish reasons of the ``Response``.
  A model span that follows a failed one in the same agent is the runner's retry (a failed model
  call not retried ends the run): both are attempts of one logical call.
- An error the SDK puts on a ``turn`` span (an input guardrail's tripwire, a tool the model made up:
  the run then raises) is the agent's: its scope ends failed with it, as with an error on its own span.

Processors are called in the code that starts and ends the span, so what runs inside an agent span
finds the agent's scope (``frameworks.framework_scope``). Scopes are detached: the SDK ends spans of
concurrent guardrails and tools in any order. The processor fails open (counted, never raised). It
observes only, but for one hook: the first one made installs ``tool_spans``' guardrail hook.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from relay_runtime import conventions as cv
from relay_runtime import session
from relay_runtime.adapters.dispatch import APIS, CHAT_COMPLETIONS, RESPONSES
from relay_runtime.adapters.instrument import is_instrumented
from relay_runtime.calls import open_call_in
from relay_runtime.conversation_urls import recorded as recorded_conversation
from relay_runtime.scopes import ScopeHandle
from relay_runtime.session import Turn
from relay_runtime.types import AnnotatedLLMResponse, ScopeType, TokenUsage

from ..frameworks import FrameworkRun, ModelCall, current_parent, deferred, deferred_answer, enter_scope, leave_scope
from . import tool_spans
from .tool_spans import ToolSpan
from .tools import parse_arguments

FRAMEWORK = cv.FRAMEWORK
SPAN_ID = "openai_agents.span_id"
_AGENT = ScopeType.AGENT.value
_FUNCTION = ScopeType.FUNCTION.value
_TOOL = ScopeType.TOOL.value
_MODEL_SPANS = frozenset({"response", "generation"})
_PRIMARY = "primary"
_managed_turn = session.managed_turn  # read once: every span asks it


class SpanFailed(RuntimeError):
    """The error the Agents SDK recorded on a span."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.relay_error_type = kind


class RelayTraceProcessor:
    """An ``agents.tracing.TracingProcessor`` that records the SDK's spans as relay scopes."""

    def __init__(self, wrapped_tools: frozenset[str] | set[str] | None = None) -> None:
        self._spans: dict[str, FrameworkRun] = {}
        self._lock = threading.Lock()
        # Names of function tools whose invocation ``instrument()`` manages (their scope is that call's).
        self.wrapped_tools: set[str] = set(wrapped_tools or ())
        self.live = True  # False after ``uninstrument()``: the SDK keeps the processor, which then does nothing
        # Failed model calls per agent scope, kept open for the runner's retry (the next model span of
        # the same agent); the agent's end closes one that was not retried.
        self._failed: dict[str | None, tuple[ModelCall, BaseException]] = {}
        # Errors of ``turn`` spans by the uuid of the agent scope around them, for that scope's end.
        self._turn_errors: dict[str, BaseException] = {}
        tool_spans.install()

    # -- the TracingProcessor interface -----------------------------------------------------------

    def on_trace_start(self, trace: Any) -> None:
        return None

    def on_trace_end(self, trace: Any) -> None:
        return None

    def shutdown(self) -> None:
        return None

    def force_flush(self) -> None:
        return None

    def on_span_start(self, span: Any) -> None:
        turn = _managed_turn() if self.live else None
        if turn is None:
            return
        try:
            self._start(turn, span)
        except Exception as exc:
            turn.relay.diag.failure("subscriber_errors", exc, "openai-agents span start")

    def on_span_end(self, span: Any) -> None:
        entry = self._spans.pop(span.span_id, None)  # one dict operation: atomic without the lock
        if entry is None:
            return
        try:
            self._end(entry, span)
        except Exception as exc:
            entry.turn.relay.diag.failure("subscriber_errors", exc, "openai-agents span end")

    # -- spans -> scopes --------------------------------------------------------------------------

    def _parent(self, turn: Turn, span: Any) -> ScopeHandle | None:
        parent_id = span.parent_id
        entry = self._spans.get(parent_id) if parent_id else None
        if entry is not None:
            handle = entry.handle
            if not entry.own:
                # A wrapped tool's function span opens no scope: what runs in the tool (an agent run as a tool)
                # nests under the tool's managed call, not beside it.
                tool = tool_spans.opened(parent_id)
                inner = tool.scope if tool is not None else None
                if inner is not None and not inner.ended:
                    return inner
            if handle is not None and not handle.ended:
                return handle
        return current_parent(turn)

    def _start(self, turn: Turn, span: Any) -> None:
        data = span.span_data
        kind = data.type
        parent = self._parent(turn, span)
        if kind in _MODEL_SPANS:
            retried = None
            if self._failed:  # most model spans retry nothing: no lock for them
                with self._lock:
                    failed = self._failed.pop(parent.uuid if parent is not None else None, None)
                if failed is not None:
                    retried = failed[0]
            # The logical call of the model span: a new one, or the failed call this span retries
            # (``ModelCall.under`` inlined: this runs for every model call).
            call = retried or ModelCall(turn, open_call_in(turn, parent, _PRIMARY), _PRIMARY, parent)
            if is_instrumented():
                call.join()  # the SDK calls inside are the attempts
            else:
                # No SDK class records the provider call: the span is its witness (with an instrumented
                # client's own attempt in its place, if the agent's client is one: ``ModelCall.witness``).
                # The SDK puts the request on the span only once the call is over: the attempt is recorded
                # then, from the time the span began, with what was sent on its start.
                model = getattr(data, "model", None)
                model = model if isinstance(model, str) else None
                call.witness("openai", model, codec=APIS[RESPONSES].codec, at_end=True)
            entry = FrameworkRun(turn, parent, call=call)
        else:
            scope = _scope_of(kind, data, self.wrapped_tools)
            if scope is None:
                entry = FrameworkRun(turn, parent)
            else:
                name, scope_type, inputs = scope
                meta = {FRAMEWORK: "openai_agents", SPAN_ID: span.span_id}
                if scope_type == _TOOL:
                    meta[cv.KIND] = cv.TOOL  # a tool call: the trajectory and the journal take its result
                handle = turn.relay.scope.push(
                    name, scope_type, parent=parent, attach=False, input=inputs, metadata=meta
                )
                token = enter_scope(handle) if scope_type == _AGENT else None
                entry = FrameworkRun(turn, handle, own=True, token=token)
            if kind == "function":  # closed by the span's end, as the entry is
                tool_spans.open_span(span.span_id)
        self._spans[span.span_id] = entry

    def _end(self, entry: FrameworkRun, span: Any) -> None:
        error: BaseException | None = _error_of(span) if span.error else _cancelled()
        call = entry.call
        if call is not None:
            if error is not None and not span.error and _answered(span.span_data):
                error = None  # its response completed before the cancellation came: a success, as the SDK's attempt
            sent = _sent_of(span.span_data)
            if sent is not None:  # its view too holds the conversation as the attempt's start records it
                sent = dict(recorded_conversation(sent))
            # First: it records the witnessed attempt when no SDK attempt joined.
            call.leave(request=deferred((_decode, sent)) if sent is not None else None, sent=sent)
            if call.observed is not None:
                _end_observed(call, span.span_data, error)
            if error is None or isinstance(error, asyncio.CancelledError):
                call.close(error)  # a cancelled call is not retried
            else:
                self._keep_for_retry(entry, call, error)
            return
        data = span.span_data
        tool = tool_spans.close_span(span.span_id) if data.type == "function" else None
        if tool is not None and tool.rejected is not None:
            error = tool.rejected  # the tool never ran: its span's output is the guardrail's message
        if not entry.own:
            if tool is not None and not tool.ran and error is not None:
                # A wrapped tool whose call ended before the managed invocation: no scope of its own.
                _record_unrun(entry, span, tool, error)
            elif data.type == "turn" and isinstance(error, SpanFailed):
                self._carry(entry, error)
            return
        if entry.handle is None:
            return
        leave_scope(entry.token)
        if self._turn_errors:
            carried = self._turn_errors.pop(entry.handle.uuid, None)
            error = error or carried
        failed = None
        if self._failed:
            with self._lock:
                failed = self._failed.pop(entry.handle.uuid, None)
        if failed is not None:  # never retried: the model call failed
            failed[0].close(failed[1])
        output = None if tool is not None and tool.rejected is not None else _output_of(data)
        entry.end(output=output, error=error)

    def _carry(self, entry: FrameworkRun, error: SpanFailed) -> None:
        """A turn span's error, for the agent scope around it (ours: its end takes it back)."""
        handle = entry.handle
        if handle is not None and not handle.ended and SPAN_ID in (handle.metadata or {}):
            self._turn_errors[handle.uuid] = error

    def _keep_for_retry(self, entry: FrameworkRun, call: ModelCall, error: BaseException) -> None:
        key = entry.handle.uuid if entry.handle is not None else None
        with self._lock:
            previous = self._failed.pop(key, None)
            self._failed[key] = (call, error)
        if previous is not None and previous[0] is not call:
            previous[0].close(previous[1])


def _scope_of(kind: str, data: Any, wrapped_tools: set[str]) -> tuple[str, str, Any] | None:
    if kind == "agent":
        return data.name, _AGENT, {"tools": data.tools, "handoffs": data.handoffs, "output_type": data.output_type}
    if kind == "function":
        if data.name in wrapped_tools:
            return None
        return data.name, _TOOL, data.input
    if kind == "handoff":
        return "handoff", _FUNCTION, {"from_agent": data.from_agent, "to_agent": data.to_agent}
    if kind == "guardrail":
        return f"guardrail {data.name}", _FUNCTION, None
    if kind == "mcp_tools":
        return "mcp_list_tools", _FUNCTION, {"server": data.server}
    return None


def _output_of(data: Any) -> Any:
    kind = data.type
    if kind == "function":
        return data.output
    if kind == "guardrail":
        return {"triggered": data.triggered}
    if kind == "handoff":
        return {"to_agent": data.to_agent}
    if kind == "mcp_tools":
        return {"result": data.result}
    return None


def _error_of(span: Any) -> BaseException | None:
    error = span.error
    if not error:
        return None
    message = error.get("message") if isinstance(error, dict) else str(error)
    if message == _TOOL_CANCELLED and span.span_data.type == "function":
        # The SDK caught the tool's CancelledError (not its own teardown's) and went on with an error output:
        # the tool was cancelled, as the managed call records it, not failed.
        return asyncio.CancelledError()
    return SpanFailed(str(message or "span error"), "agents_span_error")


# The error the SDK puts on a function span whose tool raised CancelledError outside the run's teardown.
_TOOL_CANCELLED = "Tool execution cancelled"


def _answered(data: Any) -> bool:
    """Whether a model span holds its call's complete answer: a response span's ``Response`` (set once it
    completed), a generation span's output."""
    if data.type == "generation":
        return bool(getattr(data, "output", None))
    return getattr(data, "response", None) is not None


def _cancelled() -> asyncio.CancelledError | None:
    """The error of a span ended with none while its task is being cancelled, as the core records one."""
    task = tool_spans.running_task()
    return asyncio.CancelledError() if task is not None and task.cancelling() else None


def _record_unrun(entry: FrameworkRun, span: Any, tool: ToolSpan, error: BaseException) -> None:
    """The scope of a wrapped tool's call that never reached the tool: shaped as the managed call's."""
    data = span.span_data
    metadata: dict[str, Any] = {cv.KIND: cv.TOOL, FRAMEWORK: "openai_agents", SPAN_ID: span.span_id}
    if tool.call_id is not None:
        metadata[cv.TOOL_CALL_ID] = tool.call_id
    arguments = data.input  # the SDK puts it on the span only with trace_include_sensitive_data
    inputs = parse_arguments(arguments) if isinstance(arguments, str) else None
    scopes = entry.turn.relay.scope
    handle = scopes.push(data.name, _TOOL, parent=entry.handle, attach=False, input=inputs, metadata=metadata)
    scopes.end(handle, error=error)


def _sent_of(data: Any) -> dict[str, Any] | None:
    """The request a model span's call sent, as its API's kwargs; None when the span does not hold it (the
    SDK sets it only with ``trace_include_sensitive_data``, and a response span's only once answered).

    A response span holds the agent's input (a string is the user's message, as the SDK sends it) and
    the ``Response``, which echoes the instructions; a generation span (a Chat Completions model) the
    messages as sent, the system one first."""
    given = getattr(data, "input", None)
    if data.type == "generation":
        if not isinstance(given, list):
            return None
        sent: dict[str, Any] = {"messages": list(given)}
        model = getattr(data, "model", None)
        if isinstance(model, str):
            sent["model"] = model
        return sent
    if isinstance(given, str):
        given = [{"role": "user", "content": given}]
    elif not isinstance(given, list):
        return None
    sent = {"input": list(given)}
    instructions = getattr(getattr(data, "response", None), "instructions", None)
    if instructions is not None:
        sent["instructions"] = instructions
    return sent


def _decode(sent: dict[str, Any]) -> Any:
    api = CHAT_COMPLETIONS if "messages" in sent else RESPONSES
    return APIS[api].codec.decode(sent)


def _end_observed(call: ModelCall, data: Any, error: BaseException | None) -> None:
    """End the attempt recorded from a model span (nothing else recorded it)."""
    response = getattr(data, "response", None)
    model = getattr(response, "model", None) or getattr(data, "model", None)
    # The answer object itself (a generation span's, the message as the SDK dumped it), as a managed attempt's
    # end holds its SDK's: what the view has no field for (a Responses answer's reasoning items) is read from it.
    answer = response if response is not None else getattr(data, "output", None)
    model = model if isinstance(model, str) else None
    call.end_observed(answer, deferred_answer((_annotate, data)), error=error, model=model)
    call.observed = None


def _annotate(data: Any) -> AnnotatedLLMResponse:
    response = getattr(data, "response", None)
    if response is not None:
        return APIS[RESPONSES].codec.annotate_response(response)
    usage = getattr(data, "usage", None) or {}
    model = getattr(data, "model", None)
    output = getattr(data, "output", None)
    if isinstance(output, list) and output and isinstance(output[0], dict):
        # A generation span (a Chat Completions model) holds the answer's message as the SDK dumped it: read as
        # the Chat Completions codec reads a completion, its usage details whole (cached and cache-write tokens,
        # reasoning tokens: the SDK keeps them under the names the completion's usage gives them).
        completion = {
            "model": model,
            "choices": [{"index": 0, "message": output[0], "finish_reason": None}],
            "usage": {
                "prompt_tokens": usage.get("input_tokens"),
                "completion_tokens": usage.get("output_tokens"),
                "prompt_tokens_details": usage.get("input_tokens_details") or {},
                "completion_tokens_details": usage.get("output_tokens_details") or {},
            },
        }
        return APIS[CHAT_COMPLETIONS].codec.annotate_response(completion)
    return AnnotatedLLMResponse(
        model=model if isinstance(model, str) else None,
        usage=TokenUsage(input_tokens=usage.get("input_tokens"), output_tokens=usage.get("output_tokens")),
    )
