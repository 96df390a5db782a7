"""Which provider an OpenAI-compatible client talks to: by the caller's word, the route, or its base URL.

The openai SDK reaches many providers. A call is named for the one it reaches, as the GenAI
semantic conventions spell it (``gen_ai.provider.name``): Azure OpenAI, Azure AI Inference, Groq,
Mistral, DeepSeek, xAI, Perplexity and the Gemini API have names of their own there, as do the clouds the anthropic
SDK's ``AnthropicBedrock`` and ``AnthropicVertex`` clients call (``aws.bedrock``, ``gcp.vertex_ai``;
the anthropic codec then counts the whole prompt as the input). Endpoints the conventions do not list
(OpenRouter, Together, Fireworks, Ollama, vLLM, LM Studio) stay ``openai``, the API they speak,
and say which they are as ``relay.provider.endpoint``.

Precedence: ``instrument(client, provider=...)``, then ``set_route``, then the base URL; a
host the table does not know keeps the codec's own provider.

Prices are looked up under genai-prices' provider ids (``mistral_ai`` is ``mistral`` there,
``aws.bedrock`` is ``aws``); an endpoint genai-prices prices on its own (OpenRouter, Together,
Fireworks) is priced as itself, a local server (Ollama, vLLM, LM Studio) under its own name,
which no price list has.
"""

from __future__ import annotations

import copy
import ipaddress
import re
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from relay_runtime import neutral
from relay_runtime.cost.providers import PRICE_IDS
from relay_runtime.types import AnnotatedLLMRequest

if TYPE_CHECKING:
    from .dispatch import Api

OPENAI = "openai"
AZURE_OPENAI = "azure.ai.openai"
AZURE_INFERENCE = "azure.ai.inference"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """What a call is named: its provider (semconv), the compatible endpoint if any, its price id."""

    provider: str
    endpoint: str | None = None
    price_provider: str | None = None  # None: the provider's own name

    @property
    def prices_under(self) -> str:
        return self.price_provider or self.provider


def _named(provider: str) -> Endpoint:
    return Endpoint(provider, None, PRICE_IDS.get(provider))


def _compatible(label: str) -> Endpoint:
    # Speaks OpenAI's API, priced as itself (genai-prices knows the hosted ones by these ids).
    return Endpoint(OPENAI, label, label)


# Hosts, exactly.
HOSTS: Mapping[str, Endpoint] = {
    "api.openai.com": _named(OPENAI),
    "api.groq.com": _named("groq"),
    "api.mistral.ai": _named("mistral_ai"),
    "api.deepseek.com": _named("deepseek"),
    "api.x.ai": _named("x_ai"),
    "api.perplexity.ai": _named("perplexity"),
    "generativelanguage.googleapis.com": _named("gcp.gemini"),  # the Gemini API's OpenAI-compatible endpoint
    "openrouter.ai": _compatible("openrouter"),
    "api.together.xyz": _compatible("together"),
    "api.together.ai": _compatible("together"),
    "api.fireworks.ai": _compatible("fireworks"),
}

# Host suffixes: a resource's own subdomain (``myres.openai.azure.com``). Azure's sovereign clouds give their
# resources the same names under their own domains: ``azure.us`` (Azure Government), ``azure.cn`` (China).
HOST_SUFFIXES: tuple[tuple[str, Endpoint], ...] = (
    (".openai.azure.com", _named(AZURE_OPENAI)),
    (".openai.azure.us", _named(AZURE_OPENAI)),
    (".openai.azure.cn", _named(AZURE_OPENAI)),
    (".cognitiveservices.azure.com", _named(AZURE_OPENAI)),
    (".cognitiveservices.azure.us", _named(AZURE_OPENAI)),
    (".cognitiveservices.azure.cn", _named(AZURE_OPENAI)),
    (".azure-api.net", _named(AZURE_OPENAI)),  # Azure API Management in front of Azure OpenAI
    (".models.ai.azure.com", _named(AZURE_INFERENCE)),  # a serverless deployment's own host
    (".inference.ai.azure.com", _named(AZURE_INFERENCE)),
)
# Azure AI Foundry serves both APIs on one host: Azure OpenAI under /openai, model inference elsewhere.
FOUNDRY_SUFFIX = ".services.ai.azure.com"

# The clouds' own hosts, a region in them: the anthropic SDK's ``AnthropicBedrock`` and ``AnthropicVertex``
# clients call these, as does the openai SDK pointed at the clouds' OpenAI-compatible APIs.
CLOUD_HOSTS: tuple[tuple[re.Pattern[str], Endpoint], ...] = (
    (re.compile(r"bedrock-runtime(?:-fips)?\.[a-z0-9-]+\.amazonaws\.com"), _named("aws.bedrock")),
    (re.compile(r"(?:[a-z0-9-]+-)?aiplatform\.googleapis\.com"), _named("gcp.vertex_ai")),
)


# Local servers, known by their default port on a loopback host; on another port, name them
# with ``instrument(client, provider="vllm")``.
LOOPBACK_HOSTS = frozenset({"localhost", "0.0.0.0"})
LOCAL_PORTS: Mapping[int, Endpoint] = {
    11434: _compatible("ollama"),
    8000: _compatible("vllm"),
    1234: _compatible("lmstudio"),
}

# Names a caller may give (``provider=`` or ``set_route``) beyond the conventions' own.
ALIASES: Mapping[str, Endpoint] = {
    "azure": _named(AZURE_OPENAI),
    "azure_openai": _named(AZURE_OPENAI),
    "mistral": _named("mistral_ai"),
    "xai": _named("x_ai"),
    "x-ai": _named("x_ai"),
    "openrouter": _compatible("openrouter"),
    "together": _compatible("together"),
    "fireworks": _compatible("fireworks"),
    "ollama": _compatible("ollama"),
    "vllm": _compatible("vllm"),
    "lmstudio": _compatible("lmstudio"),
    "lm_studio": _compatible("lmstudio"),
    # LangChain's names for providers (its chat models' ``ls_provider``), where they are not the conventions'.
    "amazon_bedrock": _named("aws.bedrock"),
    "google_vertexai": _named("gcp.vertex_ai"),
    "google_anthropic_vertex": _named("gcp.vertex_ai"),
    "google_genai": _named("gcp.gemini"),
}


# The conventions' names this table gives (and the few more it prices): the conventions spell them in lower
# case, so ``provider="Groq"`` is ``groq``, not a provider of its own no price list or dashboard knows.
_CONVENTION_NAMES = frozenset({OPENAI, "anthropic", AZURE_INFERENCE, *(e.provider for e in HOSTS.values()), *PRICE_IDS})


def named(name: str) -> Endpoint:
    """The endpoint a caller's provider name stands for: an alias, an endpoint label, a conventions' name
    in any case, else the name as given."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"provider must be a non-empty string naming the provider (e.g. 'groq'), got {name!r}")
    lowered = name.lower()
    found = ALIASES.get(name) or ALIASES.get(lowered)
    if found is not None:
        return found
    return _named(lowered if lowered in _CONVENTION_NAMES else name)


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def of_url(host: str | None, port: int | None, path: str = "") -> Endpoint | None:
    """The endpoint a base URL's host (and port, and on Azure AI Foundry its path) names, or None for a
    host the table does not know."""
    if not host:
        return None
    # A fully qualified name's trailing dot names the same host.
    host = host.lower().rstrip(".")
    found = HOSTS.get(host)
    if found is not None:
        return found
    for suffix, endpoint in HOST_SUFFIXES:
        if host.endswith(suffix):
            return endpoint
    if host.endswith(FOUNDRY_SUFFIX):
        return _named(AZURE_OPENAI if path.lower().startswith("/openai") else AZURE_INFERENCE)
    for pattern, endpoint in CLOUD_HOSTS:
        if pattern.fullmatch(host):
            return endpoint
    if port is not None and _is_loopback(host):
        return LOCAL_PORTS.get(port)
    return None


def _is_azure_client(client: Any) -> bool:
    openai = sys.modules.get("openai")
    return openai is not None and isinstance(client, openai.AzureOpenAI | openai.AsyncAzureOpenAI)


def deployment_of(client: Any) -> str | None:
    """An Azure client's deployment when the client holds it (``azure_deployment=``): the request's model."""
    deployment = getattr(client, "_azure_deployment", None)
    if isinstance(deployment, str) and deployment:
        return deployment
    url = getattr(client, "_base_url", None) or getattr(client, "base_url", None)
    path = str(getattr(url, "path", "") or "")
    _, found, rest = path.partition("/deployments/")
    return rest.split("/", 1)[0] or None if found else None


# The last client type and base URL seen, and what they resolved to (see dispatch.server_address).
_last: tuple[Any, Any, Endpoint | None] = (None, None, None)
_IMMUTABLE_URL_MODULES = frozenset({"httpx", "httpx2"})


def of_client(client: Any) -> Endpoint | None:
    """What the client's class and base URL name, or None (then the codec's own provider stands)."""
    global _last
    url = getattr(client, "_base_url", None) or getattr(client, "base_url", None)
    kind = type(client)
    last_kind, last_url, found = _last
    if url is last_url and kind is last_kind and url is not None:
        return found
    if _is_azure_client(client):
        found = _named(AZURE_OPENAI)
    else:
        port, path = getattr(url, "port", None), getattr(url, "path", "")
        found = of_url(getattr(url, "host", None), port if type(port) is int else None,
                       path if isinstance(path, str) else "")  # fmt: skip
    if type(url).__module__ in _IMMUTABLE_URL_MODULES:
        _last = (kind, url, found)
    return found


# -- codecs named for their endpoint ----------------------------------------------------------

_apis: dict[tuple[str, Endpoint, str | None], Api] = {}
_apis_lock = threading.Lock()


def _with_model(decode: Callable[[Mapping[str, Any]], AnnotatedLLMRequest], model: str) -> Any:
    def decoded(content: Mapping[str, Any]) -> AnnotatedLLMRequest:
        annotated = decode(content)
        annotated.model = model
        return annotated

    return decoded


def api_for(api: Api, endpoint: Endpoint, deployment: str | None) -> Api:
    """``api`` with its codec named for ``endpoint`` (and, on Azure, the deployment as the request's model)."""
    key = (api.mode, endpoint, deployment)
    named_api = _apis.get(key)
    if named_api is not None:
        return named_api
    base = api.codec
    codec: Any = copy.copy(base)
    codec.provider = endpoint.provider
    codec.price_provider = endpoint.prices_under
    codec.endpoint = endpoint.endpoint
    if deployment is not None:
        codec.decode = _with_model(codec.decode, deployment)
    spelling = getattr(base, "spelling", None)
    if isinstance(spelling, neutral.ParamSpelling):
        # Intercepts ask the request which params its API takes: the API is the base codec's.
        neutral.register_compatible(endpoint.provider, base.operation, spelling)
    named_api = replace(api, codec=codec)
    with _apis_lock:
        if len(_apis) < 1024:  # few endpoints per process; past that, made per call
            _apis[key] = named_api
    return named_api
