"""URLs: shown in messages without the credentials they may carry (``user:token@``, ``?api_key=``), and
read for the ``server.address`` a call is recorded with."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote_plus, urlsplit, urlunsplit


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
