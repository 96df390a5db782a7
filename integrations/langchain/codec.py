"""A LangChain chat model call as an LLM request: the codec of the attempts ``RelayMiddleware`` makes.

The request's content is ``{"model": name, "messages": [BaseMessage, ...], **invocation kwargs}``
(``stop``, ``tools`` bound by ``bind_tools``, ...). The neutral view holds the messages as
``{"role", "content"}`` dicts; an intercept that edits them has its messages turned back into
LangChain messages, and neutral params go to the model as invocation kwargs under the same
name (``ChatOpenAI`` and ``ChatAnthropic`` both take ``temperature``, ``max_tokens``, ``stop``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from langchain_core.load.serializable import Serializable
from langchain_core.messages import BaseMessage, convert_to_messages

from relay_runtime.adapters import endpoints
from relay_runtime.clipping import head
from relay_runtime.codec import CountingAccumulator
from relay_runtime.cost.pricing import CACHE_BESIDE_INPUT
from relay_runtime.neutral import NEUTRAL_PARAMS
from relay_runtime.types import REMOVED, AnnotatedLLMRequest, AnnotatedLLMResponse, TokenUsage

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "function"}
_NOT_PARAMS = frozenset({"model", "messages", "tools", "tool_choice"})
_MAX_TEXT = 4096  # a payload's string kept in events (the rest is elided): agent states carry whole transcripts
_MAX_ITEMS = 200
_MAX_DEPTH = 8


_MISSING = object()
# Per message class: whether it has ``tool_calls`` and ``tool_call_id`` as attributes beyond its fields (properties),
# and whether its ``type``, ``content`` and ``name`` are fields no class attribute shadows (then read from the
# message's ``__dict__``: pydantic's models define ``__getattr__``, so each attribute read of a message goes through
# Python's slower lookup hook). Asked of the classes' own dicts once, since ``hasattr`` on a pydantic class goes
# through its metaclass's ``__getattr__``. Its keys are also the classes known to be messages (``plain`` asks them
# first): a class is one for good, where ``isinstance`` against ``BaseMessage`` (an ABC) runs its Python
# ``__instancecheck__`` each time.
_MESSAGE_CLASSES: dict[type, tuple[bool, bool, bool]] = {}
_MAX_CLASSES = 1000  # classes made at run time (``create_model``) would otherwise be held for good


def _class_attributes(cls: type) -> tuple[bool, bool, bool]:
    unshadowed = not any(_declares(cls, name) for name in ("type", "content", "name"))
    found = (_declares(cls, "tool_calls"), _declares(cls, "tool_call_id"), unshadowed)
    if len(_MESSAGE_CLASSES) < _MAX_CLASSES:
        _MESSAGE_CLASSES[cls] = found
    return found


def _declares(cls: type, name: str) -> bool:
    return any(name in vars(k) for k in cls.__mro__)


def _beyond_fields(message: BaseMessage, extra: dict[str, Any] | None, name: str, declared: bool) -> Any:
    """What a message that has no field ``name`` gives for it (``getattr(message, name, None)``), without asking
    pydantic for an attribute the message does not have: that raises and catches an AttributeError (about 1.6 us),
    and most messages have no ``tool_calls`` (all but the model's) or no ``tool_call_id`` (all but tools'), read for
    each message a run's inputs and outputs hold. ``extra``: its extra fields; ``declared``: its class has ``name`` as
    an attribute (a property)."""
    if extra and name in extra:
        return extra[name]
    return getattr(message, name, None) if declared else None  # a property of its class, or nothing


def message_view(message: Any) -> dict[str, Any]:
    """A LangChain message as the neutral ``{"role", "content"}`` (tool calls and ids kept)."""
    if not isinstance(message, BaseMessage):
        return {"role": "user", "content": plain(message)}
    return _message_view(message, _MESSAGE_CLASSES.get(type(message)) or _class_attributes(type(message)))


def _as_attributes(message: BaseMessage) -> tuple[Any, Any, Any]:
    return message.type, message.content, message.name


def _message_view(message: BaseMessage, declared: tuple[bool, bool, bool]) -> dict[str, Any]:
    # Every message of every run's inputs and outputs comes here: the common case (text content, ``tool_calls`` or
    # ``tool_call_id`` a field or absent) makes no call beyond this frame.
    fields = message.__dict__
    if declared[2]:
        try:
            kind, content, name = fields["type"], fields["content"], fields["name"]
        except KeyError:  # one not set (a message built without validation)
            kind, content, name = _as_attributes(message)
    else:  # its class shadows one of them
        kind, content, name = _as_attributes(message)
    if type(content) is not str or len(content) > _MAX_TEXT:
        content = plain(content)
    view: dict[str, Any] = {"role": _ROLES.get(kind, kind), "content": content}
    extra = message.__pydantic_extra__  # LangChain's messages take extra fields
    calls = fields.get("tool_calls", _MISSING)  # a field's value
    if calls is _MISSING:
        calls = _beyond_fields(message, extra, "tool_calls", declared[0]) if declared[0] or extra else None
    if calls:
        view["tool_calls"] = [
            {"id": c.get("id"), "name": c.get("name"), "arguments": plain(c.get("args"))} for c in calls
        ]
    call_id = fields.get("tool_call_id", _MISSING)
    if call_id is _MISSING:
        call_id = _beyond_fields(message, extra, "tool_call_id", declared[1]) if declared[1] or extra else None
    if call_id:
        view["tool_call_id"] = call_id
    if name:
        view["name"] = name
    return view


_SCALARS = frozenset({type(None), bool, int, float})


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON-ready data for events (messages as views, long strings and lists cut)."""
    # The exact built-in types first, asked by identity: a graph's state is mostly dicts, lists and strings, read
    # at every run's start and end, where each ``isinstance`` against an ABC or a union runs the slow protocol.
    kind = type(value)
    if kind is str:
        return value if len(value) <= _MAX_TEXT else _cut(value)
    if kind in _SCALARS:
        return value
    if depth < _MAX_DEPTH:
        if kind is dict:
            items = list(value.items())  # one C call: a dict another thread changes meanwhile is read as it was
            return {k if type(k) is str else str(k): plain(v, depth + 1) for k, v in items[:_MAX_ITEMS]}
        if kind is list:
            return [plain(v, depth + 1) for v in value[:_MAX_ITEMS]]
        declared = _MESSAGE_CLASSES.get(kind)  # a message class met before: its ``isinstance`` chain skipped
        if declared is not None:
            return _message_view(value, declared)
    return _plain_other(value, depth)


def _cut(value: str) -> str:
    kept = head(value, _MAX_TEXT)  # no value cut in two: its first half would pass the redaction policy
    return f"{kept}... [{len(value) - len(kept)} more chars]"


def _plain_other(value: Any, depth: int) -> Any:
    """``plain`` for what is not an exact dict, list, string or scalar (subclasses too)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value if len(value) <= _MAX_TEXT else _cut(value)
    if depth >= _MAX_DEPTH:
        return repr(type(value).__name__)
    if isinstance(value, BaseMessage):
        return message_view(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v, depth + 1) for k, v in list(value.items())[:_MAX_ITEMS]}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v, depth + 1) for v in list(value)[:_MAX_ITEMS]]
    if isinstance(value, Serializable) and type(value).is_lc_serializable():
        # LangChain's own serialised form (``dumpd``'s): fields its class declares secret (``lc_secrets``,
        # often plain ``str`` fields) stand as ``{"type": "secret"}`` markers, which a dump would show.
        try:
            return plain(value.to_json(), depth + 1)
        except Exception:
            return repr(type(value).__name__)
    dump = getattr(value, "model_dump", None)  # pydantic models (tool inputs, structured output)
    if callable(dump):
        try:
            return plain(dump(), depth + 1)
        except Exception:
            pass
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # By field, so that a credential field meets the key rule (a repr would carry its value as text).
        return plain({f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, depth + 1)
    return plain(str(value), depth + 1)


def text_of(content: Any) -> str | None:
    """A message's answer text, as LangChain's own ``BaseMessage.text`` reads it: the content itself, or the
    text of a list of content blocks (strings and ``{"type": "text"}`` blocks, joined). Providers that answer in
    blocks (Anthropic, OpenAI's Responses API, Gemini with thoughts) give every answer so: read as a string
    alone, their text was missing from the record (the trajectory's step, the journal, the spans), and a rule
    on ``/response/text`` had nothing to act on. Reasoning and tool blocks are not text."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "".join(parts)


class LangChainCodec:
    """Reads and edits a LangChain model call, named for the provider the model calls.

    ``provider`` is given as the model's LangSmith name (``ls_provider``: ``amazon_bedrock``, ``azure``,
    ``google_genai``, ...) or the conventions' own, and kept as the conventions name it (``aws.bedrock``,
    ``azure.ai.openai``, ``gcp.gemini``; see ``adapters.endpoints``), priced under genai-prices' id for it.
    """

    operation = "chat"

    def __init__(self, provider: str = "langchain") -> None:
        named = endpoints.named(provider)
        self.provider = named.provider
        self.price_provider = named.prices_under
        self.endpoint = named.endpoint

    def decode(self, content: Mapping[str, Any]) -> AnnotatedLLMRequest:
        messages = content.get("messages") or []
        system = None
        views = [message_view(m) for m in messages]
        if views and views[0]["role"] == "system":
            system = views[0]["content"]
        params = {k: v for k, v in content.items() if k in NEUTRAL_PARAMS}
        others = {k: plain(v) for k, v in content.items() if k not in NEUTRAL_PARAMS and k not in _NOT_PARAMS}
        tools = content.get("tools")
        return AnnotatedLLMRequest(
            model=content.get("model") if isinstance(content.get("model"), str) else None,
            messages=views,
            system=system,
            params=params,
            provider_params=others,
            tools=plain(tools) if tools is not None else None,
            tool_choice=plain(content.get("tool_choice")),
            provider=self.provider,
            operation=self.operation,
        )

    def apply(self, content: Mapping[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        out = dict(content)
        if "messages" in changes:
            out["messages"] = convert_to_messages(
                [m if isinstance(m, BaseMessage) else _message_input(m) for m in changes["messages"]]
            )
        for key in ("params", "provider_params"):
            for name, value in (changes.get(key) or {}).items():
                if value is REMOVED:
                    out.pop(name, None)
                else:
                    out[name] = value
        if "tool_choice" in changes:
            out["tool_choice"] = changes["tool_choice"]
        return out

    def annotate_response(self, response: Any) -> AnnotatedLLMResponse:
        """A ``ChatResult`` (what a chat model's generate step returns) or an ``AIMessage``."""
        generations = getattr(response, "generations", None)
        message = generations[0].message if generations else response
        meta = getattr(message, "response_metadata", None) or {}
        llm_output = getattr(response, "llm_output", None) or {}
        finish = meta.get("finish_reason") or meta.get("stop_reason")
        calls = getattr(message, "tool_calls", None) or []
        content = getattr(message, "content", None)
        return AnnotatedLLMResponse(
            model=meta.get("model_name") or meta.get("model") or llm_output.get("model_name"),
            id=meta.get("id") or getattr(message, "id", None),
            finish_reasons=[finish] if isinstance(finish, str) else [],
            usage=usage_of(getattr(message, "usage_metadata", None), self.provider in CACHE_BESIDE_INPUT),
            output_text=text_of(content),
            tool_calls=[{"id": c.get("id"), "name": c.get("name"), "arguments": plain(c.get("args"))} for c in calls],
        )

    def accumulator(self) -> CountingAccumulator:
        return CountingAccumulator()


_WRITES_BY_TTL = ("ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens")


def usage_of(usage: Any, cache_beside_input: bool = False) -> TokenUsage:
    """LangChain's ``usage_metadata`` (input/output tokens and their details) as token usage.

    LangChain counts the whole prompt as ``input_tokens``, cache reads and writes included, for every
    provider. ``cache_beside_input``: the call is named for a provider whose records count its input apart
    from the cache (Anthropic's, as its API does: ``cost.pricing.CACHE_BESIDE_INPUT``), so the cache is
    taken out again, or prices and ``gen_ai.usage.input_tokens`` would count it twice. Cache writes split
    by how long they are kept (langchain-anthropic then zeroes ``cache_creation``) are added up. Audio is
    counted among the input and output details as the providers count it.
    """
    if not isinstance(usage, Mapping):
        return TokenUsage()
    inputs = usage.get("input_token_details") or {}
    outputs = usage.get("output_token_details") or {}
    read = _count(inputs.get("cache_read"))
    by_ttl = [n for key in _WRITES_BY_TTL if (n := _count(inputs.get(key))) is not None]
    written = _count(inputs.get("cache_creation")) or (sum(by_ttl) if by_ttl else None)
    total = _count(usage.get("input_tokens"))
    if cache_beside_input and total is not None and total >= (read or 0) + (written or 0):
        total -= (read or 0) + (written or 0)
    return TokenUsage(
        input_tokens=total,
        output_tokens=_count(usage.get("output_tokens")),
        cache_read_tokens=read,
        cache_creation_tokens=written,
        reasoning_tokens=_count(outputs.get("reasoning")),
        cache_creation_1h_tokens=_count(inputs.get("ephemeral_1h_input_tokens")),
        # Priced at their own rates, as the SDK call's are: left out, a spoken answer cost what its text would.
        input_audio_tokens=_count(inputs.get("audio")),
        output_audio_tokens=_count(outputs.get("audio")),
    )


def _count(value: Any) -> int | None:
    return value if type(value) is int else None


def _message_input(view: Any) -> Any:
    """A neutral message view back as what ``convert_to_messages`` takes."""
    if not isinstance(view, Mapping):
        return view
    out = {"role": view.get("role", "user"), "content": view.get("content", "")}
    for key in ("tool_call_id", "name"):
        if view.get(key):
            out[key] = view[key]
    if view.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c.get("id"), "name": c.get("name"), "args": c.get("arguments") or {}} for c in view["tool_calls"]
        ]
    return out


# By provider name; callers on every model call look here first, ``codec_for`` only for a name not met yet.
CODECS: dict[str, LangChainCodec] = {}


def codec_for(provider: str) -> LangChainCodec:
    """The codec of a provider name (codecs hold nothing else, so one per name serves every call)."""
    codec = CODECS.get(provider)
    if codec is None:
        codec = CODECS.setdefault(provider, LangChainCodec(provider))
    return codec
