"""Device sessions: bearer tokens issued to paired phones.

Only each token's sha256 is stored: the raw token goes back to the caller of
`create_session` once and is never kept by the relay.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field

from aiohttp import web

# Once a cache of Authorization header -> digest; keyed by the raw header, it kept every bearer
# token in memory for the life of the process. Hashing a token costs about a microsecond, so the
# relay hashes per request and this stays empty; the seed's tests still clear it.
_VALIDATION_CACHE: dict[str, str] = {}


def token_digest(token: str) -> str:
    # surrogateescape: a header with bytes that are not UTF-8 reaches us with lone surrogates; it
    # hashes (and fails to match) like any other wrong token instead of raising.
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def digests_match(expected_hex: str, candidate: str) -> bool:
    """Constant-time comparison of a stored sha256 hex digest with a presented token."""
    return hmac.compare_digest(expected_hex.encode("ascii"), token_digest(candidate).encode("ascii"))


@dataclass(frozen=True)
class DeviceSession:
    """A paired device, as the relay remembers it (no token)."""

    name: str
    device_id: str
    created_at: float = field(default_factory=time.time)


@dataclass(frozen=True)
class IssuedDevice:
    """What `create_session` hands back: the device and its bearer token, shown this once."""

    device: DeviceSession
    token: str = field(repr=False)

    @property
    def name(self) -> str:
        return self.device.name

    @property
    def device_id(self) -> str:
        return self.device.device_id


class DeviceSessions:
    def __init__(self) -> None:
        self._by_digest: dict[str, DeviceSession] = {}

    def create_session(self, name: str, device_id: str) -> IssuedDevice:
        if not name or not device_id:
            raise ValueError("a device session needs a name and a device_id")
        token = secrets.token_urlsafe(32)
        device = DeviceSession(name=name, device_id=device_id)
        self._by_digest[token_digest(token)] = device
        return IssuedDevice(device, token)

    def revoke(self, token: str) -> bool:
        return self._by_digest.pop(token_digest(token), None) is not None

    def authenticate(self, request: web.Request) -> DeviceSession | None:
        # A dict lookup by digest: the attacker controls the token, not the digest's bytes, so
        # lookup timing says nothing useful about any stored token.
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        return self._by_digest.get(token_digest(token))
