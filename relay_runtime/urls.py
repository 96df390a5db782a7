"""URLs in messages: a URL the caller gave may carry credentials (``user:token@``, ``?api_key=``)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


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
