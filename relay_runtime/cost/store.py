"""Where conversation and profile spend is kept, so that neither a restart nor a second process resets a budget.

A store with ``reserve`` and ``settle`` (every store here) is *shared*: before a
call is sent its worst case is reserved in the store against every persisted
budget at once, checked against what the store holds then (what every process
spent and has in flight), and when the call ends the reservation is replaced by
what it cost. A store with only ``load`` and ``add`` (the older protocol) is
read once per scope and checked in this process alone. ``resettle``, which every
store here has too, is ``settle`` tried again after it raised (``unsettled``).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..files import directory_locked, replace_atomically

HOME_ENV = "RELAY_HOME"
DEFAULT_HOME = "~/.relay-runtime"
# How long a reservation outlives a worker that died before settling it: then it no longer holds budget.
DEFAULT_RESERVATION_TTL = 900.0


@runtime_checkable
class SpendStore(Protocol):
    def load(self, key: str) -> float:
        """The spend recorded under ``key`` (0.0 when none)."""

    def add(self, key: str, amount: float) -> float:
        """Add ``amount`` to ``key`` durably; return the new total."""


@dataclass(frozen=True, slots=True)
class Claim:
    """One budget a reservation must fit: its store key and limit.

    ``soft``: a metered stream's budget, which lets the call go while anything is left (the
    stream is stopped when its running cost crosses) rather than only when the worst case fits.
    """

    key: str
    limit: float
    soft: bool = False


@dataclass(frozen=True, slots=True)
class Reservation:
    """What ``reserve`` found and did: per claim, the spend stored and the spend committed before this call
    (stored plus every other reservation in flight). ``crossed`` is the index of the claim the worst case
    would cross: then nothing was reserved."""

    id: str
    keys: tuple[str, ...]
    amount: float
    spent: tuple[float, ...]
    committed: tuple[float, ...]
    crossed: int | None = None


@runtime_checkable
class SharedSpendStore(SpendStore, Protocol):
    def reserve(self, claims: Sequence[Claim], amount: float) -> Reservation:
        """Atomically: reserve ``amount`` under every claim's key, or under none if one would cross."""

    def settle(self, reservation: Reservation, amount: float) -> tuple[float, ...]:
        """Atomically: drop the reservation and add ``amount`` to every key of it; the new totals."""


def check_amount(amount: float, what: str) -> float:
    if isinstance(amount, bool) or not isinstance(amount, int | float) or not math.isfinite(amount) or amount < 0:
        raise ValueError(f"{what} must be a finite amount >= 0, got {amount!r}")
    return float(amount)


def check_claims(claims: Sequence[Claim]) -> None:
    for claim in claims:
        if not isinstance(claim, Claim) or not isinstance(claim.key, str) or not claim.key:
            raise ValueError(f"a reservation claims Claim(key, limit) with a non-empty key, got {claim!r}")


def check_ttl(ttl: float) -> float:
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl) or ttl <= 0:
        raise ValueError(f"reservation_ttl must be a positive number of seconds, got {ttl!r}")
    return float(ttl)


class Ledger:
    """One key's spend and the reservations in flight against it (each ``id -> (amount, deadline)``)."""

    __slots__ = ("reserved", "spent")

    def __init__(self, spent: float = 0.0, reserved: dict[str, tuple[float, float]] | None = None) -> None:
        self.spent = spent
        self.reserved = reserved if reserved is not None else {}

    def committed(self, now: float) -> float:
        """Stored spend plus the live reservations; expired ones (their worker died) are dropped."""
        expired = [rid for rid, (_, deadline) in self.reserved.items() if deadline < now]
        for rid in expired:
            del self.reserved[rid]
        return self.spent + sum(amount for amount, _ in self.reserved.values())


def settle_ledger(ledger: Ledger, rid: str, amount: float, again: bool) -> bool:
    """Replace reservation ``rid`` by ``amount`` spent; ``again`` (a retry of a settle that raised): only if
    the ledger still holds it, since one that is gone was settled by the attempt that raised. Whether
    anything changed."""
    held = ledger.reserved.pop(rid, None)
    if held is None and again:
        return False
    ledger.spent += amount
    return True


def decide(ledgers: Sequence[Ledger], claims: Sequence[Claim], amount: float, ttl: float, rid: str) -> Reservation:
    """The reservation rule every store applies (Redis in Lua): all claims fit, or nothing is reserved."""
    now = time.time()
    spent: list[float] = []
    committed: list[float] = []
    for index, (ledger, claim) in enumerate(zip(ledgers, claims, strict=True)):
        before = ledger.committed(now)
        spent.append(ledger.spent)
        committed.append(before)
        if before + amount > claim.limit and not (claim.soft and before < claim.limit):
            keys = tuple(c.key for c in claims)
            return Reservation("", keys, amount, tuple(spent), tuple(committed), crossed=index)
    for ledger in ledgers:
        ledger.reserved[rid] = (amount, now + ttl)
    return Reservation(rid, tuple(c.key for c in claims), amount, tuple(spent), tuple(committed))


class MemorySpendStore:
    """Spend kept for the life of the process only (shared by every relay handed this store)."""

    def __init__(self, *, reservation_ttl: float = DEFAULT_RESERVATION_TTL) -> None:
        self._lock = threading.Lock()
        self._ledgers: dict[str, Ledger] = {}
        self._ids = itertools.count(1)
        self.reservation_ttl = check_ttl(reservation_ttl)

    def _ledger(self, key: str) -> Ledger:
        ledger = self._ledgers.get(key)
        if ledger is None:
            ledger = self._ledgers[key] = Ledger()
        return ledger

    def load(self, key: str) -> float:
        with self._lock:
            ledger = self._ledgers.get(key)
            return ledger.spent if ledger is not None else 0.0

    def add(self, key: str, amount: float) -> float:
        amount = check_amount(amount, "spend to add")
        with self._lock:
            ledger = self._ledger(key)
            ledger.spent += amount
            return ledger.spent

    def reserve(self, claims: Sequence[Claim], amount: float) -> Reservation:
        check_claims(claims)
        amount = check_amount(amount, "a reservation")
        with self._lock:
            # Ids need only be unique in this process: a counter, not a uuid.
            rid = str(next(self._ids))
            return decide([self._ledger(c.key) for c in claims], claims, amount, self.reservation_ttl, rid)

    def settle(self, reservation: Reservation, amount: float) -> tuple[float, ...]:
        return self._settle(reservation, amount, again=False)

    def resettle(self, reservation: Reservation, amount: float) -> tuple[float, ...]:
        """``settle`` tried again after it raised: adds only under the keys that still hold the reservation."""
        return self._settle(reservation, amount, again=True)

    def _settle(self, reservation: Reservation, amount: float, *, again: bool) -> tuple[float, ...]:
        amount = check_amount(amount, "spend to settle")
        with self._lock:
            totals: dict[str, float] = {}
            for key in dict.fromkeys(reservation.keys):  # two budgets on one key are charged once
                ledger = self._ledger(key)
                settle_ledger(ledger, reservation.id, amount, again)
                totals[key] = ledger.spent
            return tuple(totals[k] for k in reservation.keys)


class FileSpendStore:
    """One small JSON file per key under ``root`` (default ``$RELAY_HOME/cost/spend``), replaced atomically.

    Every read and change holds the exclusive lock of ``root`` (``fcntl.flock`` on the directory), so
    processes sharing ``root`` add to one total and reserve against one another's calls in flight;
    nothing is cached between calls (another process may have spent since). File names are a hash of
    the key, so no key can name a path outside ``root``. A file that cannot be read (truncated by a
    crash before the atomic writes, edited by hand) raises: a budget must not restart from zero silently.
    """

    def __init__(
        self, root: str | os.PathLike[str] | None = None, *, reservation_ttl: float = DEFAULT_RESERVATION_TTL
    ) -> None:
        if root is None:
            root = Path(os.environ.get(HOME_ENV) or DEFAULT_HOME).expanduser() / "cost" / "spend"
        self.root = Path(root)
        self.reservation_ttl = check_ttl(reservation_ttl)

    def path(self, key: str) -> Path:
        if not isinstance(key, str) or not key:
            raise ValueError(f"spend keys are non-empty strings, got {key!r}")
        return self.root / f"{hashlib.sha256(key.encode('utf-8')).hexdigest()[:32]}.json"

    def _locked(self, keys: Sequence[str]) -> contextlib.AbstractContextManager[None]:
        """The lock of ``root``, shared by every process that keeps spend there (one lock: no order to get wrong)."""
        for key in keys:
            self.path(key)  # a bad key is refused before anything is locked
        return directory_locked(self.root)

    def _read(self, key: str) -> Ledger:
        path = self.path(key)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return Ledger()
        try:
            data = json.loads(raw)
            spent = float(data["spent"])
            if data.get("key") != key or not math.isfinite(spent) or spent < 0:
                raise ValueError("key or amount does not match")
            reserved = {str(rid): (float(a), float(d)) for rid, (a, d) in (data.get("reserved") or {}).items()}
            for amount, deadline in reserved.values():
                # A NaN or negative reservation would make every later check pass: the budget silently gone.
                if not math.isfinite(amount) or amount < 0 or math.isnan(deadline):
                    raise ValueError(f"a reservation of {amount!r} until {deadline!r}")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"spend file {path} for {key!r} is unreadable: {exc}") from None
        return Ledger(spent, reserved)

    def _write(self, key: str, ledger: Ledger, *, durable: bool) -> None:
        data: dict[str, object] = {"key": key, "spent": ledger.spent}
        if ledger.reserved:
            data["reserved"] = {rid: list(v) for rid, v in ledger.reserved.items()}
        replace_atomically(self.path(key), json.dumps(data), durable=durable)

    def load(self, key: str) -> float:
        with self._locked([key]):
            return self._read(key).spent

    def add(self, key: str, amount: float) -> float:
        amount = check_amount(amount, "spend to add")
        with self._locked([key]):
            ledger = self._read(key)
            ledger.spent += amount
            self._write(key, ledger, durable=True)
        return ledger.spent

    def reserve(self, claims: Sequence[Claim], amount: float) -> Reservation:
        check_claims(claims)
        amount = check_amount(amount, "a reservation")
        keys = [c.key for c in claims]
        with self._locked(keys):
            read = {k: self._read(k) for k in keys}
            reservation = decide([read[k] for k in keys], claims, amount, self.reservation_ttl, uuid.uuid4().hex)
            if reservation.crossed is None:
                # A reservation is in flight only: a crash that loses it frees budget, it never spends it.
                for key, ledger in read.items():
                    self._write(key, ledger, durable=False)
        return reservation

    def settle(self, reservation: Reservation, amount: float) -> tuple[float, ...]:
        return self._settle(reservation, amount, again=False)

    def resettle(self, reservation: Reservation, amount: float) -> tuple[float, ...]:
        """``settle`` tried again after it raised: adds only under the keys that still hold the reservation
        (one raising part-way has written some keys and not the others)."""
        return self._settle(reservation, amount, again=True)

    def _settle(self, reservation: Reservation, amount: float, *, again: bool) -> tuple[float, ...]:
        amount = check_amount(amount, "spend to settle")
        with self._locked(reservation.keys):
            totals: dict[str, float] = {}
            for key in dict.fromkeys(reservation.keys):  # two budgets on one key are charged once
                ledger = self._read(key)
                if settle_ledger(ledger, reservation.id, amount, again):
                    self._write(key, ledger, durable=amount > 0)
                totals[key] = ledger.spent
        return tuple(totals[k] for k in reservation.keys)
