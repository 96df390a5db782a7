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

Span = tuple[int, int]
# The decoded text, and where each of its characters starts in the original (one entry more: the
# original's length), so a span ``(s, e)`` of the copy is ``(starts[s], starts[e])`` of the original.
Decoded = tuple[str, list[int]]

_ROUNDS = 3  # an encoding of an encoding (%2540, &amp;#64;) is read; deeper nesting is no one's accident

_SPACES = "\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"  # Unicode spaces str.split() splits on
_NAMED = {"amp": "&", "nbsp": " ", "commat": "@", "period": ".", "plus": "+", "lpar": "(", "rpar": ")"}
_SHORT = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f", '"': '"', "/": "/", "\\": "\\"}
_ESCAPES = (
    r"(?:%[0-9A-Fa-f]{2})+"  # percent-encoded bytes: a run, as UTF-8 spans several
    r"|(?:\\u[0-9A-Fa-f]{4})+"  # JSON's \uXXXX: a run, for surrogate pairs
    r"|\\[nrtbf\"/\\]"  # JSON's short escapes: "Card:\n4111..." must not glue the number to a word
    r"|&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|" + "|".join(_NAMED) + r");"
    rf"|[{_SPACES}]"
)
# '+' for a space, as a query string or form writes it (a text holding '='), only next to a digit or before
# a percent escape: "4111+1111" and "at+%2B44" are read, while "jane+tag%40example.com" (an address's own
# '+') keeps it.
_PLUS = r"|(?<=[A-Za-z0-9])\+(?=[0-9])|(?<=[0-9])\+(?=[A-Za-z])|(?<=[A-Za-z0-9])\+(?=%[0-9A-Fa-f]{2})"
_FIRST = re.compile(_ESCAPES + _PLUS)
_AGAIN = re.compile(_ESCAPES)  # a '+' a first round made of %2B is a plus sign
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
    result: Decoded | None = None
    pattern = _FIRST if "=" in text else _AGAIN
    for _ in range(_ROUNDS):
        once = _once(result[0] if result else text, pattern)
        if once is None:
            break
        if result is not None:  # positions in the last round's copy, to positions in the original
            earlier = result[1]
            once = (once[0], [earlier[i] for i in once[1]])
        result = once
        pattern = _AGAIN
    return result


def _once(text: str, pattern: re.Pattern[str]) -> Decoded | None:
    pieces: list[str] = []
    starts: list[int] = []
    last = 0
    changed = False
    for m in pattern.finditer(text):
        start, end = m.span()
        token = m.group()
        pieces.append(text[last:start])
        starts.extend(range(last, start))
        if _decode_token(token, start, pieces, starts):
            changed = True
        else:  # not a valid escape (a bare surrogate, bytes that are no UTF-8): the text as it is
            pieces.append(token)
            starts.extend(range(start, end))
        last = end
    if not changed:
        return None
    pieces.append(text[last:])
    starts.extend(range(last, len(text) + 1))
    return "".join(pieces), starts


def _decode_token(token: str, at: int, pieces: list[str], starts: list[int]) -> bool:
    """Appends what ``token`` (found at ``at``) decodes to; False, appending nothing, when it is not valid."""
    head = token[0]
    if head == "%":
        return _percent(token, at, pieces, starts)
    if head == "\\":
        return _json(token, at, pieces, starts)
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
    pieces.append(ch)
    starts.append(at)
    return True


def _percent(token: str, at: int, pieces: list[str], starts: list[int]) -> bool:
    raw = bytes.fromhex(token.replace("%", ""))
    if raw.isascii():  # the usual: %40, %2B, %20, one character each
        pieces.append(raw.decode("ascii"))
        starts.extend(range(at, at + len(token), 3))
        return True
    changed = False
    i, n = 0, len(raw)
    while i < n:
        b = raw[i]
        width = 1 if b < 0x80 else 2 if 0xC2 <= b <= 0xDF else 3 if 0xE0 <= b <= 0xEF else 4 if 0xF0 <= b <= 0xF4 else 0
        try:
            ch = raw[i : i + width].decode("utf-8") if width else ""
        except UnicodeDecodeError:
            ch = ""
        if ch:
            pieces.append(ch)
            starts.append(at + 3 * i)
            i += width
            changed = True
        else:  # a byte that begins no UTF-8 character here: its escape kept as it is
            pieces.append(token[3 * i : 3 * i + 3])
            starts.extend(range(at + 3 * i, at + 3 * i + 3))
            i += 1
    return changed


def _json(token: str, at: int, pieces: list[str], starts: list[int]) -> bool:
    if token[1] != "u":
        pieces.append(_SHORT[token[1]])
        starts.append(at)
        return True
    codes = [int(token[k + 2 : k + 6], 16) for k in range(0, len(token), 6)]
    changed = False
    i, n = 0, len(codes)
    while i < n:
        code = codes[i]
        if 0xD800 <= code <= 0xDBFF and i + 1 < n and 0xDC00 <= codes[i + 1] <= 0xDFFF:  # a surrogate pair
            pieces.append(chr(0x10000 + ((code - 0xD800) << 10) + (codes[i + 1] - 0xDC00)))
            starts.append(at + 6 * i)
            i += 2
            changed = True
        elif 0xD800 <= code <= 0xDFFF:  # half a pair: kept as written
            pieces.append(token[6 * i : 6 * i + 6])
            starts.extend(range(at + 6 * i, at + 6 * i + 6))
            i += 1
        else:
            pieces.append(chr(code))
            starts.append(at + 6 * i)
            i += 1
            changed = True
    return changed


def merged(found: list[Span], more: list[Span], starts: list[int]) -> list[Span]:
    """``found`` (in the original) and ``more`` (in the decoded copy, mapped back by ``starts``): sorted,
    overlaps joined, so a value found both ways is one span covering both."""
    if not more:
        return found
    spans = sorted(found + [(starts[s], starts[e]) for s, e in more])
    out = [spans[0]]
    for s, e in spans[1:]:
        ls, le = out[-1]
        if s < le:
            if e > le:
                out[-1] = (ls, e)
        else:
            out.append((s, e))
    return out
