"""A decoded copy of a text, for the detectors: values written in an encoding are found too.

A value reaches the policy encoded more often than one would think: a URL's query
(``?phone=%2B44+20+7946+0958``, ``card=4111+1111+1111+1111``), JSON that is not parsed as JSON
(prose around it, NDJSON, a truncated body: ``json.dumps`` writes ``jane@b\\u00fccher.de``), HTML
(``jane&#64;example.com``, ``&nbsp;`` between groups of digits), numbers grouped by non-breaking
or thin spaces (``4111\\u00a01111...``, as locales and word processors write them) or Unicode dashes
(the figure dash and the non-breaking hyphen typeset phone numbers: ``415\\u2012555\\u20122671``), full-width
forms (``\\uff14\\uff11\\uff11\\uff11 ...``, ``jane\\uff20example\\uff0ecom``, as Japanese and
Chinese input methods write them), digits of other scripts (``\\u0664\\u0661\\u0661\\u0661 ...``, as Arabic,
Persian and Hindi keyboards write them), invisible characters inside a value (a zero-width space or soft
hyphen pasted from a web page, or put there to slip past a filter), and an encoding applied twice
(``%2540``). Each detector reads the text as it is and, when it holds one of these, this decoded
copy as well; what it finds in the copy is mapped back to the span of the original
that encodes it, so a rule replaces the encoded value and the text around it keeps its encoding
(a URL stays a URL).

Most texts hold none of these: a few checks of single characters (each a ``memchr``) and
``isascii`` (a flag of the string) answer for them, once per text, kept for the detectors that
ask next (as ``detectors_numbers`` keeps its runs). A text escaped throughout (JSON's ``\\n`` and
``\\"`` in escaped source or logs) is not read twice by the built-in detectors: its copy differs for
them only after an escape whose letter glues to what follows, and only there is it read again.
"""

from __future__ import annotations

import re
import sys
from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate

from .detectors_forms import (
    ASCII_DIGITS,
    DASHES,
    DIGITS,
    INVISIBLE,
    LATIN1_SIZE,
    MARKS,
    MATH_DIGITS,
    NAMED,
    PLUS_NEXT,
    SHORT,
    SPACES,
    TAG_ASCII,
    TAGS,
    TOKENS,
    WIDE,
    WIDE_OPENERS,
    wide_kind,
)

Span = tuple[int, int]
# Where the way back from the copy to the text changes: the copy's positions (sorted) and the text's
# position for each; between two of them a stretch copied as it was, so position p of the copy is
# ``text_at[i] + p - copy_at[i]`` (i the last at or before p). Kept per escape, not per character: a
# long document with one escape in it costs no list as long as itself.
Map = tuple[list[int], list[int]]

_ROUNDS = 3  # an encoding of an encoding (%2540, &amp;#64;) is read; deeper nesting is no one's accident

_Round = tuple[str, re.Pattern[str], int, int]  # what a round decoded, with which expression, between where


class Decoded:
    """A text decoded: the copy, and (only when asked: most copies hold nothing a detector finds) the
    maps of its rounds of decoding, the last first."""

    __slots__ = ("_joined", "_maps", "_rounds", "text", "windows")

    def __init__(self, text: str, rounds: list[_Round], windows: list[Span] | None) -> None:
        self.text = text
        self._rounds = rounds
        self._maps: list[Map] | None = None
        # Where the copy may hold for a built-in detector what the text does not (``_windows``, spans of
        # the text); None: anywhere. Two threads may both fill in what follows: the same values, either kept.
        self.windows = windows
        self._joined: tuple[str, list[int]] | None = None

    @property
    def maps(self) -> list[Map]:
        maps = self._maps
        if maps is None:
            maps = self._maps = [_map(*decoding) for decoding in reversed(self._rounds)]
        return maps

    def found(self, find: Callable[[str], list[Span]], everywhere: bool = False) -> list[Span]:
        """What ``find`` finds in the copy, as spans of the text. Unless ``everywhere`` (a finder that
        may read inert characters apart), only in the windows where the copy differs, read from the
        text (the same characters there), joined by an inert character into one string."""
        windows = None if everywhere else self.windows
        if windows is None:
            more = find(self.text)
            if not more:
                return more
            maps = self.maps
            source = self._rounds[0][0]
            return [_without_invisible(source, original(s, maps), original(e, maps)) for s, e in more]
        if not windows:
            return []
        joined = self._joined
        if joined is None:
            starts = list(accumulate((b - a + 1 for a, b in windows[:-1]), initial=0))
            source = self._rounds[0][0]  # the text
            joined = self._joined = ("\n".join([source[a:b] for a, b in windows]), starts)
        more = find(joined[0])
        if not more:
            return more
        starts = joined[1]
        out: list[Span] = []
        for s, e in more:
            i = bisect_right(starts, s) - 1
            shift = windows[i][0] - starts[i]
            out.append((s + shift, e + shift))
        return out


_last: tuple[str, Decoded | None] = ("", None)


def decoded(text: str) -> tuple[str, list[Map]] | None:
    """``text`` decoded, with where each character came from; None when it holds no encoding."""
    copy = decoded_copy(text)
    return None if copy is None else (copy.text, copy.maps)


def decoded_copy(text: str) -> Decoded | None:
    """``text`` decoded (its maps built when asked); None when it holds no encoding."""
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
        if text[i - 1].isalnum() and text[i + 1 : i + 2] in PLUS_NEXT:
            return True
        i = text.find("+", i + 1)
    return False


def _decode(text: str) -> Decoded | None:
    copy = text
    rounds: list[_Round] = []
    kinds: set[str] = set()
    plus = "=" in text
    marked = wide_kind(text)
    for _ in range(_ROUNDS):
        ascii = copy.isascii()
        token = TOKENS[plus, ascii, 0 if ascii else marked]
        lo, hi = (0, len(copy)) if marked and not rounds else _reach(copy, plus, ascii)
        # The text split at its escapes and each replaced by its decoding, looked up (escapes repeat:
        # &amp;, %20, \n), all in C: no Python per character of the text, nor per escape (the map
        # back is built only when asked for).
        parts = token.split(copy[lo:hi])
        escapes = parts[1::2]
        distinct = set(escapes)
        if not any(_piece(escape)[3] for escape in distinct):  # none is one (a bare surrogate, &#0;)
            break
        kinds = kinds if rounds else distinct
        parts[1::2] = map(_DECODINGS.__getitem__, escapes)
        rounds.append((copy, token, lo, hi))
        copy = copy[:lo] + "".join(parts) + copy[hi:]
        plus = False  # a '+' a first round made of %2B is a plus sign
    if not rounds:
        return None
    # After a second round a character of the copy may stand for escapes of escapes: read it all.
    plain = len(rounds) == 1 and kinds <= _CLEAN | _LETTERED
    return Decoded(copy, rounds, _windows(text, rounds[0][2], rounds[0][3]) if plain else None)


# -- where the copy adds something ------------------------------------------------------------
# Characters no built-in detector reads but as "none of mine": no word character, and none its
# expressions or code name (" .-()+@%:/=_", and the apostrophe an e-mail address may hold: "o'brien@").
# So no value holds one, and each detector treats any of them as any other, and as the start or end of the
# text (every look back or ahead stops at one, or is a character or two long). What a detector finds in a
# text is then what it finds in each stretch between two of them, wherever that stretch stands.
_INERT_CHARS = '\t\n\r"\\;,<>[]{}!?*|~^$#&`'
_INERT = re.compile("[" + re.escape(_INERT_CHARS) + "]")
# Escapes that are such characters, decoding to another: each stretch between two inert characters
# is the same in the copy as in the text ("amp" of '&amp;' is one of its own, of three letters: no value).
_CLEAN = frozenset(['\\"', "&amp;"])
# These end with a letter, alone only before a space or such a character: no value opens with a space
# or holds a lowercase letter before one, and what follows the space looks back at most to it. Before
# anything else the letter glues to it: "\nsk-proj-..." and "\n-Zx8..." are no key, decoded they are.
_LETTERED = frozenset(["\\n", "\\r", "\\t"])
_GLUED = re.compile(r"\\[nrt](?=[^ " + re.escape(_INERT_CHARS) + "])")


def _windows(text: str, lo: int, hi: int) -> list[Span] | None:
    """Where the text decoded once (between ``lo`` and ``hi``; its escapes all clean or lettered, each
    an inert character in the copy) differs from the text: after each lettered escape that glues its
    letter, up to the next inert character (none decoded in between: an escape opens with one). That
    stretch is the same in both; the text read it with the letter before it. None: read the whole copy."""
    windows: list[Span] = []
    size = 0
    for m in _GLUED.finditer(text, lo, hi):
        start = m.end()
        after = _INERT.search(text, start)
        end = after.start() if after else len(text)
        windows.append((start, end))
        size += end - start
    return None if size * 2 > len(text) else windows


def _reach(text: str, plus: bool, ascii: bool) -> tuple[int, int]:
    """Where ``text``'s escapes may be: from a character before the first that opens one (a '+' is one
    only after a letter or digit) to past the longest the last may open (``&#x10FFFF;``, and what '+'
    looks ahead to). The expression skips to what opens an escape a character at a time, slower than
    ``str.find``'s memchr: a long text with an escape or two is searched only around them."""
    openers = "%\\&+" if plus else "%\\&"
    if not ascii:
        if sys.getsizeof(text) - len(text) != LATIN1_SIZE:
            # Over a hundred characters open an escape here (spaces, invisible, full-width): one search
            # for them all, not a scan apiece. From the first, the split skips to the end about as fast
            # as a search for the last would.
            first = (_OPENS_PLUS if plus else _OPENS).search(text)
            return (0, 0) if first is None else (max(0, first.start() - 1), len(text))
        # A text of Latin-1 only (accented prose: the string's size says so, a byte a character) can
        # hold but three of them; memchr finds them, where the search would test each character.
        openers += _LATIN1_OPENERS
    hi = max(map(text.rfind, openers))
    if hi < 0:
        return 0, 0
    lo = min(i for i in map(text.find, openers) if i >= 0)
    return max(0, lo - 1), min(len(text), hi + 16)


_LATIN1_OPENERS = "".join(ch for ch in SPACES + INVISIBLE if ch <= "\xff")
_OPENS = re.compile("[" + re.escape("%\\&" + SPACES + INVISIBLE + DASHES + WIDE_OPENERS + DIGITS) + "]")
_OPENS_PLUS = re.compile("[" + re.escape("%\\&+" + SPACES + INVISIBLE + DASHES + WIDE_OPENERS + DIGITS) + "]")


def _without_invisible(text: str, start: int, end: int) -> Span:
    """A span of ``text`` less the invisible characters at its end: the copy dropped them, so the end of a
    value there maps past those that follow it (a bidirectional isolate's closing mark, say), which belong
    to the text around the value, not to it."""
    while end > start and text[end - 1] in INVISIBLE:
        end -= 1
    return start, end


def original(position: int, maps: list[Map]) -> int:
    """Where ``position`` of the decoded copy is in the text it was decoded from."""
    for copy_at, text_at in maps:
        i = bisect_right(copy_at, position) - 1
        position = text_at[i] + position - copy_at[i]
    return position


# An escape's decoding: the characters, the map of them back to the escape (positions in each), and
# whether it is one.
_Piece = tuple[str, list[int], list[int], bool]
_PIECES: dict[str, _Piece] = {}
_KEEP = 4096  # escapes remembered: a long run of percent escapes is seldom seen twice


def _piece(token: str) -> _Piece:
    found = _PIECES.get(token)
    if found is None:
        copy = _Copy()
        valid = copy.token(token, 0)
        if not valid:  # no escape after all (a bare surrogate, a code point out of range)
            # Put as it is, after what ``token`` put of it: a run of percent or \u escapes none of which
            # decodes is then there twice, as it always was (harmless, and it is what the detectors read).
            copy.put(token, 0)
        found = ("".join(copy.pieces), copy.copy_at, copy.text_at, valid)
        if len(_PIECES) < _KEEP:
            _PIECES[token] = found
    return found


class _Decoded(dict[str, str]):
    """Each escape's decoding, by the escape: a hit is looked up in C, a miss worked out by ``_piece``."""

    def __missing__(self, escape: str) -> str:
        decoding = _piece(escape)[0]
        if len(self) < _KEEP:
            self[escape] = decoding
        return decoding


_DECODINGS = _Decoded()
_NARROW = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)}


def _map(text: str, token: re.Pattern[str], lo: int, hi: int) -> Map:
    """The map back from ``text`` decoded once by ``token`` (between ``lo`` and ``hi``) to ``text``."""
    copy_at: list[int] = []
    text_at: list[int] = []
    size = last = 0
    for m in token.finditer(text, lo, hi):  # a lookbehind sees before ``lo``
        start, end = m.span()
        copy_at.append(size)  # the stretch before the escape, copied as it was
        text_at.append(last)
        size += start - last
        piece, piece_copy_at, piece_text_at, _ = _piece(m[0])
        copy_at.extend([size + at for at in piece_copy_at])
        text_at.extend([start + at for at in piece_text_at])
        size += len(piece)
        last = end
    copy_at += (size, size + len(text) - last)  # the rest, and the end (a span may end there)
    text_at += (last, len(text))
    return copy_at, text_at


class _Copy:
    """The pieces of one escape's decoding, and their map back to it."""

    __slots__ = ("copy_at", "pieces", "size", "text_at")

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.copy_at: list[int] = []
        self.text_at: list[int] = []
        self.size = 0

    def put(self, piece: str, at: int) -> None:
        """``piece`` (a decoded character, or an escape kept as it was) for the escape from ``at``."""
        self.copy_at.append(self.size)
        self.text_at.append(at)
        self.pieces.append(piece)
        self.size += len(piece)

    def token(self, token: str, at: int) -> bool:
        """Puts what ``token`` (found at ``at``) decodes to; False when it is no escape."""
        head = token[0]
        if head == "%":
            return self._percent(token, at)
        if head == "\\":
            return self._json(token, at)
        if head == "&":
            body = token[1:-1]
            if body[0] != "#":
                ch = NAMED[body]
            else:
                code = int(body[2:], 16) if body[1] in "xX" else int(body[1:])
                if not 0 < code <= 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                    return False
                ch = chr(code)
        elif head in INVISIBLE or head in MARKS:
            ch = ""
        elif head in DASHES:
            ch = "-"
        elif head in WIDE:  # a run, one character for one: one stretch of the map
            ch = token.translate(_NARROW)
        elif head in TAGS:  # a run of tag characters: the ASCII they mirror
            ch = token.translate(TAG_ASCII)
        elif head in DIGITS or head in MATH_DIGITS:  # the same, for digits of other scripts
            ch = token.translate(ASCII_DIGITS)
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
        if token[1] == "x":
            return self._python(token, at)
        if token[1] != "u":
            self.put(SHORT[token[1]], at)
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

    def _python(self, token: str, at: int) -> bool:
        """A run of Python's ``\\xNN`` escapes. ``repr()`` of a ``str`` writes a non-printable Latin-1 character
        so (a non-breaking space or a soft hyphen inside a value: ``'4111\\xa01111...'``, as a ``KeyError``
        quotes its key), ``ascii()`` every Latin-1 one (``'jos\\xe9@...'``), and a ``bytes`` repr each byte of
        UTF-8 text (``b'jos\\xc3\\xa9@...'``): a byte that opens a UTF-8 character with the bytes after it is
        read as that character, any other as the Latin-1 character of its code."""
        raw = bytes.fromhex(token.replace("\\x", ""))
        i, n = 0, len(raw)
        while i < n:
            b = raw[i]
            width = 2 if 0xC2 <= b <= 0xDF else 3 if 0xE0 <= b <= 0xEF else 4 if 0xF0 <= b <= 0xF4 else 1
            try:
                ch = raw[i : i + width].decode("utf-8") if width > 1 else chr(b)
            except UnicodeDecodeError:
                ch, width = chr(b), 1
            self.put(ch, at + 4 * i)
            i += width
        return True


def merged(found: list[Span], more: list[Span]) -> list[Span]:
    """``found`` in the text and ``more`` in its decoded copy (both spans of the text): sorted, overlaps
    joined, so a value found both ways is one span covering both."""
    if not more:
        return found
    spans = sorted(found + more)
    out = [spans[0]]
    for s, e in spans[1:]:
        ls, le = out[-1]
        if s < le:
            if e > le:
                out[-1] = (ls, e)
        else:
            out.append((s, e))
    return out
