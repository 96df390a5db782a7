"""``relay.cost``: the catalog and budgets installed on one relay, and what each attempt did to them.

The attempt lifecycle calls in at two points, and only while ``active``:
``before_send`` (after guardrails and request intercepts, before the start
event: the worst-case check, a downgrade, reservations, a stream meter) and
``settle`` (before the end event: price the attempt, roll it up into every
scope above it, release reservations, persist, warn).
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Any

from .. import conventions as cv
from ..events import Deferred
from ..scopes import ScopeHandle
from ..types import AnnotatedLLMResponse, ChunkDelta, LLMRequest, Outcome, TokenUsage
from .budget import (
    CHARS_PER_TOKEN,
    DEFAULT_ASSUMED_OUTPUT_TOKENS,
    MAX_OUTPUT_KEYS,
    Budget,
    BudgetExceeded,
    input_tokens_estimate,
    max_output_tokens,
)
from .catalog import PriceCatalog, PriceEntry, rate_at
from .pricing import CACHE_BESIDE_INPUT, AttemptCost, CostRollup, price_usage, unpriced
from .store import FileSpendStore, SpendStore

if TYPE_CHECKING:
    from ..attempt import Attempt
    from ..relay import Relay

_SUCCESS = Outcome.SUCCESS.value
_M = 1e-6
_RESIDUE = 1e-12  # of the currency unit: what float arithmetic leaves of a released reservation
_new = object.__new__
WARNING_MARK = "relay.cost.budget_warning"
# The charge of an attempt priced after its end event went out (its turn ended it while it waited for the
# provider): data {"attempt_uuid", "outcome", "cost", "rollups": {uuid: roll-up}} on a mark under the attempt.
LATE_CHARGE_MARK = "relay.cost.late_charge"
DOWNGRADED_FROM = "relay.cost.downgraded_from"


class _Node:
    """Where one budget's spend is counted for one attempt: a scope's roll-up (or a profile's)."""

    __slots__ = ("budget", "handle", "rollup", "store_key", "warn_from")

    def __init__(self, budget: Budget, rollup: CostRollup, handle: ScopeHandle | None, store_key: str | None):
        self.budget = budget
        self.rollup = rollup
        self.handle = handle
        self.store_key = store_key
        # The spend at which the budget warns (never, for a budget with no ``warn_at``).
        self.warn_from = budget.warn_at * budget.limit if budget.warn_at is not None else math.inf


class _Priced:
    """A catalog entry, ready for the hot path: per-token rates, and the rates a worst case is priced at
    (the dearer of input and cache writes, of output and reasoning)."""

    __slots__ = ("currency", "entry", "in_rate", "out_rate", "rates", "simple", "tiered", "valid_from", "window_cost")

    def __init__(self, entry: PriceEntry) -> None:
        self.entry = entry
        self.currency = entry.currency
        self.valid_from = entry.valid_from
        prices = (entry.input, entry.cache_read, entry.cache_write, entry.output, entry.reasoning)
        self.tiered = any(r is not None and type(r) is not float for r in prices)
        # Flat rates per token, in CATEGORIES order: what the fast path multiplies by.
        self.rates = tuple(r * _M if type(r) is float else None for r in prices)
        self.simple = not self.tiered and entry.input is not None and entry.output is not None
        # A tiered entry's quick check assumes its dearest tier.
        self.in_rate, self.out_rate = self.rates_at(_TOP_TIER)
        window = entry.context_window
        self.window_cost = window * self.in_rate if window else None

    def rates_at(self, input_tokens: int) -> tuple[float, float]:
        e = self.entry
        ins = [rate_at(r, input_tokens) for r in (e.input, e.cache_write) if r is not None]
        outs = [rate_at(r, input_tokens) for r in (e.output, e.reasoning) if r is not None]
        return max(ins, default=0.0) * _M, max(outs, default=0.0) * _M


_TOP_TIER = 1 << 62
_MISS: Any = object()
_LOOKUP_LIMIT = 4096  # (provider, model) pairs remembered per relay


class AttemptSpend:
    """What ``before_send`` decided for one attempt, read back by ``settle`` and the stream.

    One that passed the quick check is shared by every call of the same plan, model and output
    limit (it is never changed once made): ``upper`` is the worst case that check compares.
    """

    __slots__ = ("estimate", "meter", "nodes", "sent", "upper")

    def __init__(self, nodes: list[_Node], estimate: float, sent: bool = True, upper: float = 0.0) -> None:
        self.nodes = nodes
        self.estimate = estimate
        self.meter: StreamMeter | None = None
        self.sent = sent
        self.upper = upper


class _Plan:
    """The budgets' nodes for calls under one parent scope, and the quick checks already worked out there."""

    __slots__ = ("budgets", "nodes", "parent", "quick")

    def __init__(self, parent: ScopeHandle | None, budgets: tuple[Budget, ...], nodes: list[_Node]) -> None:
        self.parent = parent
        self.budgets = budgets
        self.nodes = nodes
        # (provider, model, output limit) -> the shared AttemptSpend of a call that passes the quick check.
        self.quick: dict[tuple[str, Any, int], AttemptSpend] = {}


_QUICK_LIMIT = 64  # quick checks remembered per plan


NOT_SENT = AttemptSpend([], 0.0, sent=False)


class StreamMeter:
    """A stream's running cost, from the text its chunks carried, against the tightest ``stop_stream`` headroom."""

    __slots__ = ("budget", "chars", "headroom", "input_cost", "model", "output_rate", "spent")

    def __init__(self, budget: Budget, headroom: float, spent: float, input_cost: float, output_rate: float,
                 model: str | None) -> None:  # fmt: skip
        self.budget = budget
        self.headroom = headroom
        self.spent = spent
        self.input_cost = input_cost
        self.output_rate = output_rate
        self.model = model
        self.chars = 0

    def running(self) -> float:
        return self.input_cost + (self.chars // CHARS_PER_TOKEN + 1) * self.output_rate

    def add(self, delta: ChunkDelta | None) -> BudgetExceeded | None:
        if delta is None:
            return None
        self.chars += len(delta.text) + len(delta.reasoning)
        running = self.running()
        if running <= self.headroom:
            return None
        budget = self.budget
        return BudgetExceeded(budget, spent=self.spent, limit=budget.limit, estimate=running, model=self.model)


class RelayCost:
    """``relay.cost``: ``use(catalog)``, ``budget(...)``; ``active`` is False until one of them is called."""

    def __init__(self, relay: Relay) -> None:
        self._relay = relay
        self.active = False
        self.catalog: PriceCatalog | None = None
        self.budgets: tuple[Budget, ...] = ()
        self.assumed_output_tokens = DEFAULT_ASSUMED_OUTPUT_TOKENS
        self._store: SpendStore | None = None
        self._lock = threading.Lock()
        self._profiles: dict[str, CostRollup] = {}
        self._lookup: dict[tuple[str, str], _Priced | None] = {}
        self._metered = False  # whether some budget stops streams
        # The budgets' nodes of the last parent scope seen: calls in a row under one scope skip the walk.
        self._plan = _Plan(None, (), [])

    # -- configuring -------------------------------------------------------------------------------

    def use(self, catalog: PriceCatalog | None, *, assumed_output_tokens: int | None = None) -> RelayCost:
        """Price every attempt with ``catalog`` (None removes it, and the budgets need one)."""
        if catalog is not None and not isinstance(catalog, PriceCatalog):
            raise TypeError(f"relay.cost.use() takes a PriceCatalog, got {type(catalog).__name__}")
        if catalog is None and self.budgets:
            raise ValueError("remove the budgets before the catalog: they are checked against its prices")
        if assumed_output_tokens is not None:
            if isinstance(assumed_output_tokens, bool) or not isinstance(assumed_output_tokens, int) \
                    or assumed_output_tokens <= 0:  # fmt: skip
                raise ValueError(f"assumed_output_tokens must be a positive int, got {assumed_output_tokens!r}")
            self.assumed_output_tokens = assumed_output_tokens
        self.catalog = catalog
        self._lookup = {}
        self._plan = _Plan(None, (), [])  # its quick checks hold prices and the output assumption
        self.active = catalog is not None
        return self

    def budget(self, *budgets: Budget) -> RelayCost:
        """Install budgets (several may apply to one call; each is checked)."""
        if self.catalog is None:
            raise ValueError("install a price catalog first (relay.cost.use(catalog)): budgets are checked in money")
        for budget in budgets:
            if not isinstance(budget, Budget):
                raise TypeError(f"relay.cost.budget() takes Budget objects, got {type(budget).__name__}")
        with self._lock:
            self.budgets = (*self.budgets, *(b for b in budgets if b not in self.budgets))
            self._metered = any(b.on_exceed == "stop_stream" for b in self.budgets)
        return self

    def remove_budget(self, budget: Budget) -> bool:
        with self._lock:
            kept = tuple(b for b in self.budgets if b is not budget)
            removed = len(kept) != len(self.budgets)
            self.budgets = kept
            self._metered = any(b.on_exceed == "stop_stream" for b in kept)
        return removed

    def use_store(self, store: SpendStore) -> RelayCost:
        """Where conversation and profile spend is kept (default: a ``FileSpendStore`` under ``RELAY_HOME``)."""
        if not isinstance(store, SpendStore):
            raise TypeError(f"a spend store has load(key) and add(key, amount), got {type(store).__name__}")
        self._store = store
        return self

    @property
    def store(self) -> SpendStore:
        if self._store is None:
            self._store = FileSpendStore()
        return self._store

    def profile_rollup(self, profile_key: str) -> CostRollup:
        """The spend of ``profile_key`` (carried over from the store once a profile budget read it)."""
        with self._lock:
            rollup = self._profiles.get(profile_key)
            if rollup is None:
                rollup = self._profiles[profile_key] = CostRollup(self.catalog.currency if self.catalog else None)
            return rollup

    # -- before the provider -----------------------------------------------------------------------

    def before_send(self, attempt: Attempt, request: LLMRequest, stream: bool) -> LLMRequest:
        """Check every budget that applies against the worst case; refuse, downgrade, or reserve."""
        budgets = self.budgets
        if not budgets:
            return request
        parent = attempt.handle.parent
        plan = self._plan
        if plan.parent is not parent or plan.budgets is not budgets:
            plan = self._nodes(parent, budgets)
        nodes = plan.nodes
        if not nodes:
            return request
        if attempt.annotated is None and not (stream and self._metered):
            # A call like one seen before under this plan: its quick check is worked out already.
            content = request.raw_content()
            for key in MAX_OUTPUT_KEYS:
                limit = content.get(key)
                if type(limit) is int and limit > 0:
                    codec = attempt.codec
                    quick = plan.quick.get((codec.provider if codec is not None else attempt.name,
                                            attempt.model_name or content.get("model"), limit))  # fmt: skip
                    if quick is not None and self._reserve_quick(quick):
                        attempt.cost_state = quick
                        return request
                    break
        return self._check(attempt, request, stream, plan)

    def _reserve_quick(self, quick: AttemptSpend) -> bool:
        """Reserve the output limit of a call whose worst case fits every budget with room to spare."""
        upper = quick.upper
        lock = self._lock
        lock.acquire()
        try:
            for node in quick.nodes:
                rollup = node.rollup
                if rollup.carried + rollup.total + rollup.reserved + upper > node.budget.limit:
                    return False
            estimate = quick.estimate
            for node in quick.nodes:
                node.rollup.reserved += estimate
            return True
        finally:
            lock.release()

    def _check(self, attempt: Attempt, request: LLMRequest, stream: bool, plan: _Plan) -> LLMRequest:
        """The worst-case check in full: the price, the output limit, the input read from the text if need be."""
        nodes = plan.nodes
        codec = attempt.codec
        provider = codec.provider if codec is not None else attempt.name
        model = attempt.model_name or _str(request.raw_content().get("model"))
        priced = None
        if model:
            priced = self._lookup.get((provider, model), _MISS)
            if priced is _MISS:
                priced = self._entry(provider, model)
        if priced is None or model is None:
            # Nothing to check against: the call goes, and the gap is visible.
            self._relay.diag.count("cost.budget_unchecked_unpriced_model")
            return request
        content = request.raw_content()
        # The output limit, inline (this runs on every call): the neutral params' max_tokens, else the kwargs'.
        annotated = attempt.annotated
        out_tokens = max_output_tokens(annotated.params, content) if annotated is not None else None
        from_request = annotated is None
        if out_tokens is None:
            for key in MAX_OUTPUT_KEYS:
                value = content.get(key)
                if type(value) is int and value > 0:
                    out_tokens = value
                    break
            else:
                from_request = False
                out_tokens = self._output_limit(attempt, content, priced)
        out_cost = out_tokens * priced.out_rate
        window_cost = priced.window_cost
        if window_cost is not None and not (stream and self._metered):
            # Quick check: even a full context window of input fits every budget; no need to read the text.
            # Unread, its input may be that whole window: the worst case stays reserved while it is in flight,
            # or concurrent calls would pass on room it may still spend.
            upper = out_cost + window_cost
            quick = AttemptSpend(nodes, upper, upper=upper)
            # Not when the limit was assumed: that is counted per call, so such calls always come this way.
            if from_request and len(plan.quick) < _QUICK_LIMIT:
                plan.quick[(provider, model, out_tokens)] = quick
            if self._reserve_quick(quick):
                attempt.cost_state = quick
                return request
        estimate, input_cost, output_rate = self._worst_case(content, priced, out_tokens)
        crossed = self._reserve(nodes, estimate, stream)
        if crossed is not None:
            if crossed.budget.on_exceed != "downgrade":
                raise _exceeded(crossed, estimate, model)
            # Outside the lock: the refused attempt's events go to subscribers.
            request, model, estimate, input_cost, output_rate = self._downgrade(
                attempt, request, crossed, provider, model, estimate
            )
            crossed = self._reserve(nodes, estimate, stream)
            if crossed is not None:
                raise _exceeded(crossed, estimate, model)
        spend = attempt.cost_state = AttemptSpend(nodes, estimate)
        if stream:
            spend.meter = _meter(nodes, input_cost, output_rate, estimate, model)
        return request

    def _reserve(self, nodes: list[_Node], estimate: float, stream: bool) -> _Node | None:
        """Reserve ``estimate`` on every node, or return the first node it would cross (reserving nothing)."""
        with self._lock:
            crossed = _first_crossed(nodes, estimate, stream)
            if crossed is None:
                for node in nodes:
                    node.rollup.reserved += estimate
        return crossed

    def _entry(self, provider: str, model: str) -> _Priced | None:
        """The catalog's entry for ``(provider, model)`` with its worst-case rates, remembered per relay."""
        key = (provider, model)
        found = self._lookup.get(key, _MISS)
        if found is not _MISS:
            return found
        catalog = self.catalog
        entry = catalog.entry(provider, model) if catalog is not None else None
        priced = _Priced(entry) if entry is not None else None
        if len(self._lookup) < _LOOKUP_LIMIT:
            self._lookup[key] = priced
        return priced

    def _output_limit(self, attempt: Attempt, content: Any, priced: _Priced, count: bool = True) -> int:
        """``max_tokens`` of the request (neutral params first), else the entry's, else the assumption."""
        annotated = attempt.annotated
        limit = max_output_tokens(annotated.params if annotated is not None else None, content)
        if limit is None:
            limit = priced.entry.max_output_tokens
        if limit is None:
            limit = self.assumed_output_tokens
            if count:
                self._relay.diag.count("cost.assumed_output_tokens")
        return limit

    def _worst_case(self, content: Any, priced: _Priced, out_tokens: int) -> tuple[float, float, float]:
        """The most the call can cost: its input (estimated from the text) and its output limit, at the top rates.

        Returns the estimate, its input part and the output rate per token (what a stream meter needs).
        """
        tokens_in = input_tokens_estimate(content)
        in_rate, out_rate = priced.rates_at(tokens_in) if priced.tiered else (priced.in_rate, priced.out_rate)
        input_cost = tokens_in * in_rate
        return input_cost + out_tokens * out_rate, input_cost, out_rate

    def _downgrade(
        self, attempt: Attempt, request: LLMRequest, node: _Node, provider: str, model: str, estimate: float
    ) -> tuple[LLMRequest, str, float, float, float]:
        """Re-aim the call at the cheaper model: this attempt ends refused, a new one of the same logical call goes."""
        budget = node.budget
        cheaper = budget.downgrade_to.get(model) or budget.downgrade_to.get(model.lower())
        priced = self._entry(provider, cheaper) if cheaper else None
        if cheaper is None or priced is None or "model" not in request.raw_content():
            raise _exceeded(node, estimate, model)
        new_request = request.replace(content={**request.raw_content(), "model": cheaper})
        out_tokens = self._output_limit(attempt, new_request.raw_content(), priced, count=False)
        new_estimate, input_cost, output_rate = self._worst_case(new_request.raw_content(), priced, out_tokens)
        # The logical call (and an auxiliary call around it) number their next attempt after this one.
        attempt.renew(new_request, cheaper, _exceeded(node, estimate, model), {DOWNGRADED_FROM: model})
        return new_request, cheaper, new_estimate, input_cost, output_rate

    def _nodes(self, parent: ScopeHandle | None, budgets: tuple[Budget, ...]) -> _Plan:
        scopes: dict[str, ScopeHandle] = {}
        handle = parent
        while handle is not None:
            kind = handle.metadata.get(cv.KIND) if handle.metadata else None
            if kind is not None and kind not in scopes:
                scopes[kind] = handle
            handle = handle.parent
        conversation = scopes.get(cv.CONVERSATION)
        nodes: list[_Node] = []
        for budget in budgets:
            per = budget.per
            if per == "profile":
                meta = conversation.metadata if conversation is not None else None
                profile = (meta.get(cv.PROFILE_KEY) if meta else None) or self._relay.name
                key = f"profile:{profile}"
                rollup = self.profile_rollup(profile)
                self._carry(rollup, key)
                nodes.append(_Node(budget, rollup, None, key))
                continue
            scope = scopes.get(_KIND_OF[per])
            if scope is None:
                continue  # not inside such a scope: this budget has nothing to count against
            rollup = self._rollup(scope)
            store_key: str | None = None
            if per == "conversation":
                meta = scope.metadata or {}
                profile = meta.get(cv.PROFILE_KEY) or self._relay.name
                store_key = f"conversation:{profile}:{meta.get(cv.SESSION_ID) or scope.uuid}"
                self._carry(rollup, store_key)
            nodes.append(_Node(budget, rollup, scope, store_key))
        plan = self._plan = _Plan(parent, budgets, nodes)
        return plan

    def _rollup(self, handle: ScopeHandle) -> CostRollup:
        rollup: CostRollup | None = handle.cost
        if rollup is None:
            with self._lock:
                rollup = handle.cost
                if rollup is None:
                    rollup = handle.cost = CostRollup(self.catalog.currency if self.catalog else None)
        return rollup

    def _carry(self, rollup: CostRollup, key: str) -> None:
        """Load what the store holds for ``key`` into ``rollup``, once."""
        if rollup.loaded:
            return
        carried = self.store.load(key)
        with self._lock:
            if not rollup.loaded:
                rollup.loaded = True
                rollup.carried = carried

    # -- after the provider ------------------------------------------------------------------------

    def settle(self, attempt: Attempt, outcome: str, response: Any, view: Any) -> None:
        """Price the attempt and roll it up into every scope above; failures here are counted, never raised."""
        spend = attempt.cost_state
        try:
            if type(view) is Deferred:
                view = view.get()
            cost = None
            if type(view) is AnnotatedLLMResponse and (spend is None or spend.sent) and view.model:
                # Flat prices of a model seen before: priced without the general path's lookups.
                codec = attempt.codec
                provider = codec.provider if codec is not None else attempt.name
                priced = self._lookup.get((provider, view.model))
                if priced is not None and priced.simple:
                    cost = _fast(priced, provider, view.model, view.usage)
            if cost is None:
                cost = self._price(attempt, response, view, spend)
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
                    rollup = node.rollup
                    # Releases in another order than the reservations leave float residue (~1e-19):
                    # below a trillionth of the currency unit nothing is in flight.
                    remaining = rollup.reserved - estimate
                    rollup.reserved = remaining if remaining > _RESIDUE else 0.0
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
                        self._after_spend(spend, amount)
                    except Exception as exc:
                        self._relay.diag.failure("bookkeeping_errors", exc, f"recording the spend of {attempt.name!r}")
                    break

    def settle_late(self, attempt: Attempt, outcome: str, response: Any, view: Any) -> None:
        """``settle`` for an attempt whose end event (``outcome``) went out before its answer came.

        The end events of the attempt and of the scopes above it are already delivered without this
        charge, so it reaches the record as a mark: the attempt's cost and, for every scope above
        that has ended, its roll-up as it stands with the charge in (a snapshot: consumers that
        wrote the end event keep what they wrote).
        """
        self.settle(attempt, outcome, response, view)
        relay = self._relay
        if not relay.subscribers.mark:
            return
        try:
            handle = attempt.handle
            rollups: dict[str, dict[str, Any]] = {}
            scope = handle.parent
            while scope is not None:
                if scope.ended and scope.cost is not None:
                    rollups[scope.uuid] = scope.cost.as_dict()
                scope = scope.parent
            cost = handle.cost.as_dict() if handle.cost is not None else None
            data = {"attempt_uuid": handle.uuid, "outcome": outcome, "cost": cost, "rollups": rollups}
        except Exception as exc:
            relay.diag.failure("bookkeeping_errors", exc, f"recording the late charge of {attempt.name!r}")
            return
        relay.scope.mark(LATE_CHARGE_MARK, data, parent=handle)

    def _price(self, attempt: Attempt, response: Any, view: Any, spend: AttemptSpend | None) -> AttemptCost:
        catalog = self.catalog
        codec = attempt.codec
        provider = codec.provider if codec is not None else attempt.name
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
            self._relay.diag.count("cost.unpriced_no_usage")
            return unpriced(currency, provider, model, "usage")
        if priced.simple:
            cost = _fast(priced, provider, model, usage)
            if cost is not None:
                return cost
        cost = price_usage(entry, provider, usage)
        cost.model = model
        if cost.amount is None:
            self._relay.diag.count("cost.unpriced_category")
        return cost

    def _after_spend(self, spend: AttemptSpend, amount: float | None) -> None:
        """Persist conversation and profile spend, and warn the budgets that reached ``warn_at``."""
        persisted: set[str] = set()
        for node in spend.nodes:
            key = node.store_key
            if amount and key is not None and key not in persisted:
                persisted.add(key)
                try:
                    self.store.add(key, amount)
                except Exception as exc:
                    self._relay.diag.failure("cost.spend_store_errors", exc, f"recording spend of {key!r}")
            if node.budget.warn_at is not None:
                self._maybe_warn(node)

    def _maybe_warn(self, node: _Node) -> None:
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


def _fast(priced: _Priced, provider: str, model: str | None, usage: TokenUsage | None) -> AttemptCost | None:
    """``price_usage`` for flat rates and consistent counts, without building the breakdown (None otherwise).

    None too when there is no usage to price: the general path says why (never a silent zero).
    """
    if usage is None or (usage.input_tokens is None and usage.output_tokens is None):
        return None
    inp = usage.input_tokens or 0
    out = usage.output_tokens or 0
    cache_read = usage.cache_read_tokens or 0
    cache_write = usage.cache_creation_tokens or 0
    reasoning = usage.reasoning_tokens or 0
    fresh = inp if provider in CACHE_BESIDE_INPUT else inp - cache_read - cache_write
    r_in, r_read, r_write, r_out, r_reason = priced.rates
    if fresh < 0 or out < reasoning or r_in is None or r_out is None:
        return None
    if r_reason is None:
        reasoning = 0  # priced as output, among the output tokens
    else:
        out -= reasoning
    amount = fresh * r_in + out * r_out
    if cache_read:
        if r_read is None:
            return None
        amount += cache_read * r_read
    if cache_write:
        if r_write is None:
            return None
        amount += cache_write * r_write
    if reasoning and r_reason is not None:
        amount += reasoning * r_reason
    cost = _new(AttemptCost)
    cost.amount = amount
    cost.currency = priced.currency
    cost.provider = provider
    cost.model = model
    cost.valid_from = priced.valid_from
    cost._breakdown = None  # built from these on first read: most readers want the amount only
    cost._tokens = (fresh, cache_read, cache_write, out, reasoning)
    cost._rates = priced.rates
    cost.missing = ()
    cost.estimated = False
    cost.wasted = False
    return cost


_KIND_OF = {"logical_call": cv.LOGICAL_CALL, "turn": cv.TURN, "conversation": cv.CONVERSATION}


def _provider(attempt: Attempt) -> str:
    codec = attempt.codec
    return codec.provider if codec is not None else attempt.name


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _first_crossed(nodes: list[_Node], estimate: float, stream: bool) -> _Node | None:
    for node in nodes:
        rollup = node.rollup
        committed = rollup.spent + rollup.reserved
        if committed + estimate <= node.budget.limit:
            continue
        if stream and node.budget.on_exceed == "stop_stream" and committed < node.budget.limit:
            continue  # the stream goes, metered; it is stopped when it crosses
        return node
    return None


def _exceeded(node: _Node, estimate: float, model: str | None) -> BudgetExceeded:
    rollup = node.rollup
    return BudgetExceeded(node.budget, spent=rollup.spent + rollup.reserved, limit=node.budget.limit,
                          estimate=estimate, model=model)  # fmt: skip


def _meter(nodes: list[_Node], input_cost: float, output_rate: float, estimate: float, model: str | None
           ) -> StreamMeter | None:  # fmt: skip
    best: StreamMeter | None = None
    for node in nodes:
        budget = node.budget
        if budget.on_exceed != "stop_stream":
            continue
        rollup = node.rollup
        # Our own reservation is part of ``reserved`` now; the headroom is what others left.
        spent = rollup.spent + rollup.reserved - estimate
        headroom = budget.limit - spent
        if best is None or headroom < best.headroom:
            best = StreamMeter(budget, headroom, spent, input_cost, output_rate, model)
    return best

