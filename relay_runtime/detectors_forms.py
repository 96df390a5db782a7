"""The forms a value may be written in, beside plain ASCII, that the decoded copy reads (``detectors_decoding``).

Unicode spaces and dashes, full-width forms, digits of other scripts and the mathematical ones, tag characters,
invisible characters and marks; percent, JSON, Python and HTML escapes; '+' for a space. Here are the character
tables and the expressions that find them in a text (``TOKENS``, chosen by what ``wide_kind`` says of it), so that
the copy's own module holds how a copy is made and mapped back.
"""

from __future__ import annotations

import re
import sys

LATIN1_SIZE = sys.getsizeof("\xe9") - 1  # what a string of Latin-1 characters takes beyond a byte each
# Unicode spaces (those str.split() splits on): read as ' ', one character for one.
SPACES = (
    "\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
# Unicode dashes: read as '-', one character for one. The figure dash is Unicode's dash for phone
# numbers, the non-breaking hyphen what typesetters keep a number on one line with; the hyphen, the en
# dash and the minus sign come from word processors and pasted pages. (The em dash is punctuation.)
DASHES = "\u2010\u2011\u2012\u2013\u2212\ufe63"
# Full-width forms of ASCII (U+FF01..U+FF5E), one character for one. A run opens only with the form
# of a character some detector reads (a word character, or one of ".-()+@%:/=_"): Chinese and Japanese
# prose is full of full-width commas, colons and brackets, which alone decode to nothing a detector reads,
# and each would otherwise make a copy of the text to be read again.
WIDE = "".join(chr(code) for code in range(0xFF01, 0xFF5F))
WIDE_OPENERS = "".join(ch for ch in WIDE if chr(ord(ch) - 0xFEE0).isalnum() or chr(ord(ch) - 0xFEE0) in ".-()+@%:/=_")
# Decimal digits of the scripts with digits of their own that people type numbers in (Arabic-Indic, as
# Arabic keyboards write them; Persian and Urdu's; the Indic scripts'; Thai, Lao, Tibetan, Myanmar, Khmer,
# Mongolian), read as ASCII digits, one character for one: a run opens with any of them, as a run of
# full-width forms does. The detectors' expressions name ASCII digits only.
_DIGIT_ZEROS = (0x0660, 0x06F0, 0x0966, 0x09E6, 0x0A66, 0x0AE6, 0x0B66, 0x0BE6, 0x0C66, 0x0CE6, 0x0D66,
                0x0E50, 0x0ED0, 0x0F20, 0x1040, 0x17E0, 0x1810)  # fmt: skip
DIGITS = "".join(chr(zero + d) for zero in _DIGIT_ZEROS for d in range(10))
# The mathematical digits (bold, double-struck, sans-serif, sans-serif bold, monospace: U+1D7CE..U+1D7FF), as
# "fancy text" generators write them and a model told to slip a number past a filter may: read as ASCII digits
# too, but kept out of the expressions every text is split with (a character beyond U+FFFF in a character set
# makes the engine test each character against a list): only a text that holds one (``wide_kind``) pays for them.
MATH_DIGITS = "".join(map(chr, range(0x1D7CE, 0x1D800)))
ASCII_DIGITS = {ord(ch): 48 + i % 10 for i, ch in enumerate(DIGITS + MATH_DIGITS)}
# Unicode's tag characters (U+E0020..U+E007E) mirror printable ASCII and draw nothing: a value written in them
# ("ASCII smuggling") is invisible where the record is shown, yet a model reads it and anyone can decode it. Read
# as the ASCII they mirror, one character for one, by the same expression as the mathematical digits.
TAGS = "".join(map(chr, range(0xE0020, 0xE007F)))
TAG_ASCII = {ord(ch): ord(ch) - 0xE0000 for ch in TAGS}
# Invisible characters, dropped: zero width space, non-joiner, joiner, word joiner, BOM, soft hyphen, and the
# marks and controls of bidirectional text (left-to-right and right-to-left marks, the Arabic letter mark,
# embeddings, overrides and isolates), which editors of Arabic and Hebrew put around and inside numbers.
INVISIBLE = (
    "\u200b\u200c\u200d\u2060\ufeff\xad\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
# Marks that draw on the character before them, or nothing: the combining diacritical marks (an accent
# put on a digit, "4\u0301111 ...", or a letter typed decomposed), the variation selectors and the keycap
# ("4\ufe0f\u20e3" is a 4 drawn as a key), the combining grapheme joiner and the Mongolian vowel separator.
# A value reads the same with them in it. Dropped right after an ASCII letter or digit only: that is where
# a value's characters are, and an emoji's own selector ("\u2764\ufe0f") or a script's marks leave the text
# as it was, with no copy to read again.
MARKS = "".join(map(chr, range(0x0300, 0x0370))) + "".join(map(chr, range(0xFE00, 0xFE10))) + "\u20e3\u034f\u180e"
NAMED = {"amp": "&", "nbsp": " ", "commat": "@", "period": ".", "plus": "+", "lpar": "(", "rpar": ")"}
SHORT = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f", '"': '"', "/": "/", "\\": "\\"}
# Every alternative opens with a literal character (the lookbehind of '+' follows it): the engine then
# skips in C to the characters that may open one, rather than trying each alternative at every position.
_ESCAPES = (
    r"%[0-9A-Fa-f]{2}(?:%[0-9A-Fa-f]{2})*"  # percent-encoded bytes: a run, as UTF-8 spans several
    r"|\\u[0-9A-Fa-f]{4}(?:\\u[0-9A-Fa-f]{4})*"  # JSON's \uXXXX: a run, for surrogate pairs
    r"|\\[nrtbf\"/\\]"  # JSON's short escapes: "Card:\n4111..." must not glue the number to a word
    r"|\\x[0-9A-Fa-f]{2}(?:\\x[0-9A-Fa-f]{2})*"  # Python's \xNN (repr, ascii(), a bytes repr): a run, for UTF-8
    r"|&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|" + "|".join(NAMED) + r");"
    "|" + "|".join(map(re.escape, SPACES))
)
# Only a text that is not ASCII can hold these: the expression for an ASCII text has no alternatives for
# them (each '&' that opens no entity would try them all). A run of full-width forms takes one
# alternative per opener: one opening with a character class would cost the expression its skip.
_ESCAPES_WIDE = (
    _ESCAPES
    + "".join(f"|{re.escape(ch)}" for ch in INVISIBLE + DASHES)
    + "".join(f"|{ch}[{WIDE[0]}-{WIDE[-1]}]*" for ch in WIDE_OPENERS)
    + "".join(f"|{ch}[{DIGITS}]*" for ch in DIGITS)
)
# A mark after an ASCII letter or digit (one alternative per mark, see above) and a run of mathematical digits, in
# an expression of its own for the texts that hold one (``wide_kind`` says): so many alternatives slow the split
# wherever it stops, and a character beyond U+FFFF slows it everywhere.
_ESCAPES_MARKED = _ESCAPES_WIDE + "".join(
    f"|{re.escape(ch)}(?<=[A-Za-z0-9]{re.escape(ch)})[{re.escape(MARKS)}]*" for ch in MARKS
)
_ESCAPES_MATH = (
    _ESCAPES_MARKED
    + "".join(f"|{ch}[{MATH_DIGITS[0]}-{MATH_DIGITS[-1]}]*" for ch in MATH_DIGITS)
    + "".join(f"|{ch}[{TAGS[0]}-{TAGS[-1]}]*" for ch in TAGS)
)
_WIDE_KINDS = (_ESCAPES_WIDE, _ESCAPES_MARKED, _ESCAPES_MATH)  # by what ``wide_kind`` says
# A set of characters first, the letter or digit before looked back at: a search skips to a mark in C.
_MARK_AFTER = re.compile(f"[{re.escape(MARKS)}](?<=[A-Za-z0-9][{re.escape(MARKS)}])")
_MATH = re.compile(f"[{MATH_DIGITS[0]}-{MATH_DIGITS[-1]}{TAGS[0]}-{TAGS[-1]}]")  # two ranges: cheap to test
_UCS4_SIZE = sys.getsizeof("\U0001f600") - 4  # what a string of characters beyond U+FFFF takes beyond 4 bytes each


def wide_kind(text: str) -> int:
    """2 when ``text`` holds a mathematical digit or a tag character, 1 when it holds a mark after an ASCII letter or
    digit, else 0: neither an ASCII text nor one of Latin-1 only (a byte a character: the string's size says so)
    holds one, and only a text of four bytes a character (one beyond U+FFFF in it) can hold the first two."""
    if text.isascii():
        return 0
    size = sys.getsizeof(text)
    if size - len(text) == LATIN1_SIZE:
        return 0
    if size - 4 * len(text) == _UCS4_SIZE and _MATH.search(text) is not None:
        return 2
    return int(_MARK_AFTER.search(text) is not None)
# '+' for a space, as a query string or form writes it (in a text holding '='), only next to a digit or
# before a percent escape: "4111+1111" and "at+%2B44" are read, while "jane+tag%40example.com" (an
# address's own '+') keeps it.
_PLUS = r"|\+(?<=[A-Za-z0-9]\+)(?=[0-9])|\+(?<=[0-9]\+)(?=[A-Za-z])|\+(?<=[A-Za-z0-9]\+)(?=%[0-9A-Fa-f]{2})"


def _tokens(plus: bool, ascii: bool, marked: int) -> re.Pattern[str]:
    # A group, so that ``split`` keeps the escapes.
    return re.compile(f"({_ESCAPES if ascii else _WIDE_KINDS[marked]}{_PLUS if plus else ''})")


class _Compiled(dict[tuple[bool, bool, int], "re.Pattern[str]"]):
    """The expressions by (whether a '+' may be a space, whether the text is ASCII, what ``wide_kind`` says of
    it), each compiled the first time a text needs it. The ones for texts that are not ASCII hold an alternative
    per character that opens a run, each with a set of characters beyond Latin-1 (a table of 65,536 to build):
    compiling the six of them took half a second of every import (seconds where the allocator handed each table
    back to the system), though most processes never read a text that needs one."""

    def __missing__(self, key: tuple[bool, bool, int]) -> re.Pattern[str]:
        made = self[key] = _tokens(*key)
        return made


TOKENS = _Compiled({(plus, True, 0): _tokens(plus, True, 0) for plus in (False, True)})
PLUS_NEXT = frozenset("0123456789%ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
