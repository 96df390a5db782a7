"""Device sessions: bearer tokens issued to paired phones.

Only each token's sha256 is stored; lookups go through the digest, so the raw
token never sits in memory longer than one request.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field

from aiohttp import web

# Authorization header value -> token digest. The phone sends the same header on every
# request; this skips re-parsing and re-hashing it. Bounded; cleared on revocation.
_VALIDATION_CACHE: dict[str, str] = {}
_VALIDATION_CACHE_MAX = 1024


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def digests_match(expected_hex: str, candidate: str) -> bool:
    """Constant-time comparison of a stored sha256 hex digest with a presented token."""
    return hmac.compare_digest(expected_hex.encode("ascii"), token_digest(candidate).encode("ascii"))


@dataclass
class DeviceSession:
    name: str
    device_id: str
    token: str = field(repr=False)
    created_at: float = field(default_factory=time.time)


class DeviceSessions:
    def __init__(self) -> None:
        self._by_digest: dict[str, DeviceSession] = {}

    def create_session(self, name: str, device_id: str) -> DeviceSession:
        if not name or not device_id:
            raise ValueError("a device session needs a name and a device_id")
        token = secrets.token_urlsafe(32)
        session = DeviceSession(name=name, device_id=device_id, token=token)
        self._by_digest[token_digest(token)] = session
        return session

    def revoke(self, token: str) -> bool:
        _VALIDATION_CACHE.clear()
        return self._by_digest.pop(token_digest(token), None) is not None

    def authenticate(self, request: web.Request) -> DeviceSession | None:
        header = request.headers.get("Authorization", "")
        digest = _VALIDATION_CACHE.get(header)
        if digest is None:
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return None
            digest = token_digest(token.strip())
            if len(_VALIDATION_CACHE) >= _VALIDATION_CACHE_MAX:
                _VALIDATION_CACHE.clear()
            _VALIDATION_CACHE[header] = digest
        return self._by_digest.get(digest)
