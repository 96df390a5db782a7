"""Detectors of tokens in text: e-mail addresses, JSON web tokens, provider and cloud keys, high-entropy tokens.

Each opens with something ``str.find`` reaches in C (an ``@``, the ``J`` of ``eyJ``, a key's
prefix, found by its rarest character): the full expression is tried only there, never at every
position of the text.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

from . import detectors_decoding as _decoding

Span = tuple[int, int]


def matches(pattern: re.Pattern[str], valid: Callable[[str], bool] | None = None) -> Callable[[str], list[Span]]:
    def find(text: str) -> list[Span]:
        return [m.span() for m in pattern.finditer(text) if valid is None or valid(m.group())]

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


def at(
    pattern: re.Pattern[str], needle: str, pivot: int, valid: Callable[[str], bool] | None = None
) -> Callable[[str], list[Span]]:
    """``pattern`` matched only where ``needle`` (its literal opening) is; its lookbehind still sees the text before."""

    def find(text: str) -> list[Span]:
        found: list[Span] = []
        last = 0
        for i in occurrences(text, needle, pivot):
            if i < last:
                continue
            m = pattern.match(text, i)
            if m is not None and (valid is None or valid(m.group())):
                found.append(m.span())
                last = m.end()
        return found

    return find


# -- e-mail ------------------------------------------------------------------------------

_LOCAL = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-"
_LOCAL_CHARS = frozenset(_LOCAL)
# Labels and a top-level domain of letters in any script (RFC 6531 addresses: "jane@bücher.de"), or an
# IDN's punycode one. Nothing is asked of what follows: an address inside an id ("jane@example.com-2",
# "jane@example.com_backup") is still an address; the domain ends where its letters do.
_DOMAIN = re.compile(r"(?:[^\W_][\w-]*\.)+(?:xn--[A-Za-z0-9-]{2,59}|[^\W\d_]{2,63})")


def find_email(text: str) -> list[Span]:
    """From each ``@``: the local part back (at most 64 characters, RFC 5321), the domain forward.

    A local part in any script counts ("josé@", RFC 6531), and one with an apostrophe inside a name
    ("o'brien@", which RFC 5322 allows and people have). One longer than 64 characters is no address
    by the RFC, but its last 64 and the domain are still found: a long prefix glued to an address (an
    id built from it) must not carry the address out whole. An address written encoded (``%40`` for
    its ``@`` in a URL's query, ``&#64;``, ``\\u0040``) is found in the decoded copy every detector
    reads too (``detectors_decoding``).
    """
    found: list[Span] = []
    i = text.find("@")
    last = 0
    while i >= 0:
        floor = max(last, i - 64)
        # Back from the "@" over the local part's characters, down to ``floor``: one rstrip in C.
        start = floor + len(text[floor:i].rstrip(_LOCAL))
        while start > floor:
            before = text[start - 1]
            # A letter beyond ASCII, then ASCII again; or an apostrophe inside a name ("o'brien@"), not one
            # that opens a quote ("'jane@"): the name's first letters are the address too.
            if not (before.isalnum() or (before == "'" and start - 1 > floor and text[start - 2].isalnum())):
                break
            start -= 1
            start = floor + len(text[floor:start].rstrip(_LOCAL))
        domain = _DOMAIN.match(text, i + 1) if start < i else None
        if domain is not None:
            last = domain.end()
            found.append((start, last))
        i = text.find("@", max(i + 1, last))
    return found


# -- JSON web tokens ---------------------------------------------------------------------------

JWT = re.compile(r"(?<![A-Za-z0-9])eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{0,}")


def jwt_ok(text: str) -> bool:
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
    r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]{20,}",  # Slack webhooks: post as the app
    r"gsk_[A-Za-z0-9]{40,}",  # Groq
    r"xai-[A-Za-z0-9]{40,}",  # xAI
    r"pplx-[A-Za-z0-9]{32,}",  # Perplexity
    r"hf_[A-Za-z0-9]{30,}",  # Hugging Face
    # The secret half of an AWS key pair has no prefix: the name it is written under says what it is, and
    # only the value is the secret (the ``value`` group).
    r"(?i:aws_secret_access_key)(?:\\?[\"'])?\s*[:=]\s*(?:\\?[\"'])?(?P<value>[A-Za-z0-9/+]{40})",
    # A private key block (PEM), its newlines real or escaped (a service account's JSON read as text), and the
    # headers of an encrypted one; cut short, as far as it goes. Certificates and public keys are not secret.
    r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----(?:[A-Za-z0-9+/=\r\n\t\\]|(?:Proc-Type|DEK-Info):[^\r\n\\]*)*?"
    r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----|(?![A-Za-z0-9+/=\r\n\t\\]))",
)
_API_KEY = re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(_KEY_PATTERNS) + r")(?![A-Za-z0-9_-])")
# Where a key may start, found with ``str.find`` (a regular expression of alternatives would be tried
# at every position): a short piece of its opening, and how far before it the key starts.
# The third item: which of the needle's characters is looked for (see ``occurrences``); a needle of
# one character is found whole, as fast (longer ones walk the text). The keys opening with "k-",
# "xox?-", "xai-" or "pplx-", and private key blocks, are found from a "-" (``find_key``).
_KEY_ANCHORS = (("_", (2, 3, 5, 6), -1), ("A", (0,), -1), ("ya29.", (0,), 3))
# Openings long enough for ``str.find`` to skip ahead by their length: found whole, and how far before them
# the key starts.
_LONG_ANCHORS = (("hooks.slack.com/", 8),)


def find_key(text: str) -> list[Span]:
    starts: set[int] = set()
    # One walk of the text for the "-" (rare in prose) of "sk-"/"rk-" (the key starts two before it) and of
    # Slack's "xox?-" (four before it): each walk of 2 KB costs, whatever it looks for.
    i = text.find("-", 1)
    while i >= 0:
        if text[i - 1] == "k":
            starts.add(i - 2)
        if i >= 4 and (text.startswith("xox", i - 4) or text.startswith("pplx", i - 4)):
            starts.add(i - 4)
        if i >= 3 and text.startswith("xai", i - 3):
            starts.add(i - 3)
        elif text.startswith("----BEGIN ", i):  # a private key block (its first "-" is before this one)
            starts.add(i - 1)
        i = text.find("-", i + 1)
    for needle, back in _LONG_ANCHORS:
        i = text.find(needle)
        while i >= 0:
            starts.add(i - back)
            i = text.find(needle, i + 1)
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
    found: list[Span] = []
    last = 0
    for i in sorted(starts):
        if i < last:
            continue
        m = _API_KEY.match(text, i)
        if m is not None:
            last = m.end()
            value = m.start("value")
            found.append(m.span() if value < 0 else (value, last))
    named = _named_credentials(text)
    return _decoding.merged(found, named) if named else found


# A URL's query parameter (its name after "?" or "&") and an Authorization header's bearer token, written in
# text: a presigned S3 or GCS URL, an Azure SAS or an OAuth link pasted into a message is a credential until it
# expires. Only the value is the secret, and only values of eight characters or more are read as one.
_PARAM = re.compile(r"([A-Za-z0-9_.-]{1,64})=([^&#\s\"'<>\\)\]]{8,})")
_BEARER = re.compile(r"(?<![A-Za-z0-9])[Bb]earer\s+([A-Za-z0-9._~+/-]{16,}=*)(?![A-Za-z0-9._~+/=-])")


def _named_credentials(text: str) -> list[Span]:
    found: list[Span] = []
    i = text.find("=")
    while i > 0:
        opened = max(text.rfind("?", max(0, i - 65), i), text.rfind("&", max(0, i - 65), i))
        if opened >= 0:
            m = _PARAM.match(text, opened + 1)
            if m is not None and m.end(1) == i:
                # Here, not at the top: the redaction modules import the detectors (and most texts have no query).
                from .redaction import is_credential_name

                if is_credential_name(m[1]):
                    found.append(m.span(2))
        i = text.find("=", i + 1)
    i = text.find("earer")
    while i > 0:
        m = _BEARER.match(text, i - 1)
        if m is not None:
            found.append(m.span(1))
        i = text.find("earer", i + 1)
    return found


# -- other high-entropy tokens ------------------------------------------------------------------

TOKEN = re.compile(r"(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+/_=-]{24,}(?![A-Za-z0-9+/_=-])")
ENTROPY_BITS = 4.0  # per character: random base64 has about 5.5-6, English words under 3.5, hex at most 4


def shannon_entropy(text: str) -> float:
    counts: dict[str, int] = {}
    for c in text:
        counts[c] = counts.get(c, 0) + 1
    n = len(text)
    return -sum(k / n * math.log2(k / n) for k in counts.values())


def high_entropy_ok(text: str) -> bool:
    # Random tokens mix digits in throughout; identifiers (CamelCaseNames1) rarely hold more than one.
    has_digit = sum(c.isdigit() for c in text) >= 2
    has_upper = any(c.isupper() for c in text)
    has_lower = any(c.islower() for c in text)
    if not (has_digit and has_lower and has_upper):
        return False
    return shannon_entropy(text) >= ENTROPY_BITS
