"""The serving side: each request an instrumented server handles is a scope that continues the caller's trace.

Replaces the SDK's ``OpenTelemetryMiddleware`` while instrumented (it is on every ``Server`` by
default), so a request gets one server span, ours. The scope is pushed under the remote parent
that the request's ``params._meta`` carries (a W3C ``traceparent``), so the server's span is a
child of the client's, with its trace id, across processes; without one it is a root. It is
attached: the handler's own LLM and tool calls nest under it.

A ``tools/call`` is a TOOL scope named for the tool; other methods a scope named as the
conventions name the span. Outcomes: success; failed with the JSON-RPC code as ``error.type``
(``-32602`` for parameters that fail validation, whose message is recorded as the client is told
it, never pydantic's, which quotes the client's input), the exception's class for anything else,
or ``tool_error`` for a result marked ``isError`` (which still goes back to the client as it is);
cancelled (no ``error.type``) when the client cancels the request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from relay_runtime import conventions as cv
from relay_runtime import outside_turns
from relay_runtime.clipping import printable
from relay_runtime.redaction import REDACTED
from relay_runtime.scopes import error_type_of, outcome_of
from relay_runtime.trace_context import parse_traceparent
from relay_runtime.types import ScopeType

from . import conventions as mc
from . import routing
from .client import ToolErrorResult

Middleware = Callable[[Any, Any, Any], Awaitable[Any]]
_INVALID_PARAMS = -32602
_INITIALIZE = "initialize"
_TOOL = ScopeType.TOOL.value
_CUSTOM = ScopeType.CUSTOM.value


def _meta_of(ctx: Any) -> Mapping[str, Any]:
    meta = getattr(ctx, "meta", None)
    if type(meta) is dict or isinstance(meta, Mapping):
        return meta
    dump = getattr(meta, "model_dump", None)
    return dump(by_alias=True) if callable(dump) else {}


_known: list[frozenset[str] | None] = [None]
_UNKNOWN: Any = object()


def _known_methods() -> frozenset[str]:
    """The methods the protocol lets a client send, in any of its versions (read once, when first needed)."""
    known = _known[0]
    if known is None:
        from mcp_types.methods import SPEC_CLIENT_METHODS, SPEC_CLIENT_NOTIFICATION_METHODS

        known = _known[0] = SPEC_CLIENT_METHODS | SPEC_CLIENT_NOTIFICATION_METHODS
    return known


def _is_input_required(result: object) -> bool:
    """An ``input_required`` answer (the 2026-07-28 protocol), as a handler's model or a mapping."""
    if type(result) is dict or isinstance(result, Mapping):
        return result.get("resultType") == "input_required"
    return getattr(result, "result_type", None) == "input_required"


# A JSON-RPC id may be any string: one past this is not recorded (a cut id would name another request).
_MAX_REQUEST_ID = 256


def _request_attributes(ctx: Any, method: str, target: str | None) -> dict[str, Any]:
    # Until ``initialize`` is answered the connection holds the server's latest version, not the one the
    # answer agrees on: that request's version is read from its answer (``_agreed_version``).
    version = getattr(ctx, "protocol_version", None) if method != _INITIALIZE else None
    attributes = mc.request_attributes(method, target, version)
    request_id = getattr(ctx, "request_id", None)
    if type(request_id) is int:
        text = str(request_id)  # digits: printable, and within the bound unless the peer chose a huge one
        if len(text) <= _MAX_REQUEST_ID:
            attributes["jsonrpc.request.id"] = text
    elif request_id is not None:
        text = request_id if type(request_id) is str else str(request_id)
        if len(text) <= _MAX_REQUEST_ID:
            attributes["jsonrpc.request.id"] = printable(text)
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None) if request is not None else None
    if headers is not None:
        attributes["network.transport"] = "tcp"
        attributes["network.protocol.name"] = "http"
        session_id = _served_session_id(ctx)
        if session_id is not None:
            attributes["mcp.session.id"] = printable(session_id[:256])
        client = getattr(request, "client", None)
        host = getattr(client, "host", None)
        if isinstance(host, str):
            attributes["client.address"] = host
    return attributes


def _served_session_id(ctx: Any) -> str | None:
    """The session the server holds this request's connection in, or None where it holds none.

    Not the request's ``Mcp-Session-Id`` header: any client can send one, and a server with no
    sessions (the 2026-07-28 protocol; stateless HTTP) ignores it. Where the server keeps sessions,
    a request naming one it does not have is refused before any handler runs."""
    connection = getattr(getattr(ctx, "session", None), "_connection", None)
    session_id = getattr(connection, "session_id", None)
    return session_id if isinstance(session_id, str) and session_id else None


def _agreed_version(result: object) -> dict[str, Any]:
    version = result.get("protocolVersion") if isinstance(result, Mapping) else None
    return {"mcp.protocol.version": version} if isinstance(version, str) else {}


class InvalidParams(Exception):
    """A request whose params failed validation, as its scope records it: what the client is told.

    pydantic's own message quotes the input it refused (``input_value=...``), credentials and all."""

    relay_error_type = "ValidationError"

    def __init__(self) -> None:
        super().__init__("Invalid request parameters")


def _is_invalid_params(error: BaseException) -> bool:
    return type(error).__name__ == "ValidationError"


class EchoedAddress(Exception):
    """A failure whose text quotes the client's resource address (``cannot read <uri>``), as its scope records
    it: the credentials recording took out of that address (``?access_token=``, user info) blanked in its text
    too. They are this request's own (a client's, not the process's memory of secrets): nothing else would."""

    def __init__(self, text: str, error_type: str) -> None:
        super().__init__(text)
        self.relay_error_type = error_type


# As the process's memory of secrets: a shorter value blanked wherever it occurs would mangle the text.
_MIN_TAKEN = 8


def _recorded_error(error: BaseException, taken: list[str] | None) -> BaseException:
    """``error`` as the request's scope records it."""
    if _is_invalid_params(error):
        return InvalidParams()
    if not taken or outcome_of(error) != "failed":
        return error
    text = original = str(error)
    for value in taken:
        if len(value) >= _MIN_TAKEN:
            text = text.replace(value, REDACTED)
    return error if text == original else EchoedAddress(text, error_type_of(error))


def _failure_attributes(error: BaseException) -> dict[str, Any]:
    if outcome_of(error) != "failed":
        return {}  # a cancelled request stopped on purpose: its outcome says so, it is no error
    code = getattr(getattr(error, "error", None), "code", None)
    if code is not None:
        return mc.error_code_attributes(code)
    if _is_invalid_params(error):
        return mc.error_code_attributes(_INVALID_PARAMS)
    return {"error.type": type(error).__qualname__}


def middleware(original: Middleware) -> Middleware:
    """``OpenTelemetryMiddleware.__call__``: hands back the awaitable that serves the request (the
    SDK awaits it), so the request passes through one coroutine frame of ours."""

    def __call__(self: Any, ctx: Any, call_next: Any) -> Any:
        relay = routing.relay_for_request()
        method = getattr(ctx, "method", None)
        if relay is None or not isinstance(method, str):
            return original(self, ctx, call_next)
        return _handle(original, self, relay, method, ctx, call_next)

    return __call__


async def _handle(original: Middleware, middleware: Any, relay: Any, method: str, ctx: Any, call_next: Any) -> Any:
    try:
        params = ctx.params
        # A request's params are a dict: told so without the Mapping ABC's check.
        if type(params) is not dict and not isinstance(params, Mapping):
            params = None
        meta = _meta_of(ctx)
        # Parsed once: the parsed value is what the scope's metadata carries on to every consumer.
        remote = parse_traceparent(meta.get("traceparent"))
        # A client's address is no secret of this process: what recording it takes out is kept for this
        # request's error text alone (``urls.recorded_url``).
        taken: list[str] | None = [] if method in mc.RESOURCE_METHODS else None
        name = params.get("name") if method == mc.TOOLS_CALL and type(params) is dict else None
        if type(name) is str:
            # A tool's name as ``target_of`` gives it, remembered per name (``mc.tool_target``): a server is called
            # for its few tools again and again.
            target = mc.tool_targets.get(name, _UNKNOWN)
            if target is _UNKNOWN:
                target = mc.tool_target(name)
        else:
            target = mc.target_of(method, params, taken)
        # The client's word: a method the protocol does not define names the span as it is shown, and
        # gets a metric series of its own only while the names are few.
        known = method in (_known[0] or _known_methods())
        if not known:
            method = mc.recorded_method(method)
        attributes = _request_attributes(ctx, method, target)
        hints = mc.hints(method, target, "server", attributes, known)
        is_tool = method == mc.TOOLS_CALL and target is not None
        name = target if is_tool and target else hints["name"]
        if type(name) is not str or not name:
            raise ValueError(f"no scope name for {method!r}")  # served as it would be without us, below
        # ``opened``, not ``push``: the metadata is ours, its kind and span hints, with nothing of the caller's to
        # read for credentials on every request (``redact_metadata`` passes span hints by anyway).
        handle_ = relay.scope.opened(
            name,
            _TOOL if is_tool else _CUSTOM,
            None,  # parent: the remote one, or none
            params.get("arguments") if is_tool and params is not None else None,
            {cv.KIND: cv.TOOL, cv.SPAN_HINTS: hints} if is_tool else {cv.SPAN_HINTS: hints},
            None,  # data
            True,  # attach
            False,  # root
            remote,
            meta.get("tracestate") if remote is not None else None,
        )
    except Exception:
        # Our bookkeeping failed: the request is served as it would be without us.
        return await original(middleware, ctx, call_next)
    served = outside_turns.serve(handle_)  # the handler's own LLM calls, made with no turn open, nest here
    try:
        result = await call_next(ctx)
    except BaseException as exc:
        served.var.reset(served)
        end = mc.end_hints(hints, _failure_attributes(exc))
        relay.scope.pop(handle_, error=_recorded_error(exc, taken), metadata={cv.SPAN_HINTS: end})
        raise
    served.var.reset(served)
    if method == mc.TOOLS_CALL and mc.is_tool_error(result):
        relay.scope.pop(
            handle_,
            output=result,
            error=ToolErrorResult(result),
            metadata={cv.SPAN_HINTS: mc.end_hints(hints, {"error.type": mc.TOOL_ERROR})},
        )
        return result
    if is_tool and _is_input_required(result):
        # A round that asks the client for input: no result of the tool's yet, and no output to record;
        # the client sends the call again with the answers, a request (and a scope) of its own.
        relay.scope.mark(mc.INPUT_REQUIRED, {"requests": mc.input_requests_of(result)}, parent=handle_)
        relay.scope.pop(handle_)
        return result
    if method == _INITIALIZE:
        relay.scope.pop(handle_, metadata={cv.SPAN_HINTS: mc.end_hints(hints, _agreed_version(result))})
        return result
    relay.scope.pop(handle_, output=result if is_tool else None)
    return result
