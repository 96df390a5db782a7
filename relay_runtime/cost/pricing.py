"""What one attempt cost, and the roll-up of many, by the providers' own billing rules.

- Reasoning tokens are part of the output tokens: priced at the entry's
  reasoning rate when it has one, else at the output rate. Audio and image
  tokens are part of the input or output tokens, an hour's cache writes part
  of the cache writes: each at its own rate when the entry has one.
- OpenAI (and the APIs that copy its usage shape) count cached tokens inside
  the prompt tokens: those are priced as cache reads, the rest as input.
- Anthropic reports cache reads and cache writes beside its input tokens.
- A fee per request (Perplexity's) is billed beside the tokens, once per attempt priced; so is each web
  search a provider's own search tool ran (Anthropic's ``server_tool_use``).

A model with no entry, tokens in a category the entry has no rate for, or
counts no bill can have (negative, contradictory, absurdly large) give no
amount (``amount is None``, the reason in ``missing``): never a silent zero.
"""

from __future__ import annotations

from typing import Any

from ..types import TokenUsage
from .catalog import PriceEntry, rate_at

# The token categories of a breakdown; the fast path (flat rates, text only) prices the first five.
CATEGORIES = (
    "input", "cache_read", "cache_write", "output", "reasoning",
    "cache_write_1h", "input_audio", "output_audio", "input_image", "output_image", "cache_read_audio",
)  # fmt: skip
FAST_CATEGORIES = CATEGORIES[:5]
# The TokenUsage counts a bill is made of, and the most one call can have of any of them: no model
# reads or writes 100 million tokens in one call, so such a count is a broken report, not a bill.
USAGE_COUNTS = (
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens", "reasoning_tokens",
    "cache_creation_1h_tokens", "input_audio_tokens", "output_audio_tokens", "input_image_tokens",
    "output_image_tokens", "cache_read_audio_tokens", "web_search_requests",
)  # fmt: skip
MAX_TOKENS = 100_000_000

# Providers whose input token count excludes the cache reads and writes.
CACHE_BESIDE_INPUT = frozenset({"anthropic"})

_M = 1e-6


class AttemptCost:
    """The cost of one attempt: ``amount`` (None when it cannot be priced), per category in ``breakdown``."""

    __slots__ = (
        "_breakdown",
        "_rates",
        "_tokens",
        "amount",
        "currency",
        "estimated",
        "missing",
        "model",
        "provider",
        "valid_from",
        "wasted",
    )

    def __init__(
        self,
        amount: float | None,
        currency: str,
        provider: str | None = None,
        model: str | None = None,
        valid_from: str | None = None,
        breakdown: dict[str, float] | None = None,
        missing: tuple[str, ...] = (),
        estimated: bool = False,
    ) -> None:
        self.amount = amount
        self.currency = currency
        self.provider = provider
        self.model = model
        self.valid_from = valid_from
        self._breakdown: dict[str, float] | None = breakdown if breakdown is not None else {}
        self._tokens: tuple[int, ...] | None = None
        self._rates: tuple[float | None, ...] | None = None
        self.missing = missing
        self.estimated = estimated
        self.wasted = False

    @property
    def breakdown(self) -> dict[str, float]:
        """Amount per token category; built on first read when the attempt was priced on the fast path."""
        parts = self._breakdown
        if parts is None:
            parts = {}
            if self._tokens is not None and self._rates is not None:
                for name, tokens, rate in zip(FAST_CATEGORIES, self._tokens, self._rates, strict=True):
                    if tokens > 0 and rate is not None:
                        parts[name] = tokens * rate
            self._breakdown = parts
        return parts

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"amount": self.amount, "currency": self.currency}
        for name in ("provider", "model", "valid_from"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.breakdown:
            out["breakdown"] = dict(self.breakdown)
        if self.missing:
            out["missing"] = list(self.missing)
        if self.estimated:
            out["estimated"] = True
        if self.wasted:
            out["wasted"] = True
        return out

    def __repr__(self) -> str:
        amount = f"{self.amount:.6f}" if self.amount is not None else f"unpriced {list(self.missing)}"
        return f"AttemptCost({amount} {self.currency}{' wasted' if self.wasted else ''})"


_new_rollup = object.__new__


class CostRollup:
    """What the attempts below a scope cost: ``total`` of the priced ones, the ``wasted`` share of it.

    ``unpriced`` counts attempts that had no amount: while it is above zero,
    ``total`` is a lower bound (``complete`` is False). ``carried`` is spend
    recorded before this process (a conversation's or profile's, from the
    spend store); ``reserved`` is the worst case of calls in flight.
    """

    __slots__ = ("attempts", "carried", "currency", "loaded", "reserved", "total", "unpriced", "warned", "wasted")

    def __init__(self, currency: str | None = None) -> None:
        self.total = 0.0
        self.wasted = 0.0
        self.attempts = 0
        self.unpriced = 0
        self.currency = currency
        self.carried = 0.0
        self.reserved = 0.0
        self.loaded = False  # whether ``carried`` was read from the spend store
        self.warned: set[int] | None = None  # ids of the budgets that warned on this scope

    @property
    def complete(self) -> bool:
        return self.unpriced == 0

    def snapshot(self) -> CostRollup:
        """A copy as it stands: what the scope's end event carries (``RelayCost.frozen``). The roll-up itself
        goes on changing after the end (an answer charged late, a reservation released), and a consumer that
        reads a held event later (a buffered exporter's writer thread) must read what was true at the end."""
        copy = _new_rollup(CostRollup)
        copy.total, copy.wasted, copy.attempts, copy.unpriced = self.total, self.wasted, self.attempts, self.unpriced
        copy.currency, copy.carried, copy.reserved = self.currency, self.carried, self.reserved
        copy.loaded = self.loaded
        copy.warned = None  # which budgets warned is the live roll-up's bookkeeping, not part of the record
        return copy

    @property
    def spent(self) -> float:
        """Everything a budget counts as spent: carried over plus priced here."""
        return self.carried + self.total

    def add(self, amount: float | None, wasted: bool) -> None:
        """Count one attempt's amount in (None: an attempt with no amount)."""
        if amount is None:
            self.unpriced += 1
            return
        self.attempts += 1
        self.total += amount
        if wasted:
            self.wasted += amount

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "total": self.total,
            "wasted": self.wasted,
            "currency": self.currency,
            "attempts": self.attempts,
        }
        if self.unpriced:
            out["unpriced"] = self.unpriced
        if self.carried:
            out["carried"] = self.carried
        return out

    def __repr__(self) -> str:
        partial = f", {self.unpriced} unpriced" if self.unpriced else ""
        return f"CostRollup({self.total:.6f} {self.currency or ''}, wasted {self.wasted:.6f}{partial})"


def invalid_usage(usage: TokenUsage) -> bool:
    """Counts no bill can have: negative, or more tokens in one call than any model reads or writes."""
    for name in USAGE_COUNTS:
        value = getattr(usage, name)
        if value is not None and (type(value) is not int or value < 0 or value > MAX_TOKENS):
            return True
    return False


def price_usage(entry: PriceEntry, provider: str, usage: TokenUsage) -> AttemptCost:
    """The cost of ``usage`` at ``entry``'s rates, by ``provider``'s billing rules, with its breakdown.

    A part billed apart (an hour's cache writes, audio, images, reasoning) is priced at its own rate
    when the entry has one, else at the rate of the category it is part of, as genai-prices does.
    """
    if invalid_usage(usage):
        return AttemptCost(None, entry.currency, provider, entry.model, entry.valid_from, {}, ("usage",))
    inp = usage.input_tokens or 0
    out = usage.output_tokens or 0
    cache_read = usage.cache_read_tokens or 0
    cache_write = usage.cache_creation_tokens or 0
    whole = inp + cache_read + cache_write if provider in CACHE_BESIDE_INPUT else inp
    # Each part priced apart is taken out of the count it belongs to; one without a rate stays in it.
    write_1h = (usage.cache_creation_1h_tokens or 0) if entry.cache_write_1h is not None else 0
    in_audio = (usage.input_audio_tokens or 0) if entry.input_audio is not None else 0
    # Cached audio is among the cache reads and among the audio: billed once, as a cache read (of audio).
    cached_audio = usage.cache_read_audio_tokens or 0
    read_audio = cached_audio if entry.cache_read_audio is not None else 0
    fresh_audio = in_audio - cached_audio if in_audio else 0
    in_image = (usage.input_image_tokens or 0) if entry.input_image is not None else 0
    reasoning = (usage.reasoning_tokens or 0) if entry.reasoning is not None else 0
    out_audio = (usage.output_audio_tokens or 0) if entry.output_audio is not None else 0
    out_image = (usage.output_image_tokens or 0) if entry.output_image is not None else 0
    fresh = whole - cache_read - cache_write - fresh_audio - in_image
    text_out = out - reasoning - out_audio - out_image
    missing: list[str] = []
    if (fresh < 0 or text_out < 0 or cache_write < write_1h or (usage.reasoning_tokens or 0) > out
            or fresh_audio < 0 or cache_read < cached_audio):  # fmt: skip
        missing.append("usage")  # counts that contradict each other: no amount rather than a wrong one
    breakdown: dict[str, float] = {}
    counts = (fresh, cache_read - read_audio, cache_write - write_1h, text_out, reasoning, write_1h, fresh_audio,
              out_audio, in_image, out_image, read_audio)  # fmt: skip
    rates = (entry.input, entry.cache_read, entry.cache_write, entry.output, entry.reasoning, entry.cache_write_1h,
             entry.input_audio, entry.output_audio, entry.input_image, entry.output_image,
             entry.cache_read_audio)  # fmt: skip
    for category, tokens, rate in zip(CATEGORIES, counts, rates, strict=True):
        if tokens <= 0:
            continue
        if rate is None:
            missing.append(category)
        else:
            breakdown[category] = tokens * rate_at(rate, whole) * _M
    if entry.request:
        breakdown["request"] = entry.request
    searches = usage.web_search_requests
    if searches:
        if entry.web_search is None:
            missing.append("web_search")
        else:
            breakdown["web_search"] = searches * entry.web_search
    if missing:
        return AttemptCost(None, entry.currency, provider, entry.model, entry.valid_from, breakdown, tuple(missing))
    return AttemptCost(sum(breakdown.values()), entry.currency, provider, entry.model, entry.valid_from, breakdown)


def unpriced(currency: str, provider: str | None, model: str | None, reason: str) -> AttemptCost:
    return AttemptCost(None, currency, provider, model, None, None, (reason,))
