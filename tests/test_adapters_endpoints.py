"""OpenAI-compatible endpoints named for what they are: by base URL, by route, by the caller's word.

Real openai clients (and Azure's) over the mock transport, spans through a real OTel SDK
pipeline kept in memory, prices from a user mapping and from genai-prices.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
from typing import Any

import openai
import otel_support
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from otel_support import Pipeline

from relay_runtime import (
    AnnotatedLLMRequest,
    LLMRequest,
    LLMRequestInterceptOutcome,
    Recorder,
    adapters,
    auxiliary,
    cost,
    session,
)
from relay_runtime import conventions as cv
from relay_runtime.adapters import endpoints
from relay_runtime.adapters import testing as t
from relay_runtime.cost import PriceCatalog

# (base URL, gen_ai.provider.name, relay.provider.endpoint, server.address)
BASE_URLS = [
    ("https://api.openai.com/v1", "openai", None, "api.openai.com"),
    ("https://api.groq.com/openai/v1", "groq", None, "api.groq.com"),
    ("https://api.mistral.ai/v1", "mistral_ai", None, "api.mistral.ai"),
    ("https://api.deepseek.com", "deepseek", None, "api.deepseek.com"),
    ("https://api.x.ai/v1", "x_ai", None, "api.x.ai"),
    ("https://api.perplexity.ai", "perplexity", None, "api.perplexity.ai"),
    # The Gemini API's OpenAI-compatible endpoint.
    (
        "https://generativelanguage.googleapis.com/v1beta/openai/",
        "gcp.gemini",
        None,
        "generativelanguage.googleapis.com",
    ),
    ("https://my-res.openai.azure.com/openai/v1", "azure.ai.openai", None, "my-res.openai.azure.com"),
    (
        "https://my-res.cognitiveservices.azure.com/openai/v1",
        "azure.ai.openai",
        None,
        "my-res.cognitiveservices.azure.com",
    ),
    # Azure's sovereign clouds: Azure Government and Azure operated by 21Vianet (China).
    ("https://my-res.openai.azure.us/openai/v1", "azure.ai.openai", None, "my-res.openai.azure.us"),
    ("https://my-res.openai.azure.cn/openai/v1", "azure.ai.openai", None, "my-res.openai.azure.cn"),
    (
        "https://my-res.cognitiveservices.azure.us/openai/v1",
        "azure.ai.openai",
        None,
        "my-res.cognitiveservices.azure.us",
    ),
    (
        "https://my-res.cognitiveservices.azure.cn/openai/v1",
        "azure.ai.openai",
        None,
        "my-res.cognitiveservices.azure.cn",
    ),
    ("https://openrouter.ai/api/v1", "openai", "openrouter", "openrouter.ai"),
    ("https://api.together.xyz/v1", "openai", "together", "api.together.xyz"),
    ("https://api.fireworks.ai/inference/v1", "openai", "fireworks", "api.fireworks.ai"),
    ("http://localhost:11434/v1", "openai", "ollama", "localhost:11434"),
    ("http://127.0.0.1:8000/v1", "openai", "vllm", "127.0.0.1:8000"),
    ("http://localhost:1234/v1", "openai", "lmstudio", "localhost:1234"),
    ("http://localhost:9999/v1", "openai", None, "localhost:9999"),  # a loopback port of nobody known
    ("http://gateway.internal/v1", "openai", None, "gateway.internal"),  # a host the table does not know
    # A fully qualified host (its trailing dot) is the same host.
    ("https://api.groq.com./openai/v1", "groq", None, "api.groq.com."),
    ("https://my-res.openai.azure.com./openai/v1", "azure.ai.openai", None, "my-res.openai.azure.com."),
    ("http://localhost.:11434/v1", "openai", "ollama", "localhost.:11434"),
    ("http://[::1]:8000/v1", "openai", "vllm", "::1:8000"),
    # A proxy whose host merely starts with a provider's is not that provider.
    ("https://api.groq.com.evil.example/v1", "openai", None, "api.groq.com.evil.example"),
    # Azure AI Foundry: Azure OpenAI under /openai, the model inference API elsewhere.
    ("https://my-res.services.ai.azure.com/openai/v1", "azure.ai.openai", None, "my-res.services.ai.azure.com"),
    ("https://my-res.services.ai.azure.com/models", "azure.ai.inference", None, "my-res.services.ai.azure.com"),
    (
        "https://llama-xyz.eastus2.models.ai.azure.com/v1",
        "azure.ai.inference",
        None,
        "llama-xyz.eastus2.models.ai.azure.com",
    ),
]


traced = otel_support.traced


def attempt_span(pipeline: Pipeline) -> ReadableSpan:
    found = [s for s in pipeline.finished() if s.attributes and "gen_ai.provider.name" in s.attributes]
    assert len(found) == 1, [s.name for s in pipeline.finished()]
    return found[0]


def chat(script: t.Script, base_url: str, **instrument_kwargs: Any) -> Any:
    client = adapters.instrument(t.openai_client(script, base_url=base_url), **instrument_kwargs)
    return client.chat.completions.create(model="m-1", messages=[{"role": "user", "content": "hi"}])


@pytest.mark.parametrize(("base_url", "provider", "endpoint", "address"), BASE_URLS)
def test_the_base_url_names_the_provider_on_the_span_the_event_and_the_request(
    traced: tuple[Pipeline, Recorder], base_url: str, provider: str, endpoint: str | None, address: str
) -> None:
    pipeline, events = traced
    script = t.Script([t.json_reply(t.chat_completion_body("hello"))])
    assert chat(script, base_url).choices[0].message.content == "hello"
    assert str(script.requests[0].url).startswith(base_url.rstrip("/"))  # sent where the client said
    attrs = attempt_span(pipeline).attributes or {}
    assert attrs["gen_ai.provider.name"] == provider
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs.get("relay.provider.endpoint") == endpoint
    host, _, port = address.rpartition(":") if re.search(r":\d+$", address) else (address, "", "")
    assert attrs["server.address"] == host
    assert attrs.get("server.port") == (int(port) if port else None)
    (start,) = events.starts(relay_kind=cv.ATTEMPT)
    assert start.provider == provider
    assert start.annotated_request.provider == provider  # the OTel exporter reads this first: they agree
    assert (start.metadata or {}).get(cv.PROVIDER_ENDPOINT) == endpoint


def test_an_azure_client_is_azure_openai_and_its_deployment_is_the_request_model(
    traced: tuple[Pipeline, Recorder],
) -> None:
    pipeline, events = traced
    script = t.Script([t.json_reply(t.chat_completion_body("hi", model="gpt-4o-2024-08-06"))] * 2)
    # A proxy in front of Azure (a host the table does not know): the client's class names it.
    client = openai.AzureOpenAI(
        api_key=t.TEST_KEY, api_version="2024-10-21", azure_endpoint="https://gw.example.com",
        azure_deployment="prod-4o", http_client=t.httpx2.Client(transport=script.transport()),
    )  # fmt: skip
    adapters.instrument(client)
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert "/openai/deployments/prod-4o/chat/completions" in str(script.requests[0].url)
    attrs = attempt_span(pipeline).attributes or {}
    assert attrs["gen_ai.provider.name"] == "azure.ai.openai"
    assert attrs["gen_ai.request.model"] == "prod-4o"
    assert attrs["gen_ai.response.model"] == "gpt-4o-2024-08-06"
    start = events.starts(relay_kind=cv.ATTEMPT)[0]
    assert start.model_name == "prod-4o" and start.annotated_request.model == "prod-4o"
    # Without azure_deployment the model argument is the deployment, in the URL and on the record.
    plain = adapters.instrument(openai.AzureOpenAI(
        api_key=t.TEST_KEY, api_version="2024-10-21", azure_endpoint="https://res.openai.azure.com",
        http_client=t.httpx2.Client(transport=script.transport()),
    ))  # fmt: skip
    plain.chat.completions.create(model="dev-mini", messages=[{"role": "user", "content": "hi"}])
    assert "/openai/deployments/dev-mini/chat/completions" in str(script.requests[1].url)
    second = events.starts(relay_kind=cv.ATTEMPT)[1]
    assert second.provider == "azure.ai.openai" and second.model_name == "dev-mini"
    assert second.annotated_request.model == "dev-mini"


@pytest.mark.parametrize("host", ["gov-res.openai.azure.us", "cn-res.openai.azure.cn", "res.openai.azure.com"])
def test_a_plain_client_on_an_azure_deployment_url_records_the_deployment_as_the_request_model(
    traced: tuple[Pipeline, Recorder], host: str
) -> None:
    pipeline, events = traced
    script = t.Script([t.json_reply(t.chat_completion_body("hi", model="gpt-4o-2024-08-06"))])
    chat(script, f"https://{host}/openai/deployments/prod-4o")
    assert str(script.requests[0].url).startswith(f"https://{host}/openai/deployments/prod-4o/chat/completions")
    attrs = attempt_span(pipeline).attributes or {}
    assert attrs["gen_ai.provider.name"] == "azure.ai.openai"
    assert attrs["gen_ai.request.model"] == "prod-4o"  # the deployment, not the model argument "m-1"
    (start,) = events.starts(relay_kind=cv.ATTEMPT)
    assert start.model_name == "prod-4o" and start.annotated_request.model == "prod-4o"


def test_precedence_is_the_callers_word_then_the_route_then_the_base_url(traced: tuple[Pipeline, Recorder]) -> None:
    _, events = traced
    groq = "https://api.groq.com/openai/v1"
    script = t.Script([t.json_reply(t.chat_completion_body("x"))] * 4)
    chat(script, groq)
    chat(script, groq, provider="deepseek")

    def routed() -> None:  # in a context of its own: a route set here stays here
        auxiliary.set_route("mistral", "m-1", "chat_completions")
        chat(script, groq)  # the route over the base URL
        chat(script, groq, provider="vllm")  # the caller's word over the route

    contextvars.copy_context().run(routed)
    starts = events.starts(relay_kind=cv.ATTEMPT)
    assert [s.annotated_request.provider for s in starts] == ["groq", "deepseek", "mistral_ai", "openai"]
    assert [(s.metadata or {}).get(cv.PROVIDER_ENDPOINT) for s in starts] == [None, None, None, "vllm"]
    # The attempt keeps the route's own name; the request says what the conventions call it.
    assert [s.provider for s in starts] == ["groq", "deepseek", "mistral", "openai"]


def test_an_async_client_a_stream_and_a_derived_client_keep_the_name(traced: tuple[Pipeline, Recorder]) -> None:
    pipeline, events = traced
    script = t.Script([
        t.sse_reply(t.openai_chat_sse(t.chat_chunks(["he", "llo"], usage=t.chat_usage()))),
        t.sse_reply(t.openai_chat_sse(t.chat_chunks(["no usage asked"]))),
        t.json_reply(t.chat_completion_body("derived")),
    ])  # fmt: skip
    aclient = adapters.instrument(t.async_openai_client(script, base_url="http://localhost:9999/v1"), provider="groq")

    async def run() -> list[str]:
        texts = []
        for options in ({"stream_options": {"include_usage": True}}, {}):
            stream = await aclient.chat.completions.create(
                model="m-1", messages=[{"role": "user", "content": "hi"}], stream=True, **options
            )
            texts.append("".join([c.choices[0].delta.content or "" async for c in stream if c.choices]))
        derived = aclient.with_options(timeout=5)
        reply = await derived.chat.completions.create(model="m-1", messages=[{"role": "user", "content": "hi"}])
        texts.append(reply.choices[0].message.content)
        return texts

    assert asyncio.run(run()) == ["hello", "no usage asked", "derived"]
    ends = events.ends(relay_kind=cv.ATTEMPT)
    assert [e.provider for e in ends] == ["groq"] * 3
    assert [e.outcome for e in ends] == ["success"] * 3
    assert all(e.annotated_request.provider == "groq" for e in events.starts(relay_kind=cv.ATTEMPT))
    spans = [s for s in pipeline.finished() if s.attributes and "gen_ai.provider.name" in s.attributes]
    assert [(s.attributes or {})["gen_ai.provider.name"] for s in spans] == ["groq"] * 3
    assert (spans[0].attributes or {})["gen_ai.usage.output_tokens"] == 5


def test_intercepts_see_the_apis_params_for_a_compatible_provider(relay_turn: Any, relay_events: Recorder) -> None:
    relay, _turn = relay_turn
    seen: list[tuple[str | None, bool, bool]] = []

    def cooler(_name: str, request: LLMRequest, req: AnnotatedLLMRequest) -> LLMRequestInterceptOutcome:
        seen.append((req.provider, req.accepts("temperature"), req.accepts("top_k")))
        req.params["temperature"] = 0.1
        return LLMRequestInterceptOutcome(request, req)

    relay.intercepts.register_llm_request("cooler", 1, False, cooler)
    script = t.Script([t.json_reply(t.chat_completion_body("x"))] * 2)
    chat(script, "https://api.mistral.ai/v1")
    assert seen == [("mistral_ai", True, False)]  # OpenAI chat's params: temperature yes, top_k no
    assert script.bodies()[0]["temperature"] == 0.1
    # A route naming a provider whose own API is another (Anthropic's) on an OpenAI client: the
    # request keeps its API's name, so intercepts are not told Anthropic's params.

    def routed() -> None:
        auxiliary.set_route("anthropic", "m-1", "chat_completions")
        chat(script, t.BASE_OPENAI)

    contextvars.copy_context().run(routed)
    assert seen[1] == ("openai", True, False)
    assert relay_events.starts(relay_kind=cv.ATTEMPT)[1].provider == "anthropic"


def test_cost_is_looked_up_under_genai_prices_ids(relay_host: session.Host, relay_turn: Any, relay_events: Recorder):
    prices = {
        "mistral": {"m-1": {"input": 1.0, "output": 2.0}},  # genai-prices' id, not the conventions' mistral_ai
        "openrouter": {"m-1": {"input": 10.0, "output": 20.0}},
        "openai": {"m-1": {"input": 100.0, "output": 200.0}},
    }
    cost.attach(relay_host, PriceCatalog.from_mapping(prices))
    script = t.Script([t.json_reply(t.chat_completion_body("x"))] * 4)  # 12 input, 5 output tokens
    chat(script, "https://api.mistral.ai/v1")
    chat(script, "https://openrouter.ai/api/v1")
    chat(script, "https://api.openai.com/v1")
    chat(script, "http://localhost:11434/v1")  # a local server: no price list has it
    amounts = [e.cost.amount for e in relay_events.ends(relay_kind=cv.ATTEMPT)]
    assert amounts[:3] == [pytest.approx(22e-6), pytest.approx(220e-6), pytest.approx(2200e-6)]
    assert amounts[3] is None


def test_genai_prices_prices_the_named_providers_models(relay_host: session.Host, relay_turn: Any, relay_events):
    cost.attach(relay_host, PriceCatalog.default())
    models = [
        ("https://api.groq.com/openai/v1", "llama-3.3-70b-versatile"),
        ("https://api.mistral.ai/v1", "mistral-small-latest"),
        ("https://api.x.ai/v1", "grok-3"),
        ("https://res.openai.azure.com/openai/v1", "gpt-4o"),
        ("https://generativelanguage.googleapis.com/v1beta/openai/", "gemini-2.5-flash"),
    ]
    script = t.Script([t.json_reply(t.chat_completion_body("x", model=m)) for _, m in models])
    for base_url, model in models:
        client = adapters.instrument(t.openai_client(script, base_url=base_url))
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    ends = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert [e.cost.provider for e in ends] == ["groq", "mistral", "x-ai", "azure", "google"]
    assert all(e.cost.amount and e.cost.amount > 0 for e in ends), [e.cost for e in ends]


def test_bad_provider_names_are_refused_naming_the_argument() -> None:
    client = t.openai_client(t.Script())
    with pytest.raises(ValueError, match="provider must be a non-empty string"):
        adapters.instrument(client, provider="  ")
    with pytest.raises(TypeError, match="pass the client too"):
        adapters.instrument(provider="groq")
    assert not adapters.instrument.__module__.endswith("dispatch")
    assert endpoints.named("Mistral") == endpoints.named("mistral_ai")
    assert endpoints.named("ibm.watsonx.ai").provider == "ibm.watsonx.ai"  # a convention name we do not list


def test_instrumenting_again_with_another_provider_fails_instead_of_being_ignored(relay_turn, relay_events) -> None:
    script = t.Script([t.json_reply(t.chat_completion_body("x"))])
    client = adapters.instrument(t.openai_client(script), provider="groq")
    assert adapters.instrument(client, provider="groq") is client  # the same name: idempotent
    with pytest.raises(ValueError, match=r"instrumented already \(provider groq\); uninstrument\(client\)"):
        adapters.instrument(client)
    adapters.uninstrument(client)
    adapters.instrument(client, provider="vllm")
    client.chat.completions.create(model="m-1", messages=[])
    (start,) = relay_events.starts(relay_kind=cv.ATTEMPT)
    assert (start.metadata or {})[cv.PROVIDER_ENDPOINT] == "vllm"


@pytest.mark.parametrize(("given", "provider"), [("Groq", "groq"), ("OpenAI", "openai"), ("DeepSeek", "deepseek"),
                                                 ("AZURE.AI.OPENAI", "azure.ai.openai"), ("X_AI", "x_ai")])  # fmt: skip
def test_a_conventions_name_given_in_another_case_is_that_name_and_priced_under_it(
    traced: tuple[Pipeline, Recorder], relay_host: session.Host, given: str, provider: str
) -> None:
    pipeline, events = traced
    # A user mapping keyed as genai-prices keys its providers: lower case.
    price_id = {"azure.ai.openai": "azure", "x_ai": "x-ai"}.get(provider, provider)
    cost.attach(relay_host, PriceCatalog.from_mapping({price_id: {"m-1": {"input": 1.0, "output": 2.0}}}))
    chat(t.Script([t.json_reply(t.chat_completion_body("x"))]), "http://gateway.internal/v1", provider=given)
    assert (attempt_span(pipeline).attributes or {})["gen_ai.provider.name"] == provider
    (end,) = events.ends(relay_kind=cv.ATTEMPT)
    assert end.provider == provider
    assert end.cost.amount == pytest.approx(22e-6)  # 12 input, 5 output tokens
