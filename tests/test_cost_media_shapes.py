"""A budget counts the images, audio and documents of Gemini and Bedrock requests, by the rules of the model's family.

Gemini's media parts and Converse's media blocks carry no ``type``: the estimate read an inline Gemini image as
nothing at all (bytes) or as its base64 text, and a Converse image as nothing, so a budget let through a call
its images took over the limit. A Claude image sent through Bedrock, and an image sent to Gemini through its
OpenAI-compatible endpoint, were priced by OpenAI's tile rule: a third or a fifth of what they cost. Real
google-genai and boto3 clients on the mock transport and a loopback server.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
import test_cost_sdk_shapes as shapes
from test_cost_estimates import pdf, png, wav
from test_cost_sdk_shapes import BEDROCK_MODEL, _budgeted, _gemini

from relay_runtime.cost import BudgetExceeded
from relay_runtime.cost.estimate import estimate_input
from relay_runtime.cost.media import gemini_image_tokens, image_tokens

# At 1.0 per million input tokens (``test_cost_sdk_shapes.PRICES``): a 3000 px image is 16 tiles of 258 tokens.
BIG, SMALL = 3000, 300
BIG_TOKENS = 16 * 258
bedrock = shapes.bedrock  # the fixture, under its name here


def _bytes(b64: str) -> bytes:
    return base64.b64decode(b64)


def _gemini_part(kind: str, mime: str, b64: str) -> Any:
    from google.genai import types

    if kind == "sdk-models":
        return types.Part.from_bytes(data=_bytes(b64), mime_type=mime)
    if kind == "snake-case":
        return {"inline_data": {"data": b64, "mime_type": mime}}
    return {"inlineData": {"data": b64, "mimeType": mime}}


@pytest.mark.parametrize("kind", ["sdk-models", "snake-case", "camel-case"])
def test_a_large_gemini_image_is_refused_before_it_is_sent_and_a_small_one_goes(relay_host, relay_turn, kind) -> None:
    _budgeted(relay_host, 0.003)  # the big image's 4,128 tokens cost 0.0041; the small one's 258, 0.0003
    script, client = _gemini()

    def ask(side: int) -> Any:
        parts = [_gemini_part(kind, "image/png", png(side, side)), {"text": "What is this?"}]
        return client.models.generate_content(model="gemini-test-flash", config={"max_output_tokens": 10},
                                              contents=[{"role": "user", "parts": parts}])  # fmt: skip

    with pytest.raises(BudgetExceeded) as caught:
        ask(BIG)
    assert script.requests == []
    assert caught.value.estimate == pytest.approx((BIG_TOKENS + 6 + 10 * 2) * 1e-6, abs=1e-9)
    ask(SMALL)
    assert len(script.requests) == 1


def test_gemini_audio_counts_its_seconds_and_a_file_uri_is_reported_as_unbounded(relay_host, relay_turn) -> None:
    _budgeted(relay_host, 0.0015)
    script, client = _gemini()
    # A minute of audio: 1,920 tokens at Gemini's 32 a second.
    with pytest.raises(BudgetExceeded):
        client.models.generate_content(model="gemini-test-flash", config={"max_output_tokens": 10},
                                       contents=[{"role": "user", "parts": [_gemini_part("sdk-models", "audio/wav",
                                                                                         wav(60))]}])  # fmt: skip
    assert script.requests == []
    video = {"file_data": {"file_uri": "gs://bucket/talk.mp4", "mime_type": "video/mp4"}}
    client.models.generate_content(model="gemini-test-flash", config={"max_output_tokens": 10},
                                   contents=[{"role": "user", "parts": [video, {"text": "Summarize."}]}])  # fmt: skip
    assert len(script.requests) == 1
    assert relay_host.relay.diagnostics()["cost.estimate_unknown_parts"] == 1


def test_a_claude_image_sent_through_converse_is_priced_by_anthropics_rule(relay_host, relay_turn, bedrock) -> None:
    server, client = bedrock
    _budgeted(relay_host, 0.0012)  # a 1000 px image is 1,334 tokens by Anthropic's rule (765 by OpenAI's)
    image = {"image": {"format": "png", "source": {"bytes": _bytes(png(1000, 1000))}}}
    with pytest.raises(BudgetExceeded) as caught:
        client.converse(modelId=BEDROCK_MODEL, inferenceConfig={"maxTokens": 10},
                        messages=[{"role": "user", "content": [image, {"text": "What is this?"}]}])  # fmt: skip
    assert server.seen == []
    assert caught.value.estimate == pytest.approx((1334 + 6 + 10 * 2) * 1e-6, abs=1e-9)


def test_a_pdf_sent_through_converse_counts_its_pages(relay_host, relay_turn, bedrock) -> None:
    server, client = bedrock
    _budgeted(relay_host, 0.005)
    document = {"document": {"format": "pdf", "name": "report", "source": {"bytes": _bytes(pdf(2))}}}
    with pytest.raises(BudgetExceeded) as caught:
        client.converse(modelId=BEDROCK_MODEL, inferenceConfig={"maxTokens": 10},
                        messages=[{"role": "user", "content": [document, {"text": "Summarize."}]}])  # fmt: skip
    assert server.seen == []
    assert caught.value.estimate > 2 * 3000 * 1e-6  # each page: up to 3,000 tokens of text and the page as an image


@pytest.mark.parametrize(
    ("provider", "model", "expected"),
    [
        ("google", "gemini-2.5-flash", BIG_TOKENS),  # Gemini through its OpenAI-compatible endpoint
        ("openai", "gemini-2.5-flash", BIG_TOKENS),
        ("aws", "anthropic.claude-3-5-sonnet-20241022-v2:0", 1534),  # invoke_model's Anthropic body
        ("google", "claude-sonnet-4@20250514", 1534),  # Claude on Vertex
        ("openai", "gpt-4o", 765),
    ],
)
def test_an_image_part_is_priced_by_the_rule_of_the_models_family(provider: str, model: str, expected: int) -> None:
    part = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png(BIG, BIG)}"}}
    if "claude" in model:
        part = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png(BIG, BIG)}}
    assert estimate_input({"messages": [{"role": "user", "content": [part]}]}, provider, model).image_tokens == expected


def test_the_gemini_rule_by_size_and_generation() -> None:
    assert gemini_image_tokens("gemini-2.5-flash", (384, 200)) == 258
    assert gemini_image_tokens("gemini-2.5-flash", (800, 600)) == 2 * 258  # two 768 px tiles across
    assert gemini_image_tokens("gemini-2.5-flash", (6000, 6000)) == BIG_TOKENS  # fitted in 3072 px first
    assert gemini_image_tokens("gemini-2.5-flash", None) == BIG_TOKENS  # a size not read: the most it can be
    assert gemini_image_tokens("gemini-3-pro-preview", (300, 300)) == 1120  # high media resolution
    assert image_tokens("google", "Gemini-2.5-Flash", (300, 300), None) == 258
