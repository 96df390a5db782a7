"""What an error's text may say: the values the structured record would blank, blanked in it too.

An exception's message often quotes the input it failed on. pydantic's ``ValidationError`` quotes it
as ``input_value=...`` (the whole arguments dict for a missing field), a ``TypeError`` or a provider's
400 body quotes a kwargs dict or a request field, an HTTP error quotes a URL with its query. Where
the record holds that input as data, a credential-keyed value is blanked (``redact_value``); the
message carried it verbatim to the span's status, the exception event, the journal and the trajectory.

So an error's text is read, before anything records it, for three shapes:

- pydantic's ``input_value=<repr>`` (every ``ValidationError`` and serialization warning of pydantic 2):
  the repr is blanked whole. pydantic cuts a long repr in its middle (``'hunter...secret'``), which
  can part a value from its key; the input itself is in the record as data, judged key by key.
- a URL's user info: its password (``https://user:[redacted]@host``), or all of it when it is one word
  (``https://[redacted]@host``: a token).
- ``key=value``, ``key: value``, ``'key': 'value'`` and ``"key": "value"`` (kwargs reprs, dict reprs,
  JSON, headers, query strings) whose key the data rule calls a credential (``is_credential_data_key``;
  ``?key=`` / ``&sig=`` by the query rule, also after an escaped ``&``, and in an address percent-encoded
  inside another's query): the value is blanked, a nested dict or list whole.

The error's type and the rest of its text stay: which field failed and why is what the message is for.
Only error paths pay for this.
"""

from __future__ import annotations

import re

from .redaction import REDACTED, is_credential_data_key, is_query_credential

_INPUT_VALUE = "input_value="
_INPUT_TYPE = ", input_type="

# A key (bare, quoted, or quoted inside a JSON string: ``\"password\"``) and what joins it to its value; or a
# quoted name opening a pair, as a header list prints each header (``('authorization', 'Bearer ...')``,
# ``(b'x-api-key', b'...')``), where a comma joins them.
_KEYED = re.compile(
    r"""(?:\\?["']?(?P<key>[A-Za-z_][A-Za-z0-9_-]{0,127})\\?["']?[ \t]*[=:](?![=:/])"""
    r"""|\([ \t]*b?(?P<quote>["'])(?P<pair>[A-Za-z_][A-Za-z0-9_-]{0,127})(?P=quote)[ \t]*,)[ \t]*"""
)
# An authorization scheme before the credential itself (``Authorization: Bearer sk-...``).
_SCHEME = re.compile(r"(?:bearer|basic|token|digest|bot|key|apikey)[ \t]+", re.IGNORECASE)
# Where a bare value ends: a delimiter of whatever quoted it (a dict repr, JSON, a query string, prose), or the
# ``&`` of a query string quoted in JSON text, which some encoders (Go's) escape as ``\u0026``.
_BARE_VALUE = re.compile(r"""(?:[^\s,;&'"})\]<>\\]|\\(?!u0026))+""")
# A query's ``&`` escaped by what quoted the address (HTML or XML text, JSON text): the parameter after it is still
# one of the query's (``?sv=...&amp;sig=...``).
_ESCAPED_AMPERSANDS = ("&amp;", "\\u0026")
_OPENERS = {"{": "}", "[": "]", "(": ")"}
# A string literal's prefix as a repr writes it (``b'...'``: a key held as bytes, as HTTP clients hold headers).
_STRING_PREFIX = re.compile(r"""[bBrRuU]{1,2}(?=["'])""")
# A value printed as its constructor's call (``bytearray(b'...')``, ``Secret('...')``): blank to its closing bracket.
_CALL = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*(?=\()")
# A URL's user info (``https://user:password@host``, ``https://token@host``): a provider's error quoting the
# address it could not fetch quotes its password too. The user's name before a ``:`` is kept (group 1).
_USER_INFO = re.compile(r"""(?<=://)([^\s/?#@'"<>:]*:)?[^\s/?#@'"<>]+(?=@)""")
# A query parameter of an address carried percent-encoded in another's query (a viewer's ``?src=``, a redirect's
# ``?url=``): its ``?`` or ``&`` and its ``=`` are escapes too (``%3FX-Amz-Signature%3D...%26``). Its value ends
# at the next encoded ``&`` or anything a bare value ends at.
_ENCODED_PARAM = re.compile(
    r"""(?i)(?:%3F|%26)(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,127})%3D"""
    r"""(?P<value>(?:[^%\s,;&'"})\]<>\\]|%(?!26)[0-9A-F]{2})+)"""
)
# Words that may hold a credential's key: text holding none of them is not scanned key by key.
_HINTS = ("key", "token", "secret", "password", "auth", "cookie", "sig")


def scrubbed(text: str) -> str:
    """``text`` with pydantic's quoted input, credential-keyed values and the passwords of the URLs it quotes
    blanked (``text`` itself when nothing was)."""
    if _INPUT_VALUE in text:
        text = _without_input_values(text)
    if "://" in text and "@" in text:
        text = _USER_INFO.sub(_without_password, text)
    return keyed_values_blanked(text)


def keyed_values_blanked(text: str) -> str:
    """``text`` with the values of credential keys blanked (``text`` itself when there were none): also for a
    tool's argument text that is not the JSON it should be (a model's cut or broken tool call), which is
    recorded as the text it is, where no key-by-key walk reaches."""
    lowered = text.lower()
    if any(hint in lowered for hint in _HINTS):
        text = _without_keyed_credentials(text)
        if "%3d" in lowered:
            text = _ENCODED_PARAM.sub(_without_encoded_value, text)
    return text


def _without_encoded_value(match: re.Match[str]) -> str:
    name = match.group("name")
    if not (is_query_credential(name) or is_credential_data_key(name)):
        return match.group()
    return match.group()[: match.start("value") - match.start()] + REDACTED


def _without_password(match: re.Match[str]) -> str:
    return (match.group(1) or "") + REDACTED


def _without_input_values(text: str) -> str:
    """Each ``input_value=<repr>`` as ``input_value=[redacted]``.

    The repr ends at the last ``, input_type=`` before the next ``input_value=``, not the first: a quoted
    string may itself hold ``, input_type=``, and ending there would let its tail through. With no
    ``, input_type=`` (the text was cut) the rest of the line goes."""
    out: list[str] = []
    done = 0
    start = text.find(_INPUT_VALUE)
    while start >= 0:
        value = start + len(_INPUT_VALUE)
        following = text.find(_INPUT_VALUE, value)
        zone = following if following >= 0 else len(text)
        end = text.rfind(_INPUT_TYPE, value, zone)
        if end < 0:
            line_end = text.find("\n", value, zone)
            end = line_end if line_end >= 0 else zone
        out.append(text[done:value])
        out.append(REDACTED)
        done = end
        start = following
    out.append(text[done:])
    return "".join(out)


def _without_keyed_credentials(text: str) -> str:
    out: list[str] = []
    done = 0
    pos = 0
    while True:
        match = _KEYED.search(text, pos)
        if match is None:
            break
        pos = match.end()
        key = match.group("key") or match.group("pair")
        start = match.start()
        if key[:5] == "u0026" and text.startswith(_ESCAPED_AMPERSANDS[1], start):
            # JSON's ``\u0026sig=``: the escape's letters were read as the start of the key's name.
            key, in_query = key[5:], True
        else:
            in_query = (start > 0 and text[start - 1] in "?&") or text.endswith(_ESCAPED_AMPERSANDS, 0, start)
        if not (is_credential_data_key(key) or (in_query and is_query_credential(key))):
            continue
        value_end = _value_end(text, pos)
        if value_end == pos:
            continue
        out.append(text[done:pos])
        out.append(_blank(text, pos, value_end))
        done = pos = value_end
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def _blank(text: str, start: int, end: int) -> str:
    """What stands for the value at ``text[start:end]``: its quotes (and a bytes literal's ``b``) kept, so a JSON
    or repr stays one."""
    prefix = _STRING_PREFIX.match(text, start, end)
    if prefix is not None:
        return prefix.group() + _blank(text, prefix.end(), end)
    for quote in ('\\"', "\\'", '"', "'"):
        if text.startswith(quote, start) and end - start >= 2 * len(quote) and text.endswith(quote, start, end):
            return f"{quote}{REDACTED}{quote}"
    return REDACTED


def _value_end(text: str, start: int) -> int:
    """Where the value starting at ``start`` ends: after its closing quote or bracket, or its last character."""
    if start >= len(text):
        return start
    first = text[start]
    if first == "\\" and text.startswith(('\\"', "\\'"), start):
        return _quoted_end(text, start + 2, text[start : start + 2])
    if first in "'\"":
        return _quoted_end(text, start + 1, first)
    if first in _OPENERS:
        return _bracketed_end(text, start)
    prefix = _STRING_PREFIX.match(text, start)
    if prefix is not None:
        return _quoted_end(text, prefix.end() + 1, text[prefix.end()])
    called = _CALL.match(text, start)
    if called is not None:
        return _bracketed_end(text, called.end())
    scheme = _SCHEME.match(text, start)
    if scheme is not None:
        start = scheme.end()
    bare = _BARE_VALUE.match(text, start)
    return bare.end() if bare is not None else start


def _quoted_end(text: str, start: int, quote: str) -> int:
    """Just past the ``quote`` closing a string whose first character is at ``start``; with none (the text
    was cut), the end of the line."""
    i = start
    while True:
        found = text.find(quote, i)
        line_end = text.find("\n", i)
        if found < 0 or (0 <= line_end < found):
            return line_end if line_end >= 0 else len(text)
        if len(quote) == 1 and _escaped(text, found):
            i = found + 1
            continue
        return found + len(quote)


def _escaped(text: str, at: int) -> bool:
    backslashes = 0
    while at - backslashes - 1 >= 0 and text[at - backslashes - 1] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def _bracketed_end(text: str, start: int) -> int:
    """Just past the bracket closing the one at ``start``, quoted strings skipped; the end of the text
    when it was cut before that."""
    depth = 0
    i = start
    n = len(text)
    while i < n:
        c = text[i]
        if c in "'\"":
            i = _quoted_end(text, i + 1, c)
            continue
        if c in _OPENERS:
            depth += 1
        elif c in "}])":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n
