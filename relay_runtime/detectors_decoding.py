"""A decoded copy of a text, for the detectors: values written in an encoding are found too.

A value reaches the policy encoded more often than one would think: a URL's query
(``?phone=%2B44+20+7946+0958``, ``card=4111+1111+1111+1111``), JSON that is not parsed as JSON
(prose around it, NDJSON, a truncated body: ``json.dumps`` writes ``jane@b\\u00fccher.de``), HTML
(``jane&#64;example.com``, ``&nbsp;`` between groups of digits), numbers grouped by non-breaking
or thin spaces (``4111\\u00a01111...``, as locales and word processors write them), and an encoding
applied twice (``%2540``). Each detector reads the text as it is and, when it holds one of these,
this decoded copy as well; what it finds in the copy is mapped back to the span of the original
that encodes it, so a rule replaces the encoded value and the text around it keeps its encoding
(a URL stays a URL).

Most texts hold none of these: a few checks of single characters (each a ``memchr``) and
``isascii`` (a flag of the string) answer for them, once per text, kept for the detectors that
ask next (as ``detectors_numbers`` keeps its runs).
"""

from __future__ import annotations

import re
from bisect import bisect_right

Span = tuple[int, int]
# Where the way back from the copy to the text changes: the copy's positions (sorted) and the text's
# position for each; between two of them a stretch copied as it was, so position p of the copy is
# ``text_at[i] + p - copy_at[i]`` (i the last at or before p). Kept per escape, not per character: a
# long document with one escape in it costs no list as long as itself.
Map = tuple[list[int], list[int]]
# The decoded copy, and the maps of its rounds of decoding, the last first.
Decoded = tuple[str, list[Map]]

_ROUNDS = 3  # an encoding of an encoding (%2540, &amp;#64;) is read; deeper nesting is no one's accident

# Unicode spaces (those str.split() splits on): read as ' ', one character for one.
_SPACES = (
    "\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_NAMED = {"amp": "&", "nbsp": " ", "commat": "@", "period": ".", "plus": "+", "lpar": "(", "rpar": ")"}
_SHORT = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f", '"': '"', "/": "/", "\\": "\\"}
# '+' for a space, as a query string or form writes it (in a text holding '='), only next to a digit or
# before a percent escape: "4111+1111" and "at+%2B44" are read, while "jane+tag%40example.com" (an
# address's own '+') keeps it.
_TOKEN = re.compile(
    r"(?:%[0-9A-Fa-f]{2})+"  # percent-encoded bytes: a run, as UTF-8 spans several
    r"|(?:\\u[0-9A-Fa-f]{4})+"  # JSON's \uXXXX: a run, for surrogate pairs
    r"|\\[nrtbf\"/\\]"  # JSON's short escapes: "Card:\n4111..." must not glue the number to a word
    r"|&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|" + "|".join(_NAMED) + r");"
    r"|(?<=[A-Za-z0-9])\+(?=[0-9])|(?<=[0-9])\+(?=[A-Za-z])|(?<=[A-Za-z0-9])\+(?=%[0-9A-Fa-f]{2})"
    rf"|[{_SPACES}]"
)
# Matched only where one of these is (found by str.find, a memchr): an expression searching the text
# would try every position of it, a megabyte of text in a second.
_OPENERS = "%\\&"
_PLUS_NEXT = frozenset("0123456789%ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")

_last: tuple[str, Decoded | None] = ("", None)


def decoded(text: str) -> Decoded | None:
    """``text`` decoded, with where each character came from; None when it holds no encoding."""
    global _last
    seen, result = _last
    if seen is text:
        return result
    # What each encoding opens with, one memchr apiece (``isascii`` is a flag of the string): most texts
    # hold none. '+' is a space only in a query or form ("a=1+2"), and common in prose ("+44 ...", "C++").
    marked = (
        not text.isascii()
        or "%" in text
        or "&" in text
        or "\\" in text
        or ("=" in text and "+" in text and _plus(text))
    )
    result = _decode(text) if marked else None
    _last = (text, result)  # one tuple, swapped whole: threads never see half of it
    return result


def _plus(text: str) -> bool:
    """Whether a '+' in ``text`` may stand for a space: after a letter or digit, before one or a '%'."""
    i = text.find("+", 1)
    while i > 0:
        if text[i - 1].isalnum() and text[i + 1 : i + 2] in _PLUS_NEXT:
            return True
        i = text.find("+", i + 1)
    return False


def _decode(text: str) -> Decoded | None:
    copy = text
    maps: list[Map] = []
    plus = "=" in text
    for _ in range(_ROUNDS):
        once = _Copy(copy).decode(plus)
        if once is None:
            break
        copy = once[0]
        maps.insert(0, once[1])
        plus = False  # a '+' a first round made of %2B is a plus sign
    return (copy, maps) if maps else None


def original(position: int, maps: list[Map]) -> int:
    """Where ``position`` of the decoded copy is in the text it was decoded from."""
    for copy_at, text_at in maps:
        i = bisect_right(copy_at, position) - 1
        position = text_at[i] + position - copy_at[i]
    return position


class _Copy:
    """One round of decoding ``text``: the pieces of the copy, and its map back."""

    __slots__ = ("copy_at", "pieces", "size", "text", "text_at")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pieces: list[str] = []
        self.copy_at: list[int] = []
        self.text_at: list[int] = []
        self.size = 0

    def put(self, piece: str, at: int) -> None:
        """``piece`` (a decoded character, or text copied as it was) for the text from ``at``."""
        self.copy_at.append(self.size)
        self.text_at.append(at)
        self.pieces.append(piece)
        self.size += len(piece)

    def decode(self, plus: bool) -> tuple[str, Map] | None:
        text = self.text
        openers = _OPENERS + "+" if plus else _OPENERS
        if not text.isascii():
            openers += _SPACES
        at: list[int] = []
        for ch in openers:
            i = text.find(ch)
            while i >= 0:
                at.append(i)
                i = text.find(ch, i + 1)
        last = 0
        changed = False
        for start in sorted(at):
            if start < last:
                continue
            m = _TOKEN.match(text, start)
            if m is None:
                continue
            token = m.group()
            self.put(text[last:start], last)
            if self._token(token, start):
                changed = True
            else:  # not a valid escape (a bare surrogate, a code point out of range): the text as it is
                self.put(token, start)
            last = m.end()
        if not changed:
            return None
        self.put(text[last:], last)
        self.put("", len(text))  # the end: a span may end there
        return "".join(self.pieces), (self.copy_at, self.text_at)

    def _token(self, token: str, at: int) -> bool:
        """Puts what ``token`` (found at ``at``) decodes to; False, putting nothing, when it is no escape."""
        head = token[0]
        if head == "%":
            return self._percent(token, at)
        if head == "\\":
            return self._json(token, at)
        if head == "&":
            body = token[1:-1]
            if body[0] != "#":
                ch = _NAMED[body]
            else:
                code = int(body[2:], 16) if body[1] in "xX" else int(body[1:])
                if not 0 < code <= 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                    return False
                ch = chr(code)
        else:  # '+' for a space, or a Unicode space: one character for one
            ch = " "
        self.put(ch, at)
        return True

    def _percent(self, token: str, at: int) -> bool:
        raw = bytes.fromhex(token.replace("%", ""))
        if raw.isascii():  # the usual: %40, %2B, %20, one character each
            for i, ch in enumerate(raw.decode("ascii")):
                self.put(ch, at + 3 * i)
            return True
        changed = False
        i, n = 0, len(raw)
        while i < n:
            b = raw[i]
            width = (
                1 if b < 0x80 else 2 if 0xC2 <= b <= 0xDF else 3 if 0xE0 <= b <= 0xEF else 4 if 0xF0 <= b <= 0xF4 else 0
            )
            try:
                ch = raw[i : i + width].decode("utf-8") if width else ""
            except UnicodeDecodeError:
                ch = ""
            if ch:
                self.put(ch, at + 3 * i)
                i += width
                changed = True
            else:  # a byte that begins no UTF-8 character here: its escape kept as it is
                self.put(token[3 * i : 3 * i + 3], at + 3 * i)
                i += 1
        return changed

    def _json(self, token: str, at: int) -> bool:
        if token[1] != "u":
            self.put(_SHORT[token[1]], at)
            return True
        codes = [int(token[k + 2 : k + 6], 16) for k in range(0, len(token), 6)]
        changed = False
        i, n = 0, len(codes)
        while i < n:
            code = codes[i]
            if 0xD800 <= code <= 0xDBFF and i + 1 < n and 0xDC00 <= codes[i + 1] <= 0xDFFF:  # a surrogate pair
                self.put(chr(0x10000 + ((code - 0xD800) << 10) + (codes[i + 1] - 0xDC00)), at + 6 * i)
                i += 2
                changed = True
            elif 0xD800 <= code <= 0xDFFF:  # half a pair: kept as written
                self.put(token[6 * i : 6 * i + 6], at + 6 * i)
                i += 1
            else:
                self.put(chr(code), at + 6 * i)
                i += 1
                changed = True
        return changed


def merged(found: list[Span], more: list[Span], maps: list[Map]) -> list[Span]:
    """``found`` (in the original) and ``more`` (in the decoded copy, mapped back by ``maps``): sorted,
    overlaps joined, so a value found both ways is one span covering both."""
    if not more:
        return found
    spans = sorted(found + [(original(s, maps), original(e, maps)) for s, e in more])
    out = [spans[0]]
    for s, e in spans[1:]:
        ls, le = out[-1]
        if s < le:
            if e > le:
                out[-1] = (ls, e)
        else:
            out.append((s, e))
    return out
