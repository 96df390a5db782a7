"""Detectors of numbers written in text: phone numbers, payment cards, IBANs, IP addresses, US SSNs.

Every such value but an IBAN lies in a *numeric run*: a stretch of digits and the separators
numbers are written with (space, dot, dash, brackets, plus), opening where no letter or digit
comes before it (each of these values must be set apart so). A text's runs of four digits or
more (the fewest such a value has) are found once, by one expression the engine skips to in C,
and kept for the two texts last seen (a text and its decoded copy, which each detector reads in
turn: with one kept, both were scanned again for every detector): the detectors ask in turn, and
each tries its own expression only in the runs long enough for it. Prose holds few digits, so most
texts cost one search for a first digit. An IBAN opens with two capital letters before its check
digits: it has its own anchor.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

Span = tuple[int, int]
Run = tuple[int, int, int, str]  # start, end, how many digits, the run itself

# The pattern opens with a character class (its check of what comes before follows it, so the engine
# still skips to candidates in C instead of trying every position) and ends on a digit (backtracking
# there), so a run holds no trailing separators.
_NUMERIC_RUN = re.compile(r"[+(0-9](?<![A-Za-z0-9][(0-9])(?:[0-9 ().+-]*[0-9])?")
_DIGIT_CHARS = tuple("0123456789")
_RUN_CHARS = frozenset("0123456789 ().+-")
_SEPARATORS = b" ().+-"
_LONG = 4  # digits: every value of these detectors holds as many (an IPv4 address the fewest)
Window = tuple[int, int]  # from the first digit's stretch of separators to past the last digit; (0, 0): none
_Kept = tuple[str, Window, list[Run]]
_NONE: _Kept = ("", (0, 0), [])
_last: tuple[_Kept, _Kept] = (_NONE, _NONE)  # the text last scanned, and the one before it


def _kept(text: str) -> _Kept:
    newest, older = _last
    if newest[0] is text:
        return newest
    if older[0] is text:
        return older
    window, runs = _scan(text)
    return text, window, runs


def long_runs(text: str) -> list[Run]:
    """``text``'s numeric runs of four digits or more; the last two texts' answers are kept."""
    return _kept(text)[2]


def digit_window(text: str) -> Window:
    """Where ``text``'s digits are: ``(lo, hi)``, empty when it has none; the last two texts' answers are kept."""
    return _kept(text)[1]


def _scan(text: str) -> tuple[Window, list[Run]]:
    global _last
    runs: list[Run] = []
    # str.find of one character is a memchr: ten of them beat one expression over digit-free prose
    # (gathered in a set in C, the misses' -1 dropped, rather than filtered by a loop in Python).
    found = set(map(text.find, _DIGIT_CHARS))
    found.discard(-1)
    if not found:
        window = (0, 0)
    else:
        lo = min(found)
        while lo > 0 and text[lo - 1] in _RUN_CHARS:
            lo -= 1
        hi = max(map(text.rfind, _DIGIT_CHARS)) + 1
        window = (lo, hi)
        for m in _NUMERIC_RUN.finditer(text, lo, hi):
            start, end = m.span()
            if end - start < _LONG:
                continue
            run = m.group()
            # The run is ASCII (the pattern's classes are): its separators dropped in one C call, not six counts.
            digits = len(run) if run.isdigit() else len(run.encode("ascii").translate(None, _SEPARATORS))
            if digits >= _LONG:
                runs.append((start, end, digits, run))
    _last = ((text, window, runs), _last[0])  # one tuple, swapped whole: threads never see half of it
    return window, runs


def in_runs(
    pattern: re.Pattern[str], valid: Callable[[str], bool] | None, least: int, holding: str = ""
) -> Callable[[str], list[Span]]:
    """``pattern`` tried only in the numeric runs of ``least`` digits or more that hold ``holding`` (a
    separator the value must have), and a character each side."""

    def find(text: str) -> list[Span]:
        found: list[Span] = []
        n = len(text)
        for start, end, digits, run in long_runs(text):
            if digits < least or (holding and holding not in run):
                continue
            for m in pattern.finditer(text, max(0, start - 1), min(n, end + 1)):
                if valid is None or valid(m.group()):
                    found.append(m.span())
        return found

    return find


# A value must be set apart from the words around it: "[^\W_]" is a letter or digit of any script ("_" is glue
# between words, "host_10.0.4.17", not one). The letters of scripts written without spaces between words are not
# counted as such (Thai, kana, Han, and Hangul, whose particles are written on): in "カード番号4111 1111 1111 1111です"
# the number is set apart as a space would set it.
_UNSPACED = "\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_WORD = "[^\\W_" + _UNSPACED + "]"


def _set_apart(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled, its ``[^\\W_]`` (a letter or digit next to the value) read as ``_WORD``."""
    return re.compile(pattern.replace(r"[^\W_]", _WORD))


# -- phone numbers ----------------------------------------------------------------------------
# International: "+" or "00", a country code, then groups of digits split by one space, dot or
# dash (an optional area code in brackets). National (North American): (NNN) NNN-NNNN and
# NNN-NNN-NNNN, NNN.NNN.NNNN, NNN NNN NNNN. Bare digit runs are not phone numbers here: they are
# as often order numbers, amounts or ids.
_PHONE_INTL = _set_apart(
    # "_" and a letter before "+" are glue ("phone_+44...", "call+44..."), not part of a longer number.
    r"(?:(?<![+\d])\+[1-9]\d{0,2}|(?<![^\W_])(?<!\+)00[1-9]\d{0,2}(?=[ .-]))"
    r"(?:[ .-]?\(\d{1,4}\))?(?:[ .-]?\d{1,5}){1,6}(?![\w.-]*\d)"
)
_PHONE_NANP = _set_apart(
    r"(?<![^\W_])(?<![+.-])(?:\+?1[ .-]?)?"
    r"(?:\([2-9]\d{2}\) ?[2-9]\d{2}[ .-]\d{4}|[2-9]\d{2}([ .-])[2-9]\d{2}\1\d{4})(?![^\W_]|-|\.\d)"
)


def _phone_digits_ok(text: str) -> bool:
    if text.isascii():
        digits = len(text.encode("ascii").translate(None, _SEPARATORS))
    else:  # digits of other scripts (the pattern's \d takes them): counted as characters
        digits = len(text) - sum(map(text.count, " ().+-"))
    return 8 <= digits <= 15  # E.164 allows at most 15; fewer than 8 is no reachable number


def find_phone(text: str) -> list[Span]:
    spans: list[Span] = []
    n = len(text)
    for start, end, digits, _ in long_runs(text):
        if digits < 8:  # no phone number has fewer
            continue
        lo, hi = max(0, start - 1), min(n, end + 1)
        window = text[lo:hi]  # short: asked with ``in`` rather than ``str.find``'s argument parsing
        # Each pattern only where it can match: an international number opens with "+" or "00", and a
        # North American one holds ten digits (the window's ends may be digits of other scripts).
        found = (
            [m.span() for m in _PHONE_INTL.finditer(text, lo, hi) if _phone_digits_ok(m.group())]
            if "+" in window or "00" in window
            else []
        )
        if digits >= 10 or not window.isascii():
            for m in _PHONE_NANP.finditer(text, lo, hi):
                if not any(s < m.end() and m.start() < e for s, e in found):
                    found.append(m.span())
        spans.extend(found)
    return sorted(spans)


# -- payment cards --------------------------------------------------------------------------

_CARD = _set_apart(r"(?<![^\W_])(?<!\d-)\d(?:[ -]?\d){12,18}(?![^\W_])(?!-\d)")
# Issuer prefixes (IIN ranges) of the card networks in use; a Luhn-valid number outside them
# is more likely an id than a card. Visa, Mastercard, American Express, Diners Club, Discover, UnionPay,
# JCB; then Maestro (Europe's debit cards), Mir and RuPay (Russia's and India's national networks).
_CARD_PREFIX = re.compile(
    r"4|5[1-5]|2(?:2[2-9]|[3-6]\d|7[01]|720)|3[47]|3(?:0[0-5]|[689])|6(?:011|5|4[4-9]|2)|35(?:2[89]|[3-8])"
    r"|5(?:0(?:18|20|38)|893)|6(?:304|759|76[1-3])|220[0-4]|60|508|8[12]"
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
    if not 13 <= len(digits) <= 19 or digits.count(digits[0]) == len(digits):  # not all one digit
        return False
    return _CARD_PREFIX.match(digits) is not None and luhn_ok(digits)


find_card = in_runs(_CARD, _card_ok, 13)

# -- IBAN ---------------------------------------------------------------------------------------

_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?![A-Za-z0-9])")
# Its country code and check digits, searched for only in the stretch of the text that holds digits (and
# the two characters before it). Opening with the capitals, the expression is tried at the few capitals
# there, not at every digit.
_IBAN_CHECK = re.compile(r"[A-Z][A-Z][0-9][0-9]")


def iban_ok(text: str) -> bool:
    compact = text.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(c, 36)) for c in moved)
    return int(number) % 97 == 1


def find_iban(text: str) -> list[Span]:
    found: list[Span] = []
    n = len(text)
    last = -1
    lo, hi = digit_window(text)
    for check in _IBAN_CHECK.finditer(text, max(0, lo - 2), hi):
        start = check.start()
        if start < last:
            continue
        m = _IBAN.match(text, start, min(n, start + 42))
        if m is not None and iban_ok(m.group()):
            last = m.end()
            found.append(m.span())
    return found


# -- IP addresses -------------------------------------------------------------------------------

_IPV4 = _set_apart(r"(?<![^\W_])(?<!\.)(?:\d{1,3}\.){3}\d{1,3}(?![^\W_]|\.\d)")
_IPV6 = _set_apart(
    r"(?<![^\W_])(?<![:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:(?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]{0,4})(?![^\W_]|:|\.\d)"
)


_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
# What ipaddress.IPv4Address accepts of ASCII text: four decimal octets, none over 255, no leading zero.
_IPV4_ASCII = re.compile(rf"(?:{_OCTET}\.){{3}}{_OCTET}").fullmatch


def _ipv4_ok(text: str) -> bool:
    # One C call instead of the address parser's exceptions and objects (or a split and a loop in
    # Python): this runs on every dotted run of digits.
    if text.isascii():
        return _IPV4_ASCII(text) is not None
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


def _find_ipv6(text: str) -> list[Span]:
    """From each ``:``: the stretch of hex digits, colons and dots around it, if it holds two colons."""
    found: list[Span] = []
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
                    found.append(m.span())
        i = text.find(":", end)
    return found


_ipv4_in_runs = in_runs(_IPV4, _ipv4_ok, 4, ".")


def find_ip(text: str) -> list[Span]:
    # Version 6 first: one may end in a version 4 address (::ffff:192.0.2.1), which is part of it.
    spans = _find_ipv6(text) if ":" in text else []
    if "." in text:
        for m in _ipv4_in_runs(text):
            if not any(s < m[1] and m[0] < e for s, e in spans):
                spans.append(m)
    return sorted(spans) if len(spans) > 1 else spans


# -- US social security numbers ------------------------------------------------------------------

# Grouped by dashes, or by single spaces (as speech-to-text writes a number read aloud): then not within a
# longer spaced number ("+1 415 55 2671"), whose groups alone would read as one.
_SSN = _set_apart(
    r"(?<![^\W_])(?!000|666|9\d\d)"
    r"(?:(?<!-)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![^\W_]|-)|(?<![\d+] )\d{3} (?!00)\d{2} (?!0000)\d{4}(?![^\W_]| \d))"
)


def find_ssn(text: str) -> list[Span]:
    # ``in_runs``, with its check of each run made for the two forms: one with a dash, or nine digits and a space
    # (most runs are neither: a phone number's, a card's).
    found: list[Span] = []
    n = len(text)
    for start, end, digits, run in long_runs(text):
        if digits < 9 or ("-" not in run and (digits != 9 or " " not in run)):
            continue
        found.extend(m.span() for m in _SSN.finditer(text, max(0, start - 1), min(n, end + 1)))
    return found
