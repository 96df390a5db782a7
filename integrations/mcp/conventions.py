"""What the GenAI conventions say an MCP span is called and carries, from a request's method and params.

Only extraction here: no scopes, no SDK. The client and the server side both build
their hints from these functions, so a request is described the same way on both.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any

from relay_runtime.clipping import head, printable
from relay_runtime.urls import recorded_url

TOOLS_CALL = "tools/call"
# Methods whose target names the span (``tools/call add``), and where the target is found.
_TARGET_PARAM = {
    TOOLS_CALL: "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "resources/subscribe": "uri",
    "resources/unsubscribe": "uri",
}
RESOURCE_METHODS = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})
TOOL_ERROR = "tool_error"
_STATUS_KEY = "rpc.response.status_code"
_RESERVED_CODES = (-32768, -32000)  # JSON-RPC's own error codes and those it leaves to the protocol
# A target is caller data that becomes a span name: bounded, so one odd request cannot bloat every backend.
_MAX_TARGET = 256
_NO_FLAG: Any = object()


def target_of(method: str, params: object, taken: list[str] | None = None) -> str | None:
    """The target a request's params name (a mapping on the wire, a model in a client), bounded.

    ``taken``: where the credentials a peer's resource address held go (``urls.recorded_url``)."""
    key = _TARGET_PARAM.get(method)
    if key is None or params is None:
        return None
    if type(params) is dict:
        value = params.get(key)
    else:
        # A model has the field (asked first: no Mapping ABC check per request); a Mapping has no such attribute.
        value = getattr(params, key, _NO_FLAG)
        if value is _NO_FLAG:
            value = params.get(key) if isinstance(params, Mapping) else None
    if not isinstance(value, str) or not value:
        return None
    if method in RESOURCE_METHODS:
        # A resource's address may carry a credential (``?access_token=``, ``user:token@``): the span's
        # name and ``mcp.resource.uri`` hold it without (the request itself goes out as it was).
        value = recorded_url(value, taken)
    if len(value) <= _MAX_TARGET and value.isprintable():
        return value or None  # within the bound and printable: what the line below gives, without its two calls
    # Cut where no value is cut in two (an address across the bound would pass the policy by halves).
    return printable(head(value, _MAX_TARGET)) or None


# A client's tool names as ``target_of`` gives them: a client calls its few tools again and again.
tool_targets: dict[str, str | None] = {}
_MAX_TOOL_TARGETS = 256


def tool_target(name: object) -> str | None:
    """``target_of(TOOLS_CALL, {"name": name})``, remembered for the first names a process calls (caller data:
    past that many, worked out each time)."""
    if type(name) is str:
        found = tool_targets.get(name, _NO_FLAG)
        if found is not _NO_FLAG:
            return found
    target = target_of(TOOLS_CALL, {"name": name})
    if type(name) is str and len(tool_targets) < _MAX_TOOL_TARGETS:
        tool_targets[name] = target
    return target


# What the conventions call a value outside the known set (HTTP's methods; ``error.type``).
OTHER = "_OTHER"
_METHOD_SHAPE = re.compile(r"[A-Za-z0-9_./:@-]{1,256}")


def recorded_method(method: str) -> str:
    """A method as its span names it. On the serving side it is the client's word: a server refuses a
    method it does not serve (-32601) only after the request's span began, so whatever a client makes up
    names one. Kept when shaped like a method (an extension's: ``vendor.example/do-thing``), else
    ``_OTHER``: a space would let it pass for another request's span (``tools/call <tool>``), a line
    break forge a log line, and a cut name would name another method."""
    return method if _METHOD_SHAPE.fullmatch(method) else OTHER


def span_name(method: str, target: str | None) -> str:
    return f"{method} {target}" if target else method


def request_attributes(method: str, target: str | None, protocol_version: str | None) -> dict[str, Any]:
    """What is known when a request starts, on either side (``target``: ``target_of`` its params)."""
    out: dict[str, Any] = {"mcp.method.name": method}
    if protocol_version:
        out["mcp.protocol.version"] = protocol_version
    if method == TOOLS_CALL:
        out["gen_ai.operation.name"] = "execute_tool"
        if target:
            out["gen_ai.tool.name"] = target
    elif method == "prompts/get" and target:
        out["gen_ai.prompt.name"] = target
    elif method in RESOURCE_METHODS and target:
        out["mcp.resource.uri"] = target
    return out


def error_code_attributes(code: object) -> dict[str, Any]:
    """A JSON-RPC error: its code is both the status and the error type, as strings.

    Outside the range JSON-RPC reserves (its own codes and the protocol's, a bounded set) the code is the
    peer's choice, any integer, so each new one would be a new series of every backend's metric: while the
    cap the names share allows, it is the error type; past it, the error type is ``_OTHER`` and only the
    span carries the code (``end_hints`` leaves it out of the metric)."""
    text = str(code)
    return {_STATUS_KEY: text, "error.type": text if _code_admitted(text) else OTHER}


def _code_admitted(text: str) -> bool:
    try:
        reserved = _RESERVED_CODES[0] <= int(text) <= _RESERVED_CODES[1]
    except ValueError:
        reserved = False
    return reserved or (_STATUS_KEY, text) in _metric_names or _admitted((_STATUS_KEY, text))


def end_hints(hints: dict[str, Any], end: Mapping[str, Any]) -> dict[str, Any]:
    """A request's hints as its end sets them: ``end``'s attributes over the start's, in new dicts (the
    start's are shared by the requests that have them the same)."""
    out = {**hints, "attributes": {**hints["attributes"], **end}}
    if _STATUS_KEY in end and end.get("error.type") == OTHER:  # a code past the cap: no series of its own
        out["metric_keys"] = tuple(k for k in hints["metric_keys"] if k != _STATUS_KEY)
    return out


def is_tool_error(result: object) -> bool:
    """A ``tools/call`` result the server marked ``isError`` (a dict on the wire, a model in a handler)."""
    if type(result) is dict:
        return result.get("isError") is True
    flag = getattr(result, "is_error", _NO_FLAG)  # the SDK's model (asked first: no Mapping ABC check per call)
    if flag is not _NO_FLAG:
        return flag is True
    if isinstance(result, Mapping):
        return result.get("isError") is True
    return getattr(result, "isError", None) is True  # only what has no such field is asked for the alias


# A mark on a tool scope: the server answered a round of the call by asking the client for input
# (``resultType: "input_required"``, the 2026-07-28 protocol) rather than with the tool's result.
INPUT_REQUIRED = "mcp.input_required"
_MAX_INPUT_REQUESTS = 32


def input_requests_of(result: object) -> dict[str, str]:
    """What an ``input_required`` answer asks for: each request's key and method (``elicitation/create``),
    bounded. Not the requests' own text, nor the opaque ``requestState``: the server's words to its user
    and its sealed state are no part of the call's record."""
    requests = result.get("inputRequests") if isinstance(result, Mapping) else getattr(result, "input_requests", None)
    out: dict[str, str] = {}
    if not isinstance(requests, Mapping):
        return out
    for key, request in requests.items():
        if len(out) >= _MAX_INPUT_REQUESTS:
            break
        method = request.get("method") if isinstance(request, Mapping) else getattr(request, "method", None)
        out[printable(head(str(key), _MAX_TARGET))] = recorded_method(method) if isinstance(method, str) else OTHER
    return out


def tool_error_text(result: object) -> str:
    """The text a failed tool result carries, for the scope's error message."""
    content = result.get("content") if isinstance(result, Mapping) else getattr(result, "content", None)
    texts: list[str] = []
    for part in content or ():
        text = part.get("text") if isinstance(part, Mapping) else getattr(part, "text", None)
        if isinstance(text, str):
            texts.append(text)
    return head("\n".join(texts), 2000) or "the tool reported an error"


def peer_attributes(server: object) -> dict[str, Any]:
    """``network.transport`` and the server's address, from what a ``Client`` was given to connect to."""
    if isinstance(server, str):
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(server)
            port = parts.port
        except ValueError:
            return {"network.transport": "tcp"}
        out: dict[str, Any] = {"network.transport": "tcp", "network.protocol.name": "http"}
        if parts.hostname:
            out["server.address"] = parts.hostname
        if port is None and parts.scheme in ("http", "https"):
            port = 443 if parts.scheme == "https" else 80
        if port is not None:
            out["server.port"] = port
        return out
    if type(server).__name__ == "StdioServerParameters":
        return {"network.transport": "pipe"}
    return _built_transport(server)


def _built_transport(transport: object) -> dict[str, Any]:
    """A transport the caller built and gave the ``Client`` (the Agents SDK's stdio server does):
    the SDK's own transports are context managers that keep the function that made them and its
    arguments, which say what ``Client(params)`` or ``Client(url)`` would have said."""
    made_by = getattr(transport, "func", None)
    module = getattr(made_by, "__module__", None)
    if module == "mcp.client.stdio" and getattr(made_by, "__name__", None) == "stdio_client":
        return {"network.transport": "pipe"}
    if module == "mcp.client.sse" and getattr(made_by, "__name__", None) == "sse_client":
        args = getattr(transport, "args", ())
        url = args[0] if isinstance(args, tuple) and args else getattr(transport, "kwds", {}).get("url")
        return peer_attributes(url) if isinstance(url, str) else {"network.transport": "tcp"}
    return {}


# Attributes the MCP metrics carry: low-cardinality ones only (never ids, URIs or addresses).
METRIC_KEYS = (
    "mcp.method.name",
    "error.type",
    "gen_ai.operation.name",
    "gen_ai.prompt.name",
    "gen_ai.tool.name",
    "mcp.protocol.version",
    "network.protocol.name",
    "network.transport",
    "rpc.response.status_code",
)
CLIENT_OPERATION_DURATION = "mcp.client.operation.duration"
SERVER_OPERATION_DURATION = "mcp.server.operation.duration"
CLIENT_SESSION_DURATION = "mcp.client.session.duration"
SERVER_SESSION_DURATION = "mcp.server.session.duration"


# Tool and prompt names are caller data: any client may call any name (an unknown one still gets an
# answer), so each new name would be a new series of every backend's metric. So is a method a server
# does not know (it still gets its span and its measure), and an error's code (``error_code_attributes``).
# The first names seen get series of their own; past that, a request's metric carries no name (its span
# still does).
_NAME_KEYS = ("gen_ai.tool.name", "gen_ai.prompt.name")
_METHOD_KEY = "mcp.method.name"
UNNAMED_METRIC_KEYS = tuple(k for k in METRIC_KEYS if k not in _NAME_KEYS)
# (name kept, method kept) -> the keys a request's metric carries.
_KEYS = {
    (True, True): METRIC_KEYS,
    (False, True): UNNAMED_METRIC_KEYS,
    (True, False): tuple(k for k in METRIC_KEYS if k != _METHOD_KEY),
    (False, False): tuple(k for k in UNNAMED_METRIC_KEYS if k != _METHOD_KEY),
}
MAX_METRIC_NAMES = 256
# Tool and prompt names as they are; a method or an error code as (its key, its value), so no tool's name
# stands for one.
_metric_names: set[str | tuple[str, str]] = set()
_metric_names_lock = threading.Lock()


def _admitted(name: str | tuple[str, str]) -> bool:
    if name in _metric_names:
        return True
    with _metric_names_lock:
        if len(_metric_names) < MAX_METRIC_NAMES:
            _metric_names.add(name)
            return True
    return False


def metric_keys_for(attributes: Mapping[str, Any], known_method: bool = True) -> tuple[str, ...]:
    """``known_method``: the protocol defines the request's method (its series are bounded by the protocol)."""
    name = attributes.get("gen_ai.tool.name") or attributes.get("gen_ai.prompt.name")
    named = name is None or name in _metric_names or _admitted(name)
    if known_method:
        return METRIC_KEYS if named else UNNAMED_METRIC_KEYS
    method = attributes.get(_METHOD_KEY)
    return _KEYS[named, not isinstance(method, str) or _admitted((_METHOD_KEY, method))]


def hints(
    method: str, target: str | None, kind: str, attributes: dict[str, Any], known_method: bool = True
) -> dict[str, Any]:
    """The span hints of one request on one side: its name, kind, attributes and duration metric.

    ``method`` as ``recorded_method`` gives it where a peer chose it; ``known_method``: see ``metric_keys_for``."""
    metric = CLIENT_OPERATION_DURATION if kind == "client" else SERVER_OPERATION_DURATION
    return {
        "name": span_name(method, target),
        "kind": kind,
        "attributes": attributes,
        "duration_metric": metric,
        "metric_keys": metric_keys_for(attributes, known_method),
    }
