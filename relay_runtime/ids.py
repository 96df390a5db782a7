"""Identifiers: 128 random bits as 32 hex digits.

``random.getrandbits`` is several times cheaper than ``uuid.uuid4()`` and ids
only need to be unique, not unguessable. They are drawn in batches: turning
one big number into hex and slicing it costs a managed call far less, right
after a provider call has pushed the relay out of the CPU caches, than
converting a number per id does.
"""

from __future__ import annotations

import random
from collections.abc import Callable

_BATCH = 64
_bits = random.SystemRandom().getrandbits(64)
_rng = random.Random(_bits)
_getrandbits = _rng.getrandbits
# Ready ids, taken from the end. list.pop and list.extend are atomic: threads racing to
# refill only draw an extra batch, and every id in it is as fresh as the rest.
_pool: list[str] = []


# A ready id, or IndexError when none is left (``new_id`` then refills the pool). The managed call takes
# its ids so, in a ``try`` of its own: ``new_id``'s frame would cost each id about 700 instructions more.
# ``_pool`` is only ever cleared, never replaced, so this stays its ``pop``.
pooled: Callable[[], str] = _pool.pop


def new_id() -> str:
    try:
        return _pool.pop()
    except IndexError:
        # The batch's digits with a space after every 16 bytes, split in C: no call per id (a slice each,
        # by ``map``, cost about 700 instructions an id); at that one character, not at any whitespace (a tenth
        # less time).
        batch = _getrandbits(128 * _BATCH).to_bytes(16 * _BATCH, "big").hex(" ", 16).split(" ")
        last = batch.pop()
        _pool.extend(batch)
        return last


def reseed_after_fork() -> None:
    # A forked child would otherwise repeat its parent's ids: both the ones waiting in the pool
    # and the ones its generator would draw next.
    _pool.clear()
    _rng.seed(random.SystemRandom().getrandbits(64))


try:
    import os

    os.register_at_fork(after_in_child=reseed_after_fork)
except AttributeError:  # pragma: no cover - platforms without fork
    pass
