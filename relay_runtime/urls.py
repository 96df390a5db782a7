"""URLs: shown in messages without the credentials they may carry (``user:token@``, ``?api_key=``), recorded
without them where the address itself is what a record names (``recorded_url``), and read for the
``server.address`` a call is recorded with."""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import unquote, unquote_plus, urlsplit, urlunsplit

# A parameter of an address carried percent-encoded in a parameter of this one (an image proxy's ``?url=``, a
# viewer's ``?src=``): its ``?`` or ``&`` and its ``=`` are ``%3F`` or ``%26`` and ``%3D``; its value ends at the
# next encoded ``&``.
_NESTED_PARAM = re.compile(r"(?i)(?:%3F|%26)([A-Za-z0-9_.~+-]{1,128})%3D((?:[^%]|%(?!26)[0-9A-F]{2})*)")


def shown_url(url: object) -> str:
    """``url`` for an error message or a log line: its scheme, host, port and path, without user info,
    query or fragment (where credentials travel); anything that does not parse as a URL is not shown."""
    if not isinstance(url, str):
        return f"<a {type(url).__name__}, not a URL>"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "<unparsable URL>"
    if ":" in host:
        host = f"[{host}]"
    return repr(urlunsplit((parts.scheme, host + port, parts.path, "", "")))


def server_address(url: object) -> str | None:
    """``host`` or ``host:port`` of an endpoint URL (for ``server.address``); None for anything else.

    Never the user info: ``https://user:secret@host`` gives ``host``.
    """
    if not isinstance(url, str):
        return None
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    return f"{host}:{port}" if port else host


def edit_query(path: str, edit: Callable[[str, str, str], str | None]) -> str:
    """``path`` with each ``name=value`` of its query string given to ``edit(name, raw_name, raw_value)``
    (``name`` decoded, the raw parts as written); a part it returns stands in that one's place, ``None``
    keeps it as it was. Parameters without ``=`` and the order of the rest are kept, byte for byte.
    """
    head, mark, query = path.partition("?")
    if not mark:
        return path
    parts = []
    for part in query.split("&"):
        name, equals, value = part.partition("=")
        if equals:
            part = edit(unquote_plus(name), name, value) or part
        parts.append(part)
    return f"{head}?{'&'.join(parts)}"


def is_signing_scope(value: str) -> bool:
    """Whether ``value`` is a presigned URL's credential scope (``X-Amz-Credential``'s
    ``<key id>/20261205/eu-west-1/s3/aws4_request``, ``X-Goog-Credential``'s ``.../goog4_request``), decoded or
    as written: blanked where its parameter is, but no secret to cut from all text, whose runs of 8 are dates
    and regions found everywhere (an answer, the host of the address itself)."""
    return value.endswith("4_request") and ("/" in value or "%2F" in value)


# When a presigned address was signed, and for how long (AWS SigV4, GCS V4 and V2, CloudFront, Azure SAS):
# signed anew, an address changes these as it changes its signature.
_SIGNING_TIMES = frozenset({"x-amz-date", "x-amz-expires", "x-goog-date", "x-goog-expires", "expires", "st", "se",
                            "skt", "ske"})  # fmt: skip


def signing_times_blanked(url: str) -> str:
    """``url``, a recorded address whose credentials were blanked, with the times of its signing blanked too
    (a cassette matches a call whose address was signed anew: ``conversation_urls.matched``)."""
    from .redaction import REDACTED  # here: redaction's own imports come before this module is needed

    def blank(name: str, raw_name: str, raw_value: str) -> str | None:
        return f"{raw_name}={REDACTED}" if raw_value and name.lower() in _SIGNING_TIMES else None

    return edit_query(url, blank)


def recorded_url(url: str, taken: list[str] | None = None) -> str:
    """``url`` as a record may hold it (a span name, an attribute naming what was read): its user info, and
    the values of its query and fragment parameters that hold a credential (``redaction.is_query_credential``:
    ``?access_token=``, ``#sig=``, ``?key=``; also those of an address carried percent-encoded in one of its
    parameters, an image proxy's ``?url=``), as ``[redacted]``; the rest as given, so the address still
    says what it is. The values taken out are remembered (``redaction.remember_secret``; a signing scope is
    not: ``is_signing_scope``): an error echoing the address (a server's "Unknown resource: ...") is scrubbed
    of them too. Text with no ``@``, ``?`` or ``#`` is returned as it is, without parsing.

    ``taken``: an address a peer chose (a client's, on a server) is not the process's own. Its values go
    to this list instead, as written and decoded, for the caller to scrub what it records of that request:
    remembered process-wide, a peer sending a new one per request would push the process's own keys out of
    the memory of secrets, and a long one would cost every record after it a search for each of its runs.
    """
    if "@" not in url and "?" not in url and "#" not in url:
        return url
    from . import redaction  # here: redaction's own imports come before this module is needed

    def keep(value: str, written: str) -> None:
        if taken is None:
            if not is_signing_scope(value):
                redaction.remember_secret(value)  # a short value is not searched for
        else:
            taken.extend((value, written) if written != value else (value,))

    def blank(name: str, raw_name: str, raw_value: str) -> str | None:
        if not raw_value:
            return None
        if not redaction.is_query_credential(name):
            if "%3d" not in raw_value.lower():
                return None
            nested = _NESTED_PARAM.sub(blank_nested, raw_value)
            return None if nested == raw_value else f"{raw_name}={nested}"
        keep(unquote_plus(raw_value), raw_value)
        return f"{raw_name}={redaction.REDACTED}"

    def blank_nested(match: re.Match[str]) -> str:
        name, written = match.group(1), match.group(2)
        if not written or not redaction.is_query_credential(unquote_plus(name)):
            return match.group()
        keep(unquote_plus(unquote(written)), written)
        return match.group()[: match.start(2) - match.start()] + redaction.REDACTED

    rest, hash_mark, fragment = url.partition("#")
    scheme, colon_slashes, after = rest.partition("://")
    if colon_slashes:
        ends = [i for i in (after.find("/"), after.find("?")) if i != -1]
        authority = after[: min(ends)] if ends else after
        user_info, at, host = authority.rpartition("@")
        if at:
            written = user_info.partition(":")[2] or user_info
            keep(unquote(written), written)
            rest = f"{scheme}://{redaction.REDACTED}@{host}{after[len(authority) :]}"
    out = edit_query(rest, blank)
    if hash_mark:
        out += "#" + edit_query("?" + fragment, blank)[1:]  # a fragment's parameters, read as a query's
    return out
