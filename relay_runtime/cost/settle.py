"""After the provider: price an attempt, roll it up into every scope above it, release its reservations,
persist the spend that outlives the process, and warn the budgets that reached ``warn_at``."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol

from ..events import Deferred
from ..scopes import ScopeHandle
from ..types import AnnotatedLLMResponse, Outcome
from .catalog import PriceCatalog
from .plan import RESIDUE, AttemptSpend, Node, Plan, sync_carried
from .pricing import AttemptCost, CostRollup, price_usage, unpriced
from .providers import price_provider
from .rates import Priced, fast_price
from .store import SharedSpendStore, SpendStore
from .unsettled import Unsettled

if TYPE_CHECKING:
    from ..relay import Relay
    from .budget import Budget

_SUCCESS = Outcome.SUCCESS.value
_CANCELLED = Outcome.CANCELLED.value
# A timeout waiting for the answer to a request sent whole (httpx's, under every SDK on it; botocore's). Told by
# name: the core imports no HTTP client. A connect or pool timeout sent nothing, a write timeout no whole request.
_READ_TIMEOUTS = frozenset({"ReadTimeout", "ReadTimeoutError"})
_MISS: Any = object()
WARNING_MARK = "relay.cost.budget_warning"
# The charge of an attempt priced after its end event went out (its turn ended it while it waited for the
# provider): data {"attempt_uuid", "outcome", "cost", "rollups": {uuid: roll-up}} on a mark under the attempt.
LATE_CHARGE_MARK = "relay.cost.late_charge"
DOWNGRADED_FROM = "relay.cost.downgraded_from"


class Billable(Protocol):
    """What pricing reads of an attempt: a managed ``Attempt``, or an ``Observed`` one."""

    name: str
    codec: Any
    model_name: str | None
    handle: ScopeHandle
    cost_state: Any


class Observed:
    """An attempt a framework integration recorded from the framework's callbacks (``ModelCall.observe``):
    no ``Attempt`` ran it, so no budget was checked before it was sent."""

    __slots__ = ("codec", "cost_state", "handle", "model_name", "name")

    def __init__(self, handle: ScopeHandle, codec: Any, model_name: str | None) -> None:
        self.handle = handle
        self.name = handle.name
        self.codec = codec
        self.model_name = model_name
        self.cost_state: Any = None


class Settlement:
    """``RelayCost``'s half that runs when an attempt ends (what it reads of the relay's cost is declared here)."""

    _relay: Relay
    catalog: PriceCatalog | None
    _lock: threading.Lock
    _lookup: dict[tuple[str, str], Priced | None]
    budgets: tuple[Budget, ...]
    _plan: Plan
    _unsettled: Unsettled

    if TYPE_CHECKING:

        @property
        def store(self) -> SpendStore: ...

        def _entry(self, provider: str, model: str) -> Priced | None: ...

        def _shared_store(self) -> SharedSpendStore: ...

        def _nodes(self, parent: ScopeHandle | None, budgets: tuple[Budget, ...]) -> Plan: ...

        def _answered_estimate(self, attempt: Billable, view: AnnotatedLLMResponse, priced: Priced) -> float | None: ...

        def _prompt_estimate(self, attempt: Billable, priced: Priced) -> float | None: ...

    # -- after the provider ------------------------------------------------------------------------

    def settle(
        self, attempt: Billable, outcome: str, response: Any, view: Any, error: BaseException | None = None
    ) -> bool:
        """Price the attempt and roll it up into every scope above; failures here are counted, never raised.

        Returns whether a scope above had ended already (its end event went out without this charge).
        """
        spend = attempt.cost_state
        if spend is None and self.budgets:
            # No budget was checked before it was sent (an observed attempt, or a model the catalog priced
            # only by the name in its answer): its spend still counts, after the fact.
            spend = attempt.cost_state = self._spend_after(attempt)
        try:
            if type(view) is Deferred:
                view = view.get()
            cost = None
            if type(view) is AnnotatedLLMResponse and (spend is None or spend.sent) and view.model:
                # Flat prices of a model seen before: priced without the general path's lookups.
                codec = attempt.codec
                provider = price_provider(codec, attempt.name)
                priced = self._lookup.get((provider, view.model))
                if priced is not None and priced.simple:
                    cost = fast_price(priced, provider, view.model, view.usage)
            if cost is None:
                cost = self._price(attempt, response, view, spend, outcome, error)
        except Exception as exc:
            self._relay.diag.failure("bookkeeping_errors", exc, f"pricing LLM attempt {attempt.name!r}")
            cost = unpriced(self.catalog.currency if self.catalog else "USD", None, attempt.model_name, "error")
        amount = cost.amount
        wasted = outcome != _SUCCESS and bool(amount)
        cost.wasted = wasted
        attempt.handle.cost = cost
        late = False
        # One pass, under one lock: release the reservations, add to the relay's and every scope's roll-up.
        # (``CostRollup.add`` inline: this runs on every call.)
        lock = self._lock
        lock.acquire()
        try:
            if spend is not None:
                estimate = spend.estimate
                for node in spend.nodes:
                    if not node.counts:
                        continue
                    rollup = node.rollup
                    # Releases in another order than the reservations leave float residue (~1e-19):
                    # below a trillionth of the currency unit nothing is in flight.
                    remaining = rollup.reserved - estimate
                    rollup.reserved = remaining if remaining > RESIDUE else 0.0
                    if node.handle is None:  # a profile's roll-up is not a scope's: the walk below misses it
                        rollup.add(amount, wasted)
            handle = attempt.handle.parent
            while handle is not None:
                rollup = handle.cost
                if rollup is None:
                    rollup = handle.cost = CostRollup(cost.currency)
                if amount is None:
                    rollup.unpriced += 1
                else:
                    rollup.attempts += 1
                    rollup.total += amount
                    if wasted:
                        rollup.wasted += amount
                if handle.ended:
                    late = True
                handle = handle.parent
        finally:
            lock.release()
        if late:
            self._relay.diag.count("cost.rolled_up_after_scope_end")
        if spend is not None:
            for node in spend.nodes:
                rollup = node.rollup
                if node.store_key is not None or rollup.carried + rollup.total >= node.warn_from:
                    try:
                        self._after_spend(spend, amount, attempt.handle.start_ns)
                    except Exception as exc:
                        self._relay.diag.failure("bookkeeping_errors", exc, f"recording the spend of {attempt.name!r}")
                    break
        return late

    def _spend_after(self, attempt: Billable) -> AttemptSpend | None:
        """The budgets' nodes of an attempt no check reserved for, to count what it cost (None: none apply)."""
        parent = attempt.handle.parent
        budgets = self.budgets
        try:
            plan = self._plan
            if plan.parent is not parent or plan.budgets is not budgets:
                plan = self._nodes(parent, budgets)
        except Exception as exc:
            self._relay.diag.failure("cost.spend_store_errors", exc, f"reading the spend before {attempt.name!r}")
            return None
        return AttemptSpend(plan.nodes, 0.0) if plan.nodes else None

    def frozen(self, cost: Any) -> Any:
        """``cost`` as a scope's end event carries it: an attempt's as it is (priced once, before its end), a
        roll-up's snapshot taken under the lock every charge and reservation takes, so that the record holds
        none of what changes after the end and never half of a charge another thread is adding."""
        if type(cost) is not CostRollup:
            return cost
        with self._lock:
            return cost.snapshot()

    def settle_observed(self, handle: ScopeHandle, codec: Any, model_name: str | None, outcome: str, view: Any) -> bool:
        """Price an attempt recorded from a framework's callbacks, before its end event (``handle`` still open).

        It was never checked against the budgets (it was sent before anything here heard of it): its spend
        counts after the fact, so the next call, managed or observed, sees it. Returns ``settle``'s.
        """
        return self.settle(Observed(handle, codec, model_name), outcome, None, view)

    def settle_late(self, attempt: Billable, outcome: str, response: Any, view: Any) -> None:
        """``settle`` for an attempt whose end event (``outcome``) went out before its answer came.

        The end events of the attempt and of the scopes above it are already delivered without this
        charge, so it reaches the record as a mark: the attempt's cost and, for every scope above
        that has ended, its roll-up as it stands with the charge in (a snapshot: consumers that
        wrote the end event keep what they wrote).
        """
        self.settle(attempt, outcome, response, view)
        self.late_charge(attempt.handle, outcome)

    def late_charge(self, handle: ScopeHandle, outcome: str) -> None:
        """The ``LATE_CHARGE_MARK`` under ``handle``, an attempt priced after end events it belongs in went out."""
        relay = self._relay
        if not relay.subscribers.mark:
            return
        try:
            rollups: dict[str, dict[str, Any]] = {}
            scope = handle.parent
            while scope is not None:
                if scope.ended and scope.cost is not None:
                    rollups[scope.uuid] = self.frozen(scope.cost).as_dict()
                scope = scope.parent
            cost = handle.cost.as_dict() if handle.cost is not None else None
            data = {"attempt_uuid": handle.uuid, "outcome": outcome, "cost": cost, "rollups": rollups}
        except Exception as exc:
            relay.diag.failure("bookkeeping_errors", exc, f"recording the late charge of {handle.name!r}")
            return
        relay.scope.mark(LATE_CHARGE_MARK, data, parent=handle)

    def _price(
        self, attempt: Billable, response: Any, view: Any, spend: AttemptSpend | None, outcome: str | None = None,
        error: BaseException | None = None,
    ) -> AttemptCost:  # fmt: skip
        catalog = self.catalog
        codec = attempt.codec
        provider = price_provider(codec, attempt.name)
        if spend is not None and not spend.sent:
            return AttemptCost(0.0, catalog.currency if catalog is not None else "USD", provider, attempt.model_name)
        if type(view) is Deferred:
            view = view.get()
        elif view is None and response is not None and codec is not None:
            try:
                view = codec.annotate_response(response)
            except Exception as exc:
                self._relay.diag.failure("bookkeeping_errors", exc, f"annotating the response of {attempt.name!r}")
        annotated = type(view) is AnnotatedLLMResponse or isinstance(view, AnnotatedLLMResponse)
        usage = view.usage if annotated else None
        response_model = view.model if annotated else None
        model = response_model or attempt.model_name
        priced = None
        if response_model:
            priced = self._lookup.get((provider, response_model), _MISS)
            if priced is _MISS:
                priced = self._entry(provider, response_model)
        if priced is None and attempt.model_name and attempt.model_name != response_model:
            priced = self._entry(provider, attempt.model_name)
        currency = catalog.currency if catalog is not None else "USD"
        if priced is None:
            self._relay.diag.count("cost.unpriced_model")
            return unpriced(currency, provider, model, "model")
        entry = priced.entry
        if usage is None or (usage.input_tokens is None and usage.output_tokens is None):
            meter = spend.meter if spend is not None else None
            if meter is not None and meter.chars:
                # A stream stopped before its usage arrived: its running estimate is all there is.
                amount = meter.running()
                return AttemptCost(amount, currency, provider, model, entry.valid_from, {"estimate": amount}, (), True)
            if annotated and spend is not None and spend.nodes:
                # An answer with no usage (a chat stream not asked for it, one the caller closed) is billed
                # all the same: counted as nothing, a budget would let any number of them through.
                guessed = self._answered_estimate(attempt, view, priced)
                if guessed is not None:
                    self._relay.diag.count("cost.estimated_no_usage")
                    return AttemptCost(guessed, currency, provider, model, entry.valid_from, {"estimate": guessed},
                                       (), True)  # fmt: skip
            if (
                response is None and spend is not None and spend.nodes
                and (outcome == _CANCELLED or (error is not None and read_timed_out(error)))
            ):  # fmt: skip
                # Cancelled, or timed out waiting, before anything came back: the provider had the prompt, and
                # bills its input once it starts. Counted as nothing, a caller that cancels each call once sent
                # (or sets a timeout shorter than the model takes) would pass any budget.
                guessed = self._prompt_estimate(attempt, priced)
                if guessed is not None:
                    timed_out = outcome != _CANCELLED
                    self._relay.diag.count("cost.estimated_timed_out" if timed_out else "cost.estimated_cancelled")
                    return AttemptCost(guessed, currency, provider, model, entry.valid_from, {"estimate": guessed},
                                       (), True)  # fmt: skip
            self._relay.diag.count("cost.unpriced_no_usage")
            return unpriced(currency, provider, model, "usage")
        if priced.simple:
            cost = fast_price(priced, provider, model, usage)
            if cost is not None:
                return cost
        cost = price_usage(entry, provider, usage)
        cost.model = model
        if cost.amount is None:
            # Counts no bill can have (negative, contradictory, absurd) are told apart from a missing rate.
            self._relay.diag.count("cost.invalid_usage" if "usage" in cost.missing else "cost.unpriced_category")
        return cost

    def _after_spend(self, spend: AttemptSpend, amount: float | None, started_ns: int) -> None:
        """Persist conversation and profile spend, and warn the budgets that reached ``warn_at``."""
        persisted: set[str] = set()
        reservation = spend.reservation
        if reservation is not None:
            # The shared store's reservation becomes what the call cost, in one step on the store's side.
            store = self._shared_store()
            diag = self._relay.diag
            if self._unsettled:
                self._unsettled.retry(diag)
            try:
                totals = store.settle(reservation, amount or 0.0)
            except Exception as exc:
                diag.failure("cost.spend_store_errors", exc, f"settling spend of {reservation.keys!r}")
                # Settled again before the next check reads the store (``unsettled``), never counted twice.
                self._unsettled.keep(store, reservation, amount or 0.0, started_ns / 1e9, diag)
            else:
                sync_carried([n for n in spend.nodes if n.shared], totals)
        added: dict[str, float] = {}
        for node in spend.nodes:
            key = node.store_key
            # A shared node with no reservation: spend no check reserved for (``_spend_after``), added as it is.
            if amount and key is not None and not (node.shared and reservation is not None):
                if key not in persisted:
                    persisted.add(key)
                    try:
                        added[key] = self.store.add(key, amount)
                    except Exception as exc:
                        self._relay.diag.failure("cost.spend_store_errors", exc, f"recording spend of {key!r}")
                if node.shared and key in added:
                    sync_carried([node], (added[key],))
            if node.budget.warn_at is not None:
                self._maybe_warn(node)

    def _maybe_warn(self, node: Node) -> None:
        budget = node.budget
        if budget.warn_at is None:
            return
        rollup = node.rollup
        spent = rollup.spent
        if spent < budget.warn_at * budget.limit:
            return
        with self._lock:
            if spent < budget.warn_at * budget.limit or (rollup.warned is not None and budget.id in rollup.warned):
                return
            if rollup.warned is None:
                rollup.warned = set()
            rollup.warned.add(budget.id)
        data = {"budget": budget.name, "per": budget.per, "spent": spent, "limit": budget.limit,
                "warn_at": budget.warn_at, "currency": rollup.currency}  # fmt: skip
        if node.store_key is not None:
            data["key"] = node.store_key
        self._relay.scope.mark(WARNING_MARK, data, parent=node.handle)


def read_timed_out(error: BaseException) -> bool:
    """Whether ``error``, or what it was raised from (an SDK wraps its HTTP client's), is a timeout waiting for the
    answer to a request sent whole. Only the last try's: an SDK's earlier tries that timed out are not known."""
    seen: BaseException | None = error
    for _ in range(8):  # a chain of causes is short; a cycle of them is not followed round
        if seen is None:
            return False
        if any(kind.__name__ in _READ_TIMEOUTS for kind in type(seen).__mro__):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
