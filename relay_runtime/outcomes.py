"""What a scope's end says of how it ended: its outcome, and the type its error is recorded under."""

from __future__ import annotations

from .types import Outcome

# The outcomes' values, read once: an enum member's ``.value`` costs two Python calls on every read.
_SUCCESS = Outcome.SUCCESS.value
_CANCELLED = Outcome.CANCELLED.value
_FAILED = Outcome.FAILED.value


def outcome_of(error: BaseException | None) -> str:
    if error is None:
        return _SUCCESS
    if isinstance(error, (KeyboardInterrupt, GeneratorExit)) or _is_cancelled(error):
        return _CANCELLED
    return _FAILED


def error_type_of(error: BaseException) -> str:
    """What events call ``error``: its class name, or the ``relay_error_type`` it declares."""
    declared = getattr(error, "relay_error_type", None)
    return declared if isinstance(declared, str) and declared else type(error).__name__


def _is_cancelled(error: BaseException) -> bool:
    import asyncio

    return isinstance(error, asyncio.CancelledError)
