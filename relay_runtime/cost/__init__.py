"""What LLM calls cost, and budgets that stop an agent before it overspends.

``relay.cost.use(PriceCatalog...)`` prices every attempt on that relay (its end
event's ``cost``; scopes above carry a ``CostRollup`` with the wasted share);
``relay.cost.budget(Budget(...))`` refuses, downgrades or stops calls that would
cross a limit. Nothing here runs until a catalog is installed.
"""

from __future__ import annotations

from typing import Any

from .budget import Budget, BudgetExceeded
from .catalog import PriceCatalog, PriceEntry
from .control import DOWNGRADED_FROM, LATE_CHARGE_MARK, WARNING_MARK, RelayCost
from .pricing import AttemptCost, CostRollup
from .redis_store import RedisSpendStore
from .store import Claim, FileSpendStore, MemorySpendStore, Reservation, SharedSpendStore, SpendStore

__all__ = [
    "DOWNGRADED_FROM",
    "LATE_CHARGE_MARK",
    "WARNING_MARK",
    "AttemptCost",
    "Budget",
    "BudgetExceeded",
    "Claim",
    "CostRollup",
    "FileSpendStore",
    "MemorySpendStore",
    "PriceCatalog",
    "PriceEntry",
    "RedisSpendStore",
    "RelayCost",
    "Reservation",
    "SharedSpendStore",
    "SpendStore",
    "attach",
]

CONSUMER = "relay.cost"


def attach(
    target: Any,
    catalog: PriceCatalog,
    *budgets: Budget,
    store: SpendStore | None = None,
    assumed_output_tokens: int | None = None,
) -> RelayCost:
    """Install ``catalog`` and ``budgets`` on a ``Relay``, or on a session host.

    On a host, managed execution is retained (as consumer ``relay.cost``), so
    that the calls of its turns are priced and checked even when nothing else
    watches them.
    """
    relay = getattr(target, "relay", None)
    host = target if relay is not None and hasattr(target, "retain_managed_execution") else None
    relay = relay if host is not None else target
    cost = getattr(relay, "cost", None)
    if not isinstance(cost, RelayCost):
        raise TypeError(f"cost.attach() takes a Relay or a session host, got {type(target).__name__}")
    if store is not None:
        cost.use_store(store)
    cost.use(catalog, assumed_output_tokens=assumed_output_tokens)
    if budgets:
        cost.budget(*budgets)
    if host is not None and CONSUMER not in host.consumers():
        host.retain_managed_execution(CONSUMER)
    return cost
