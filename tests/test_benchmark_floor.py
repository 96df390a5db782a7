"""The floor ``bench_adapters`` measures the library against is the same records, written by hand.

If the library's records change and the floor does not follow, the benchmark compares unlike work
(and refuses to run): this keeps the two in step.
"""

from __future__ import annotations

import pytest

from benchmarks.adapters_floor import KWARGS, by_hand, record_shapes
from benchmarks.bench_adapters import openai_client
from relay_runtime import adapters


def test_the_hand_written_floor_records_what_a_managed_call_records() -> None:
    client = openai_client()
    ours = record_shapes(lambda: adapters.complete(client, KWARGS))
    floor = record_shapes(by_hand(client))
    kinds = [(shape[0], shape[1]) for shape in ours]
    assert ("scope_end", "openai") in kinds and ("scope_end", "logical_llm_call") in kinds
    assert floor == ours


def test_the_hand_written_genai_floor_records_what_an_instrumented_generate_content_and_its_stream_record() -> None:
    pytest.importorskip("google.genai")
    from benchmarks import genai_floor
    from benchmarks.bench_genai import _client

    client, bare = adapters.instrument(_client()), _client()  # held: a client dropped closes its HTTP client
    ours = genai_floor.record_shapes(
        lambda: client.models.generate_content(model=genai_floor.MODEL, contents=genai_floor.CONTENTS)
    )
    floor = genai_floor.record_shapes(genai_floor.by_hand(bare))
    ours_stream = genai_floor.record_shapes(
        lambda: list(client.models.generate_content_stream(model=genai_floor.MODEL, contents=genai_floor.CONTENTS))
    )
    floor_stream = genai_floor.record_shapes(genai_floor.read_out(genai_floor.by_hand_stream(bare)))
    for shapes in (ours, ours_stream):
        assert [(shape[0], shape[1]) for shape in shapes] == [
            ("scope_start", "logical_llm_call"), ("scope_start", "gcp.gemini"),
            ("scope_end", "gcp.gemini"), ("scope_end", "logical_llm_call"),
        ]  # fmt: skip
    assert floor == ours
    assert floor_stream == ours_stream


def test_the_hand_written_langchain_floor_records_what_the_callback_handler_records() -> None:
    pytest.importorskip("langchain_core")
    from benchmarks import langchain_floor
    from benchmarks.bench_frameworks import _langchain_calls
    from benchmarks.genai_floor import record_shapes

    calls = _langchain_calls()[0]
    ours, floor = record_shapes(calls["invoke-ours"]), record_shapes(calls["invoke-floor"])
    assert [(shape[0], shape[1], shape[2]) for shape in ours] == [
        ("scope_start", "logical_llm_call", "function"), ("scope_start", "benchmodel", "llm"),
        ("scope_end", "benchmodel", "llm"), ("scope_end", "logical_llm_call", "function"),
    ]  # fmt: skip
    assert floor == ours
    langchain_floor.check_same_records(calls["invoke-ours"], calls["invoke-floor"])  # the benchmark's own check
