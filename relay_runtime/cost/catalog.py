"""Prices per provider and model: a user's own mapping, the ``genai-prices`` data set, or both.

Prices are per million tokens, in one currency. A price may be *tiered* (the
rate depends on the request's whole input size, as some providers bill long
prompts): a tuple of ``(above_input_tokens, rate)`` pairs, the first from 0. A
tier applies to a request with *more* input than its start, as the providers
bill: exactly 200,000 input tokens are billed at the rate below a 200k tier.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

Rate = float | tuple[tuple[int, float], ...]

# The keys of one model's entry in ``PriceCatalog.from_mapping``.
PRICE_KEYS = (
    "input", "output", "cache_read", "cache_write", "cache_write_1h", "reasoning",
    "input_audio", "output_audio", "input_image", "output_image", "cache_read_audio",
)  # fmt: skip
OTHER_KEYS = ("request", "web_search", "max_output_tokens", "context_window", "valid_from", "currency")


def rate_at(rate: Rate, input_tokens: int) -> float:
    """The per-million rate that applies to a request with ``input_tokens`` of input."""
    if type(rate) is float:
        return rate
    tiers: tuple[tuple[int, float], ...] = rate  # type: ignore[assignment]
    chosen = tiers[0][1]  # the base rate, whatever its start says
    for start, value in tiers[1:]:
        if input_tokens > start:
            chosen = value
    return chosen


@dataclass(frozen=True, slots=True)
class PriceEntry:
    """One model's prices (per million tokens); ``None`` means the category has no price."""

    provider: str
    model: str
    input: Rate | None = None
    output: Rate | None = None
    cache_read: Rate | None = None
    cache_write: Rate | None = None  # writes kept 5 minutes (the default), and any kept longer without a rate
    cache_write_1h: Rate | None = None
    reasoning: Rate | None = None
    input_audio: Rate | None = None
    output_audio: Rate | None = None
    input_image: Rate | None = None
    output_image: Rate | None = None
    cache_read_audio: Rate | None = None  # audio read from the cache (else at the cache read rate)
    request: float | None = None  # a fee billed per request, beside the tokens (not per million)
    web_search: float | None = None  # billed per web search a provider's own search tool ran
    max_output_tokens: int | None = None
    context_window: int | None = None  # the most input a request can have: bounds a budget's quick check
    currency: str = "USD"
    valid_from: str | None = None  # ISO date, when the source says
    source: str = "user"


class PriceCatalog:
    """Prices looked up by ``(provider, model)``; models are matched case-insensitively.

    ``entry(provider, model)`` returns the entry or None. A catalog built by
    ``default()`` resolves a model on first use and remembers the answer; one
    built by ``overlay`` asks its own entries first, then the one below.
    """

    def __init__(
        self,
        entries: Mapping[tuple[str, str], PriceEntry] | None = None,
        *,
        below: PriceCatalog | None = None,
        currency: str = "USD",
    ) -> None:
        self._entries: dict[tuple[str, str], PriceEntry] = dict(entries or {})
        self._below = below
        self.currency = currency
        for entry in self._entries.values():
            if entry.currency != currency:
                raise ValueError(
                    f"price of {entry.provider}/{entry.model} is in {entry.currency}, the catalog in {currency}"
                )
        if below is not None and below.currency != currency:
            raise ValueError(f"cannot overlay a {currency} catalog on a {below.currency} one")

    # -- building ----------------------------------------------------------------------------------

    @classmethod
    def from_mapping(
        cls, mapping: Mapping[str, Mapping[str, Mapping[str, Any]]], *, currency: str = "USD"
    ) -> PriceCatalog:
        """``{"openai": {"gpt-x": {"input": 1.0, "output": 4.0, "cache_read": 0.1}}}``: USD per million tokens.

        Keys per model: ``input``, ``output``, ``cache_read``, ``cache_write``
        (5-minute writes), ``cache_write_1h``, ``reasoning``, ``input_audio``,
        ``output_audio``, ``input_image``, ``output_image``, ``cache_read_audio``
        (rates), ``request`` (a fee per request, beside the tokens), ``web_search``
        (per search its search tool ran), and ``max_output_tokens``,
        ``context_window`` (tokens), ``valid_from`` (``YYYY-MM-DD``), ``currency``.
        Anything else is an error naming the key.
        """
        if not isinstance(mapping, Mapping):
            raise TypeError(f"a price mapping is {{provider: {{model: {{key: rate}}}}}}, got {type(mapping).__name__}")
        entries: dict[tuple[str, str], PriceEntry] = {}
        for provider, models in mapping.items():
            if not isinstance(provider, str) or not provider:
                raise ValueError(f"provider names must be non-empty strings, got {provider!r}")
            if not isinstance(models, Mapping):
                raise TypeError(
                    f"prices of provider {provider!r} must be a mapping of models, got {type(models).__name__}"
                )
            for model, prices in models.items():
                entry = _entry_from_mapping(provider, model, prices, currency)
                entries[(provider.lower(), model.lower())] = entry
        return cls(entries, currency=currency)

    @classmethod
    def default(cls) -> PriceCatalog:
        """Prices from the ``genai-prices`` package (install the ``cost`` extra), resolved per model on first use."""
        try:
            import genai_prices  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                "PriceCatalog.default() reads the genai-prices package: pip install 'relay-runtime[cost]'"
            ) from exc
        return _GenAIPricesCatalog()

    def overlay(self, base: PriceCatalog) -> PriceCatalog:
        """This catalog's entries over ``base``: a model priced here is priced by this entry alone."""
        return PriceCatalog(self._entries, below=base if self._below is None else self._below.overlay(base),
                            currency=self.currency)  # fmt: skip

    # -- reading -----------------------------------------------------------------------------------

    def entry(self, provider: str, model: str) -> PriceEntry | None:
        found = self._entries.get((provider, model)) or self._entries.get((provider.lower(), model.lower()))
        if found is not None:
            return found
        bare = bare_model(model)
        if bare is not None:
            found = self._entries.get((provider, bare)) or self._entries.get((provider.lower(), bare.lower()))
            if found is not None:
                return found
        return self._below.entry(provider, model) if self._below is not None else None

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        below = f" over {self._below!r}" if self._below is not None else ""
        return f"<PriceCatalog {len(self._entries)} models in {self.currency}{below}>"


def _entry_from_mapping(provider: str, model: Any, prices: Any, currency: str) -> PriceEntry:
    where = f"{provider}/{model}"
    if not isinstance(model, str) or not model:
        raise ValueError(f"model names of {provider!r} must be non-empty strings, got {model!r}")
    if not isinstance(prices, Mapping):
        raise TypeError(f"prices of {where} must be a mapping, got {type(prices).__name__}")
    unknown = [k for k in prices if k not in PRICE_KEYS and k not in OTHER_KEYS]
    if unknown:
        raise ValueError(f"unknown price keys for {where}: {sorted(map(str, unknown))}; expected some of "
                         f"{list(PRICE_KEYS + OTHER_KEYS)}")  # fmt: skip
    fields: dict[str, Any] = {}
    for key in PRICE_KEYS:
        if key in prices and prices[key] is not None:
            value = prices[key]
            # NaN and inf too: an infinite price makes every cost inf, which no journal row or span can carry.
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise ValueError(f"price {key!r} of {where} must be a number >= 0 (per million tokens), got {value!r}")
            fields[key] = float(value)
    for key, per in (("request", "request"), ("web_search", "search")):
        fee = prices.get(key)
        if fee is not None:
            if isinstance(fee, bool) or not isinstance(fee, int | float) or not 0 <= fee < math.inf:
                raise ValueError(f"price {key!r} of {where} must be a number >= 0 (per {per}), got {fee!r}")
            fields[key] = float(fee)
    limit = prices.get("max_output_tokens")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
        raise ValueError(f"max_output_tokens of {where} must be a positive int, got {limit!r}")
    window = prices.get("context_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
        raise ValueError(f"context_window of {where} must be a positive int, got {window!r}")
    valid_from = prices.get("valid_from")
    if valid_from is not None:
        try:
            valid_from = date.fromisoformat(str(valid_from)).isoformat()
        except ValueError:
            raise ValueError(f"valid_from of {where} must be a date YYYY-MM-DD, got {valid_from!r}") from None
    entry_currency = prices.get("currency", currency)
    if entry_currency != currency:
        raise ValueError(f"price of {where} is in {entry_currency!r}; this catalog is in {currency!r}")
    return PriceEntry(provider, model, max_output_tokens=limit, context_window=window, currency=currency,
                      valid_from=valid_from, **fields)  # fmt: skip


def bare_model(model: str) -> str | None:
    """A model named by its resource path (Google's ``models/gemini-2.5-flash``, Vertex AI's
    ``publishers/google/models/...`` or ``projects/p/locations/l/publishers/google/models/...``) as the
    price lists name it; None for a name with no such path. Unpriced, such a call's budget check was skipped."""
    _, found, bare = model.rpartition("models/")
    return bare if found and bare and "/" not in bare else None


class _GenAIPricesCatalog(PriceCatalog):
    """The ``genai-prices`` data set, read through its public snapshot API, one model at a time."""

    def __init__(self) -> None:
        super().__init__()
        from importlib.metadata import version

        self._source = f"genai-prices {version('genai-prices')}"
        self._lock = threading.Lock()
        self._resolved: dict[tuple[str, str], PriceEntry | None] = {}

    def overlay(self, base: PriceCatalog) -> PriceCatalog:
        raise TypeError("the default catalog is the base: overlay your own prices on it, not it on others")

    def entry(self, provider: str, model: str) -> PriceEntry | None:
        key = (provider, model)
        try:
            return self._resolved[key]
        except KeyError:
            pass
        entry = _from_genai_prices(provider, model, self._source)
        bare = bare_model(model) if entry is None else None
        if bare is not None:
            entry = _from_genai_prices(provider, bare, self._source)
        with self._lock:
            self._resolved[key] = entry
        return entry

    def __repr__(self) -> str:
        return f"<PriceCatalog {self._source}>"


def _from_genai_prices(provider: str, model: str, source: str) -> PriceEntry | None:
    from genai_prices import data_snapshot, types

    now = datetime.now(tz=UTC)
    try:
        _, info = data_snapshot.get_snapshot().find_provider_model(model, None, provider, None)
    except LookupError:
        return None
    prices = info.get_prices(now)
    valid_from: str | None = None
    if not isinstance(info.prices, types.ModelPrice):
        for conditional in reversed(info.prices):
            constraint = conditional.constraint
            if conditional.prices is prices and isinstance(constraint, types.StartDateConstraint):
                valid_from = constraint.start_date.isoformat()
                break

    def rate(key: str) -> Rate | None:
        value = getattr(prices, key, None)
        if value is None:
            return None
        if isinstance(value, types.TieredPrices):
            return ((0, float(value.base)), *((t.start, float(t.price)) for t in value.tiers))
        return float(value)

    def first(*keys: str) -> Rate | None:
        for key in keys:
            found = rate(key)
            if found is not None:
                return found
        return None

    # The data set prices a token with no rate of its own at the rate of the category it is part of
    # (cache reads and writes at the input rate, an hour's writes as writes, reasoning as output):
    # so does an entry made from it.
    inp = first("input_mtok", "input_text_mtok")
    out = first("output_mtok", "output_text_mtok")
    write = first("cache_write_mtok", "cache_write_5m_mtok", "cache_text_write_mtok") or inp
    entry = PriceEntry(
        provider,
        model,
        input=inp,
        output=out,
        cache_read=first("cache_read_mtok", "cache_text_read_mtok") or inp,
        cache_write=write,
        cache_write_1h=first("cache_write_1h_mtok", "cache_text_write_1h_mtok"),
        reasoning=first("output_reasoning_mtok", "output_text_reasoning_mtok"),
        input_audio=rate("input_audio_mtok"),
        output_audio=rate("output_audio_mtok"),
        input_image=rate("input_image_mtok"),
        output_image=rate("output_image_mtok"),
        cache_read_audio=rate("cache_audio_read_mtok"),
        request=fee / 1000 if type(fee := rate("requests_kcount")) is float else None,
        web_search=search / 1000 if type(search := rate("web_searches_kcount")) is float else None,
        context_window=info.context_window if isinstance(info.context_window, int) else None,
        valid_from=valid_from,
        source=source,
    )
    return entry if entry.input is not None or entry.output is not None else None
