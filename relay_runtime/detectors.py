"""Built-in detectors of personal data and secrets in text, for ``RedactionPolicy`` rules.

A detector finds spans: ``find(text) -> [(start, end), ...]``, sorted, not overlapping.
Each one is a regular expression and a validator where the format has one (Luhn for
cards, mod-97 for IBANs, the address parser for IPs, the JOSE header for JWTs), so that
order numbers, version strings and dates survive.

Scanning a prompt is the cost: a regular expression tried at every position of 2 KB of
text costs tens of microseconds, once per detector. So the full expressions only run in
windows around anchors found cheaply: the runs of digits and separators (one scan,
shared by the numeric detectors and kept for the text last seen), each ``@`` for e-mail,
each ``:`` for IPv6, and each literal prefix for keys and JWTs (``str.find``).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

Span = tuple[int, int]


class Detector:
    """A named finder of spans.

    ``needles``: strings of which every match holds one (a fast pre-check); ``digits``: every match
    holds a digit; ``shortest``: no match is shorter. Most strings an event holds are short (roles,
    model names, ids): these checks answer for them without running the finder.
    """

    __slots__ = ("_find", "digits", "name", "needles", "shortest")

    def __init__(
        self, name: str, find: Callable[[str], Iterator[Span]], needles: tuple[str, ...] = (),
        *, digits: bool = False, shortest: int = 1,
    ) -> None:  # fmt: skip
        self.name = name
        self._find = find
        self.needles = needles
        self.digits = digits
        self.shortest = shortest

    def find(self, text: str) -> list[Span]:
        if len(text) < self.shortest:
            return []
        if self.digits and _DIGIT(text) is None:
            return []
        needles = self.needles
        if needles:
            for n in needles:
                if n in text:
                    break
            else:
                return []
        return list(self._find(text))

    def __repr__(self) -> str:
        return f"<detector {self.name}>"


def _matches(pattern: re.Pattern[str], valid: Callable[[str], bool] | None = None) -> Callable[[str], Iterator[Span]]:
    def find(text: str) -> Iterator[Span]:
        for m in pattern.finditer(text):
            if valid is None or valid(m.group()):
                yield m.span()

    return find


# -- anchors ---------------------------------------------------------------------------------

# A run of digits and the separators numbers are written with: every numeric value (card, phone,
# SSN, IPv4, an IBAN's check digits) lies in one, so its pattern need only be tried there. The
# pattern opens with a character class (no optional part, no lookbehind): the engine then skips
# to candidates in C instead of trying every position. It ends on a digit (backtracking there), so
# a run holds no trailing separators; a lone "+" or "(" is a match of no digits.
_NUMERIC_RUN = re.compile(r"[+(0-9](?:[0-9 ().+-]*[0-9])?")
_DIGIT = re.compile(r"[0-9]").search
_DIGITS = frozenset("0123456789")
_DIGIT_CHARS = tuple("0123456789")
_RUN_CHARS = frozenset("0123456789 ().+-")
Run = tuple[int, int, int]  # start, end, how many digits
# Every numeric value but an IBAN's check digits holds four digits or more (an IPv4 address the
# fewest): those detectors walk only the runs that long.
_LONG = 4
_last_runs: tuple[str, list[Run], list[Run]] = ("", [], [])


def numeric_runs(text: str) -> list[Run]:
    """``text``'s numeric runs; the last text's answer is kept (several detectors ask in turn)."""
    seen, runs, _ = _last_runs
    if seen is text:
        return runs
    return _numeric_runs(text)[0]


def long_runs(text: str) -> list[Run]:
    """``text``'s numeric runs of ``_LONG`` digits or more."""
    seen, _, long = _last_runs
    if seen is text:
        return long
    return _numeric_runs(text)[1]


def _numeric_runs(text: str) -> tuple[list[Run], list[Run]]:
    global _last_runs
    runs: list[Run] = []
    first = _DIGIT(text)
    if first is not None:
        # Prose holds few digits: the regular expression (a few ns a character) is run only from the
        # first digit's stretch of separators to the last digit (found with str.rfind, far faster).
        lo = first.start()
        while lo > 0 and text[lo - 1] in _RUN_CHARS:
            lo -= 1
        hi = max(map(text.rfind, _DIGIT_CHARS)) + 1
        for m in _NUMERIC_RUN.finditer(text, lo, hi):
            start, end = m.span()
            if end - start == 1:
                if text[start] in _DIGITS:
                    runs.append((start, end, 1))
            else:
                run = m.group()
                runs.append((start, end, len(run) - sum(map(run.count, " ().+-"))))
    long = [r for r in runs if r[2] >= _LONG]
    _last_runs = (text, runs, long)  # one tuple, swapped whole: threads never see half of it
    return runs, long


def _in_runs(
    pattern: re.Pattern[str], valid: Callable[[str], bool] | None, least: int, holding: str = ""
) -> Callable[[str], Iterator[Span]]:
    """``pattern`` tried only in the numeric runs of ``least`` digits or more that hold ``holding`` (a
    separator the value must have), and a character each side."""

    runs_of = long_runs if least >= _LONG else numeric_runs

    def find(text: str) -> Iterator[Span]:
        n = len(text)
        for start, end, digits in runs_of(text):
            if digits < least or (holding and text.find(holding, start, end) < 0):
                continue
            for m in pattern.finditer(text, max(0, start - 1), min(n, end + 1)):
                if valid is None or valid(m.group()):
                    yield m.span()

    return find


def occurrences(text: str, needle: str, pivot: int = 0) -> Iterator[int]:
    """Where ``needle`` starts in ``text`` (overlaps too), in order, found by its character at ``pivot``.

    ``str.find`` of a single character is a ``memchr``; of three characters or more it walks the
    text a character at a time (1-3 us over 2 KB). A character seldom seen in prose ("J" of "eyJ")
    found alone, then the needle checked there, is faster.
    """
    ch = needle[pivot]
    i = text.find(ch, pivot)
    while i >= 0:
        if text.startswith(needle, i - pivot):
            yield i - pivot
        i = text.find(ch, i + 1)


def _at(
    pattern: re.Pattern[str], needle: str, pivot: int, valid: Callable[[str], bool] | None = None
) -> Callable[[str], Iterator[Span]]:
    """``pattern`` matched only where ``needle`` (its literal opening) is; its lookbehind still sees the text before."""

    def find(text: str) -> Iterator[Span]:
        last = 0
        for i in occurrences(text, needle, pivot):
            if i < last:
                continue
            m = pattern.match(text, i)
            if m is not None and (valid is None or valid(m.group())):
                yield m.span()
                last = m.end()

    return find


# -- e-mail ------------------------------------------------------------------------------

_LOCAL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")
_DOMAIN = re.compile(r"(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,24}(?![\w-])")


def _find_email(text: str) -> Iterator[Span]:
    """From each ``@``: the local part back (at most 64 characters, RFC 5321), the domain forward."""
    i = text.find("@")
    last = 0
    while i >= 0:
        start = i
        floor = max(last, i - 64)
        while start > floor and text[start - 1] in _LOCAL_CHARS:
            start -= 1
        domain = _DOMAIN.match(text, i + 1)
        longer = start > 0 and start == floor and text[start - 1] in _LOCAL_CHARS
        if domain is not None and start < i and not longer and not text[start - 1 : start].isalnum():
            yield start, domain.end()
            last = domain.end()
        i = text.find("@", max(i + 1, last))

# -- phone numbers ----------------------------------------------------------------------------
# International: "+" or "00", a country code, then groups of digits split by one space, dot or
# dash (an optional area code in brackets). National (North American): (NNN) NNN-NNNN and
# NNN-NNN-NNNN, NNN.NNN.NNNN, NNN NNN NNNN. Bare digit runs are not phone numbers here: they are
# as often order numbers, amounts or ids.
_PHONE_INTL = re.compile(
    r"(?<![\w+])(?:\+[1-9]\d{0,2}|00[1-9]\d{0,2}(?=[ .-]))(?:[ .-]?\(\d{1,4}\))?(?:[ .-]?\d{1,5}){1,6}(?![\w.-]*\d)"
)
_PHONE_NANP = re.compile(
    r"(?<![\w+.-])(?:\+?1[ .-]?)?"
    r"(?:\([2-9]\d{2}\) ?[2-9]\d{2}[ .-]\d{4}|[2-9]\d{2}([ .-])[2-9]\d{2}\1\d{4})(?![\w-]|\.\d)"
)


def _phone_digits_ok(text: str) -> bool:
    digits = len(text) - sum(map(text.count, " ().+-"))
    return 8 <= digits <= 15  # E.164 allows at most 15; fewer than 8 is no reachable number


def _find_phone(text: str) -> Iterator[Span]:
    spans: list[Span] = []
    n = len(text)
    for start, end, digits in long_runs(text):
        if digits < 8:  # no phone number has fewer
            continue
        lo, hi = max(0, start - 1), min(n, end + 1)
        # Each pattern only where it can match: an international number opens with "+" or "00", and a
        # North American one holds ten digits (the window's ends may be digits of other scripts).
        found = (
            [m.span() for m in _PHONE_INTL.finditer(text, lo, hi) if _phone_digits_ok(m.group())]
            if text.find("+", lo, hi) >= 0 or text.find("00", lo, hi) >= 0
            else []
        )
        if digits >= 10 or not text[lo:hi].isascii():
            for m in _PHONE_NANP.finditer(text, lo, hi):
                if not any(s < m.end() and m.start() < e for s, e in found):
                    found.append(m.span())
        spans.extend(found)
    yield from sorted(spans)


# -- payment cards --------------------------------------------------------------------------

_CARD = re.compile(r"(?<![\w-])\d(?:[ -]?\d){12,18}(?![\w-])")
# Issuer prefixes (IIN ranges) of the card networks in use; a Luhn-valid number outside them
# is more likely an id than a card.
_CARD_PREFIX = re.compile(
    r"4|5[1-5]|2(?:2[2-9]|[3-6]\d|7[01]|720)|3[47]|3(?:0[0-5]|[689])|6(?:011|5|4[4-9]|2)|35(?:2[89]|[3-8])"
)


# The Luhn sum of an ASCII digit in a doubled place, by its byte.
_DOUBLED = bytes(((b - 48) * 2 - 9 if (b - 48) * 2 > 9 else (b - 48) * 2) if 48 <= b <= 57 else 0 for b in range(256))


def luhn_ok(digits: str) -> bool:
    if digits.isascii() and digits.isdigit():
        raw = digits.encode("ascii")
        kept = raw[-1::-2]
        return (sum(kept) - 48 * len(kept) + sum(raw[-2::-2].translate(_DOUBLED))) % 10 == 0
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _card_ok(text: str) -> bool:
    # The pattern allows only spaces and dashes between the digits: one kind of them, not both.
    if " " in text and "-" in text:
        return False
    digits = text.replace(" ", "").replace("-", "")
    if not 13 <= len(digits) <= 19 or len(set(digits)) == 1:
        return False
    return _CARD_PREFIX.match(digits) is not None and luhn_ok(digits)


# -- IBAN ---------------------------------------------------------------------------------------

_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?![A-Za-z0-9])")


def iban_ok(text: str) -> bool:
    compact = text.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(c, 36)) for c in moved)
    return int(number) % 97 == 1


def _find_iban(text: str) -> Iterator[Span]:
    # Two capital letters, then the check digits: the digits open a numeric run.
    n = len(text)
    last = -1
    for start, _, _ in numeric_runs(text):
        if start < 2 or start < last or not ("A" <= text[start - 2] <= "Z" and "A" <= text[start - 1] <= "Z"):
            continue
        m = _IBAN.match(text, start - 2, min(n, start + 40))
        if m is not None and iban_ok(m.group()):
            last = m.end()
            yield m.span()


# -- IP addresses -------------------------------------------------------------------------------

_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)")
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:(?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]{0,4})(?![\w:]|\.\d)")


def _ipv4_ok(text: str) -> bool:
    # What ipaddress.IPv4Address accepts (four ASCII decimal octets, none over 255, no leading zero),
    # without its exceptions and objects: this runs on every dotted run of digits.
    parts = text.split(".")
    if len(parts) == 4 and text.isascii():
        for part in parts:
            if not part.isdigit() or len(part) > 3 or (len(part) > 1 and part[0] == "0") or int(part) > 255:
                return False
        return True
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def _ipv6_ok(text: str) -> bool:
    if text.count(":") < 2 or text.strip(":") == "":
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


_HEX_COLON = frozenset("0123456789abcdefABCDEF:.")


def _find_ipv6(text: str) -> Iterator[Span]:
    """From each ``:``: the stretch of hex digits, colons and dots around it, if it holds two colons."""
    n = len(text)
    i = text.find(":")
    while i >= 0:
        start, end = i, i + 1
        while start > 0 and text[start - 1] in _HEX_COLON:
            start -= 1
        while end < n and text[end] in _HEX_COLON:
            end += 1
        if text.count(":", start, end) >= 2:
            for m in _IPV6.finditer(text, start, min(n, end + 1)):
                if _ipv6_ok(m.group()):
                    yield m.span()
        i = text.find(":", end)


def _find_ip(text: str) -> Iterator[Span]:
    # Version 6 first: one may end in a version 4 address (::ffff:192.0.2.1), which is part of it.
    spans = list(_find_ipv6(text)) if ":" in text else []
    if "." in text:
        for m in _IPV4_IN_RUNS(text):
            if not any(s < m[1] and m[0] < e for s, e in spans):
                spans.append(m)
    yield from sorted(spans)


# -- US social security numbers ------------------------------------------------------------------

_SSN = re.compile(r"(?<![\w-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\w-])")

# -- JSON web tokens ---------------------------------------------------------------------------

_JWT = re.compile(r"(?<![\w-])eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{0,}")


def _jwt_ok(text: str) -> bool:
    header = text.split(".", 1)[0]
    try:
        decoded: Any = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    except (ValueError, binascii.Error):
        return False
    return isinstance(decoded, dict) and "alg" in decoded


# -- provider and cloud keys -------------------------------------------------------------------

_KEY_PATTERNS = (
    r"sk-ant-(?:api|admin)\d{2}-[A-Za-z0-9_-]{20,}",  # Anthropic
    r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,}",  # OpenAI (project, service account, legacy)
    r"(?:AKIA|ASIA|ABIA|ACCA|AIDA|AROA)[A-Z0-9]{16}",  # AWS access key ids
    r"AIza[0-9A-Za-z_-]{35}",  # Google API keys
    r"ya29\.[0-9A-Za-z_-]{20,}",  # Google OAuth access tokens
    r"gh[pousr]_[A-Za-z0-9]{36,255}",  # GitHub tokens
    r"github_pat_[A-Za-z0-9_]{22,255}",  # GitHub fine-grained tokens
    r"xox[abposr]-[A-Za-z0-9-]{10,}",  # Slack tokens
    r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe secret and restricted keys
    r"whsec_[A-Za-z0-9]{24,}",  # Stripe webhook secrets
)
_API_KEY = re.compile(r"(?<![A-Za-z0-9_-])(?:" + "|".join(_KEY_PATTERNS) + r")(?![A-Za-z0-9_-])")
# Where a key may start, found with ``str.find`` (a regular expression of alternatives would be tried
# at every position): a short piece of its opening, and how far before it the key starts.
# The third item: which of the needle's characters is looked for (see ``occurrences``); a needle of
# one or two characters is found whole, as fast.
_KEY_ANCHORS = (("k-", (1,), -1), ("_", (2, 3, 5, 6), -1), ("A", (0,), -1), ("ya29.", (0,), 3), ("xox", (0,), -1))


def _find_key(text: str) -> Iterator[Span]:
    starts: set[int] = set()
    for needle, backs, pivot in _KEY_ANCHORS:
        if pivot < 0:
            i = text.find(needle)
            while i >= 0:
                starts.update(i - back for back in backs)
                i = text.find(needle, i + 1)
            continue
        # Inline rather than ``occurrences``: a generator costs more than it saves here.
        ch = needle[pivot]
        i = text.find(ch, pivot)
        while i >= 0:
            if text.startswith(needle, i - pivot):
                starts.update(i - pivot - back for back in backs)
            i = text.find(ch, i + 1)
    last = 0
    for i in sorted(starts):
        if i < last:
            continue
        m = _API_KEY.match(text, i)
        if m is not None:
            last = m.end()
            yield m.span()

# -- other high-entropy tokens ------------------------------------------------------------------

_TOKEN = re.compile(r"(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+/_=-]{24,}(?![A-Za-z0-9+/_=-])")
ENTROPY_BITS = 4.0  # per character: random base64 has about 5.5-6, English words under 3.5, hex at most 4


def shannon_entropy(text: str) -> float:
    counts: dict[str, int] = {}
    for c in text:
        counts[c] = counts.get(c, 0) + 1
    n = len(text)
    return -sum(k / n * math.log2(k / n) for k in counts.values())


def _high_entropy_ok(text: str) -> bool:
    # Random tokens mix digits in throughout; identifiers (CamelCaseNames1) rarely hold more than one.
    has_digit = sum(c.isdigit() for c in text) >= 2
    has_upper = any(c.isupper() for c in text)
    has_lower = any(c.islower() for c in text)
    if not (has_digit and has_lower and has_upper):
        return False
    return shannon_entropy(text) >= ENTROPY_BITS


# -- presidio (optional) ------------------------------------------------------------------------

PRESIDIO_ENTITIES = ("PERSON", "LOCATION", "NRP", "ORGANIZATION")


def _presidio() -> Detector:
    try:
        from presidio_analyzer import AnalyzerEngine  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise ImportError(
            "the 'presidio' detector needs presidio-analyzer: pip install 'relay-runtime[pii]'"
        ) from exc
    engine = AnalyzerEngine()

    def find(text: str) -> Iterator[Span]:
        results = engine.analyze(text=text, language="en", entities=list(PRESIDIO_ENTITIES))
        spans = sorted((r.start, r.end) for r in results)
        last = -1
        for s, e in spans:
            if s >= last:
                yield s, e
                last = e

    return Detector("presidio", find)


_IPV4_IN_RUNS = _in_runs(_IPV4, _ipv4_ok, 4, ".")

_BUILT_IN: dict[str, Detector] = {
    # An e-mail's local part is at most 64 characters, its domain at most 255 (RFC 5321).
    "email": Detector("email", _find_email, ("@",), shortest=6),
    "phone": Detector("phone", _find_phone, digits=True, shortest=8),
    "credit_card": Detector("credit_card", _in_runs(_CARD, _card_ok, 13), digits=True, shortest=13),
    "iban": Detector("iban", _find_iban, digits=True, shortest=15),
    "ip_address": Detector("ip_address", _find_ip, (".", ":"), shortest=3),
    "us_ssn": Detector("us_ssn", _in_runs(_SSN, None, 9, "-"), ("-",), digits=True, shortest=11),
    # "J": every token holds "eyJ", and a capital J is rare in prose (``in`` of "eyJ" walks the text slowly).
    "jwt": Detector("jwt", _at(_JWT, "eyJ", 2, _jwt_ok), ("J",), shortest=16),
    "api_key": Detector("api_key", _find_key, shortest=20),
    "high_entropy": Detector("high_entropy", _matches(_TOKEN, _high_entropy_ok), shortest=24),
}
_LAZY: dict[str, Callable[[], Detector]] = {"presidio": _presidio}

DETECTOR_NAMES = (*_BUILT_IN, *_LAZY)


def detector(name: str) -> Detector:
    """The detector called ``name``; an unknown name is a ``ValueError`` listing the known ones."""
    found = _BUILT_IN.get(name)
    if found is not None:
        return found
    lazy = _LAZY.get(name)
    if lazy is None:
        raise ValueError(f"unknown detector {name!r}; the detectors are {', '.join(DETECTOR_NAMES)}")
    made = lazy()
    _BUILT_IN[name] = made
    return made
