"""Where conversation and profile spend is kept, so that a restart does not reset a budget."""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..files import replace_atomically

HOME_ENV = "RELAY_HOME"
DEFAULT_HOME = "~/.relay-runtime"


@runtime_checkable
class SpendStore(Protocol):
    def load(self, key: str) -> float:
        """The spend recorded under ``key`` (0.0 when none)."""

    def add(self, key: str, amount: float) -> float:
        """Add ``amount`` to ``key`` durably; return the new total."""


class MemorySpendStore:
    """Spend kept for the life of the process only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spent: dict[str, float] = {}

    def load(self, key: str) -> float:
        return self._spent.get(key, 0.0)

    def add(self, key: str, amount: float) -> float:
        with self._lock:
            total = self._spent[key] = self._spent.get(key, 0.0) + amount
        return total


class FileSpendStore:
    """One small JSON file per key under ``root`` (default ``$RELAY_HOME/cost/spend``), replaced atomically.

    File names are a hash of the key, so no key can name a path outside
    ``root``. A file that cannot be read (truncated by a crash before the
    atomic writes, edited by hand) raises: a budget must not restart from zero
    silently.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        if root is None:
            root = Path(os.environ.get(HOME_ENV) or DEFAULT_HOME).expanduser() / "cost" / "spend"
        self.root = Path(root)
        self._lock = threading.Lock()
        self._cache: dict[str, float] = {}

    def path(self, key: str) -> Path:
        if not isinstance(key, str) or not key:
            raise ValueError(f"spend keys are non-empty strings, got {key!r}")
        return self.root / f"{hashlib.sha256(key.encode('utf-8')).hexdigest()[:32]}.json"

    def load(self, key: str) -> float:
        with self._lock:
            return self._load(key)

    def _load(self, key: str) -> float:
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        path = self.path(key)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            spent = 0.0
        else:
            try:
                data = json.loads(raw)
                spent = float(data["spent"])
                if data.get("key") != key or not math.isfinite(spent) or spent < 0:
                    raise ValueError("key or amount does not match")
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"spend file {path} for {key!r} is unreadable: {exc}") from None
        self._cache[key] = spent
        return spent

    def add(self, key: str, amount: float) -> float:
        if not math.isfinite(amount) or amount < 0:
            raise ValueError(f"spend to add must be a finite amount >= 0, got {amount!r}")
        with self._lock:
            total = self._load(key) + amount
            self._write(key, total)
            self._cache[key] = total
        return total

    def _write(self, key: str, total: float) -> None:
        replace_atomically(self.path(key), json.dumps({"key": key, "spent": total}), durable=True)
