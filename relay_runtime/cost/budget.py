"""Spending limits, and the output limit a call is checked against before it is sent (its input: ``estimate``)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

from ..types import AnnotatedLLMRequest
from .estimate import CHARS_PER_TOKEN, INPUT_KEYS, input_tokens_estimate, text_chars

__all__ = [
    "CHARS_PER_TOKEN",
    "INPUT_KEYS",
    "Budget",
    "BudgetExceeded",
    "choices_of",
    "input_tokens_estimate",
    "max_output_tokens",
    "text_chars",
]

PER = ("turn", "conversation", "logical_call", "profile")
ON_EXCEED = ("raise", "stop_stream", "downgrade")
# Spend that outlives the process: kept in the spend store.
PERSISTED = frozenset({"conversation", "profile"})

DEFAULT_ASSUMED_OUTPUT_TOKENS = 4096

_ids = itertools.count(1)


class BudgetExceeded(Exception):
    """A call was refused (nothing sent) or a stream stopped, because it would cross a budget."""

    def __init__(self, budget: Budget, *, spent: float, limit: float, estimate: float, model: str | None = None):
        self.budget = budget
        self.spent = spent
        self.limit = limit
        self.estimate = estimate
        self.model = model
        what = f" for {model}" if model else ""
        super().__init__(
            f"budget {budget.name!r} (per {budget.per}) exceeded: spent {spent:.6f} + estimate {estimate:.6f}{what} "
            f"> limit {limit:.6f}"
        )


class Budget:
    """A limit on spend per turn, conversation, logical call or profile.

    ``warn_at``: the fraction of ``limit`` at which one ``relay.cost.budget_warning``
    mark is emitted (once per budget and scope). ``on_exceed``: ``raise``
    (refuse the call, nothing sent), ``stop_stream`` (streams run and are
    closed when their running cost crosses; other calls are refused), or
    ``downgrade`` (send to ``downgrade_to[model]`` instead, refuse when no
    mapping fits). A model call recorded from a framework's callbacks (not run by the relay) cannot
    be refused: its spend counts after the fact, against the next call.
    """

    def __init__(
        self,
        limit: float,
        *,
        per: str = "turn",
        warn_at: float | None = 0.8,
        on_exceed: str = "raise",
        downgrade_to: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int | float) or not limit > 0 or math.isinf(limit):
            raise ValueError(f"budget limit must be a positive finite number, got {limit!r}")
        if per not in PER:
            raise ValueError(f"budget per must be one of {list(PER)}, got {per!r}")
        if on_exceed not in ON_EXCEED:
            raise ValueError(f"budget on_exceed must be one of {list(ON_EXCEED)}, got {on_exceed!r}")
        if warn_at is not None and (isinstance(warn_at, bool) or not isinstance(warn_at, int | float)
                                    or not 0 < warn_at <= 1):  # fmt: skip
            raise ValueError(f"budget warn_at must be a fraction in (0, 1] or None, got {warn_at!r}")
        if on_exceed == "downgrade":
            if not isinstance(downgrade_to, Mapping) or not downgrade_to:
                raise ValueError("a budget with on_exceed='downgrade' needs downgrade_to={model: cheaper_model}")
            for src, dst in downgrade_to.items():
                if not isinstance(src, str) or not isinstance(dst, str) or not src or not dst:
                    raise ValueError(f"downgrade_to maps model names to model names, got {src!r}: {dst!r}")
        elif downgrade_to:
            raise ValueError(f"downgrade_to is only read with on_exceed='downgrade', not {on_exceed!r}")
        self.id = next(_ids)
        self.limit = float(limit)
        self.per = per
        self.warn_at = float(warn_at) if warn_at is not None else None
        self.on_exceed = on_exceed
        self.downgrade_to: dict[str, str] = dict(downgrade_to or {})
        self.name = name or f"{per}:{self.limit:g}"

    @property
    def persisted(self) -> bool:
        return self.per in PERSISTED

    def __repr__(self) -> str:
        return f"Budget({self.limit:g}, per={self.per!r}, on_exceed={self.on_exceed!r}, name={self.name!r})"


MAX_OUTPUT_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def max_output_tokens(params: Mapping[str, Any] | None, content: Mapping[str, Any]) -> int | None:
    """The request's own output limit: the neutral params' ``max_tokens`` when present, else the SDK kwargs'."""
    for source in (params, content):
        if not source:
            continue
        for key in MAX_OUTPUT_KEYS:
            value = source.get(key)
            if type(value) is int and value > 0:
                return value
    return None


def choices_of(content: Mapping[str, Any], view: AnnotatedLLMRequest | None = None) -> int:
    """How many answers the request asks for (chat's ``n``, the neutral params' for other SDKs' spellings, as
    Gemini's ``candidate_count``): each may run to the output limit, each is billed."""
    n = content.get("n")
    if n is None and view is not None and view.params:
        n = view.params.get("n")
    return n if type(n) is int and n > 1 else 1
