"""Finding secrets in text and bytes: the whole value, and any run of ``RUN`` or more of its characters.

A provider that echoes a key back often masks it (``sk-abcdefgh****wxyz``): the whole
value is not in the text, but a run of it is. Every run of ``RUN`` characters of every
secret is a needle; one compiled pattern (the needles as a trie, so a text is scanned
once however many secrets there are) finds the first, which is then grown to the longest
run of that secret the text holds there, and blanked.

Bytes (a body that is not UTF-8) are searched for the secret's UTF-8 and UTF-16 forms,
each blanked in its own encoding.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

RUN = 8
S = TypeVar("S", str, bytes)

_BYTE_FORMS = (("utf-8", 1), ("utf-16-le", 2), ("utf-16-be", 2))


# Any run of RUN units holds a whole block of BLOCK units that starts at a multiple of BLOCK in
# the secret (2 * BLOCK - 1 <= RUN): a text holding none of those blocks holds no run, which a
# few substring searches in C tell faster than the pattern (it has no literal prefix to skip by).
_BLOCK = 4
# Past this many blocks the searches cost more than the pattern they would spare.
_MAX_BLOCKS = 64


class _Finder(Generic[S]):
    """Runs of any of ``needles`` (value, replacement, unit width) in a text of one type."""

    __slots__ = ("_blocks", "_grams", "_pattern", "_values")

    def __init__(self, needles: list[tuple[S, S, int]], empty: S) -> None:
        self._values: list[tuple[S, S, int]] = needles
        grams: dict[S, list[tuple[int, int]]] = {}
        blocks: set[S] = set()
        for index, (value, _, width) in enumerate(needles):
            size = RUN * width
            for offset in range(0, len(value) - size + 1, width):
                grams.setdefault(value[offset : offset + size], []).append((index, offset))
            block = _BLOCK * width
            blocks.update(value[at : at + block] for at in range(0, len(value) - block + 1, block))
        self._grams: dict[S, list[tuple[int, int]]] = grams
        self._blocks: tuple[S, ...] | None = tuple(blocks) if len(blocks) <= _MAX_BLOCKS else None
        self._pattern: re.Pattern[S] = re.compile(_trie(list(grams), empty))

    def _may_hold(self, text: S) -> bool:
        blocks = self._blocks
        if blocks is None:
            return True
        # A plain loop: a generator for any() costs more than the few searches themselves.
        for block in blocks:  # noqa: SIM110
            if block in text:
                return True
        return False

    def search(self, text: S) -> bool:
        return self._may_hold(text) and self._pattern.search(text) is not None

    def spans(self, text: S) -> list[tuple[int, int, S]]:
        """Where ``text`` holds runs of a secret: (start, end, replacement), in order, not overlapping."""
        if not self._may_hold(text):
            return []
        found = self._pattern.search(text)
        spans: list[tuple[int, int, S]] = []
        while found is not None:
            start = found.start()
            grown = self._grown(text, start, found.group())
            if grown is None:  # a two-byte form seen across its code units: not the secret
                found = self._pattern.search(text, start + 1)
                continue
            end, replacement = grown
            spans.append((start, end, replacement))
            found = self._pattern.search(text, end)
        return spans

    def sub(self, text: S) -> S:
        spans = self.spans(text)
        if not spans:
            return text
        parts: list[S] = []
        done = 0
        for start, end, replacement in spans:
            parts += [text[done:start], replacement]
            done = end
        parts.append(text[done:])
        return text[:0].join(parts)

    def _grown(self, text: S, start: int, gram: S) -> tuple[int, S] | None:
        """The end of the longest run of a secret that starts at ``start`` with ``gram``, and its blank."""
        best: tuple[int, S] | None = None
        for index, offset in self._grams[gram]:
            value, replacement, width = self._values[index]
            if start % width:
                continue
            length = len(gram)
            limit = min(len(value) - offset, len(text) - start)
            while length + width <= limit and text[start + length : start + length + width] == value[
                offset + length : offset + length + width
            ]:
                length += width
            if best is None or start + length > best[0]:
                best = (start + length, replacement)
        return best


def _trie(words: list[S], empty: S) -> S:
    """A pattern matching any of ``words`` (all of one length per unit width), shared prefixes merged."""
    root: dict[Any, Any] = {}
    for word in words:
        node = root
        for i in range(len(word)):
            node = node.setdefault(word[i : i + 1], {})
        node[None] = {}

    opening, bar, closing = _text(empty, "(?:"), _text(empty, "|"), _text(empty, ")")

    def emit(node: dict[Any, Any]) -> S:
        if None in node:  # a whole needle: any longer one sharing it is found by growing the run
            return empty
        branches = [re.escape(piece) + emit(child) for piece, child in sorted(node.items())]
        return branches[0] if len(branches) == 1 else opening + bar.join(branches) + closing

    return emit(root)


def _text(kind: S, text: str) -> S:
    return text.encode("ascii") if isinstance(kind, bytes) else text


class SecretRuns:
    """What to blank: ``secrets`` (shorter than ``RUN`` left out: a placeholder more likely than a key)."""

    __slots__ = ("_bytes", "_replacement", "_text", "secrets")

    def __init__(self, secrets: Iterable[str], replacement: str) -> None:
        self.secrets = frozenset(s for s in secrets if type(s) is str and len(s) >= RUN)
        self._replacement = replacement
        ordered = sorted(self.secrets, key=len, reverse=True)
        self._text = _Finder([(s, replacement, 1) for s in ordered], "") if ordered else None
        self._bytes: _Finder[bytes] | None = None  # made at the first bytes to scrub

    def __bool__(self) -> bool:
        return self._text is not None

    def search(self, text: str) -> bool:
        """Whether ``text`` holds a run of a secret."""
        return self._text is not None and self._text.search(text)

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """Where ``text`` holds runs of a secret, with what replaces each (see ``text``)."""
        return [] if self._text is None else self._text.spans(text)

    def text(self, text: str) -> str:
        """``text`` with every run of a secret blanked."""
        return text if self._text is None else self._text.sub(text)

    def bytes(self, data: bytes) -> bytes:
        """``data`` with every run of a secret blanked, in whichever of its encodings it is there."""
        if self._text is None:
            return data
        if self._bytes is None:
            needles = []
            for secret in sorted(self.secrets, key=len, reverse=True):
                for encoding, width in _BYTE_FORMS:
                    needles.append((secret.encode(encoding), self._replacement.encode(encoding), width))
            self._bytes = _Finder(needles, b"")
        return self._bytes.sub(data)
