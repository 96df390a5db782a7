"""RFC 6901 JSON pointers with ``*`` for any one segment: where a redaction rule applies.

A pointer selects a subtree: ``/request/messages/*/content`` covers a message's content
whether it is one string or a list of parts (every string below it). ``~1`` and ``~0``
stand for ``/`` and ``~`` inside a segment, as in RFC 6901; ``*`` alone is the wildcard
(there is no escape for a literal ``*`` key: no field of the view is named so).
"""

from __future__ import annotations

import difflib

WILDCARD = "*"

Path = tuple[str, ...]

# The provider-neutral view every event is read through (README: "Redaction targets").
# Each entry is the pointer of a field; ``...`` below it means free keys of the user's own.
VIEW_FIELDS: tuple[str, ...] = (
    "/request/messages/*/content",
    "/request/messages/*/role",
    "/request/messages/*/tool_calls",
    "/request/system",
    "/request/tools",
    "/request/params",
    "/response/text",
    "/response/reasoning",
    "/response/tool_calls/*/arguments",
    "/response/tool_calls/*/name",
    "/tool/arguments",
    "/tool/result",
    "/metadata",
    "/data",
    "/input",
    "/output",
    "/error/message",
)
# Fields under which any key may follow (the SDK's params, the user's metadata and mark data, tool
# arguments and results, message contents as parts).
_OPEN = ("/request/params", "/request/messages/*", "/request/tools", "/response/tool_calls/*/arguments",
         "/tool/arguments", "/tool/result", "/metadata", "/data", "/input", "/output")  # fmt: skip


class PointerError(ValueError):
    """A redaction target that is not a JSON pointer."""


# What the SDK sends beside the view, read as ``/request/params`` (its keys are params, as a cassette stores them).
SENT_BESIDE = ("extra_body", "extra_query")


def parse(pointer: str) -> Path:
    """``"/a/b~1c"`` -> ``("a", "b/c")``; ``""`` (the whole document) -> ``()``."""
    if not isinstance(pointer, str):
        raise PointerError(f"a redaction path must be a string JSON pointer, got {type(pointer).__name__}")
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise PointerError(f"redaction path {pointer!r} is not a JSON pointer: it must start with '/' (RFC 6901)")
    segments = pointer[1:].split("/")
    for seg in segments:
        rest = seg.replace("~0", "").replace("~1", "")
        if "~" in rest:
            raise PointerError(f"redaction path {pointer!r}: '~' must be followed by 0 or 1 (RFC 6901)")
    return tuple(seg.replace("~1", "/").replace("~0", "~") for seg in segments)


def covers(pattern: Path, path: Path) -> bool:
    """Whether the pointer ``pattern`` selects ``path`` or a subtree holding it."""
    if len(pattern) > len(path):
        return False
    return all(not (want != WILDCARD and want != have) for want, have in zip(pattern, path, strict=False))


def may_reach(pattern: Path, path: Path) -> bool:
    """Whether something at or below ``path`` could be selected by ``pattern`` (walk pruning)."""
    return all(not (want != WILDCARD and want != have) for want, have in zip(pattern, path, strict=False))


def unknown_field(pointer: str) -> list[str] | None:
    """None if ``pointer`` can match a field of the view; else the fields it may have meant (maybe none)."""
    path = parse(pointer)
    if not path:
        return None
    if path[:2] == ("request", "params") and len(path) > 2 and path[2] in SENT_BESIDE:
        # What the SDK sends beside the view is read as params itself: its keys are the params' names.
        return ["/request/params/" + ("/".join(path[3:]) if len(path) > 3 else "<name>")]
    for field in VIEW_FIELDS:
        known = parse(field)
        # Either the pointer is inside a field (any depth below it), or it selects a field or a parent of one.
        if covers(known, path) or may_reach(path, known) or _wild_match(known, path):
            return None
    for field in _OPEN:
        if covers(parse(field), path):
            return None
    return difflib.get_close_matches(pointer, VIEW_FIELDS, n=3, cutoff=0.5)


def _wild_match(known: Path, path: Path) -> bool:
    """A pointer with ``*`` where the view has a name (``/request/*``) still reaches that field."""
    if len(path) > len(known):
        return False
    return all(p in (WILDCARD, k) or k == WILDCARD for p, k in zip(path, known, strict=False))
