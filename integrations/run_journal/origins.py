"""Which sites may read the journal through a browser: the ``Host`` a request names, and the ``Origin`` it came from.

Without a token the journal is open to whoever reaches it, and a browser reaches it for any page:
a page on ``attacker.example`` whose name is made to resolve to 127.0.0.1 (DNS rebinding) is, to the
browser, the same origin as the journal, and may read every run. Its requests still name
``attacker.example`` in ``Host``, so without a token only these names are served:

- the loopback names (``localhost``, ``*.localhost``, ``127.0.0.1``, ``::1``);
- the address the client connected to (an IP in ``Host`` cannot be rebound);
- the names given in ``allowed_hosts`` (a reverse proxy's public name, the machine's own name).

Whatever the token, a request that changes state (any method but GET, HEAD, OPTIONS) or opens an SSE
stream must come from the journal's own origin when it names one (``Origin``): another site's page
cannot log in for the user or hold streams open.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

log = logging.getLogger(__name__)

LOOPBACK_NAMES = frozenset(("localhost", "127.0.0.1", "::1"))
_SAFE_METHODS = frozenset(("GET", "HEAD", "OPTIONS"))


def _split_host(value: str) -> tuple[str, str | None] | None:
    """``(name, port)`` of a ``Host`` value, the name lowercased without a trailing dot; None if it is not one."""
    value = value.strip()
    if not value or any(c.isspace() or c in "/@?#\\" for c in value):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:] or None
    else:
        name, sep, port_text = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
        port = port_text if sep else None
    if port is not None and not port.isdigit():
        return None
    name = name.lower().rstrip(".")
    return (name, port) if name else None


def _same_ip(name: str, address: Any) -> bool:
    if not isinstance(address, str):
        return False
    try:
        return ipaddress.ip_address(name) == ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False


def check_allowed_hosts(hosts: Iterable[str]) -> frozenset[str]:
    """The names as the check compares them; a value that is not a host name is a clear error."""
    if isinstance(hosts, str):
        raise ValueError(f"allowed_hosts must be a list of host names, not one string: {hosts!r}")
    names = set()
    for host in hosts:
        split = _split_host(host) if isinstance(host, str) else None
        if split is None or split[1] is not None:
            raise ValueError(f"allowed_hosts holds {host!r}: give host names without a scheme, port or path")
        names.add(split[0].strip("[]"))
    return frozenset(names)


class SiteGuard:
    """The middleware's decisions, for one app: ``host_refusal`` / ``origin_refusal`` say why a request is refused."""

    def __init__(self, allowed_hosts: frozenset[str], *, check_host: bool) -> None:
        self.allowed_hosts = allowed_hosts
        self.check_host = check_host

    def host_allowed(self, name: str, request: web.Request) -> bool:
        if name in LOOPBACK_NAMES or name.endswith(".localhost") or name in self.allowed_hosts:
            return True
        sockname: Any = request.transport.get_extra_info("sockname") if request.transport is not None else None
        return isinstance(sockname, tuple) and bool(sockname) and _same_ip(name, sockname[0])

    def host_refusal(self, request: web.Request) -> str | None:
        if not self.check_host:
            return None
        header = request.headers.get("Host")
        if header is None:
            return None  # not a browser: browsers always name the host
        split = _split_host(header)
        if split is None:
            return "the Host header is not a host name"
        if self.host_allowed(split[0], request):
            return None
        return (
            f"host {split[0]!r} is not served here without a token: use localhost or this server's address, "
            "or add the name to allowed_hosts (--allow-host)"
        )

    def origin_refusal(self, request: web.Request) -> str | None:
        if request.method in _SAFE_METHODS and not request.path.endswith("/events"):
            return None
        origin = request.headers.get("Origin")
        if origin is None:
            return None  # not sent by a browser's cross-site request
        parts = urlsplit(origin.strip()) if origin.strip() != "null" else None
        host = _split_host(request.headers.get("Host", ""))
        if parts is None or parts.hostname is None or host is None:
            return f"requests from origin {origin[:100]!r} are refused"
        try:
            port = parts.port
        except ValueError:
            return f"requests from origin {origin[:100]!r} are refused"
        same_port = (str(port) if port is not None else None) == host[1]
        if parts.hostname.lower().rstrip(".") == host[0].strip("[]") and same_port:
            return None
        return f"requests from origin {origin[:100]!r} are refused: only this server's own pages may send them"


def site_guard(allowed_hosts: frozenset[str], *, check_host: bool) -> Any:
    """The middleware refusing (403) requests for another host (without a token) or from another origin."""
    guard = SiteGuard(allowed_hosts, check_host=check_host)

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        why = guard.host_refusal(request) or guard.origin_refusal(request)
        if why is not None:
            log.info("run journal: refused %s %s: %s", request.method, request.path, why)
            return web.json_response({"error": why}, status=403, dumps=lambda v: json.dumps(v, ensure_ascii=True))
        response: web.StreamResponse = await handler(request)
        return response

    return middleware
