"""A capped, insertion-ordered map for per-session tables fed by the provider.

Entries normally leave when the provider reports them done; one that never does must not keep
memory growing, so past the cap the oldest entry is dropped and handed back to be counted.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class CappedMap(Generic[K, V]):
    def __init__(self, cap: int) -> None:
        if cap < 1:
            raise ValueError(f"cap must be at least 1, got {cap}")
        self.cap = cap
        self.evicted = 0  # entries dropped for the cap over this map's life
        self._items: OrderedDict[K, V] = OrderedDict()

    def put(self, key: K, value: V) -> tuple[K, V] | None:
        """Add or refresh `key` as the newest entry; returns the entry dropped to stay in the cap."""
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) <= self.cap:
            return None
        self.evicted += 1
        return self._items.popitem(last=False)

    def pop(self, key: K) -> V | None:
        return self._items.pop(key, None)

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._items))

    def items(self) -> list[tuple[K, V]]:
        return list(self._items.items())
