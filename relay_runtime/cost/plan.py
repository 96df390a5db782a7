"""Which budgets count one call, where their spend is kept, and what ``before_send`` decided for it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .. import conventions as cv
from ..scopes import ScopeHandle
from .budget import Budget, BudgetExceeded
from .pricing import CostRollup

if TYPE_CHECKING:
    from .meter import StreamMeter
    from .store import Reservation

QUICK_LIMIT = 64  # quick checks remembered per plan
RESIDUE = 1e-12  # of the currency unit: what float arithmetic leaves of a released reservation
KIND_OF = {"logical_call": cv.LOGICAL_CALL, "turn": cv.TURN, "conversation": cv.CONVERSATION}


class Node:
    """Where one budget's spend is counted for one attempt: a scope's roll-up (or a profile's)."""

    __slots__ = ("budget", "counts", "handle", "rollup", "shared", "store_key", "warn_from")

    def __init__(self, budget: Budget, rollup: CostRollup, handle: ScopeHandle | None, store_key: str | None,
                 shared: bool = False) -> None:  # fmt: skip
        self.budget = budget
        self.rollup = rollup
        self.handle = handle
        self.store_key = store_key
        # Checked and reserved in a shared spend store (every process's spend), not in this process's roll-up.
        self.shared = shared
        # The spend at which the budget warns (never, for a budget with no ``warn_at``).
        self.warn_from = budget.warn_at * budget.limit if budget.warn_at is not None else math.inf
        # Whether this node reserves in and adds to its roll-up: False for every node of a call after the first
        # on the same roll-up (two budgets on one turn or one profile), or a call would count there twice.
        self.counts = True


class AttemptSpend:
    """What ``before_send`` decided for one attempt, read back by ``settle`` and the stream.

    One that passed the quick check is shared by every call of the same plan, model and output
    limit (it is never changed once made): ``upper`` is the worst case that check compares.
    """

    __slots__ = ("estimate", "extras", "meter", "nodes", "reservation", "sent", "upper")

    def __init__(self, nodes: list[Node], estimate: float, sent: bool = True, upper: float = 0.0) -> None:
        self.nodes = nodes
        self.estimate = estimate
        self.meter: StreamMeter | None = None
        self.sent = sent
        self.upper = upper
        self.reservation: Reservation | None = None  # held in a shared spend store until settled
        # A quick check's for a model that bills searches or audio answers: it holds for requests asking for neither.
        self.extras = False


class Plan:
    """The budgets' nodes for calls under one parent scope, and the quick checks already worked out there."""

    __slots__ = ("budgets", "nodes", "parent", "quick", "shared")

    def __init__(self, parent: ScopeHandle | None, budgets: tuple[Budget, ...], nodes: list[Node]) -> None:
        self.parent = parent
        self.budgets = budgets
        self.nodes = nodes
        if len(nodes) > 1:  # several budgets may count on one roll-up (a turn's, a profile's)
            for i, node in enumerate(nodes):
                node.counts = not any(other.rollup is node.rollup for other in nodes[:i])
        self.shared = [node for node in nodes if node.shared]
        # (provider, model, output limit) -> the shared AttemptSpend of a call that passes the quick check.
        self.quick: dict[tuple[str, Any, int], AttemptSpend] = {}


NOT_SENT = AttemptSpend([], 0.0, sent=False)


def first_crossed(nodes: list[Node], estimate: float, stream: bool) -> Node | None:
    for node in nodes:
        if node.shared:
            continue  # the store decides, against every process's spend
        rollup = node.rollup
        committed = rollup.spent + rollup.reserved
        if committed + estimate <= node.budget.limit:
            continue
        if stream and node.budget.on_exceed == "stop_stream" and committed < node.budget.limit:
            continue  # the stream goes, metered; it is stopped when it crosses
        return node
    return None


def exceeded(node: Node, estimate: float, model: str | None, committed: float | None = None) -> BudgetExceeded:
    """The refusal; ``committed``: what the shared store held against the budget (else this process's figure)."""
    if committed is None:
        committed = node.rollup.spent + node.rollup.reserved
    return BudgetExceeded(node.budget, spent=committed, limit=node.budget.limit, estimate=estimate, model=model)


def sync_carried(nodes: list[Node], spent: tuple[float, ...]) -> None:
    """Shared nodes: what the store holds (every process's spend) becomes the roll-up's ``spent``."""
    for node, total in zip(nodes, spent, strict=False):  # a refused reservation reports up to the crossed node
        rollup = node.rollup
        rollup.carried = max(0.0, total - rollup.total)
        rollup.loaded = True
