"""The SDK's own answer objects are read field by field directly (``answers.load_sdk``): what they read must be
exactly what the tolerant generic reads make of the same objects."""

from __future__ import annotations

from typing import Any

import pytest
from genai_support import response_body, usage

from relay_runtime.adapters.google_genai import answers
from relay_runtime.adapters.google_genai.codec import GenerateContentCodec

types = pytest.importorskip("google.genai.types")

_DIRECT = ("_RESPONSE", "_CANDIDATE", "_CONTENT", "_PART", "_USAGE")

FULL_USAGE = usage(
    prompt=100, candidates=20, cachedContentTokenCount=60, thoughtsTokenCount=30, toolUsePromptTokenCount=7,
    promptTokensDetails=[{"modality": "TEXT", "tokenCount": 90}, {"modality": "IMAGE", "tokenCount": 10}],
    candidatesTokensDetails=[{"modality": "AUDIO", "tokenCount": 20}],
)  # fmt: skip
CALL = {"id": "c-1", "name": "lookup", "args": {"city": "Oslo"}}


def _chunks() -> list[list[dict[str, Any]]]:
    """Streams as REST bodies: plain text, thoughts and a function call, a second candidate, no usage, blocked, a
    lone candidate not the first and two text parts."""
    second = response_body("other", finish="MAX_TOKENS")["candidates"][0] | {"index": 1}
    two = response_body("first", finish="STOP", usage_metadata=usage())
    two["candidates"].append(second)
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": usage(candidates=0)}
    no_candidates_count = {"promptTokenCount": 4, "totalTokenCount": 4}
    return [
        [response_body("Hel", finish=None), response_body("lo", finish=None),
         response_body("!", finish="STOP", usage_metadata=FULL_USAGE)],
        [response_body("let me", thought="hmm", finish=None),
         response_body(None, calls=[CALL], finish="STOP", usage_metadata=usage())],
        [two],
        [response_body("cut", finish=None, usage_metadata=no_candidates_count)],
        [blocked],
        [response_body("x", finish="SAFETY", model="", response_id="")],
        # One candidate that is not the first, then one text part beside another (not the usual chunk's shape).
        [{**response_body("late", finish=None), "candidates": [second | {"index": 2}]},
         {**response_body("a", finish="STOP"), "candidates": [
             {"content": {"role": "model", "parts": [{"text": "a"}, {"text": "b"}]}, "finishReason": "STOP"}]}],
    ]  # fmt: skip


def _sdk(body: dict[str, Any]) -> Any:
    return types.GenerateContentResponse.model_validate(body)


def _fold(chunks: list[Any]) -> tuple[list[Any], Any, Any, bool]:
    accumulator = GenerateContentCodec("gcp.gemini", True).accumulator()
    deltas = [accumulator.add(chunk) for chunk in chunks]
    response, annotation = accumulator.finish()
    if annotation is None:  # left to the attempt, which reads it back from the folded response
        annotation = GenerateContentCodec("gcp.gemini", True).annotate_response(response)
    return deltas, response, annotation, accumulator.terminated


def _generic(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _DIRECT:
        monkeypatch.setattr(answers, name, answers._Never)


def test_the_sdks_classes_are_read_directly_once_loaded() -> None:
    answers.load_sdk()
    assert answers._RESPONSE is types.GenerateContentResponse and answers._PART is types.Part
    assert answers._USAGE is types.GenerateContentResponseUsageMetadata


@pytest.mark.parametrize("index", range(len(_chunks())))
def test_a_stream_of_sdk_chunks_folds_as_the_generic_reads_fold_it(monkeypatch, index: int) -> None:
    answers.load_sdk()
    chunks = [_sdk(body) for body in _chunks()[index]]
    direct = _fold(chunks)
    with monkeypatch.context() as patched:
        _generic(patched)
        generic = _fold(chunks)
    assert direct == generic


CACHED_IMAGES = usage(
    prompt=50, candidates=4, cachedContentTokenCount=30,
    promptTokensDetails=[{"modality": "TEXT", "tokenCount": 10}, {"modality": "IMAGE", "tokenCount": 40}],
    cacheTokensDetails=[{"modality": "IMAGE", "tokenCount": 25}, {"modality": "AUDIO", "tokenCount": 5}],
)  # fmt: skip


@pytest.mark.parametrize("chunks", [*_chunks(), [response_body("seen", finish="STOP", usage_metadata=CACHED_IMAGES)]])
def test_a_stream_left_unannotated_reads_back_from_its_folded_response_as_its_fold_annotates_it(
    chunks: list[dict[str, Any]],
) -> None:
    """``finish`` leaves the annotation of a stream that ended to the attempt (built when it is read, from the
    folded response, by the codec): it must be the annotation of the fold itself, every field of it."""
    answers.load_sdk()
    codec = GenerateContentCodec("gcp.gemini", True)
    accumulator = codec.accumulator()
    for chunk in chunks:
        accumulator.add(_sdk(chunk))
    response, annotation = accumulator.finish()
    folded = accumulator.annotation()
    ended = accumulator.terminated and not accumulator.blocked and 0 in accumulator.candidates
    assert (annotation is None) is ended
    assert (codec.annotate_response(response) if annotation is None else annotation) == folded


@pytest.mark.parametrize("index", range(len(_chunks())))
def test_a_whole_sdk_response_reads_as_the_generic_reads_read_it(monkeypatch, index: int) -> None:
    answers.load_sdk()
    codec = GenerateContentCodec("gcp.gemini", False)
    response = _sdk(_chunks()[index][-1])
    direct = codec.annotate_response(response)
    with monkeypatch.context() as patched:
        _generic(patched)
        assert codec.annotate_response(response) == direct
    assert answers.usage_of(response.usage_metadata) == direct.usage


def test_the_full_usage_reads_every_category() -> None:
    answers.load_sdk()
    read = answers.usage_of(_sdk(response_body(usage_metadata=FULL_USAGE)).usage_metadata)
    assert (read.input_tokens, read.output_tokens, read.cache_read_tokens, read.reasoning_tokens) == (107, 50, 60, 30)
    assert (read.input_image_tokens, read.output_audio_tokens) == (10, 20)
