"""Keeping credentials out of cassette files.

Three layers, applied to a whole cassette document just before it is written, on the
relay's own credential lists (``relay_runtime.redaction``):
credential headers lose their values, credential keys lose their values at any
depth, and every secret value seen on a recorded request (the API key from its
``Authorization`` or ``x-api-key`` header) is cut out of every string, so a
provider that echoes the key back in an error body does not put it on disk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import unquote_plus

from .. import redaction

REDACTED = redaction.REDACTED

# Shorter than this, a "secret" is more likely a placeholder than a key; cutting it out of every
# string would mangle the cassette.
MIN_SECRET_LENGTH = 8
_SCHEMES = ("bearer ", "basic ", "token ")


def credential_lists() -> tuple[Callable[[str | bytes], bool], frozenset[str]]:
    """The relay's credential rules: a header-name test and the body keys (the one place cassettes read them).

    Body keys match exactly in any case, never by substring: ``max_tokens`` and usage counts
    are content, and so is ``token`` in OpenAI's logprobs.
    """
    return redaction.is_credential_header, redaction.CREDENTIAL_BODY_KEYS


def secret_values(headers: Iterable[tuple[Any, Any]]) -> set[str]:
    """The credential values among request headers, with and without their auth scheme."""
    is_header, _ = credential_lists()
    found: set[str] = set()
    for name, value in headers:
        if not is_header(name):
            continue
        text = value.decode("latin-1") if isinstance(value, (bytes, bytearray)) else str(value)
        text = text.strip()
        for scheme in _SCHEMES:
            if text.lower().startswith(scheme):
                text = text[len(scheme) :].strip()
        if len(text) >= MIN_SECRET_LENGTH:
            found.add(text)
    return found


def redact_query(path: str) -> tuple[str, set[str]]:
    """A request path with its credential query values (``?api_key=...``) redacted, and those values.

    The values are returned so they are cut from every other string too (an error body
    echoing them); a short one is redacted here but not cut elsewhere (see MIN_SECRET_LENGTH).
    """
    head, mark, query = path.partition("?")
    if not mark:
        return path, set()
    _, keys = credential_lists()
    found: set[str] = set()
    parts = []
    for part in query.split("&"):
        name, equals, value = part.partition("=")
        if equals and value and unquote_plus(name).lower() in keys:
            found |= {v for v in (value, unquote_plus(value)) if len(v) >= MIN_SECRET_LENGTH}
            part = f"{name}={REDACTED}"
        parts.append(part)
    return f"{head}?{'&'.join(parts)}", found


def redact_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    is_header, _ = credential_lists()
    return {k: (REDACTED if is_header(k) else v) for k, v in headers.items()}


def scrub(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of a JSON document with credential keys redacted at any depth and ``secrets`` cut from strings."""
    _, keys = credential_lists()
    # Longest first, so a secret that contains another is cut whole.
    ordered = sorted({s for s in secrets if s}, key=len, reverse=True)
    return _scrub(value, keys, ordered)


def may_scrub(text: str) -> bool:
    """Whether ``scrub`` could change the JSON document whose text (``json.dumps``, no ASCII escaping) this is.

    No false "no": with no escaped character in the text, every string in the document
    (keys too) is in it verbatim, so a remembered secret in one is found in the text, and
    a credential key shows as ``"key":``. An escape anywhere answers yes.
    """
    if "\\" in text or redaction.scrub_text(text) != text:
        return True
    _, keys = credential_lists()
    lowered = text.lower()
    return any(f'"{key}":' in lowered for key in keys)


def _scrub(value: Any, keys: frozenset[str], secrets: list[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return redaction.scrub_text(value)  # and every client key the relay was told of
    if isinstance(value, Mapping):
        # Only a scalar under a credential key is a credential: a tool schema may well
        # describe a "password" property, and that object is the request's content.
        return {
            k: (
                REDACTED
                if isinstance(k, str) and k.lower() in keys and v is not None and not isinstance(v, (Mapping, list))
                else _scrub(v, keys, secrets)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_scrub(v, keys, secrets) for v in value]
    return value
