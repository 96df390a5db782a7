"""The detectors' fast paths find what the plain code they replaced found, on a large generated corpus."""

from __future__ import annotations

import random
import re

import pytest

from relay_runtime import detectors_numbers as dn
from relay_runtime import detectors_tokens as dt
from relay_runtime.redaction_rules import Rule

_PIECES = (
    "jane.doe@example.com", "a+b%c@mail.co.uk", "x@y", "@", "@@", "foo@bar.", "üser@example.org",
    "4111 1111 1111 1111", "4111-1111-1111-1111", "378282246310005", "+44 20 7946 0958", "(212) 555-0100",
    "212.555.0100", "0044 20 7946 0958", "10.0.4.17", "256.1.1.1", "::1", "fe80::1", "123-45-6789",
    "GB82 WEST 1234 5698 7654 32", "DE89370400440532013000", "v1.2.3", "2024-05-01", "00042", "٣٤٥٦٧٨٩",
    "sk-proj-Zx8Kq2LmN4pR7sT1vW3yB5cD9fG0hJ", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
)  # fmt: skip
_CHARS = "0123456789" * 3 + " ().+-_" * 2 + "abcXYZ@:.é٣"


def _corpus(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.4:
                parts.append(rng.choice(_PIECES))
            else:
                parts.append("".join(rng.choice(_CHARS) for _ in range(rng.randint(0, 24))))
        out.append(rng.choice(("", " ", "x", "-", ".")).join(parts))
    return out


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    """Built when a test here asks for it, not at collection: it takes seconds, which every run would pay."""
    return _corpus(100_000)


def _email_before(text: str) -> list[tuple[int, int]]:
    """``find_email`` written plainly: the local part walked back a character at a time."""
    found: list[tuple[int, int]] = []
    i = text.find("@")
    last = 0
    while i >= 0:
        start = i
        floor = max(last, i - 64)
        while start > floor and (text[start - 1] in dt._LOCAL_CHARS or text[start - 1].isalnum()):
            start -= 1
        domain = dt._DOMAIN.match(text, i + 1)
        if domain is not None and start < i:
            last = domain.end()
            found.append((start, last))
        i = text.find("@", max(i + 1, last))
    return found


def test_email_matches_the_character_walk(corpus: list[str]) -> None:
    long_local = "a" * 70 + "@example.com " + "b" * 64 + "@example.com " + "é" * 70 + "@example.com"
    for text in [*corpus, long_local]:
        assert dt.find_email(text) == _email_before(text), text


def _scan_before(text: str) -> tuple[tuple[int, int], list[tuple[int, int, int]]]:
    """The numeric scan's window and runs as computed before (a filtered list of digit positions)."""
    found = [i for i in map(text.find, "0123456789") if i >= 0]
    if not found:
        return (0, 0), []
    lo = min(found)
    while lo > 0 and text[lo - 1] in dn._RUN_CHARS:
        lo -= 1
    hi = max(map(text.rfind, "0123456789")) + 1
    runs = []
    for m in dn._NUMERIC_RUN.finditer(text, lo, hi):
        start, end = m.span()
        digits = sum(c.isdigit() for c in m.group())
        if end - start >= 4 and digits >= 4:
            runs.append((start, end, digits))
    return (lo, hi), runs


def test_numeric_scan_matches_the_plain_scan(corpus: list[str]) -> None:
    for text in corpus:
        window, runs = dn._scan(text)
        assert (window, [r[:3] for r in runs]) == _scan_before(text), text
        # Each run carries its own text: the separator checks read it instead of searching the text.
        assert all(r[3] == text[r[0] : r[1]] for r in runs)


@pytest.mark.parametrize("action", ["redact", "remove"])
def test_rule_constant_is_its_replacement(action: str) -> None:
    for rule in (Rule(action, detector="email"), Rule(action, pattern=re.compile("x"), replacement=None)):
        assert rule.constant is not None
        for value in ("a@b.co", "x", ""):
            assert rule.constant == rule.replace(value, None, None)
    assert Rule("redact", detector="email", replacement="<e>").constant == "<e>"
    assert Rule("mask", detector="email").constant is None
