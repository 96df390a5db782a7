"""Core value types: requests, their provider-neutral view, responses, scope types."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from . import neutral


class ScopeType(enum.StrEnum):
    AGENT = "agent"
    FUNCTION = "function"
    LLM = "llm"
    TOOL = "tool"
    RETRIEVER = "retriever"
    CUSTOM = "custom"


class Outcome(enum.StrEnum):
    SUCCESS = "success"
    FAILED = "failed"
    CANCELLED = "cancelled"


_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _copy_tree(value: Any) -> Any:
    """``value`` with its dicts and lists copied at every depth; other objects are shared."""
    kind = type(value)
    if kind is dict:
        return {k: _copy_tree(v) for k, v in value.items()}
    if kind is list:
        return [_copy_tree(v) for v in value]
    return value


class LLMRequest:
    """The request as the provider will see it: headers and the SDK's own kwargs.

    Immutable so that an intercept can never change a request another intercept
    (or an in-flight retry) is still holding; intercepts return a new one.
    """

    __slots__ = ("_content", "_headers")
    _headers: Mapping[str, Any]
    _content: Mapping[str, Any]

    def __init__(self, headers: Mapping[str, Any] | None = None, content: Mapping[str, Any] | None = None):
        # ``type(...) is dict`` first: the ABC check is slow and plain dicts are the common case.
        if headers is not None and type(headers) is not dict and not isinstance(headers, Mapping):
            raise TypeError(f"LLMRequest headers must be a mapping, got {type(headers).__name__}")
        if content is not None and type(content) is not dict and not isinstance(content, Mapping):
            raise TypeError(f"LLMRequest content must be a mapping, got {type(content).__name__}")
        object.__setattr__(self, "_headers", MappingProxyType(dict(headers)) if headers else _EMPTY)
        object.__setattr__(self, "_content", MappingProxyType(dict(content)) if content else _EMPTY)

    @property
    def headers(self) -> dict[str, Any]:
        """A fresh, mutable copy of the headers: editing it changes nothing until passed to a new request."""
        return dict(self._headers)

    @property
    def content(self) -> dict[str, Any]:
        """A fresh copy of the content, its dicts and lists copied at every depth.

        Intercepts may edit it and build a new request from it
        (``LLMRequest(request.headers, c)``); an edit never reaches the provider
        unless that new request is returned. Copied per read, so the call path,
        which reads ``raw_content()``, pays nothing for it.
        """
        return {k: _copy_tree(v) for k, v in self._content.items()}

    def raw_content(self) -> Mapping[str, Any]:
        """The content itself, read-only and shared: for code that only reads it."""
        return self._content

    def raw_headers(self) -> Mapping[str, Any]:
        """The headers themselves, read-only and shared: for code that only reads them."""
        return self._headers

    def replace(
        self, *, headers: Mapping[str, Any] | None = None, content: Mapping[str, Any] | None = None
    ) -> LLMRequest:
        return LLMRequest(self._headers if headers is None else headers, self._content if content is None else content)

    def kwargs(self) -> dict[str, Any]:
        """A fresh, shallow copy of the content, ready to splat into an SDK call."""
        content = self._content
        return content.copy() if type(content) is MappingProxyType else dict(content)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("LLMRequest is immutable; use replace() to derive a new one")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LLMRequest):
            return NotImplemented
        return dict(self._headers) == dict(other._headers) and dict(self._content) == dict(other._content)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LLMRequest(headers={sorted(self._headers)}, content={sorted(self._content)})"


# The slots' own setters: ``LLMRequest.__setattr__`` refuses every write, and going around it
# with ``object.__setattr__`` costs a name lookup per slot.
_new_object = object.__new__
_set_headers = LLMRequest.__dict__["_headers"].__set__
_set_content = LLMRequest.__dict__["_content"].__set__


def request_of_kwargs(kwargs: dict[str, Any]) -> LLMRequest:
    """``LLMRequest(None, kwargs)`` for a plain dict of SDK kwargs, as the adapters build one per call.

    The same request (its own copy of ``kwargs``, no headers), without the class call and
    the type checks a plain dict does not need: a third of the cost.
    """
    request = _new_object(LLMRequest)
    _set_headers(request, _EMPTY)
    _set_content(request, MappingProxyType(dict(kwargs)) if kwargs else _EMPTY)
    return request


def request_taking(kwargs: dict[str, Any]) -> LLMRequest:
    """``request_of_kwargs`` for a dict the caller hands over: made for this call (a ``**kwargs``) and held by
    nothing else, so the request keeps it, uncopied, behind its read-only view. The caller never writes to it again.
    """
    request = _new_object(LLMRequest)
    _set_headers(request, _EMPTY)
    _set_content(request, MappingProxyType(kwargs) if kwargs else _EMPTY)
    return request


@dataclass
class AnnotatedLLMRequest:
    """The provider-neutral view of a request, which request intercepts may edit in place.

    After the intercepts ran, the provider codec maps the fields that changed back
    onto the SDK kwargs; fields nobody touched leave the kwargs as they were.
    ``params`` holds only the neutral names of ``relay_runtime.neutral.NEUTRAL_PARAMS``
    (``temperature``, ``max_tokens``, ``stop``, ...), which each codec spells its
    API's way; ``provider_params`` holds the SDK's other arguments under its own names.
    """

    model: str | None = None
    messages: list[Any] = field(default_factory=list)
    system: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    provider_params: dict[str, Any] = field(default_factory=dict)
    tools: list[Any] | None = None
    tool_choice: Any = None
    stream: bool = False
    provider: str | None = None
    operation: str = "chat"

    def accepts(self, param: str) -> bool:
        """Whether this request's API takes the neutral ``param`` (Anthropic 2.x has no ``temperature``)."""
        return neutral.accepts(self.provider, self.operation, param)

    def settings(self) -> dict[str, Any]:
        """The params and provider params without what carries content (``neutral.CONTENT_PARAMS``: a
        predicted answer, an output schema, template variables, ...): what records show as the request's settings."""
        if not self.provider_params:
            return dict(self.params)
        return neutral.settings(self.params, self.provider_params)

    def snapshot(self) -> AnnotatedLLMRequest:
        """A copy deep enough to detect what an intercept changed."""
        return AnnotatedLLMRequest(
            model=self.model,
            messages=list(self.messages),
            system=self.system,
            params=dict(self.params) if self.params else {},
            provider_params=dict(self.provider_params) if self.provider_params else {},
            tools=list(self.tools) if self.tools is not None else None,
            tool_choice=self.tool_choice,
            stream=self.stream,
            provider=self.provider,
            operation=self.operation,
        )

    def changes_since(self, before: AnnotatedLLMRequest) -> dict[str, Any]:
        """Fields that differ from ``before``; the two params dicts map each changed key, ``REMOVED`` for deletions."""
        changed: dict[str, Any] = {}
        for name in _COMPARED:
            now, then = getattr(self, name), getattr(before, name)
            if name in _KEYED:
                now, then = now or {}, then or {}
                if now == then:
                    continue
                delta = {k: v for k, v in now.items() if k not in then or then[k] != v}
                delta.update({k: REMOVED for k in then if k not in now})
                if delta:
                    changed[name] = delta
            elif now is not then and now != then:
                changed[name] = now
        return changed


_KEYED = ("params", "provider_params")
# What an intercept may change (provider and operation describe the codec, not the request);
# computed once: ``dataclasses.fields()`` rebuilds its tuple on every call.
_COMPARED = tuple(f.name for f in fields(AnnotatedLLMRequest) if f.name not in ("provider", "operation"))


class _Removed:
    __slots__ = ()

    def __repr__(self) -> str:
        return "REMOVED"


REMOVED: Any = _Removed()


class LLMRequestInterceptOutcome:
    """What a request intercept returns: the (possibly new) request and its annotated view."""

    __slots__ = ("annotated_request", "request")

    def __init__(self, request: LLMRequest, annotated_request: AnnotatedLLMRequest | None = None):
        if not isinstance(request, LLMRequest):
            raise TypeError(f"LLMRequestInterceptOutcome needs an LLMRequest, got {type(request).__name__}")
        self.request = request
        self.annotated_request = annotated_request

    def __repr__(self) -> str:
        return f"LLMRequestInterceptOutcome({self.request!r}, {self.annotated_request!r})"


@dataclass
class TokenUsage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_creation_tokens: int | None = None
    reasoning_tokens: int | None = None
    # Parts of the counts above that some providers bill at their own rates: cache writes kept an hour
    # (among ``cache_creation_tokens``), audio and image tokens (among the input and the output tokens).
    cache_creation_1h_tokens: int | None = None
    input_audio_tokens: int | None = None
    output_audio_tokens: int | None = None
    input_image_tokens: int | None = None
    output_image_tokens: int | None = None
    # Audio read from the cache: among both ``cache_read_tokens`` and ``input_audio_tokens`` (Gemini's
    # ``cacheTokensDetails``), billed once, at its own rate.
    cache_read_audio_tokens: int | None = None
    # Not tokens, but billed with them: the web searches a provider's own search tool ran (Anthropic's
    # ``server_tool_use.web_search_requests``), each at the entry's ``web_search`` price.
    web_search_requests: int | None = None

    def as_dict(self) -> dict[str, int]:
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}


@dataclass
class AnnotatedLLMResponse:
    """What the codec read off a provider response, for events and exporters."""

    model: str | None = None
    id: str | None = None
    finish_reasons: list[str] = field(default_factory=list)
    usage: TokenUsage = field(default_factory=TokenUsage)
    output_text: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    time_to_first_chunk_ns: int | None = None
    sdk_retries: int | None = None
    embedding_dimensions: int | None = None  # an embeddings answer: the length of one vector


@dataclass
class ChunkDelta:
    """The provider-neutral content of one stream chunk.

    ``text`` and ``reasoning`` are the first choice's; ``extra_chars`` counts the other output the chunk
    carried (other choices' text, tool-call arguments, refusals), which the provider bills as output too:
    a budget's stream meter counts it.
    """

    text: str = ""
    reasoning: str = ""
    model: str | None = None
    extra_chars: int = 0
