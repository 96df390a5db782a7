"""Load on loopback: 50 concurrent phone sessions, each running tool calls through the stub voice
and a fast broker. Every event reaches its phone exactly once and in order."""

from __future__ import annotations

import pytest

from benchmarks.bench_voice import run_load


@pytest.mark.asyncio
async def test_fifty_sessions_every_event_once_and_in_order() -> None:
    result = await run_load(sessions=50, tasks_per_session=2, timeout=45.0)
    assert len(result.event_ids) == 50
    for session_id, ids in result.event_ids.items():
        # Event ids are per session and gapless while attached: a gap is a lost event,
        # a repeat a duplicate, a step back a reordering.
        assert ids == list(range(1, len(ids) + 1)), session_id
    assert result.tool_results == 50 * 2
    assert result.events == sum(len(ids) for ids in result.event_ids.values())
    assert len(result.latencies_ns) > 50 * 2 * 4
    assert result.seconds < 45.0
