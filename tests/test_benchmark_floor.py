"""The floor ``bench_adapters`` measures the library against is the same records, written by hand.

If the library's records change and the floor does not follow, the benchmark compares unlike work
(and refuses to run): this keeps the two in step.
"""

from __future__ import annotations

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
