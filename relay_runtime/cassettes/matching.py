"""Why a call found no recording: the closest recorded request and a diff against it.

Every request given here is as its cassette stores it (see ``Cassette.shown``): what a miss
prints reaches the caller, CI logs, events and spans, and must hold nothing the file would not.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from .requests import canonical, pretty

# A miss message shows this many diff lines at most: enough for a changed prompt, bounded for a huge one.
MAX_DIFF_LINES = 80


# How many candidates, best by the cheap measure, the line diff then ranks.
DIFFED = 4


def closest(request: Mapping[str, Any], candidates: Sequence[Mapping[str, Any]]) -> int | None:
    """Index of the candidate whose text is most like ``request``'s (same provider and API preferred).

    A line diff of every candidate takes minutes on a big cassette: candidates are first
    ranked by the share of parts (each message, tool and other field, as canonical JSON)
    they have in common with ``request``, and only the best few are diffed.
    """
    if not candidates:
        return None
    parts = _parts(request)
    ranked = sorted(range(len(candidates)), key=lambda i: -_overlap(parts, _parts(candidates[i])))
    text = pretty(request).splitlines()
    best, best_score = ranked[0], -1.0
    for index in sorted(ranked[:DIFFED]):  # in recorded order: the earliest of equals wins, as a full scan would
        candidate = candidates[index]
        same_api = candidate.get("provider") == request.get("provider") and candidate.get("api") == request.get("api")
        score = difflib.SequenceMatcher(None, pretty(candidate).splitlines(), text, autojunk=False).ratio()
        score += 1.0 if same_api else 0.0
        if score > best_score:
            best, best_score = index, score
    return best


def _parts(request: Mapping[str, Any]) -> Counter[str]:
    """A request as a bag of its parts' canonical text: each item of a list field, every other field whole."""
    bag: Counter[str] = Counter()
    for key, value in request.items():
        items = value if isinstance(value, list) else [value]
        bag.update(f"{key}\0{canonical({'': item})}" for item in items)
    return bag


def _overlap(parts: Counter[str], other: Counter[str]) -> float:
    """How much two bags share (1.0: the same parts), the same provider and API counting above all."""
    shared = sum((parts & other).values())
    same_api = parts.keys() & other.keys() >= {k for k in parts if k.startswith(("provider\0", "api\0"))}
    return (1.0 if same_api else 0.0) + 2 * shared / ((sum(parts.values()) + sum(other.values())) or 1)


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


def withheld(recorded: Any, matched: Any, shown: Any, path: str = "") -> list[str]:
    """Where the request as matched differs from ``recorded`` while the request as shown does not: a
    difference the cassette's redaction hides from the diff (a ``redact=`` hook's), which a miss still names.

    Paths are named by the keys ``shown`` has, never by ``matched``'s own: those may be what was hidden.
    """
    if _same(matched, recorded):
        return []
    if _same(shown, recorded):
        return _changed(recorded, matched, path)
    found: list[str] = []
    if isinstance(recorded, Mapping) and isinstance(matched, Mapping) and isinstance(shown, Mapping):
        for key in shown:
            if key in recorded and key in matched:
                where = f"{path}.{key}" if path else str(key)
                found += withheld(recorded[key], matched[key], shown[key], where)
    # Items are paired by place only when none was added or dropped; else the diff shows the list changed.
    elif (
        isinstance(recorded, list)
        and isinstance(matched, list)
        and isinstance(shown, list)
        and (len(recorded) == len(matched) == len(shown))
    ):
        for index, (r, m, s) in enumerate(zip(recorded, matched, shown, strict=True)):
            found += withheld(r, m, s, f"{path}[{index}]")
    return found


def _changed(recorded: Any, matched: Any, path: str) -> list[str]:
    """Where ``matched`` differs from ``recorded`` (which is as shown), named by ``recorded``'s keys: a
    difference in a key only ``matched`` has is named by the path of what holds it."""
    if isinstance(recorded, Mapping) and isinstance(matched, Mapping) and matched.keys() <= recorded.keys():
        found: list[str] = []
        for key in recorded:
            where = f"{path}.{key}" if path else str(key)
            found += _changed(recorded[key], matched[key], where) if key in matched else [where]
        return found
    if isinstance(recorded, list) and isinstance(matched, list) and len(recorded) == len(matched):
        return [
            p for i, (r, m) in enumerate(zip(recorded, matched, strict=True)) for p in _changed(r, m, f"{path}[{i}]")
        ]
    return [] if _same(recorded, matched) else [path or "the request"]


def _same(a: Any, b: Any) -> bool:
    # As JSON compares them: 1, 1.0 and true are three values, though Python finds them equal.
    return a is b or canonical({"": a}) == canonical({"": b})
