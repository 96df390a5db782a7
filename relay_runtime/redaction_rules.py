"""``Rule``: what one redaction rule finds (a detector, a pattern, or a whole field) and what it does there."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from typing import Any

from . import detectors, pointers

ACTIONS = ("remove", "redact", "regex_replace", "hash", "mask")


class RedactionConfigError(ValueError):
    """A redaction rule or policy that cannot work as written."""


class Rule:
    """One redaction rule (see ``RedactionPolicy``).

    ``action``: ``remove`` (the value is cut out; a whole field named by ``paths`` is dropped),
    ``redact`` (replaced by ``replacement``, default ``[REDACTED:<detector>]``), ``regex_replace``
    (``pattern`` substituted by ``replacement``, group references allowed), ``hash`` (a keyed token:
    HMAC-SHA256 with the policy's ``hash_key``) or ``mask`` (every character but the first
    ``unmasked_prefix`` and last ``unmasked_suffix`` becomes ``replacement``, default ``*``).
    What it acts on: the spans a ``detector`` finds, the matches of ``pattern``, or (neither
    given) each whole string, within the fields ``paths`` points at (every field when empty).
    """

    __slots__ = (
        "action",
        "constant",
        "detector",
        "finder",
        "name",
        "parsed_paths",
        "paths",
        "pattern",
        "regex",
        "replacement",
        "unmasked_prefix",
        "unmasked_suffix",
        "whole",
    )

    def __init__(
        self,
        action: str,
        *,
        name: str | None = None,
        paths: Iterable[str] | str = (),
        detector: str | None = None,
        pattern: str | re.Pattern[str] | None = None,
        replacement: str | None = None,
        unmasked_prefix: int = 0,
        unmasked_suffix: int = 0,
    ) -> None:
        if action not in ACTIONS:
            raise RedactionConfigError(f"unknown redaction action {action!r}; the actions are {', '.join(ACTIONS)}")
        self.action = action
        if isinstance(paths, str):
            paths = (paths,)
        self.paths = tuple(paths)
        try:
            self.parsed_paths = tuple(pointers.parse(p) for p in self.paths)
        except pointers.PointerError as exc:
            raise RedactionConfigError(str(exc)) from None
        if detector is not None and pattern is not None:
            raise RedactionConfigError(f"a {action} rule takes a detector or a pattern, not both")
        self.detector = detector
        try:
            self.finder = detectors.detector(detector) if detector is not None else None
        except ValueError as exc:
            raise RedactionConfigError(str(exc)) from None
        self.pattern = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
        try:
            self.regex = re.compile(pattern) if pattern is not None else None
        except (re.error, TypeError) as exc:
            raise RedactionConfigError(f"bad pattern {pattern!r} in a {action} rule: {exc}") from None
        if replacement is not None and not isinstance(replacement, str):
            raise RedactionConfigError(f"replacement must be a string, got {type(replacement).__name__}")
        if action == "regex_replace" and (self.regex is None or replacement is None):
            raise RedactionConfigError("a regex_replace rule needs both pattern= and replacement=")
        if action == "regex_replace" and self.regex is not None and replacement is not None:
            try:
                self.regex.sub(replacement, "")
                _check_template(self.regex, replacement)
            except (re.error, IndexError) as exc:
                raise RedactionConfigError(
                    f"bad replacement {replacement!r} for pattern {self.pattern!r}: {exc}"
                ) from None
        if action == "mask" and replacement is not None and len(replacement) != 1:
            raise RedactionConfigError(f"a mask rule's replacement is the one mask character, got {replacement!r}")
        for label, n in (("unmasked_prefix", unmasked_prefix), ("unmasked_suffix", unmasked_suffix)):
            if type(n) is not int or n < 0:
                raise RedactionConfigError(f"{label} must be a non-negative int, got {n!r}")
        if action != "mask" and (unmasked_prefix or unmasked_suffix):
            raise RedactionConfigError(f"unmasked_prefix / unmasked_suffix apply to mask rules, not {action}")
        self.replacement = replacement
        self.unmasked_prefix = unmasked_prefix
        self.unmasked_suffix = unmasked_suffix
        self.whole = self.finder is None and self.regex is None
        # What every value becomes when that does not depend on the value (remove, redact): set once, read per hit.
        self.constant = "" if action == "remove" else self.replace("", None, None) if action == "redact" else None
        if name is None:
            name = f"{action}:{detector}" if detector else (f"{action}:pattern" if pattern is not None else action)
        if not isinstance(name, str) or not name:
            raise RedactionConfigError(f"a rule's name must be a non-empty string, got {name!r}")
        self.name = name

    def applies(self, path: pointers.Path) -> bool:
        if not self.parsed_paths:
            return True
        return any(pointers.covers(pattern, path) for pattern in self.parsed_paths)

    def describe(self) -> dict[str, Any]:
        """What the rule is, for the policy's fingerprint (never a key)."""
        described = {
            "action": self.action, "name": self.name, "paths": list(self.paths), "detector": self.detector,
            "pattern": self.pattern, "replacement": self.replacement,
            "unmasked_prefix": self.unmasked_prefix, "unmasked_suffix": self.unmasked_suffix,
        }  # fmt: skip
        if self.action == "hash" and self.detector is not None:
            # Its tokens are of the value's one form (``detectors.canonical``) since this was added: a cassette
            # recorded before holds other tokens, and is told to be recorded again rather than missed.
            described["hashes"] = "canonical"
        return described

    def spans(self, text: str) -> list[tuple[int, int]] | list[re.Match[str]]:
        if self.finder is not None:
            return self.finder.find(text)
        if self.regex is not None:
            return list(self.regex.finditer(text))
        return [(0, len(text))] if text else []

    def replace(self, value: str, match: re.Match[str] | None, hash_key: bytes | None) -> str:
        action = self.action
        if action == "remove":
            return ""
        if action == "redact":
            if self.replacement is not None:
                return self.replacement
            return f"[REDACTED:{self.detector}]" if self.detector else "[REDACTED]"
        if action == "regex_replace":
            assert match is not None and self.replacement is not None
            return match.expand(self.replacement)
        if action == "hash":
            assert hash_key is not None
            if self.detector is not None:  # the value the detector found, however written: one value, one token
                value = detectors.canonical(self.detector, value)
            digest = hmac.new(hash_key, value.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:16]
            return f"[{self.detector or 'hash'}:{digest}]"
        # mask
        keep_head, keep_tail = self.unmasked_prefix, self.unmasked_suffix
        char = self.replacement or "*"
        if keep_head + keep_tail >= len(value):
            return char * len(value)
        return value[:keep_head] + char * (len(value) - keep_head - keep_tail) + value[len(value) - keep_tail :]

    def __repr__(self) -> str:
        return f"Rule({self.action!r}, name={self.name!r})"


def _check_template(regex: re.Pattern[str], template: str) -> None:
    """Group references in ``template`` must name groups the pattern has (checked once, not at the first match)."""
    for ref in re.findall(r"\\(\d+)|\\g<(\w+)>", template):
        number, named = ref
        key = number or named
        if key.isdigit():
            if int(key) > regex.groups:
                raise re.error(f"invalid group reference {key}")
        elif key not in regex.groupindex:
            raise re.error(f"unknown group name {key!r}")
