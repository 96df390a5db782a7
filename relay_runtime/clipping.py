"""Cutting caller data to a bound without cutting a value in two.

Integrations bound what they put in an event (a span name, a payload string, an error text)
before the redaction policy reads it. A plain cut can split an e-mail address, a key or a
card number, and a detector does not find a value's first half (``jane.doe@example.c``,
``sk-proj-Zx8Kq2L``): that half would reach every sink. So a cut here also drops the token it
went through (addresses, keys and JWTs hold no space) and the digits and separators just
before it (a card or phone number written in groups): a value either stays whole, where the
policy finds it, or is left out.
"""

from __future__ import annotations

# Characters of a number written in groups: what a card, phone or IBAN's earlier groups are made of.
_GROUPED = frozenset("0123456789 ().+-/")


def head(text: str, limit: int) -> str:
    """The start of ``text`` kept when it is cut to at most ``limit`` characters (``text`` itself when it fits)."""
    if len(text) <= limit:
        return text
    end = max(0, limit)
    if end < len(text) and not text[end].isspace():
        while end > 0 and not text[end - 1].isspace():  # the token the cut went through
            end -= 1
    while end > 0 and (text[end - 1] in _GROUPED or text[end - 1].isspace()):
        end -= 1
    return text[:end]


# An error's text as events carry it: a provider or an MCP server may answer with megabytes of it, and every
# sink (spans, journal rows, the run page) would hold it all.
ERROR_MESSAGE_LIMIT = 16_384


def bounded(text: str, limit: int) -> str:
    """``text`` cut as ``head`` cuts it, saying how much was left out (``text`` itself when it fits)."""
    if len(text) <= limit:
        return text
    kept = head(text, limit)
    return f"{kept} [cut: {len(text) - len(kept):,} more characters]"


def printable(text: str) -> str:
    """``text`` with each character that is not printable (line breaks, escapes, NUL, bidi overrides) as U+FFFD.

    For caller data that becomes a name (a span's, a metric label): a name that ends a line or moves the
    cursor forges log lines and rewrites terminals where backends show it, and NUL breaks some stores.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else "\ufffd" for c in text)
