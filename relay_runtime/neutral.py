"""The provider-neutral request vocabulary, and how each supported API spells it.

``AnnotatedLLMRequest.params`` holds only the names in ``NEUTRAL_PARAMS``; each
codec turns them into its SDK's keyword arguments with its ``ParamSpelling``
on the way out (``max_tokens`` is ``max_completion_tokens`` for OpenAI chat,
``max_output_tokens`` for the Responses API, ``max_tokens`` for Anthropic).
A neutral param an API has no spelling for is refused before anything is sent.
SDK arguments with no neutral name travel in ``provider_params`` under the
SDK's own name. Plain data, no SDK import: cassettes and tests read it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

NEUTRAL_PARAMS: Mapping[str, str] = MappingProxyType(
    {
        "temperature": "sampling temperature",
        "top_p": "nucleus sampling mass",
        "top_k": "sample from the k most likely tokens only",
        "max_tokens": "upper bound on generated tokens (reasoning included where the API counts it)",
        "stop": "stop sequences: a string or a list of strings",
        "seed": "seed for best-effort deterministic sampling",
        "frequency_penalty": "penalty on tokens by how often they appeared",
        "presence_penalty": "penalty on tokens that appeared at all",
        "n": "number of choices to generate",
        "parallel_tool_calls": "whether the model may call several tools in one turn",
    }
)


# Provider params (under the SDK's own names) that carry what is sent to the model or who it is for, not
# how it is asked: text, output schemas, documents, template variables, end users' identifiers, remote
# servers' addresses and tokens. ``None``: the whole value; a tuple: only those keys of a dict value (a
# Responses ``prompt`` names its template by id and version, which stay; its ``variables`` do not). They
# are params to the request (intercepts edit them, redaction rules reach them under ``/request/params``),
# but no record shows them as its settings (``AnnotatedLLMRequest.settings``): OpenInference's
# ``llm.invocation_parameters`` goes out whatever the content capture says. One table for every API:
# the names are the SDKs' own and mean content wherever they occur (LangChain passes them on as given).
CONTENT_PARAMS: Mapping[str, tuple[str, ...] | None] = MappingProxyType(
    {
        # OpenAI chat completions and Responses (and the APIs that borrow their shape)
        "prediction": None,  # the predicted answer's text
        "functions": None,  # the deprecated spelling of tools: definitions with descriptions
        "response_format": ("json_schema",),  # a JSON schema; its type ("json_object") stays
        "text": ("format",),  # Responses: the output's JSON schema; its verbosity stays
        "prompt": ("variables",),  # Responses: a stored prompt's variables
        "web_search_options": ("user_location",),
        "user": None,  # an end user's identifier
        "safety_identifier": None,
        # Anthropic messages
        "metadata": ("user_id",),  # an end user's identifier; OpenAI's own metadata keys stay
        "mcp_servers": None,  # remote servers' URLs and authorization tokens
        # Google Gen AI
        "response_schema": None,
        "response_json_schema": None,
        "title": None,  # embed_content: the document's title
        # Amazon Bedrock: Converse's prompt template variables, invoke_model bodies of other families
        "promptVariables": None,
        "documents": None,
        "preamble": None,  # Cohere's system prompt
        "tool_results": None,
        "tools": None,
        "toolConfig": None,
        "images": None,  # Llama vision's images (base64), beside the prompt that names them
        # LangChain: with_structured_output's schema, passed to the model as an invocation kwarg
        "ls_structured_output_format": None,
    }
)


def settings(params: Mapping[str, Any], provider_params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` and ``provider_params`` as one dict (the neutral names win), without their content
    (``CONTENT_PARAMS``): what a record may show of a request whatever its content capture says."""
    out: dict[str, Any] = {}
    for key, value in provider_params.items():
        if key not in CONTENT_PARAMS:
            out[key] = value
            continue
        parts = CONTENT_PARAMS[key]
        if parts is not None and isinstance(value, Mapping):
            kept = {k: v for k, v in value.items() if k not in parts}
            if kept:
                out[key] = kept
    out.update(params)
    return out


class UnsupportedParamError(ValueError):
    """A neutral param the target API cannot take; raised before the request is sent."""

    def __init__(self, param: str, api: str, supported: list[str]) -> None:
        self.param = param
        self.api = api
        super().__init__(
            f"the {api} API has no {param!r} parameter; neutral params it takes: {', '.join(supported)}"
        )


@dataclass(frozen=True)
class ParamSpelling:
    """One API's names for the neutral params."""

    api: str  # as error messages name it, e.g. "OpenAI chat completions"
    names: Mapping[str, str]  # neutral name -> the SDK kwarg
    # Other SDK kwargs that mean the same neutral param (read on the way in, removed on the way out).
    aliases: Mapping[str, str] = field(default_factory=dict)
    list_only: frozenset[str] = frozenset()  # neutral params the API takes only as a list

    def __post_init__(self) -> None:
        unknown = (set(self.names) | set(self.aliases.values())) - set(NEUTRAL_PARAMS)
        if unknown:
            raise ValueError(f"{self.api}: not neutral params: {sorted(unknown)}")
        sdk_names = {sdk: neutral for neutral, sdk in self.names.items()}
        object.__setattr__(self, "by_sdk", MappingProxyType({**sdk_names, **self.aliases}))

    # SDK kwarg -> its neutral name, for every spelling this API accepts (set in __post_init__).
    by_sdk: Mapping[str, str] = field(init=False, repr=False, compare=False)

    def neutral_of(self, sdk_key: str) -> str | None:
        """The neutral name of an SDK kwarg, or None when it has none."""
        return self.by_sdk.get(sdk_key)

    def sdk_keys(self, neutral: str) -> tuple[str, ...]:
        """Every SDK kwarg that spells ``neutral`` here, the primary one first."""
        primary = self.names.get(neutral)
        extra = tuple(sdk for sdk, name in self.aliases.items() if name == neutral)
        return (primary, *extra) if primary is not None else extra

    def to_sdk(self, neutral: str, value: Any) -> tuple[str, Any]:
        """``(kwarg, value)`` for this API; a clear error for a name it cannot take."""
        if neutral not in NEUTRAL_PARAMS:
            raise ValueError(
                f"{neutral!r} is not a neutral param (known: {', '.join(NEUTRAL_PARAMS)}); "
                f"put SDK-specific arguments in annotated.provider_params under the SDK's own name"
            )
        sdk_key = self.names.get(neutral)
        if sdk_key is None:
            raise UnsupportedParamError(neutral, self.api, list(self.names))
        if neutral in self.list_only and isinstance(value, str):
            value = [value]
        return sdk_key, value


OPENAI_CHAT = ParamSpelling(
    "OpenAI chat completions",
    {
        "temperature": "temperature",
        "top_p": "top_p",
        "max_tokens": "max_completion_tokens",
        "stop": "stop",
        "seed": "seed",
        "frequency_penalty": "frequency_penalty",
        "presence_penalty": "presence_penalty",
        "n": "n",
        "parallel_tool_calls": "parallel_tool_calls",
    },
    aliases={"max_tokens": "max_tokens"},  # the deprecated spelling, still accepted by the API
)

OPENAI_RESPONSES = ParamSpelling(
    "OpenAI responses",
    {
        "temperature": "temperature",
        "top_p": "top_p",
        "max_tokens": "max_output_tokens",
        "parallel_tool_calls": "parallel_tool_calls",
    },
)

# Anthropic 2.x's Messages.create() takes no sampling parameters (temperature, top_p, top_k).
ANTHROPIC_MESSAGES = ParamSpelling(
    "Anthropic messages",
    {
        "max_tokens": "max_tokens",
        "stop": "stop_sequences",
    },
    list_only=frozenset({"stop"}),
)

# Embeddings take none of the neutral params (no sampling, no output limit).
OPENAI_EMBEDDINGS = ParamSpelling("OpenAI embeddings", {})

# (provider, operation) of an AnnotatedLLMRequest -> its API's spelling.
SPELLINGS: Mapping[tuple[str, str], ParamSpelling] = MappingProxyType(
    {
        ("openai", "chat"): OPENAI_CHAT,
        ("openai", "responses"): OPENAI_RESPONSES,
        ("openai", "embeddings"): OPENAI_EMBEDDINGS,
        ("anthropic", "chat"): ANTHROPIC_MESSAGES,
    }
)


# Providers reached through another's API (Groq through OpenAI's chat API): registered by the
# adapters as they name a call for its endpoint. The API decides which params a request takes.
_COMPATIBLE: dict[tuple[str, str], ParamSpelling] = {}


def register_compatible(provider: str, operation: str, spelling: ParamSpelling) -> None:
    """Say that ``provider``'s ``operation`` is spelled as ``spelling`` (its API is another's)."""
    if (provider, operation) not in SPELLINGS:
        _COMPATIBLE[(provider, operation)] = spelling


def accepts(provider: str | None, operation: str, param: str) -> bool:
    """Whether the API of ``(provider, operation)`` takes the neutral ``param``.

    An API this module does not know (a custom codec) is assumed to take every neutral param.
    """
    if param not in NEUTRAL_PARAMS:
        return False
    key = (provider or "", operation)
    spelling = SPELLINGS.get(key) or _COMPATIBLE.get(key)
    return spelling is None or param in spelling.names
