"""What an ATIF step counts of its logical call's attempts: tokens and cost as ATIF names them, which attempt the
step stands for, and the trajectory's totals."""

from __future__ import annotations

from typing import Any

# (a step's metric, the trajectory's final_metrics total of it)
TOTALS = (
    ("prompt_tokens", "total_prompt_tokens"),
    ("completion_tokens", "total_completion_tokens"),
    ("cached_tokens", "total_cached_tokens"),
    ("cost_usd", "total_cost_usd"),
)


def usage_of(attempt: dict[str, Any]) -> dict[str, int]:
    usage = (attempt.get("resp") or {}).get("usage") or {}
    return {k: v for k, v in usage.items() if isinstance(v, int)}


def usd(attempt: dict[str, Any]) -> float | None:
    """What an attempt cost in US dollars, when a price catalog priced it (``relay.cost.use``)."""
    cost = attempt.get("cost") or {}
    amount = cost.get("amount")
    if isinstance(amount, (int, float)) and not isinstance(amount, bool) and cost.get("currency", "USD") == "USD":
        return float(amount)
    return None


def prompt_tokens(attempt: dict[str, Any], usage: dict[str, int]) -> int | None:
    """Every input token the call sent, cached or not, as ATIF's ``prompt_tokens`` counts them. Anthropic
    reports cache reads and writes apart from ``input_tokens`` (its codec keeps them apart, as the
    provider does); the other providers' ``input_tokens`` already hold them."""
    prompt = usage.get("input_tokens")
    if prompt is None or attempt.get("provider") != "anthropic":
        return prompt
    return prompt + usage.get("cache_read_tokens", 0) + usage.get("cache_creation_tokens", 0)


def metrics_of(attempt: dict[str, Any]) -> dict[str, Any] | None:
    usage = usage_of(attempt)
    if not usage:
        # Priced without counts (a stream stopped before its usage came, billed by its running estimate): what it
        # cost still counts, in the step and the total, as the journal counts it.
        cost = usd(attempt)
        return {"cost_usd": cost} if cost is not None else None
    prompt, completion = prompt_tokens(attempt, usage), usage.get("output_tokens")
    metrics: dict[str, Any] = {}
    if prompt is not None:
        metrics["prompt_tokens"] = prompt
    if completion is not None:
        metrics["completion_tokens"] = completion
    if "cache_read_tokens" in usage:
        metrics["cached_tokens"] = usage["cache_read_tokens"]
    cost = usd(attempt)
    if cost is not None:
        metrics["cost_usd"] = cost
    extra: dict[str, Any] = {"total_tokens": (prompt or 0) + (completion or 0)}
    for key in ("reasoning_tokens", "cache_creation_tokens"):
        if usage.get(key):
            extra[key] = usage[key]
    metrics["extra"] = extra
    return metrics


def final_attempt(attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """The attempt a logical call's step stands for: its last that succeeded, else its last."""
    for attempt in reversed(attempts):
        if attempt.get("outcome") == "success":
            return attempt
    return attempts[-1]
