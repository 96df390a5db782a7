"""``relay.cost``: the catalog and budgets installed on one relay, and the check made before each attempt.

The attempt lifecycle calls in at two points, and only while ``active``:
``before_send`` (after guardrails and request intercepts, before the start
event: the worst-case check, a downgrade, reservations, a stream meter; here)
and ``settle`` (before the end event: price the attempt, roll it up into every
scope above it, release reservations, persist, warn; in ``settle.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from .. import conventions as cv
from ..scopes import ScopeHandle
from ..types import AnnotatedLLMRequest, AnnotatedLLMResponse, LLMRequest
from .budget import (
    CHARS_PER_TOKEN,
    DEFAULT_ASSUMED_OUTPUT_TOKENS,
    INPUT_KEYS,
    MAX_OUTPUT_KEYS,
    Budget,
    choices_of,
    max_output_tokens,
    text_chars,
)
from .catalog import PriceCatalog, rate_at
from .estimate import estimate_input, input_of, web_searches
from .meter import meter_for
from .plan import (
    KIND_OF,
    NOT_SENT,
    QUICK_LIMIT,
    RESIDUE,
    AttemptSpend,
    Node,
    Plan,
    exceeded,
    first_crossed,
    sync_carried,
)
from .pricing import CostRollup
from .providers import EMBEDDINGS, price_provider
from .rates import TOP_TIER, Priced
from .settle import DOWNGRADED_FROM, LATE_CHARGE_MARK, WARNING_MARK, Billable, Settlement
from .store import Claim, FileSpendStore, Reservation, SharedSpendStore, SpendStore
from .unsettled import Unsettled

if TYPE_CHECKING:
    from ..attempt import Attempt
    from ..relay import Relay

__all__ = ["DOWNGRADED_FROM", "LATE_CHARGE_MARK", "NOT_SENT", "WARNING_MARK", "RelayCost"]

_MISS: Any = object()
# Request keys naming input the provider keeps and adds to what the request carries (OpenAI Responses: an
# earlier response's conversation, a stored conversation): the text of the request does not bound it.
STORED_INPUT_KEYS = ("previous_response_id", "conversation")
_LOOKUP_LIMIT = 4096  # (provider, model) pairs remembered per relay


class RelayCost(Settlement):
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
        self._lookup: dict[tuple[str, str], Priced | None] = {}
        self._metered = False  # whether some budget stops streams
        # The budgets' nodes of the last parent scope seen: calls in a row under one scope skip the walk.
        self._plan = Plan(None, (), [])
        self._unsettled = Unsettled()  # settles the shared store failed, tried again before it is read

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
        self._plan = Plan(None, (), [])  # its quick checks hold prices and the output assumption
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

    def _shared_store(self) -> SharedSpendStore:
        return cast(SharedSpendStore, self.store)  # only asked for by nodes made when it was one

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
                    if "n" in content:
                        break  # several choices: the output limit is per choice, the full check multiplies it
                    codec = attempt.codec
                    quick = plan.quick.get((price_provider(codec, attempt.name),
                                            attempt.model_name or content.get("model"), limit))  # fmt: skip
                    # A request that may ask for searches or audio has its worst case worked out in full.
                    if quick is not None and not (quick.extras and _may_ask_extras(content)) \
                            and self._reserve_quick(quick):  # fmt: skip
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
                if node.counts:
                    node.rollup.reserved += estimate
            return True
        finally:
            lock.release()

    def _check(self, attempt: Attempt, request: LLMRequest, stream: bool, plan: Plan) -> LLMRequest:
        """The worst-case check in full: the price, the output limit, the input read from the text if need be."""
        nodes = plan.nodes
        codec = attempt.codec
        provider = price_provider(codec, attempt.name)
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
        annotated = attempt.annotated if attempt.annotated is not None else self._view(codec, content)
        out_tokens = max_output_tokens(annotated.params, content) if annotated is not None else None
        from_request = annotated is None
        if out_tokens is None and codec is not None and codec.operation == EMBEDDINGS:
            out_tokens = 0  # an embedding answers vectors, not tokens: its worst case is its input
        elif out_tokens is None:
            for key in MAX_OUTPUT_KEYS:
                value = content.get(key)
                if type(value) is int and value > 0:
                    out_tokens = value
                    break
            else:
                from_request = False
                out_tokens = self._output_limit(annotated, content, priced)
        out_tokens *= choices_of(content, annotated)
        out_cost = out_tokens * priced.out_rate
        window_cost = priced.window_cost
        if window_cost is not None and not (stream and self._metered) and not plan.shared:
            # Quick check: even a full context window of input fits every budget; no need to read the text.
            # Unread, its input may be that whole window: the worst case stays reserved while it is in flight,
            # or concurrent calls would pass on room it may still spend.
            upper = out_cost + window_cost
            extra = _extra_cost(priced, input_of(content, annotated), content, out_tokens) if priced.extras else 0.0
            quick = AttemptSpend(nodes, upper + extra, upper=upper + extra)
            quick.extras = priced.extras
            # Not when the limit was assumed: that is counted per call, so such calls always come this way.
            # Nor with extras: the next request under the same key may ask for others.
            if from_request and not extra and len(plan.quick) < QUICK_LIMIT:
                plan.quick[(provider, model, out_tokens)] = quick
            if self._reserve_quick(quick):
                attempt.cost_state = quick
                return request
        estimate, input_cost, output_rate = self._worst_case(content, priced, out_tokens, annotated)
        crossed, held, reservation = self._reserve(plan, estimate, stream)
        if crossed is not None:
            if crossed.budget.on_exceed != "downgrade":
                raise exceeded(crossed, estimate, model, held)
            # Outside the lock: the refused attempt's events go to subscribers.
            request, model, estimate, input_cost, output_rate = self._downgrade(
                attempt, request, crossed, provider, model, estimate, held
            )
            crossed, held, reservation = self._reserve(plan, estimate, stream)
            if crossed is not None:
                raise exceeded(crossed, estimate, model, held)
        spend = attempt.cost_state = AttemptSpend(nodes, estimate)
        spend.reservation = reservation
        if stream:
            shared = dict(zip(plan.shared, reservation.committed, strict=True)) if reservation is not None else None
            spend.meter = meter_for(nodes, input_cost, output_rate, estimate, model, shared)
        return request

    def _reserve(self, plan: Plan, estimate: float, stream: bool
                 ) -> tuple[Node | None, float | None, Reservation | None]:  # fmt: skip
        """Reserve ``estimate`` on every node, or return the first node it would cross (reserving nothing)
        and, for a node of a shared store, what the store held against it. Third: the store's reservation."""
        nodes = plan.nodes
        with self._lock:
            crossed = first_crossed(nodes, estimate, stream)
            if crossed is not None:
                return crossed, None, None
            for node in nodes:
                if node.counts:
                    node.rollup.reserved += estimate
        shared = plan.shared
        if not shared:
            return None, None, None
        claims = [Claim(n.store_key or "", n.budget.limit, stream and n.budget.on_exceed == "stop_stream")
                  for n in shared]  # fmt: skip
        if self._unsettled:
            self._unsettled.retry(self._relay.diag)  # so this check sees what earlier calls spent
        try:
            reservation = self._shared_store().reserve(claims, estimate)
        except BaseException:
            self._release(nodes, estimate)
            self._relay.diag.count("cost.spend_store_errors")
            raise  # a budget that cannot be checked refuses the call: never an unchecked send
        sync_carried(shared, reservation.spent)
        if reservation.crossed is not None:
            self._release(nodes, estimate)
            return shared[reservation.crossed], reservation.committed[reservation.crossed], None
        return None, None, reservation

    def _release(self, nodes: list[Node], estimate: float) -> None:
        with self._lock:
            for node in nodes:
                if not node.counts:
                    continue
                rollup = node.rollup
                remaining = rollup.reserved - estimate
                rollup.reserved = remaining if remaining > RESIDUE else 0.0

    def _entry(self, provider: str, model: str) -> Priced | None:
        """The catalog's entry for ``(provider, model)`` with its worst-case rates, remembered per relay."""
        key = (provider, model)
        found = self._lookup.get(key, _MISS)
        if found is not _MISS:
            return found
        catalog = self.catalog
        entry = catalog.entry(provider, model) if catalog is not None else None
        priced = Priced(entry) if entry is not None else None
        if len(self._lookup) < _LOOKUP_LIMIT:
            self._lookup[key] = priced
        return priced

    def _view(self, codec: Any, content: Mapping[str, Any]) -> AnnotatedLLMRequest | None:
        """The codec's neutral view of SDK kwargs the estimate cannot read as they are: a prompt under none of
        ``INPUT_KEYS`` (Gemini's ``contents`` and ``config``, Bedrock's ``body``) or an output limit nested in
        ``inferenceConfig`` (Bedrock Converse's). None for OpenAI's and Anthropic's kwargs, read directly."""
        if codec is None or ("inferenceConfig" not in content and any(key in content for key in INPUT_KEYS)):
            return None
        try:
            view: AnnotatedLLMRequest = codec.decode(content)
        except Exception as exc:
            self._relay.diag.failure("bookkeeping_errors", exc, "reading a request for its budget check")
            return None
        return view

    def _output_limit(self, view: AnnotatedLLMRequest | None, content: Any, priced: Priced, count: bool = True) -> int:
        """``max_tokens`` of the request (neutral params first), else the entry's, else the assumption."""
        limit = max_output_tokens(view.params if view is not None else None, content)
        if limit is None:
            limit = priced.entry.max_output_tokens
        if limit is None:
            limit = self.assumed_output_tokens
            if count:
                self._relay.diag.count("cost.assumed_output_tokens")
        return limit

    def _worst_case(self, content: Any, priced: Priced, out_tokens: int, view: AnnotatedLLMRequest | None = None,
                    stored: bool = True, searches: bool = True) -> tuple[float, float, float]:  # fmt: skip
        """The most the call can cost: its input (text, images, audio, files), the web searches its tools allow
        (``max_uses``; not with ``searches=False``) and its output limit, at the top rates. ``stored``: a
        conversation the provider keeps and adds to the input (``STORED_INPUT_KEYS``) counts as a full context
        window (False: not counted).

        Returns the estimate, its input part and the output rate per token (what a stream meter needs).
        """
        entry = priced.entry
        asked = input_of(content, view)
        found = estimate_input(asked, entry.provider, entry.model)
        searched, unbounded = web_searches(asked) if entry.web_search and searches else (0, 0)
        if stored and any(content.get(key) for key in STORED_INPUT_KEYS):
            # None of it is in the request: as much as the model reads, or no bound at all.
            if entry.context_window:
                found.text_tokens += max(0, entry.context_window - found.total)
            else:
                found.unknown += 1
        if found.unknown or unbounded:
            self._relay.diag.count("cost.estimate_unknown_parts", found.unknown + unbounded)
        tokens_in = found.total
        in_rate, out_rate = priced.rates_at(tokens_in) if priced.tiered else (priced.in_rate, priced.out_rate)
        input_cost = found.text * in_rate + (entry.request or 0.0) + searched * (entry.web_search or 0.0)
        if found.image_tokens or found.audio_tokens:
            image_rate, audio_rate = priced.media_rates(tokens_in)
            input_cost += found.image_tokens * image_rate + found.audio_tokens * audio_rate
        if entry.output_audio is not None and _audio_answer(content):
            out_rate = max(out_rate, rate_at(entry.output_audio, tokens_in) * 1e-6)  # it may answer in audio
        return input_cost + out_tokens * out_rate, input_cost, out_rate

    def _answered_estimate(self, attempt: Billable, view: AnnotatedLLMResponse, priced: Priced) -> float | None:
        """What an answer that came without its usage cost, read as a stream meter reads one: its request's
        input estimated, its text and tool-call arguments as output (each of ``n`` choices as long as the
        first). None when the request is not known (an attempt a framework's callbacks witnessed)."""
        request = getattr(attempt, "request", None)
        if not isinstance(request, LLMRequest):
            return None
        content = request.raw_content()
        chars = text_chars(view.output_text) + sum(text_chars(call.get("arguments")) for call in view.tool_calls)
        asked = self._view(attempt.codec, content)
        out_tokens = (chars // CHARS_PER_TOKEN + 1) * choices_of(content, asked)
        return self._worst_case(content, priced, out_tokens, asked, stored=False)[0]

    def _prompt_estimate(self, attempt: Billable, priced: Priced) -> float | None:
        """What the prompt of a call cancelled before any answer came costs: its input alone (no output, no web
        search), estimated as the budget check estimates it. None when the request is not known."""
        request = getattr(attempt, "request", None)
        if not isinstance(request, LLMRequest):
            return None
        content = request.raw_content()
        return self._worst_case(content, priced, 0, self._view(attempt.codec, content), stored=False, searches=False)[0]

    def _downgrade(
        self, attempt: Attempt, request: LLMRequest, node: Node, provider: str, model: str, estimate: float,
        held: float | None,
    ) -> tuple[LLMRequest, str, float, float, float]:  # fmt: skip
        """Re-aim the call at the cheaper model: this attempt ends refused, a new one of the same logical call goes."""
        budget = node.budget
        cheaper = budget.downgrade_to.get(model) or budget.downgrade_to.get(model.lower())
        priced = self._entry(provider, cheaper) if cheaper else None
        if cheaper is None or priced is None or "model" not in request.raw_content():
            raise exceeded(node, estimate, model, held)
        new_request = request.replace(content={**request.raw_content(), "model": cheaper})
        content = new_request.raw_content()
        view = attempt.annotated if attempt.annotated is not None else self._view(attempt.codec, content)
        out_tokens = self._output_limit(view, content, priced, count=False) * choices_of(content, view)
        new_estimate, input_cost, output_rate = self._worst_case(content, priced, out_tokens, view)
        # The logical call (and an auxiliary call around it) number their next attempt after this one.
        attempt.renew(new_request, cheaper, exceeded(node, estimate, model, held), {DOWNGRADED_FROM: model})
        return new_request, cheaper, new_estimate, input_cost, output_rate

    def _nodes(self, parent: ScopeHandle | None, budgets: tuple[Budget, ...]) -> Plan:
        scopes: dict[str, ScopeHandle] = {}
        handle = parent
        while handle is not None:
            kind = handle.metadata.get(cv.KIND) if handle.metadata else None
            if kind is not None and kind not in scopes:
                scopes[kind] = handle
            handle = handle.parent
        conversation = scopes.get(cv.CONVERSATION)
        shared = isinstance(self.store, SharedSpendStore)
        nodes: list[Node] = []
        for budget in budgets:
            per = budget.per
            if per == "profile":
                meta = conversation.metadata if conversation is not None else None
                profile = (meta.get(cv.PROFILE_KEY) if meta else None) or self._relay.name
                key = f"profile:{profile}"
                rollup = self.profile_rollup(profile)
                if not shared:  # a shared store's figure is read at every reservation instead
                    self._carry(rollup, key)
                nodes.append(Node(budget, rollup, None, key, shared))
                continue
            scope = scopes.get(KIND_OF[per])
            if scope is None:
                continue  # not inside such a scope: this budget has nothing to count against
            rollup = self._rollup(scope)
            store_key: str | None = None
            if per == "conversation":
                meta = scope.metadata or {}
                profile = meta.get(cv.PROFILE_KEY) or self._relay.name
                store_key = f"conversation:{profile}:{meta.get(cv.SESSION_ID) or scope.uuid}"
                if not shared:
                    self._carry(rollup, store_key)
            nodes.append(Node(budget, rollup, scope, store_key, shared and store_key is not None))
        plan = self._plan = Plan(parent, budgets, nodes)
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


def _extra_cost(priced: Priced, asked: Mapping[str, Any], content: Mapping[str, Any], out_tokens: int) -> float:
    """What a request's worst case holds beyond a full window of input and its output at the dearest text
    rate, as ``_worst_case`` prices it: the web searches its tools allow, an answer in audio."""
    entry = priced.entry
    extra = web_searches(asked)[0] * entry.web_search if entry.web_search else 0.0
    if entry.output_audio is not None and _audio_answer(content):
        extra += out_tokens * max(0.0, rate_at(entry.output_audio, TOP_TIER) * 1e-6 - priced.out_rate)
    return extra


def _audio_answer(content: Mapping[str, Any]) -> bool:
    modalities = content.get("modalities")
    return isinstance(modalities, list | tuple) and "audio" in modalities


def _may_ask_extras(content: Mapping[str, Any]) -> bool:
    """Whether a request may ask for searches or audio (a prompt under none of ``INPUT_KEYS`` is not read here)."""
    if not any(key in content for key in INPUT_KEYS):
        return True
    return _audio_answer(content) or web_searches(content)[0] > 0


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
