"""Identifiers: 128 random bits as 32 hex digits.

``random.getrandbits`` is several times cheaper than ``uuid.uuid4()`` and ids
only need to be unique, not unguessable.
"""

from __future__ import annotations

import random

_bits = random.SystemRandom().getrandbits(64)
_rng = random.Random(_bits)
_getrandbits = _rng.getrandbits


def new_id() -> str:
    # bytes.hex() is about twice as fast as formatting the int with "032x".
    return _getrandbits(128).to_bytes(16, "big").hex()


def reseed_after_fork() -> None:
    # A forked child would otherwise repeat its parent's ids.
    _rng.seed(random.SystemRandom().getrandbits(64))


try:
    import os

    os.register_at_fork(after_in_child=reseed_after_fork)
except AttributeError:  # pragma: no cover - platforms without fork
    pass
