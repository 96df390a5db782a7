"""Built-in detectors of personal data and secrets in text, for ``RedactionPolicy`` rules.

A detector finds spans: ``find(text) -> [(start, end), ...]``, sorted, not overlapping.
Each one is a regular expression and a validator where the format has one (Luhn for
cards, mod-97 for IBANs, the address parser for IPs, the JOSE header for JWTs), so that
order numbers, version strings and dates survive.

Scanning a prompt is the cost: a regular expression tried at every position of 2 KB of
text costs tens of microseconds, once per detector. So the full expressions only run in
windows around anchors found cheaply: numbers in the runs of digits and separators
(``detectors_numbers``, one scan shared by the numeric detectors), tokens at what opens
them (``detectors_tokens``: each ``@`` for e-mail, each literal prefix for keys and JWTs).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from . import detectors_decoding as _decoding
from .detectors_numbers import find_card, find_iban, find_ip, find_phone, find_ssn, iban_ok, luhn_ok
from .detectors_tokens import (
    ENTROPY_BITS,
    JWT,
    TOKEN,
    at,
    find_email,
    find_key,
    high_entropy_ok,
    jwt_ok,
    matches,
    shannon_entropy,
)

__all__ = [
    "DETECTOR_NAMES",
    "ENTROPY_BITS",
    "Detector",
    "canonical",
    "detector",
    "iban_ok",
    "luhn_ok",
    "shannon_entropy",
]

Span = tuple[int, int]
_DIGIT = re.compile(r"[0-9]").search


class Detector:
    """A named finder of spans.

    ``needles``: strings of which every match holds one (a fast pre-check); ``digits``: every match
    holds a digit; ``shortest``: no match is shorter. Most strings an event holds are short (roles,
    model names, ids): these checks answer for them without running the finder. ``inert_alike``: the
    finder reads the characters ``detectors_decoding`` calls inert all alike (a regular expression
    naming none of them), so a decoded copy differing only by inert escapes (JSON's \\n and \\" in
    escaped source) is not read again.
    """

    __slots__ = ("_find", "digits", "inert_alike", "name", "needles", "shortest")

    def __init__(
        self, name: str, find: Callable[[str], list[Span]], needles: tuple[str, ...] = (),
        *, digits: bool = False, shortest: int = 1, inert_alike: bool = False,
    ) -> None:  # fmt: skip
        self.name = name
        self._find = find
        self.needles = needles
        self.digits = digits
        self.shortest = shortest
        self.inert_alike = inert_alike

    def find(self, text: str) -> list[Span]:
        if len(text) < self.shortest:
            return []
        # A text holding an encoding (a URL's %2B44+20..., JSON's \\u0040, HTML's &#64;, a non-breaking
        # space between digits) is read decoded too, and what is found there mapped back to the encoded
        # span. Decided once per text: the detectors after the first find it kept.
        seen, copy = _decoding._last
        if seen is not text:
            copy = _decoding.decoded_copy(text)
        if copy is None:
            return self._checked(text)
        return self._with_copy(text, copy)

    def _with_copy(self, text: str, copy: _decoding.Decoded) -> list[Span]:
        # Each read asks its own checks: the copy may hold what they look for ("@" for "&#64;") where
        # the text does not, and most detectors find neither in a page of HTML or a list of URLs. A
        # built-in detector reads only where the copy differs, when that is known (``Decoded.windows``).
        return _decoding.merged(self._checked(text), copy.found(self._checked, not self.inert_alike))

    def _checked(self, text: str) -> list[Span]:
        if self.digits and _DIGIT(text) is None:
            return []
        needles = self.needles
        if needles:
            for n in needles:
                if n in text:
                    break
            else:
                return []
        return self._find(text)

    def __repr__(self) -> str:
        return f"<detector {self.name}>"


def find_all(finders: Sequence[Detector], text: str) -> list[tuple[int, int, int]]:
    """What each of ``finders`` finds in ``text`` (``find``), as ``(start, which finder, end)``, unsorted.

    The detectors of a policy read each text in a row: its decoded copy is asked for once, not once per
    detector, and for the text that has none (most) each detector's checks run without ``find``'s call.
    """
    hits: list[tuple[int, int, int]] = []
    size = len(text)
    copy = _decoding.decoded_copy(text)
    for index, finder in enumerate(finders):
        if size < finder.shortest:
            continue
        for start, end in finder._checked(text) if copy is None else finder._with_copy(text, copy):
            if end > start:
                hits.append((start, index, end))
    return hits


Hit = TypeVar("Hit", bound=tuple[Any, ...])


def unclaimed(hits: Iterable[Hit]) -> Iterator[tuple[int, Hit]]:
    """``hits`` (in order, each opening ``(start, which rule, end, ...)``, none empty), each with where it starts
    past the ones before it: where two overlap, the one that begins first (then the earlier rule) keeps the
    overlap, and the other what it found beyond it (an address whose local part begins inside a key must not go
    out whole for it); one inside an earlier one is left out."""
    last = 0
    for hit in hits:
        end = hit[2]
        if end <= last:
            continue
        start = hit[0]
        yield (start if start > last else last), hit
        last = end


# -- one form per value, for hashing -------------------------------------------------------------


def canonical(name: str | None, value: str) -> str:
    """``value`` (what the detector ``name`` found) in one form however it was written, so that a ``hash``
    rule gives one value one token: decoded (``%40``, ``&#64;``, digits of other scripts), then an address
    in lower case, a number's digits alone (a phone's international prefix as ``+``, a North American one
    given its ``+1``), an IBAN without spaces in capitals, an IP address in its shortest form."""
    copy = _decoding.decoded_copy(value)
    text = value if copy is None else copy.text
    if name == "email":
        return text.lower()
    if name in ("credit_card", "us_ssn", "phone"):
        if name == "phone":
            text = text.replace("(0)", "")  # the trunk prefix written beside a country code: +44 (0)20 ...
        digits = "".join(ch for ch in text if "0" <= ch <= "9")
        if name != "phone":
            return digits
        if text.lstrip().startswith("+"):
            return "+" + digits
        if digits.startswith("00"):
            return "+" + digits[2:]
        if len(digits) == 10:  # only North American numbers are read without a country code
            return "+1" + digits
        return "+" + digits if len(digits) == 11 and digits[0] == "1" else digits
    if name == "iban":
        return "".join(text.split()).upper()
    if name == "ip_address":
        try:
            return ipaddress.ip_address(text.strip("[]")).compressed
        except ValueError:
            return text
    return text


# -- presidio (optional) ------------------------------------------------------------------------

PRESIDIO_ENTITIES = ("PERSON", "LOCATION", "NRP", "ORGANIZATION")


def _presidio() -> Detector:
    try:
        from presidio_analyzer import AnalyzerEngine  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise ImportError("the 'presidio' detector needs presidio-analyzer: pip install 'relay-runtime[pii]'") from exc
    engine = AnalyzerEngine()

    def find(text: str) -> list[Span]:
        results = engine.analyze(text=text, language="en", entities=list(PRESIDIO_ENTITIES))
        found: list[Span] = []
        last = -1
        for s, e in sorted((r.start, r.end) for r in results):
            if s >= last:
                found.append((s, e))
                last = e
        return found

    return Detector("presidio", find)


_BUILT_IN: dict[str, Detector] = {
    # An e-mail's local part is at most 64 characters, its domain at most 255 (RFC 5321).
    "email": Detector("email", find_email, ("@",), inert_alike=True, shortest=6),
    # The numeric detectors need no check of their own for digits: the runs they read are kept per text.
    "phone": Detector("phone", find_phone, inert_alike=True, shortest=8),
    "credit_card": Detector("credit_card", find_card, inert_alike=True, shortest=13),
    "iban": Detector("iban", find_iban, inert_alike=True, shortest=15),
    "ip_address": Detector("ip_address", find_ip, (".", ":"), inert_alike=True, shortest=3),
    "us_ssn": Detector("us_ssn", find_ssn, inert_alike=True, shortest=11),
    # "J": every token holds "eyJ", and a capital J is rare in prose (``in`` of "eyJ" walks the text slowly).
    "jwt": Detector("jwt", at(JWT, "eyJ", 2, jwt_ok), ("J",), inert_alike=True, shortest=16),
    # Not inert alike: a private key block spans newlines, quotes and "&" end a URL's credential parameter while
    # "~" may be in it (CloudFront's signatures): a decoded copy is read whole.
    "api_key": Detector("api_key", find_key, shortest=20),
    "high_entropy": Detector("high_entropy", matches(TOKEN, high_entropy_ok), inert_alike=True, shortest=24),
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
