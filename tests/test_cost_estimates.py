"""The worst case checked before sending covers what is not text: images, audio and files by the providers'
documented rules (real SDK clients on the mock transport); parts no rule can bound are counted."""

from __future__ import annotations

import base64
import io
import struct
import threading
import wave
import zlib
from typing import Any

import pytest

from relay_runtime import LLMRequest, Relay, adapters, cost, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.adapters.anthropic_messages import AnthropicMessagesCodec
from relay_runtime.adapters.openai_chat import OpenAIChatCodec
from relay_runtime.cost import Budget, BudgetExceeded, PriceCatalog
from relay_runtime.cost.estimate import estimate_input, text_weight
from tests.test_cost import close, conversation

PRICES = {
    "openai": {
        "gpt-x": {"input": 1.0, "output": 4.0},
        "gpt-voice": {"input": 4.0, "output": 16.0, "input_audio": 32.0, "output_audio": 64.0},
        "gpt-4.1-mini": {"input": 0.4, "output": 1.6},
    },
    "anthropic": {"claude-x": {"input": 3.0, "output": 15.0}},
}
URLS = [f"https://images.example/{i}.png" for i in range(4)]


def png(width: int, height: int) -> str:
    """A real PNG (one grey channel), base64."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    raw = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) \
        + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")  # fmt: skip
    return base64.b64encode(raw).decode()


def wav(seconds: float, rate: int = 16_000) -> str:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\x00\x00" * int(seconds * rate))
    return base64.b64encode(out.getvalue()).decode()


def pdf(pages: int) -> str:
    kids = " ".join(f"{3 + i} 0 R" for i in range(pages))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode()]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"] * pages
    body = b"%PDF-1.4\n" + b"".join(f"{i + 1} 0 obj\n".encode() + o + b"\nendobj\n" for i, o in enumerate(objects))
    return base64.b64encode(body + b"trailer\n<< /Root 1 0 R >>\n%%EOF\n").decode()


def refused_estimate(host: session.Host, client: Any, request: dict[str, Any], **kwargs: Any) -> float:
    """The worst case a tiny budget refused ``request`` at (nothing is sent)."""
    cost.attach(host, PriceCatalog.from_mapping(PRICES), Budget(1e-9, per="turn"))
    lease, turn = conversation(host)
    try:
        with pytest.raises(BudgetExceeded) as caught:
            adapters.complete(client, request, **kwargs)
    finally:
        close(lease, turn)
    return caught.value.estimate


def test_image_urls_are_estimated_at_the_most_an_image_costs_and_threads_cannot_overshoot(
    relay_host, relay_events
) -> None:
    # Billed as four high-detail 1024 px images would be: 4 x 765 tokens, plus the text.
    limit = 0.03
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), Budget(limit, per="turn"))
    body = t.chat_completion_body(model="gpt-x", usage=t.chat_usage(3070, 50))
    scripted = t.scripted_openai(*(t.json_reply(body) for _ in range(16)))
    parts = [{"type": "text", "text": "compare these"}]
    parts += [{"type": "image_url", "image_url": {"url": u}} for u in URLS]
    request = {"model": "gpt-x", "max_tokens": 50, "messages": [{"role": "user", "content": parts}]}
    lease, turn = conversation(relay_host)
    refused: list[BudgetExceeded] = []
    gate = threading.Barrier(16)

    def worker() -> None:
        with session.use_turn(turn):
            gate.wait()
            try:
                adapters.complete(scripted.client, request)
            except BudgetExceeded as exc:
                refused.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    close(lease, turn)
    assert refused and turn.scope.cost.total <= limit
    # Each URL is an image of unknown size: 85 + 8 tiles x 170 tokens, the most GPT-4o bills for one.
    assert refused[0].estimate == pytest.approx(4 * 1445e-6 + 50 * 4e-6, abs=2e-5)


def test_low_detail_and_patch_priced_models_follow_openais_rules() -> None:
    low = [{"type": "image_url", "image_url": {"url": URLS[0], "detail": "low"}}]
    assert estimate_input({"messages": [{"role": "user", "content": low}]}, "openai", "gpt-4o").image_tokens == 85
    sized = [{"type": "input_image", "image_url": f"data:image/png;base64,{png(1024, 1024)}"}]
    # 1024 x 1024 -> 768 x 768: four tiles (OpenAI's own worked example: 765 tokens).
    assert estimate_input({"input": [{"role": "user", "content": sized}]}, "openai", "gpt-4o").image_tokens == 765
    # gpt-4.1-mini: 32 px patches (32 x 32 of them) times 1.62.
    assert estimate_input({"input": [{"role": "user", "content": sized}]}, "openai",
                          "gpt-4.1-mini").image_tokens == 1659  # fmt: skip


def test_an_anthropic_image_is_estimated_from_its_own_size(relay_host) -> None:
    scripted = t.scripted_anthropic()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png(1000, 600)}}
    request = {"model": "claude-x", "max_tokens": 1, "messages": [{"role": "user", "content": [image]}]}
    estimate = refused_estimate(relay_host, scripted.client, request)
    # 1000 x 600 / 750 = 800 tokens at 3.0 per million; the base64 text is not read as text.
    assert estimate == pytest.approx(800 * 3e-6 + 15e-6, abs=3e-5)
    assert scripted.script.requests == []


def test_audio_is_estimated_from_its_length_at_the_audio_rate(relay_host) -> None:
    scripted = t.scripted_openai()
    part = {"type": "input_audio", "input_audio": {"data": wav(3.0), "format": "wav"}}
    request = {"model": "gpt-voice", "max_tokens": 1, "messages": [{"role": "user", "content": [part]}]}
    # Three seconds at 10 tokens a second, at 32.0 per million.
    assert refused_estimate(relay_host, scripted.client, request) == pytest.approx(30 * 32e-6 + 16e-6, abs=5e-5)


def test_pdf_files_are_estimated_by_their_pages(relay_host) -> None:
    scripted = t.scripted_anthropic()
    doc = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": pdf(2)}}
    request = {"model": "claude-x", "max_tokens": 1, "messages": [{"role": "user", "content": [doc]}]}
    # Each page: up to 3000 tokens of text and the page as an image (up to 1600).
    assert refused_estimate(relay_host, scripted.client, request) == pytest.approx(2 * 4600 * 3e-6, abs=5e-5)


def test_responses_input_files_are_estimated_too(relay_host) -> None:
    scripted = t.scripted_openai()
    content = [{"type": "input_file", "filename": "a.pdf", "file_data": f"data:application/pdf;base64,{pdf(3)}"}]
    request = {"model": "gpt-x", "max_output_tokens": 16, "input": [{"role": "user", "content": content}]}
    estimate = refused_estimate(relay_host, scripted.client, request, api_mode="responses")
    assert estimate == pytest.approx(3 * (3000 + 1445) * 1e-6 + 16 * 4e-6, abs=2e-5)


def test_parts_no_rule_can_bound_are_counted_and_the_call_goes(relay_host, relay_events) -> None:
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), Budget(1.0, per="turn"))
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body(model="gpt-x")))
    parts = [{"type": "file", "file": {"file_id": "file-abc"}},
             {"type": "input_audio", "input_audio": {"data": base64.b64encode(b"\x00" * 64).decode(),
                                                     "format": "mp3"}}]  # fmt: skip
    lease, turn = conversation(relay_host)
    adapters.complete(scripted.client, {"model": "gpt-x", "max_tokens": 5, "messages": [
        {"role": "user", "content": parts}]})  # fmt: skip
    close(lease, turn)
    assert len(scripted.script.requests) == 1
    assert relay_host.relay.diagnostics()["cost.estimate_unknown_parts"] == 2


def test_a_large_inline_image_is_not_read_as_text() -> None:
    data = png(2000, 2000)
    assert len(data) > 10_000
    part = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}
    found = estimate_input({"messages": [{"role": "user", "content": [part]}]}, "openai", "gpt-4o")
    assert found.image_tokens == 765 and found.chars == len("user")  # 2000 px -> 768 x 768, four tiles


def test_a_request_for_audio_answers_is_checked_at_the_output_audio_rate(relay_host) -> None:
    scripted = t.scripted_openai()
    request = {"model": "gpt-voice", "max_tokens": 100, "modalities": ["text", "audio"], "messages": []}
    assert refused_estimate(relay_host, scripted.client, request) == pytest.approx(100 * 64e-6, abs=1e-5)


def _searching(host: session.Host, tool: dict[str, Any], limit: float) -> tuple[Any, float | None]:
    """An Anthropic request offering ``tool`` under a turn budget of ``limit`` (0.01 a search): what was sent,
    and the estimate it was refused at (None: it went)."""
    prices = {"anthropic": {"claude-x": {"input": 3.0, "output": 15.0, "web_search": 0.01}}}
    cost.attach(host, PriceCatalog.from_mapping(prices), Budget(limit, per="turn"))
    scripted = t.scripted_anthropic(t.json_reply(t.anthropic_message_body("Found it.", model="claude-x")))
    request = {"model": "claude-x", "max_tokens": 10, "tools": [tool],
               "messages": [{"role": "user", "content": "Latest news?"}]}  # fmt: skip
    lease, turn = conversation(host)
    try:
        adapters.complete(scripted.client, request)
        return scripted, None
    except BudgetExceeded as refused:
        return scripted, refused.estimate
    finally:
        close(lease, turn)


def test_the_web_searches_a_request_allows_count_in_its_worst_case(relay_host) -> None:
    # Five searches at 0.01 each: 0.05 at worst, over a 0.04 limit; the tokens are a few hundred-thousandths.
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
    scripted, estimate = _searching(relay_host, search, 0.04)
    assert estimate == pytest.approx(0.05, abs=3e-4)
    assert scripted.script.requests == []
    scripted, estimate = _searching(relay_host, {**search, "max_uses": 2}, 0.04)
    assert estimate is None and len(scripted.script.requests) == 1


def test_a_web_search_tool_without_max_uses_is_reported_as_unbounded(relay_host) -> None:
    scripted, estimate = _searching(relay_host, {"type": "web_search_20250305", "name": "web_search"}, 0.04)
    assert estimate is None and len(scripted.script.requests) == 1
    assert relay_host.relay.diagnostics()["cost.estimate_unknown_parts"] == 1


EXTRAS_PRICES = {
    "anthropic": {"claude-x": {"input": 3.0, "output": 15.0, "web_search": 0.01, "context_window": 1000}},
    "openai": {"gpt-voice": {"input": 4.0, "output": 16.0, "output_audio": 64.0, "context_window": 1000}},
}
SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}  # 0.05 at worst
ASKING = {"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "news?"}]}
VOICE = {"model": "gpt-voice", "max_tokens": 1000, "messages": [{"role": "user", "content": "hi"}]}


def _refuses_searches_and_audio(complete_anthropic: Any, complete_openai: Any) -> None:
    """Twice: the second time a quick check is remembered from the requests asking for neither."""
    for _ in range(2):
        with pytest.raises(BudgetExceeded) as searching:
            complete_anthropic({**ASKING, "tools": [SEARCH]})
        assert searching.value.estimate == pytest.approx(0.05, abs=1e-3)
        # 1000 tokens of audio at 64.0 per million: 0.064 at worst, where text would be 0.016.
        with pytest.raises(BudgetExceeded) as speaking:
            complete_openai({**VOICE, "modalities": ["text", "audio"]})
        assert speaking.value.estimate == pytest.approx(0.064, abs=1e-3)
        complete_anthropic(ASKING)
        complete_openai(VOICE)


def test_a_model_priced_with_a_context_window_checks_searches_and_audio_answers_too(relay_host) -> None:
    # A context window lets a budget skip reading the prompt (the quick check): a full window of input and the
    # output limit fit. What else the worst case holds counts there too, or the call goes over the limit.
    cost.attach(relay_host, PriceCatalog.from_mapping(EXTRAS_PRICES), Budget(0.04, per="turn"))
    anthropic = t.scripted_anthropic(*[t.json_reply(t.anthropic_message_body("ok", model="claude-x"))] * 2)
    openai = t.scripted_openai(*[t.json_reply(t.chat_completion_body("ok", model="gpt-voice"))] * 2)
    lease, turn = conversation(relay_host)
    try:
        _refuses_searches_and_audio(
            lambda kwargs: adapters.complete(anthropic.client, kwargs),
            lambda kwargs: adapters.complete(openai.client, kwargs),
        )
    finally:
        close(lease, turn)
    assert len(anthropic.script.requests) == len(openai.script.requests) == 2  # only those asking for neither


def test_a_remembered_quick_check_holds_only_for_requests_asking_for_no_searches_or_audio() -> None:
    # Calls in a row under one scope reuse the quick check worked out for the first (model, output limit).
    relay = Relay("extras")
    relay.cost.use(PriceCatalog.from_mapping(EXTRAS_PRICES)).budget(Budget(0.04, per="turn"))
    anthropic = t.scripted_anthropic(*[t.json_reply(t.anthropic_message_body("ok", model="claude-x"))] * 2)
    openai = t.scripted_openai(*[t.json_reply(t.chat_completion_body("ok", model="gpt-voice"))] * 2)

    def complete(client: Any, codec: Any) -> Any:
        def call(kwargs: dict[str, Any]) -> Any:
            send = client.messages.create if codec is AnthropicMessagesCodec else client.chat.completions.create
            return relay.llm.execute(
                codec.provider, LLMRequest({}, kwargs), lambda r: send(**r.raw_content()), codec=codec()
            )

        return call

    turn = relay.scope.push("turn", metadata={cv.KIND: cv.TURN})
    _refuses_searches_and_audio(complete(anthropic.client, AnthropicMessagesCodec),
                                complete(openai.client, OpenAIChatCodec))  # fmt: skip
    relay.scope.pop(turn)
    assert len(anthropic.script.requests) == len(openai.script.requests) == 2


def test_a_cjk_prompt_is_estimated_at_more_than_a_token_a_character(relay_host) -> None:
    # 30,000 Chinese characters cost 30,000 tokens or more; at 3 characters a token they were read as 10,000.
    text = "请总结这份报告" * 4_286
    request = {"model": "gpt-x", "max_tokens": 1, "messages": [{"role": "user", "content": text}]}
    estimate = refused_estimate(relay_host, t.scripted_openai().client, request)
    assert estimate >= len(text) * 1.0e-6  # gpt-x: 1.0 per million input tokens
    # ASCII stays at 3 characters a token; one character beyond it weighs by its UTF-8 length.
    found = estimate_input({"messages": [{"role": "user", "content": "abc" * 1000}]}, "openai", "gpt-x")
    assert found.text == (3000 + len("user")) // 3 + 1
    assert [text_weight(c) for c in ("a", "é", "я", "中", "😀")] == [1, 3, 3, 5, 7]


@pytest.mark.parametrize("stored", [{"previous_response_id": "resp_0"}, {"conversation": "conv_1"}])
def test_a_conversation_the_provider_stores_counts_as_a_full_window_of_input(relay_host, stored) -> None:
    """The conversation a Responses request continues is billed as input though the request does not carry it:
    read from the request's few words, a call the answer then billed 100,000 input tokens for went under a
    budget it spent twice over."""
    prices = {"openai": {"gpt-x": {"input": 1.0, "output": 4.0, "context_window": 128_000}}}
    cost.attach(relay_host, PriceCatalog.from_mapping(prices), Budget(0.05, per="turn"))
    body = t.responses_body("ok", model="gpt-x", usage=t.responses_usage(100_000, 50))
    scripted = t.scripted_openai(t.json_reply(body))
    request = {"model": "gpt-x", "input": "and then?", "max_output_tokens": 100}
    lease, turn = conversation(relay_host)
    try:
        with pytest.raises(BudgetExceeded) as refused:
            adapters.complete(scripted.client, {**request, **stored}, api_mode="responses")
        adapters.complete(scripted.client, request, api_mode="responses")  # all its input is in the request
    finally:
        close(lease, turn)
    assert refused.value.estimate == pytest.approx(128_000 * 1e-6 + 100 * 4e-6, rel=1e-3)
    assert len(scripted.script.requests) == 1


def test_a_stored_conversation_with_no_known_window_is_reported_as_unbounded(relay_host, relay_events) -> None:
    prices = {"openai": {"gpt-x": {"input": 1.0, "output": 4.0}}}
    cost.attach(relay_host, PriceCatalog.from_mapping(prices), Budget(0.05, per="turn"))
    scripted = t.scripted_openai(t.json_reply(t.responses_body("ok", model="gpt-x")))
    request = {"model": "gpt-x", "input": "and then?", "max_output_tokens": 100, "previous_response_id": "resp_0"}
    lease, turn = conversation(relay_host)
    adapters.complete(scripted.client, request, api_mode="responses")
    close(lease, turn)
    assert relay_host.relay.diagnostics()["cost.estimate_unknown_parts"] == 1
