"""LangChain chat models recorded as the provider they call, with the provider's own token counts.

A chat model names its provider in LangChain's words (``ls_provider``: ``amazon_bedrock``, ``google_genai``,
``xai``, ...), and its ``usage_metadata`` counts the whole prompt as ``input_tokens``, cache reads and
writes included, whatever the provider. Recorded as they were, a Bedrock model's calls went out as
``gen_ai.provider.name`` ``amazon_bedrock`` and found no price (budgets never counted them), and
``ChatAnthropic``'s cache reads and writes were counted twice, in ``gen_ai.usage.input_tokens`` and in the
price: the records of an ``anthropic`` call count its input apart from the cache, as Anthropic's API does.

``ChatAnthropic`` over a scripted Anthropic client (not instrumented: the middleware's attempt, or the
callback handler's, is the only record of each call); a small chat model standing for the integrations
not installed here (langchain-aws, langchain-google-*), naming its provider as they do.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from relay_runtime import Recorder, cost
from relay_runtime.adapters import testing as t
from relay_runtime.cost import PriceCatalog
from tests import framework_support
from tests.framework_support import attempts, need

agents_mod = need("langchain.agents")
chat_models = need("langchain_core.language_models.chat_models")
messages_mod = need("langchain_core.messages")
outputs_mod = need("langchain_core.outputs")
langchain_anthropic = need("langchain_anthropic")

from relay_runtime.integrations.langchain import RelayCallbackHandler, RelayMiddleware  # noqa: E402

otel_spans = framework_support.otel_spans
HOW = pytest.mark.parametrize("how", ["middleware", "callback-handler"])
# Anthropic's count: 100 fresh input tokens beside 400 read from the cache and 50 written to it
# (30 kept five minutes, 20 kept an hour).
USAGE = {
    **t.anthropic_usage(100, 20, cache_read=400, cache_creation=50),
    "cache_creation": {"ephemeral_5m_input_tokens": 30, "ephemeral_1h_input_tokens": 20},
}
RATES = {"input": 1.0, "output": 2.0, "cache_read": 0.1, "cache_write": 1.25, "cache_write_1h": 2.0}


def record(model: Any, how: str) -> Any:
    """One call of ``model``, through an agent under ``RelayMiddleware`` or with the callback handler."""
    if how == "middleware":
        agent = agents_mod.create_agent(model, [], middleware=[RelayMiddleware()], name="helper")
        return agent.invoke({"messages": [{"role": "user", "content": "hi"}]})
    return model.invoke("hi", config={"callbacks": [RelayCallbackHandler()]})


def attempt_span(spans: Any) -> dict[str, Any]:
    (span,) = [s for s in spans.get_finished_spans() if s.attributes and "gen_ai.provider.name" in s.attributes]
    return dict(span.attributes or {})


@HOW
def test_chat_anthropic_with_a_prompt_cache_counts_each_token_once(
    relay_host: Any, relay_turn: Any, relay_events: Recorder, otel_spans: Any, how: str
) -> None:
    cost.attach(relay_host, PriceCatalog.from_mapping({"anthropic": {"claude-test": RATES}}))
    script = t.Script([t.json_reply(t.anthropic_message_body("Hello.", usage=USAGE))])
    model = langchain_anthropic.ChatAnthropic(model="claude-test", api_key=t.TEST_KEY, max_retries=0)
    model.__dict__["_client"] = t.anthropic_client(script, max_retries=0)
    record(model, how)
    (end,) = attempts(relay_events)
    usage = end.annotated_response.usage
    assert end.provider == "anthropic"
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_creation_tokens) == (100, 400, 50)
    assert usage.cache_creation_1h_tokens == 20
    attributes = attempt_span(otel_spans)
    assert attributes["gen_ai.usage.input_tokens"] == 550  # every input token once, as the conventions count
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 400
    # Priced alike: the middleware's managed attempt, the handler's observed one.
    expected = (100 * 1.0 + 400 * 0.1 + 30 * 1.25 + 20 * 2.0 + 20 * 2.0) * 1e-6
    assert end.cost.amount == pytest.approx(expected)


class NamedModel(chat_models.BaseChatModel):
    """A chat model naming its provider in LangChain's words, as the integrations not installed here do."""

    ls_provider: ClassVar[str] = "langchain"
    model: str = "m-1"

    @property
    def _llm_type(self) -> str:
        return "named-test"

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = type(self).ls_provider
        params["ls_model_name"] = self.model
        return params

    def _generate(self, messages: list[Any], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> Any:  # fmt: skip
        usage = {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17}
        message = messages_mod.AIMessage(content="ok", usage_metadata=usage, response_metadata={"model_name": "m-1"})
        return outputs_mod.ChatResult(generations=[outputs_mod.ChatGeneration(message=message)])


# LangChain's name -> (gen_ai.provider.name, genai-prices id)
NAMES = {
    "amazon_bedrock": ("aws.bedrock", "aws"),
    "google_vertexai": ("gcp.vertex_ai", "google"),
    "google_genai": ("gcp.gemini", "google"),
    "azure": ("azure.ai.openai", "azure"),
    "mistral": ("mistral_ai", "mistral"),
    "xai": ("x_ai", "x-ai"),
    "groq": ("groq", "groq"),
}


@HOW
@pytest.mark.parametrize("langchain_name", sorted(NAMES))
def test_a_chat_model_is_named_and_priced_as_the_provider_it_calls(
    relay_host: Any, relay_turn: Any, relay_events: Recorder, otel_spans: Any, how: str, langchain_name: str
) -> None:
    provider, price_id = NAMES[langchain_name]
    cost.attach(relay_host, PriceCatalog.from_mapping({price_id: {"m-1": {"input": 1.0, "output": 2.0}}}))
    # A class per name: the middleware reads a model class's provider once.
    model_class = type(f"Model_{langchain_name}", (NamedModel,), {"ls_provider": langchain_name})
    record(model_class(), how)
    (end,) = attempts(relay_events)
    assert end.provider == provider
    assert attempt_span(otel_spans)["gen_ai.provider.name"] == provider
    assert end.cost.provider == price_id
    assert end.cost.amount == pytest.approx((12 * 1.0 + 5 * 2.0) * 1e-6)


@HOW
def test_a_chat_model_answering_with_audio_counts_and_prices_its_audio_tokens_as_the_sdk_call_does(
    relay_host: Any, relay_turn: Any, relay_events: Recorder, how: str
) -> None:
    """``usage_metadata`` counts audio among its input and output details (``audio``), as the provider's usage
    does: read without them, the call's audio went uncounted and was priced at the text rates, below what the
    same call made with the SDK costs."""
    from relay_runtime import adapters
    from tests.test_frameworks_langchain import chat_model

    rates = {"input": 1.0, "output": 2.0, "cache_read": 0.5, "reasoning": 3.0, "input_audio": 10.0,
             "output_audio": 20.0}  # fmt: skip
    cost.attach(relay_host, PriceCatalog.from_mapping({"openai": {"gpt-test": rates}}))
    usage = {"prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140,
             "prompt_tokens_details": {"cached_tokens": 20, "audio_tokens": 30},
             "completion_tokens_details": {"reasoning_tokens": 5, "audio_tokens": 25}}  # fmt: skip
    script = t.Script([t.json_reply(t.chat_completion_body("Hello.", usage=usage)) for _ in range(2)])
    record(chat_model(script), how)
    adapters.instrument(t.openai_client(script)).chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi"}]
    )
    framework, sdk = attempts(relay_events)
    got = framework.annotated_response.usage
    assert (got.input_audio_tokens, got.output_audio_tokens) == (30, 25)
    assert framework.cost.amount == pytest.approx(sdk.cost.amount)
    expected = (50 * 1.0 + 20 * 0.5 + 30 * 10.0 + 10 * 2.0 + 5 * 3.0 + 25 * 20.0) * 1e-6
    assert sdk.cost.amount == pytest.approx(expected)
