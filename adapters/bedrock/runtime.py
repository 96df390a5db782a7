"""One ``bedrock-runtime`` API call as a managed attempt: what a botocore client adds around it.

boto3 does not speak httpx: the attempt wraps the client's ``_make_api_call``, and
botocore's own events report the rest. ``before-send`` fires once per HTTP try, so
its count is the call's ``sdk_retries`` (and no send at all marks the attempt
``relay.sent: False``); ``before-sign`` adds the headers an intercept put on the
request, signed with the rest. The client's credentials are remembered as secrets
before every call, so an error echoing one never records it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextvars import ContextVar
from functools import partial
from typing import Any

from relay_runtime import calls, cassettes, redaction
from relay_runtime import conventions as cv
from relay_runtime.attempt import current_attempt
from relay_runtime.types import LLMRequest, request_of_kwargs
from relay_runtime.urls import server_address

from .. import dispatch, sdk_retries
from . import cassette, invoke
from .codec import PROVIDER, ConverseCodec

SERVICE = "bedrock-runtime"
CONVERSE = ConverseCodec(streaming=False)
CONVERSE_STREAM = ConverseCodec(streaming=True)
# botocore operation name -> (its codec for the call's params, the response key holding a stream or None):
# the calls that are LLM attempts.
OPERATIONS: dict[str, tuple[Callable[[dict[str, Any]], Any], str | None]] = {
    "Converse": (lambda params: CONVERSE, None),
    "ConverseStream": (lambda params: CONVERSE_STREAM, "stream"),
    "InvokeModel": (lambda params: invoke.codec_for(params, False), None),
    "InvokeModelWithResponseStream": (lambda params: invoke.codec_for(params, True), "body"),
}

_INVOKE = frozenset({"InvokeModel", "InvokeModelWithResponseStream"})
_headers: ContextVar[Any] = ContextVar("relay_bedrock_headers", default=None)


class _ClientState:
    """What one client contributes to every attempt, worked out on its first managed call."""

    __slots__ = ("credentials", "events", "metadata", "replays", "signs_headers", "token")

    def __init__(self, client: Any) -> None:
        metadata: dict[str, Any] = {}
        address = server_address(getattr(client.meta, "endpoint_url", None))
        if address:
            metadata[cv.SERVER_ADDRESS] = address
        region = getattr(client.meta, "region_name", None)
        if isinstance(region, str) and region:
            metadata[cv.CLOUD_REGION] = region
        self.metadata = metadata
        self.credentials: Any = None  # the static credentials already remembered as secrets
        self.token: Any = None  # the static Bedrock API key, likewise
        self.events = events = client.meta.events
        # One before-send handler counts the try and answers it from a bound tape: botocore pays a
        # debug log and a keyword splat for every handler it calls, on every try.
        events.register(f"before-send.{SERVICE}", cassette.send_handler(client, sdk_retries.count_try),
                        unique_id="relay-runtime-send")  # fmt: skip
        # The signing hooks go on when a call first needs them (see ``hooks_for``): botocore has no
        # before-sign handler of its own, so until then that event costs it one dict lookup.
        self.signs_headers = False
        self.replays = False

    def hooks_for(self, headers: bool, tape: bool) -> None:
        """Before a call that sends an intercept's headers, or runs with a cassette: the hooks it needs.

        Registered by the call that needs them before it sends, and left on. Two calls racing to the
        first registration may both make it (botocore's unique id check is not atomic): the
        handlers then run twice, which changes nothing (both set the same headers, give the same answer).
        """
        if headers and not self.signs_headers:
            self.events.register(f"before-sign.{SERVICE}", _on_sign, unique_id="relay-runtime-sign")
            self.signs_headers = True
        if tape and not self.replays:
            # First: the first answer wins, and botocore's own handler answers for an operation with its
            # own auth type.
            self.events.register_first(
                f"choose-signer.{SERVICE}", cassette.choose_signer, unique_id="relay-runtime-signer"
            )
            self.replays = True


_STATE = "_relay_bedrock_state"


def _state(client: Any) -> _ClientState:
    state = client.__dict__.get(_STATE)
    if state is None:
        state = _ClientState(client)
        client.__dict__[_STATE] = state
    return state


def _on_sign(request: Any = None, **_: Any) -> None:
    headers = _headers.get()
    if headers and request is not None:
        for name, value in headers.items():
            request.headers[name] = value


def _credential_values(client: Any) -> set[str]:
    """The SigV4 credentials and the Bedrock API key (``AWS_BEARER_TOKEN_BEDROCK``, sent as a bearer token)."""
    signer = getattr(client, "_request_signer", None)
    found: set[str] = set()
    credentials = getattr(signer, "_credentials", None)
    if credentials is not None:
        frozen = credentials.get_frozen_credentials()
        found.update(v for v in (frozen.access_key, frozen.secret_key, frozen.token) if isinstance(v, str) and v)
    token = getattr(signer, "_auth_token", None)
    if token is not None:
        # A refreshable token hands out a frozen one, as botocore's signer asks it to.
        frozen_token = token.get_frozen_token() if hasattr(token, "get_frozen_token") else token
        value = getattr(frozen_token, "token", None)
        if isinstance(value, str) and value:
            found.add(value)
    return found


def _remember_credentials(client: Any, state: _ClientState) -> None:
    signer = getattr(client, "_request_signer", None)
    credentials = getattr(signer, "_credentials", None)
    token = getattr(signer, "_auth_token", None)
    if credentials is state.credentials and token is state.token:
        return  # an unsigned client, or static credentials and key remembered before
    for value in _credential_values(client):
        redaction.remember_secret(value)
    # Refreshable credentials and tokens change under the same object: those are read again every call.
    if credentials is None or type(credentials).__name__ == "Credentials":
        state.credentials = credentials
    if token is None or type(token).__name__ == "FrozenAuthToken":
        state.token = token


def _tag(error: BaseException) -> None:
    """A ClientError botocore has no class for says its error code (``ThrottlingException``, ...)."""
    response = getattr(error, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    if isinstance(code, str) and code and type(error).__name__ in ("ClientError", "EventStreamError"):
        error.relay_error_type = code  # type: ignore[attr-defined]


# While a class is wrapped (``instrument()``), the call it makes of the client's own ``_make_api_call``
# must pass straight through that wrapper, or one call would be two attempts; a client's own
# wrapper calls the original, so only then is the context switch worth its cost.
_class_wrapped = False


def guard_sdk_calls(on: bool) -> None:
    global _class_wrapped
    _class_wrapped = on


def _sdk_call(
    send: Callable[[str, dict[str, Any]], Any],
    operation: str,
    codec: Any,
    client: Any,
    state: _ClientState,
    request: LLMRequest,
) -> Any:
    attempt = current_attempt()
    if attempt is not None:
        attempt.metadata.pop(cv.SDK_RETRIES, None)  # an execution intercept's second call counts afresh
    headers = request.raw_headers()
    taped = cassettes.current() is not None
    if headers or taped:
        state.hooks_for(bool(headers), taped)
    token = dispatch.inside_sdk_call.set(True) if _class_wrapped else None
    header_token = _headers.set(dict(headers)) if headers else None
    try:
        # In the attempt: credentials that cannot be refreshed (an expired SSO session) fail it, unsent, as
        # botocore would while signing.
        _remember_credentials(client, state)
        kwargs = request.kwargs()
        if not taped:
            return send(operation, kwargs)
        with cassette.Bound(codec, kwargs, _credential_values(client)):
            return send(operation, kwargs)
    except BaseException as exc:
        _tag(exc)
        if attempt is not None and cv.SDK_RETRIES not in attempt.metadata:
            attempt.metadata[cv.SENT] = False  # refused before any HTTP try (botocore's own checks)
        raise
    finally:
        if header_token is not None:
            _headers.reset(header_token)
        if token is not None:
            dispatch.inside_sdk_call.reset(token)


_TAGGING: dict[type, type] = {}  # botocore's EventStream class -> its subclass that tags errors


def _iter_tagged(self: Any) -> Iterator[Any]:
    try:
        base: Any = type(self).__mro__[1]  # botocore's own class, the one this subclasses
        yield from base.__iter__(self)
    except Exception as exc:
        _tag(exc)
        raise


def _tagging(events: Any) -> Any:
    """botocore's event stream, made (in place) a subclass of its own class whose errors carry their code.

    A subclass rather than a wrapper: the managed stream stands for its source, and the caller's
    ``isinstance(stream, EventStream)`` must still hold.
    """
    base = type(events)
    if base in _TAGGING.values():
        return events
    tagging = _TAGGING.get(base)
    if tagging is None:
        tagging = _TAGGING[base] = type(base.__name__, (base,), {"__iter__": _iter_tagged, "__module__": __name__})
    events.__class__ = tagging
    return events


def managed_call(client: Any, send: Callable[[str, dict[str, Any]], Any], operation: str, params: Any) -> Any:
    """``send(operation, params)`` (the client's own ``_make_api_call``) as a managed attempt when it is an
    LLM call made where one is recorded; straight through otherwise."""
    known = OPERATIONS.get(operation)
    if known is None or dispatch.inside_sdk_call.get() or type(params) is not dict:
        return send(operation, params)
    codec_of, stream_key = known
    if operation in _INVOKE:
        params = invoke.with_body_read(params)
    codec = codec_of(params)
    state = client.__dict__.get(_STATE) or _state(client)
    model = params.get("modelId")
    model_name = model if isinstance(model, str) else None
    request = request_of_kwargs(params)
    # The client's metadata as it is: the attempt's own dict is made of it (never the caller's).
    metadata = state.metadata
    if stream_key is None:
        sent = partial(_sdk_call, send, operation, codec, client, state)  # a partial: one frame fewer than a lambda
        if operation == "InvokeModel":
            return calls.execute_current(
                request, lambda r: invoke.replayable(sent(r)),
                name=PROVIDER, model_name=model_name, metadata=metadata, codec=codec,
            )  # fmt: skip
        return calls.execute_current(
            request, sent, name=PROVIDER, model_name=model_name, metadata=metadata, codec=codec
        )
    answered: list[dict[str, Any]] = []

    def open_stream(sent: LLMRequest) -> Any:
        response = _sdk_call(send, operation, codec, client, state, sent)
        answered.append(response)
        return _tagging(response[stream_key])

    managed = calls.stream_current(request, open_stream, name=PROVIDER, model_name=model_name, metadata=metadata,
                                   codec=codec)  # fmt: skip
    if not answered:
        # A stream execution intercept served the events itself (a cache) and never opened Bedrock's: there is
        # no botocore response around them, only the stream.
        return {stream_key: managed}
    response = answered[-1]
    if managed is response[stream_key]:  # not recorded: the caller gets botocore's own stream
        return response
    return {**response, stream_key: managed}
