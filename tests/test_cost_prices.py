"""Prices match genai-prices for every token category it bills apart, the tier boundary is the providers'
(> not >=), and counts no bill can have are *missing*, never 0.0. Each response goes through a real SDK
client on the mock transport, and the same response body through genai-prices' own usage extractor."""

from __future__ import annotations

from typing import Any

import pytest

from relay_runtime import TokenUsage, adapters, cost
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.cost import Budget, BudgetExceeded, PriceCatalog, PriceEntry
from relay_runtime.cost.pricing import price_usage

genai_prices = pytest.importorskip("genai_prices")  # the cost extra, installed by `make test`


def _anthropic(model: str, inputs: int, outputs: int, *, read: int = 0, write_5m: int = 0,
               write_1h: int = 0, searches: int = 0) -> dict[str, Any]:  # fmt: skip
    usage = t.anthropic_usage(inputs, outputs, cache_read=read, cache_creation=write_5m + write_1h)
    usage["cache_creation"] = {"ephemeral_5m_input_tokens": write_5m, "ephemeral_1h_input_tokens": write_1h}
    if searches:
        usage["server_tool_use"] = {"web_search_requests": searches}
    return t.anthropic_message_body("ok", model=model, usage=usage)


def _openai(model: str, prompt: int, completion: int, *, cached: int = 0, audio_in: int = 0, audio_out: int = 0,
            image_in: int = 0, reasoning: int = 0) -> dict[str, Any]:  # fmt: skip
    usage = t.chat_usage(prompt, completion, cached=cached, reasoning=reasoning)
    usage["prompt_tokens_details"].update(audio_tokens=audio_in, image_tokens=image_in)
    usage["completion_tokens_details"]["audio_tokens"] = audio_out
    return t.chat_completion_body("ok", model=model, usage=usage)


CASES = {
    # Anthropic: cache writes kept 5 minutes and 1 hour at their two rates (1h was -27% when both were 5m).
    "anthropic-5m-and-1h-cache-writes": ("anthropic", _anthropic("claude-sonnet-4-0", 1200, 300, read=5000,
                                                                 write_5m=2000, write_1h=3000)),
    "anthropic-1h-writes-only": ("anthropic", _anthropic("claude-opus-4-1", 10, 50, write_1h=40_000)),
    # Tiered by the whole input (input + cache reads + writes): 200,000 exactly is below the tier, one more above.
    "anthropic-tier-at-200000": ("anthropic", _anthropic("claude-sonnet-4-5", 150_000, 1000, read=50_000)),
    "anthropic-tier-at-200001": ("anthropic", _anthropic("claude-sonnet-4-5", 150_001, 1000, read=50_000)),
    "anthropic-tier-with-writes": ("anthropic", _anthropic("claude-sonnet-4-5", 100_000, 2000, read=60_000,
                                                           write_5m=30_000, write_1h=20_000)),
    # OpenAI: audio in and out at the audio rates (-86% when priced as text), images, cached reads inside input.
    "openai-audio-in-and-out": ("openai", _openai("gpt-realtime", 5000, 2000, audio_in=4000, audio_out=1500)),
    "openai-audio-cached-and-images": ("openai", _openai("gpt-realtime", 9000, 100, cached=2000, audio_in=3000,
                                                         image_in=1000)),
    "openai-image-model": ("openai", _openai("gpt-image-1", 800, 4000, image_in=600)),
    "openai-reasoning-inside-output": ("openai", _openai("o3", 1000, 3000, cached=200, reasoning=2500)),
    "openai-no-cache-price": ("openai", _openai("gpt-4o-audio-preview", 1000, 100, cached=500)),
    # Anthropic bills each web search its server tool ran ($10 a thousand) beside the tokens.
    "anthropic-web-searches": ("anthropic", _anthropic("claude-sonnet-4-0", 1200, 300, searches=3)),
    # Perplexity bills each request a fee beside its tokens (more than 1000 tokens of sonar cost).
    "perplexity-request-fee": ("perplexity", _openai("sonar", 1000, 200)),
}  # fmt: skip
BASE_URLS = {"perplexity": "https://api.perplexity.ai"}


def _genai(provider: str, body: dict[str, Any]) -> float:
    """genai-prices' price of the same response: Anthropic's usage read by its own extractor; OpenAI's
    given to it key by key (its chat extractor skips image tokens, and it needs to be told that no cached
    token was audio or image, which chat completions do not report)."""
    if provider == "anthropic":
        return float(genai_prices.extract_usage(body, provider_id=provider).calc_price().total_price)
    usage, prompt, completion = body["usage"], body["usage"]["prompt_tokens_details"], \
        body["usage"]["completion_tokens_details"]  # fmt: skip
    counts = genai_prices.Usage(
        input_tokens=usage["prompt_tokens"], output_tokens=usage["completion_tokens"],
        cache_read_tokens=prompt["cached_tokens"], input_audio_tokens=prompt["audio_tokens"],
        input_image_tokens=prompt["image_tokens"], output_audio_tokens=completion["audio_tokens"],
        cache_audio_read_tokens=0, cache_image_read_tokens=0,
    )  # fmt: skip
    return float(genai_prices.calc_price(counts, body["model"], provider_id=provider).total_price)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_default_catalog_prices_like_genai_prices(case: str, relay_host, relay_turn, relay_events) -> None:
    provider, body = CASES[case]
    cost.attach(relay_host, PriceCatalog.default())
    if provider == "anthropic":
        scripted = t.scripted_anthropic(t.json_reply(body))
        adapters.complete(scripted.client, {"model": body["model"], "max_tokens": 64, "messages": []})
    else:
        script = t.Script([t.json_reply(body)])
        client = adapters.instrument(t.openai_client(script, base_url=BASE_URLS.get(provider, t.BASE_OPENAI)))
        adapters.complete(client, {"model": body["model"], "messages": []})
    got = relay_events.ends(relay_kind=cv.ATTEMPT)[0].cost
    assert got.amount is not None, got.missing
    assert got.amount == pytest.approx(_genai(provider, body), rel=1e-9)


def test_an_hours_cache_writes_audio_and_images_are_broken_down_at_their_own_rates() -> None:
    entry = PriceEntry("openai", "m", input=1.0, output=4.0, cache_read=0.1, cache_write=1.25, cache_write_1h=2.0,
                       input_audio=10.0, output_audio=20.0, input_image=5.0)  # fmt: skip
    usage = TokenUsage(input_tokens=10_000, output_tokens=1000, cache_read_tokens=1000, cache_creation_tokens=3000,
                       cache_creation_1h_tokens=2000, input_audio_tokens=2000, output_audio_tokens=400,
                       input_image_tokens=500, output_image_tokens=100)  # fmt: skip
    priced = price_usage(entry, "openai", usage)
    assert priced.breakdown == pytest.approx({
        "input": 3500e-6, "cache_read": 100e-6, "cache_write": 1250e-6, "cache_write_1h": 4000e-6,
        "input_audio": 20_000e-6, "input_image": 2500e-6, "output": 600 * 4e-6, "output_audio": 8000e-6,
    })  # fmt: skip
    # Output images with no rate of their own are billed as output, as genai-prices does.
    assert priced.amount == pytest.approx(sum(priced.breakdown.values()))


@pytest.mark.parametrize(
    "usage",
    [
        TokenUsage(input_tokens=-100, output_tokens=50),
        TokenUsage(input_tokens=100, output_tokens=-50),
        TokenUsage(input_tokens=1000, output_tokens=50, cache_read_tokens=-400),
        TokenUsage(input_tokens=1000, output_tokens=50, reasoning_tokens=-10),
        TokenUsage(input_tokens=10**15, output_tokens=10),
        TokenUsage(input_tokens=0, output_tokens=-3),
        TokenUsage(input_tokens=100, output_tokens=10, cache_creation_tokens=50, cache_creation_1h_tokens=80),
    ],
    ids=["negative-input", "negative-output", "negative-cache-read", "negative-reasoning", "absurd", "zero-and-neg",
         "more-1h-writes-than-writes"],
)  # fmt: skip
def test_counts_no_bill_can_have_are_missing_never_zero(usage: TokenUsage) -> None:
    entry = PriceEntry("openai", "m", input=1.0, output=4.0, cache_read=0.1, cache_write=1.0, cache_write_1h=2.0,
                       reasoning=8.0)  # fmt: skip
    priced = price_usage(entry, "openai", usage)
    assert priced.amount is None and priced.missing == ("usage",)


def test_a_negative_count_from_a_provider_is_missing_with_a_diagnostic(relay_host, relay_turn, relay_events) -> None:
    cost.attach(relay_host, PriceCatalog.from_mapping({"openai": {"gpt-x": {"input": 1.0, "output": 4.0}}}))
    bodies = [t.chat_completion_body(model="gpt-x", usage=t.chat_usage(-500, 20)),
              t.chat_completion_body(model="gpt-x", usage=t.chat_usage(10**12, 20))]  # fmt: skip
    scripted = t.scripted_openai(*(t.json_reply(b) for b in bodies))
    for _ in bodies:
        adapters.complete(scripted.client, {"model": "gpt-x", "messages": []})
    for end in relay_events.ends(relay_kind=cv.ATTEMPT):
        assert end.cost.amount is None and end.cost.missing == ("usage",)
    assert relay_host.relay.diagnostics()["cost.invalid_usage"] == 2
    _relay, turn = relay_turn
    assert turn.scope.cost.unpriced == 2 and turn.scope.cost.total == 0.0


def test_a_tier_applies_above_its_start_not_at_it() -> None:
    entry = PriceEntry("anthropic", "long", input=((0, 3.0), (200_000, 6.0)), output=15.0)
    at = price_usage(entry, "anthropic", TokenUsage(input_tokens=200_000, output_tokens=0))
    above = price_usage(entry, "anthropic", TokenUsage(input_tokens=200_001, output_tokens=0))
    assert at.amount == pytest.approx(200_000 * 3e-6) and above.amount == pytest.approx(200_001 * 6e-6)


def test_from_mapping_takes_the_new_categories_and_a_default_entry_has_them() -> None:
    mine = PriceCatalog.from_mapping({"anthropic": {"c": {"input": 3.0, "output": 15.0, "cache_write": 3.75,
                                                          "cache_write_1h": 6.0, "input_image": 3.0}}})  # fmt: skip
    entry = mine.entry("anthropic", "c")
    assert entry is not None and entry.cache_write_1h == 6.0 and entry.input_image == 3.0
    sonnet = PriceCatalog.default().entry("anthropic", "claude-sonnet-4-0")
    assert sonnet is not None and sonnet.cache_write == 3.75 and sonnet.cache_write_1h == 6.0
    realtime = PriceCatalog.default().entry("openai", "gpt-realtime")
    assert realtime is not None and realtime.input_audio == 32.0 and realtime.output_audio == 64.0


@pytest.mark.parametrize("window", [None, 1000], ids=["read-estimate", "quick-check"])
def test_a_fee_per_request_counts_in_the_worst_case_a_budget_checks(
    relay_host, relay_turn, relay_events, window: int | None
) -> None:
    # 10 output tokens and an empty prompt cost a hundred-thousandth; the request's fee is 0.012.
    prices: dict[str, Any] = {"input": 1.0, "output": 1.0, "request": 0.012}
    if window is not None:
        prices["context_window"] = window
    cost.attach(relay_host, PriceCatalog.from_mapping({"openai": {"gpt-x": prices}}), Budget(0.01, per="turn"))
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body(model="gpt-x")))
    with pytest.raises(BudgetExceeded) as caught:
        adapters.complete(scripted.client, {"model": "gpt-x", "max_tokens": 10, "messages": []})
    assert scripted.script.requests == []
    assert caught.value.estimate > 0.012


def test_a_request_price_is_checked_like_any_other() -> None:
    with pytest.raises(ValueError, match="price 'request' of openai/m must be a number >= 0 \\(per request\\)"):
        PriceCatalog.from_mapping({"openai": {"m": {"input": 1.0, "request": -1}}})


def test_the_web_searches_of_a_streamed_answer_are_priced_too(relay_host, relay_turn, relay_events) -> None:
    prices = {"input": 3.0, "output": 15.0, "web_search": 0.01}
    cost.attach(relay_host, PriceCatalog.from_mapping({"anthropic": {"claude-x": prices}}))
    events = t.anthropic_events(["ok"], model="claude-x", output_tokens=20)
    events[-2]["usage"]["server_tool_use"] = {"web_search_requests": 2}  # the message_delta's usage
    scripted = t.scripted_anthropic(t.sse_reply(t.typed_sse(events)))
    for _ in adapters.stream(scripted.client, {"model": "claude-x", "max_tokens": 64, "messages": []}):
        pass
    got = relay_events.ends(relay_kind=cv.ATTEMPT)[0].cost
    assert got.breakdown["web_search"] == pytest.approx(0.02)
    assert got.amount == pytest.approx((30 * 3.0 + 20 * 15.0) / 1e6 + 0.02)
