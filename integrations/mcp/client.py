"""The sending side: every request an MCP client sends becomes a scope of the relay that records it.

Pipeline of one managed request (``ClientSession.send_request``, which also checks the result;
requests a dispatcher sends on its own, such as a server calling its client back, the same way
at ``send_raw_request``):

1. ``tools/call``: a TOOL scope through ``relay.tools.execute_async``, so the relay's tool request
   intercepts (guardrails; argument rewrites) and execution intercepts run first. An intercept
   that raises refuses the call: nothing is sent, the scope ends failed with that error, and the
   caller gets the SDK's ordinary error result (``isError: true`` carrying the reason). With no
   intercept registered anywhere, the same tool scope is opened and ended here, with nothing
   between it and the send. Any other method: a plain scope.
2. The request's ``params._meta`` gets our scope's trace context (``traceparent``, and
   ``tracestate`` / ``baggage`` when set), merged over the caller's own ``_meta`` keys; the SDK's
   own injection is swapped for ours while the request is sent, so it cannot replace it.
3. The SDK's own client span is not made: its span hook hands back a collector that keeps the
   JSON-RPC id and error code for our scope.
4. The scope ends once: success; failed with the JSON-RPC error code as ``error.type``, with the
   SDK's error for a result it cannot read, or ``tool_error`` for a result marked ``isError``;
   cancelled when the caller is cancelled.

Failure policy: intercepts fail closed (they are policy); the instrumentation's own bookkeeping
fails open: if it cannot describe a request, the request goes out as the SDK would send it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from functools import partial
from typing import Any

from relay_runtime import conventions as cv
from relay_runtime.trace_context import carrier_for
from relay_runtime.types import Outcome, ScopeType

from . import conventions as mc
from . import routing

Send = Callable[..., Awaitable[Any]]
Notify = Callable[..., Awaitable[None]]
Call = Callable[[], Awaitable[Any]]

# The managed request being sent in this task, for the SDK hooks swapped below.
_sending: ContextVar[_Sending | None] = ContextVar("relay_mcp_sending", default=None)

_UNSET: Any = object()
_TOOL = ScopeType.TOOL.value
_KIND = cv.KIND
_TOOL_KIND = cv.TOOL
_SPAN_HINTS = cv.SPAN_HINTS
_CUSTOM = ScopeType.CUSTOM.value
_SUCCESS = Outcome.SUCCESS.value
# What the SDK's span hook is told that the scope's end carries.
_REPORTED = ("jsonrpc.request.id", "rpc.response.status_code")


def carry(meta: dict[str, Any], carrier: Mapping[str, str]) -> None:
    """Our trace context into ``meta`` (in place), instead of whatever trace context the caller's held."""
    if "traceparent" in carrier:
        # What says which trace a request continues: a tracestate belongs to the traceparent it came with (a
        # vendor's ids and sampling for that trace), so the caller's go as a pair when ours replaces them.
        meta.pop("traceparent", None)
        meta.pop("tracestate", None)
    meta.update(carrier)


class _Sending:
    """One managed request on its way: the context it carries, arguments an intercept rewrote,
    and what the SDK told its span hook (the JSON-RPC id, an error code).

    It also stands in for the SDK's span (and its context manager) during the send: what the SDK
    sets on that span goes to our scope (one object per request, not two)."""

    # Defaults on the class and no ``__init__``: making one per request runs no Python frame.
    arguments: Any = _UNSET
    reported: Mapping[str, Any] | None = None
    dispatched = False
    carrier: Mapping[str, str]
    # Set when a ``Client.call_tool`` opened the scope (``calls``): the session whose ``tools/call``
    # rounds of this tool are sent as part of it, each one carrying its context and arguments.
    driver: Any = None
    tool: str | None = None

    def report(self, attributes: Mapping[str, Any]) -> None:
        # The first report is kept as given, not copied: the SDK builds a new dict for each span
        # (its start's), and only a later report (an error's) makes the merged copy.
        reported = self.reported
        self.reported = attributes if reported is None else {**reported, **attributes}

    def params(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """``params`` as they go out: ``_meta`` merged with our context, arguments as rewritten."""
        out = dict(params) if params is not None else {}
        if self.arguments is not _UNSET:
            out["arguments"] = self.arguments
        meta = out.get("_meta")
        merged = dict(meta) if isinstance(meta, Mapping) else {}
        carry(merged, self.carrier)
        out["_meta"] = merged
        return out

    def end_attributes(self, error: BaseException | None) -> dict[str, Any]:
        reported = self.reported
        if error is None and reported is not None and "rpc.response.status_code" not in reported:
            # The usual end (no error, no status): the request id alone, without the general walk.
            request_id = reported.get("jsonrpc.request.id", _UNSET)
            return {} if request_id is _UNSET else {"jsonrpc.request.id": request_id}
        out: dict[str, Any] = {}
        if reported:
            for key in _REPORTED:
                if key in reported:
                    out[key] = reported[key]
        code = getattr(getattr(error, "error", None), "code", None) if error is not None else None
        if code is not None:
            out.update(mc.error_code_attributes(code))
        elif "rpc.response.status_code" in out:
            out.update(mc.error_code_attributes(out["rpc.response.status_code"]))
        return out

    # -- the SDK's span, as the SDK uses it ---------------------------------------------------

    def __enter__(self) -> _Sending:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.report(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        self.report({key: value})

    def set_status(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def record_exception(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def is_recording(self) -> bool:
        return False


class ToolErrorResult(Exception):
    """A tool result the server marked ``isError``: the scope fails with ``tool_error``; the caller gets the result."""

    relay_error_type = mc.TOOL_ERROR

    def __init__(self, result: Any) -> None:
        super().__init__(mc.tool_error_text(result))
        self.result = result


# -- the SDK's hooks, swapped while instrumented --------------------------------------------------
# While a request of ours is sent, the SDK's span hook hands back its ``_Sending`` as the span.


def swapped_span(original: Callable[..., Any]) -> Callable[..., Any]:
    def otel_span(name: str, *args: Any, **kwargs: Any) -> Any:
        sending = _sending.get()
        if sending is None:
            return original(name, *args, **kwargs)  # not ours: the SDK's tracing as it was
        attributes = kwargs.get("attributes")
        if type(attributes) is dict or isinstance(attributes, Mapping):
            # ``sending.report(attributes)`` for the start's, the only one so far (a call less per request).
            if sending.reported is None:
                sending.reported = attributes
            else:
                sending.report(attributes)
        return sending  # the span (and its context manager) the SDK sets what it knows on

    return otel_span


def swapped_inject(original: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def inject_trace_context(meta: dict[str, Any]) -> None:
        sending = _sending.get()
        if sending is None:
            original(meta)
            return
        # ``carry(meta, sending.carrier)``, unrolled (a call less per request); last: whatever was merged before,
        # ours is what the server reads.
        carrier = sending.carrier
        if "traceparent" in carrier:
            meta.pop("traceparent", None)
            meta.pop("tracestate", None)
        meta.update(carrier)

    return inject_trace_context


# -- requests ----------------------------------------------------------------------------------------
#
# The wrappers are plain functions handing back the awaitable that does the work (the SDK awaits
# what they return): a request passes through as few coroutine frames of ours as can be, since
# every resume of the request (each read and write of the transport) passes through all of them.


def _refusal(error: BaseException) -> dict[str, Any]:
    reason = str(error) or type(error).__name__
    # ``resultType`` is required from the 2026-07-28 protocol on; earlier sessions drop it as a later field.
    return {
        "content": [{"type": "text", "text": f"Tool call refused: {reason}"}],
        "isError": True,
        "resultType": "complete",
    }


def session_send(original: Send) -> Send:
    """``ClientSession.send_request``: the scope spans the send *and* the SDK's check of the result,
    so a server answering junk fails the scope the caller's error comes from."""

    def send_request(client_session: Any, request: Any, result_type: Any, *args: Any, **kwargs: Any) -> Any:
        owner = _sending.get()
        if owner is not None and owner.driver is client_session:
            try:
                is_round = request.method == mc.TOOLS_CALL and request.params.name == owner.tool
            except AttributeError:
                is_round = False
            if is_round:
                # A round of a ``Client.call_tool`` whose scope is open above: sent as part of it, not a call of
                # its own.
                owner.dispatched = False
                owner.reported = None  # the scope's end records the last round's request, not an earlier one's
                return original(client_session, request, result_type, *args, **kwargs)
        relay = routing.relay_for_request()
        if relay is None:
            return original(client_session, request, result_type, *args, **kwargs)
        try:
            method = request.method
            params = request.params
            target = mc.target_of(method, params)
            hints = routing.hints_for(client_session._dispatcher, method, target)
            tool = params.name if method == mc.TOOLS_CALL and target is not None else None
            arguments = params.arguments if tool is not None else None
        except Exception:
            # Our bookkeeping failed: the request goes out as the SDK would send it.
            return original(client_session, request, result_type, *args, **kwargs)

        # A partial, not a closure: the send runs one Python frame fewer.
        call = partial(original, client_session, request, result_type, *args, **kwargs)
        if tool is not None:
            return _tool_call(relay, tool, arguments, hints, call, result_type)
        return _request(relay, hints, call)

    return send_request


def _typed(result_type: Any, raw: dict[str, Any]) -> Any:
    """A refusal's result as the SDK's caller expects it (``result_type``; None: the raw dict)."""
    if result_type is None:
        return raw
    validate = getattr(result_type, "validate_python", None) or result_type.model_validate
    return validate(raw, by_name=False)


def dispatcher_send(original: Send, *, injects: bool) -> Send:
    """A dispatcher's ``send_raw_request``. Inside a session's request (above) it only writes what
    that request carries (``injects``: the dispatcher writes ``_meta`` through the SDK's inject hook,
    swapped for ours); alone (a server calling its client back) the request is a scope of its own."""

    def send_raw_request(dispatcher: Any, method: str, params: Any, opts: Any = None, **kwargs: Any) -> Any:
        owner = _sending.get()
        if owner is not None and not owner.dispatched:
            owner.dispatched = True
            if not injects or owner.arguments is not _UNSET:
                params = owner.params(params)
            return original(dispatcher, method, params, opts, **kwargs)
        relay = routing.relay_for_request()
        if relay is None or not isinstance(method, str):
            return original(dispatcher, method, params, opts, **kwargs)
        return _alone(original, relay, dispatcher, method, params, opts, kwargs)

    return send_raw_request


async def _alone(
    original: Send, relay: Any, dispatcher: Any, method: str, params: Any, opts: Any, kwargs: dict[str, Any]
) -> Any:
    mapping = params if isinstance(params, Mapping) else None
    try:
        target = mc.target_of(method, mapping)
        hints = routing.hints_for(dispatcher, method, target)
        tool = mapping["name"] if method == mc.TOOLS_CALL and target is not None and mapping is not None else None
        arguments = mapping.get("arguments") if tool is not None and mapping is not None else None
    except Exception:
        return await original(dispatcher, method, params, opts, **kwargs)
    sending_params = params

    def call() -> Awaitable[Any]:
        sending = _sending.get()
        out = sending.params(sending_params) if sending is not None else sending_params
        if sending is not None:
            sending.dispatched = True
        return original(dispatcher, method, out, opts, **kwargs)

    if tool is not None:
        return await _tool_call(relay, tool, arguments, hints, call, None)
    return await _request(relay, hints, call)


async def _request(relay: Any, hints: dict[str, Any], call: Call) -> Any:
    """Any request but a tool call: a plain scope around it."""
    handle = relay.scope.push(hints["name"], _CUSTOM, metadata={cv.SPAN_HINTS: hints})
    sending = _Sending()
    sending.carrier = carrier_for(handle)
    token = _sending.set(sending)
    try:
        result = await call()
    except BaseException as exc:
        _sending.reset(token)
        handle.metadata = {**handle.metadata, cv.SPAN_HINTS: mc.end_hints(hints, sending.end_attributes(exc))}
        relay.scope.pop(handle, error=exc)
        raise
    _sending.reset(token)
    # Set on the scope, not given to ``pop``: as ``_tool_call`` does, and why. Its outcome given, as there.
    handle.metadata = {**handle.metadata, cv.SPAN_HINTS: mc.end_hints(hints, sending.end_attributes(None))}
    relay.scope.pop(handle, outcome=_SUCCESS)
    return result


def _sending_for(tool: str, driver: Any) -> _Sending:
    sending = _Sending()
    if driver is not None:
        sending.driver = driver
        sending.tool = tool
    return sending


async def _tool_call(
    relay: Any, tool: str, arguments: Any, hints: dict[str, Any], call: Call, result_type: Any, driver: Any = None
) -> Any:
    """``driver``: the session a ``Client.call_tool`` (``call``) sends its rounds over, or None for one request."""
    current = relay.scope.current()
    if current is not None and current.scope_type == _TOOL and (current.name == tool or _declares(current, tool)):
        # A framework already opened this call's tool scope (and ran the relay's tool intercepts):
        # the MCP attributes join it rather than making a second scope.
        return await _join_tool_scope(current, hints, call, _sending_for(tool, driver))
    if type(tool) is str and tool and not relay.intercepts.active:
        # ``relay.tools.open_unintercepted(tool, arguments, {cv.SPAN_HINTS: hints})``'s scope, opened as it opens
        # one (the tool's kind beside the metadata given, which ``redact_metadata`` hands back as it is: our span
        # hints alone), through ``Scopes.opened`` as the server side opens its: three frames less per call.
        handle = relay.scope.opened(tool, _TOOL, None, arguments, {_KIND: _TOOL_KIND, _SPAN_HINTS: hints})
    else:
        handle = relay.tools.open_unintercepted(tool, arguments, {_SPAN_HINTS: hints})
    if handle is not None:
        # No intercept anywhere: the tool scope is ours to end, with nothing between it and the send.
        sending = _Sending()  # ``_sending_for``, written out: a call less per request
        if driver is not None:
            sending.driver = driver
            sending.tool = tool
        sending.carrier = carrier_for(handle)
        token = _sending.set(sending)
        try:
            result = await call()
        except BaseException as exc:
            _sending.reset(token)
            handle.metadata = {**handle.metadata, cv.SPAN_HINTS: mc.end_hints(hints, sending.end_attributes(exc))}
            relay.scope.pop(handle, error=exc)
            raise
        _sending.reset(token)
        end, failed = _tool_end(sending, result)
        # The end hints set on the scope as ``pop(metadata=...)`` would merge them, in a new dict (its start event
        # keeps the one it had): the pop then reads no metadata for credentials, which span hints, the
        # integration's own, are passed over in anyway (``redact_metadata``). Two calls less per request.
        handle.metadata = {**handle.metadata, cv.SPAN_HINTS: mc.end_hints(hints, end)}
        if failed:
            relay.scope.pop(handle, error=ToolErrorResult(result))
        else:
            # The outcome ``pop`` would work out, given (an output that is no dict says none of its own): no read of
            # the recorded output back, and no call, to find it.
            relay.scope.pop(handle, output=result, outcome=None if isinstance(result, dict) else _SUCCESS)
        return result
    return await _intercepted_tool_call(relay, tool, arguments, hints, call, result_type, driver)


def _tool_end(sending: _Sending, result: Any) -> tuple[dict[str, Any], bool]:
    """A sent tool call's end attributes, and whether the server marked its result ``isError``."""
    end = sending.end_attributes(None)
    # The SDK's result model says it in a bool field: read here, a call less per tool call;
    # anything else (a dict, another shape) is ``is_tool_error``'s to read.
    flag = getattr(result, "is_error", None)
    failed = flag is True if type(flag) is bool else mc.is_tool_error(result)
    if failed:
        end["error.type"] = mc.TOOL_ERROR
    return end, failed


async def _intercepted_tool_call(
    relay: Any, tool: str, arguments: Any, hints: dict[str, Any], call: Call, result_type: Any, driver: Any
) -> Any:
    """Through ``relay.tools.execute_async``, so the relay's tool request intercepts (guardrails;
    argument rewrites) and execution intercepts run first."""
    sent = False
    holder: Any = None  # the scope the first send to end set the end hints on: a later send's end replaces them

    async def terminal(args: Any) -> Any:
        nonlocal sent, holder
        # One per send: an execution intercept may send the call again (a retry) or several times at once (a
        # fan-out), each with the arguments it gives, written into that request alone.
        sending = _sending_for(tool, driver)
        inner = relay.scope.current()  # the tool scope, or one an execution intercept opened in it
        sending.carrier = carrier_for(inner) if inner is not None else {}
        if args is not arguments:
            sending.arguments = args
        sent = True
        token = _sending.set(sending)
        try:
            result = await call()
        except BaseException as exc:
            _sending.reset(token)
            # Set before the tool scope ends (which happens as this propagates).
            holder = _set_end_hints(inner, hints, sending.end_attributes(exc), holder)
            raise
        _sending.reset(token)
        end, failed = _tool_end(sending, result)
        holder = _set_end_hints(inner, hints, end, holder)
        if failed:
            raise ToolErrorResult(result)
        return result

    try:
        return await relay.tools.execute_async(tool, arguments, terminal, metadata={cv.SPAN_HINTS: hints})
    except ToolErrorResult as failed:
        return failed.result
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        if sent:
            raise
        return _typed(result_type, _refusal(exc))


def _set_end_hints(current: Any, hints: dict[str, Any], end: dict[str, Any], holder: Any = None) -> Any:
    """The tool scope's hints as its end sets them: on the scope that holds them (``current`` or one it
    is in: an execution intercept may have opened one inside it; ``holder``, once an earlier send of the
    call set them there), in its own metadata, which its end event carries; returns that scope. A new
    dict: the scope's start event holds the one it had, and a consumer reading that later (ATOF's
    writer) must find the start as it was."""
    node = holder
    if node is None:
        node = current
        while node is not None:
            md = node.metadata
            if type(md) is dict and md.get(cv.SPAN_HINTS) is hints:
                break
            node = node.parent
        else:
            return None
    node.metadata = {**node.metadata, cv.SPAN_HINTS: mc.end_hints(hints, end)}
    return node


def _declares(scope: Any, tool: str) -> bool:
    """Whether a framework said its tool scope, named otherwise, is a call of this MCP tool (``cv.MCP_TOOL``)."""
    md = scope.metadata
    return type(md) is dict and md.get(cv.MCP_TOOL) == tool


async def _join_tool_scope(handle: Any, hints: dict[str, Any], call: Call, sending: _Sending) -> Any:
    sending.carrier = carrier_for(handle)
    error: BaseException | None = None
    token = _sending.set(sending)
    try:
        return await call()
    except BaseException as exc:
        error = exc
        raise
    finally:
        _sending.reset(token)
        if isinstance(handle.metadata, dict):  # a new dict, as in ``_set_end_hints``
            handle.metadata = {**handle.metadata, cv.SPAN_HINTS: mc.end_hints(hints, sending.end_attributes(error))}


def notify(original: Notify) -> Notify:
    def notify(dispatcher: Any, method: str, params: Any, opts: Any = None, **kwargs: Any) -> Any:
        relay = routing.relay_for_request()
        if relay is None or not isinstance(method, str):
            return original(dispatcher, method, params, opts, **kwargs)
        return _notified(original, relay, dispatcher, method, params, opts, kwargs)

    return notify


async def _notified(
    original: Notify, relay: Any, dispatcher: Any, method: str, params: Any, opts: Any, kwargs: dict[str, Any]
) -> Any:
    hints = mc.hints(method, None, "client", {"mcp.method.name": method, **routing.peer_of(dispatcher)})
    # Notifications carry no trace context: the conventions give them a span, not a child on the other side.
    with relay.scope.scope(method, ScopeType.CUSTOM, metadata={cv.SPAN_HINTS: hints}):
        return await original(dispatcher, method, params, opts, **kwargs)


def peer_attributes_of(mcp_client: Any) -> dict[str, Any]:
    """What a ``Client`` was given to connect to, as span attributes."""
    return mc.peer_attributes(getattr(mcp_client, "server", None))
