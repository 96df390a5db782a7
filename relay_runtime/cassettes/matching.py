"""Why a call found no recording: the closest recorded request and a diff against it."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from .requests import pretty

# A miss message shows this many diff lines at most: enough for a changed prompt, bounded for a huge one.
MAX_DIFF_LINES = 80


def closest(request: Mapping[str, Any], candidates: Sequence[Mapping[str, Any]]) -> int | None:
    """Index of the candidate whose text is most like ``request``'s (same provider and API preferred)."""
    if not candidates:
        return None
    text = pretty(request).splitlines()
    best, best_score = 0, -1.0
    for index, candidate in enumerate(candidates):
        same_api = candidate.get("provider") == request.get("provider") and candidate.get("api") == request.get("api")
        score = difflib.SequenceMatcher(None, pretty(candidate).splitlines(), text, autojunk=False).ratio()
        score += 1.0 if same_api else 0.0
        if score > best_score:
            best, best_score = index, score
    return best


def diff(recorded: Mapping[str, Any], request: Mapping[str, Any]) -> str:
    lines = list(
        difflib.unified_diff(
            pretty(recorded).splitlines(),
            pretty(request).splitlines(),
            fromfile="recorded",
            tofile="this call",
            lineterm="",
        )
    )
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"... ({len(lines) - MAX_DIFF_LINES} more diff lines)"]
    return "\n".join(lines)
