"""Scope and logical-call ids: 32 hex digits, never repeated, in threads and across a fork."""

from __future__ import annotations

import multiprocessing
import os
import re
import threading

import pytest

from relay_runtime import ids

HEX32 = re.compile(r"[0-9a-f]{32}")


def test_ids_are_32_hex_digits_and_unique_across_many_batches():
    drawn = [ids.new_id() for _ in range(ids._BATCH * 20 + 7)]
    assert all(HEX32.fullmatch(i) for i in drawn)
    assert len(set(drawn)) == len(drawn)


def test_threads_drawing_at_once_never_share_an_id():
    per_thread, threads_n = 2000, 8
    out: list[list[str]] = [[] for _ in range(threads_n)]
    barrier = threading.Barrier(threads_n, timeout=10)

    def draw(slot: list[str]) -> None:
        barrier.wait()
        slot.extend(ids.new_id() for _ in range(per_thread))

    threads = [threading.Thread(target=draw, args=(slot,)) for slot in out]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    everything = [i for slot in out for i in slot]
    assert len(everything) == per_thread * threads_n
    assert len(set(everything)) == len(everything)


def _child_ids(queue: multiprocessing.Queue) -> None:
    queue.put([ids.new_id() for _ in range(ids._BATCH * 2)])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_draws_none_of_its_parents_next_ids():
    ids.new_id()
    if not ids._pool:  # that id was the batch's last: the next one draws a fresh batch
        ids.new_id()
    assert ids._pool  # the pool now holds ids the parent has not handed out yet
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_ids, args=(queue,))
    child.start()
    try:
        from_child = queue.get(timeout=30)
    finally:
        child.join(30)
    assert child.exitcode == 0
    from_parent = [ids.new_id() for _ in range(ids._BATCH * 2)]
    assert not set(from_child) & set(from_parent)
