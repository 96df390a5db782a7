"""A catalog entry made ready for the hot path: per-token rates, and ``fast_price`` for the common case."""

from __future__ import annotations

from ..types import TokenUsage
from .catalog import PriceEntry, rate_at
from .pricing import CACHE_BESIDE_INPUT, MAX_TOKENS, AttemptCost

_M = 1e-6
_new = object.__new__
TOP_TIER = 1 << 62  # an input size past every tier: a tiered entry's quick check assumes its dearest rates


class Priced:
    """A catalog entry, ready for the hot path: per-token rates, and the rates a worst case is priced at
    (the dearer of input and cache writes, of output and reasoning)."""

    __slots__ = (
        "currency", "entry", "extras", "in_rate", "out_rate", "rates", "simple", "tiered", "valid_from", "window_cost",
    )  # fmt: skip

    def __init__(self, entry: PriceEntry) -> None:
        self.entry = entry
        self.currency = entry.currency
        self.valid_from = entry.valid_from
        prices = (entry.input, entry.cache_read, entry.cache_write, entry.output, entry.reasoning)
        self.tiered = any(r is not None and type(r) is not float for r in prices)
        # Flat rates per token, in CATEGORIES order: what the fast path multiplies by.
        self.rates = tuple(r * _M if type(r) is float else None for r in prices)
        # A fee per request goes in the breakdown, which the fast path does not build.
        self.simple = not self.tiered and entry.input is not None and entry.output is not None and not entry.request
        # A tiered entry's quick check assumes its dearest tier.
        self.in_rate, self.out_rate = self.rates_at(TOP_TIER)
        window = entry.context_window
        # A full window of the dearest input (images or audio may cost more than text), and the fee per request
        # when there is one, bound any request's input side.
        self.window_cost = window * max(self.in_rate, *self.media_rates(TOP_TIER)) + (entry.request or 0.0) \
            if window else None  # fmt: skip
        # Whether a request may ask for what no window bounds: web searches its tools allow, an answer in audio.
        self.extras = bool(entry.web_search) or entry.output_audio is not None

    def media_rates(self, input_tokens: int) -> tuple[float, float]:
        """Per-token rates of image and audio input: their own when the entry has them, else the input rate's."""
        e = self.entry
        base = rate_at(e.input, input_tokens) if e.input is not None else 0.0
        image = rate_at(e.input_image, input_tokens) if e.input_image is not None else base
        audio = rate_at(e.input_audio, input_tokens) if e.input_audio is not None else base
        return image * _M, audio * _M

    def rates_at(self, input_tokens: int) -> tuple[float, float]:
        e = self.entry
        ins = [rate_at(r, input_tokens) for r in (e.input, e.cache_write, e.cache_write_1h) if r is not None]
        outs = [rate_at(r, input_tokens) for r in (e.output, e.reasoning) if r is not None]
        return max(ins, default=0.0) * _M, max(outs, default=0.0) * _M


def fast_price(priced: Priced, provider: str, model: str | None, usage: TokenUsage | None) -> AttemptCost | None:
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
    try:
        # One OR of the counts is negative when any is, and above the cap when any is near it.
        if not 0 <= (inp | out | cache_read | cache_write | reasoning) <= MAX_TOKENS:
            return None  # the general path says what is wrong with them
    except TypeError:  # not ints
        return None
    if (usage.cache_creation_1h_tokens or usage.input_audio_tokens or usage.output_audio_tokens
            or usage.input_image_tokens or usage.output_image_tokens or usage.cache_read_audio_tokens
            or usage.web_search_requests):  # fmt: skip
        return None  # parts priced apart: the general path
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
