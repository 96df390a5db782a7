"""Keeping credentials out of cassette files.

Three layers, applied to a whole cassette document just before it is written, on the
relay's own credential lists (``relay_runtime.redaction``):
credential headers lose their values, credential keys lose their values at any
depth, and every secret value seen on a recorded request (the API key from its
``Authorization`` or ``x-api-key`` header, a credential query parameter) or held by
a client (``remember_secret``) is cut out of every string, JSON keys and base64
bodies included, whole or any run of 8 or more of its characters, so a provider
that echoes the key back in an error body, masked or not, does not put it on disk.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import unquote, unquote_plus

from .. import redaction
from ..redaction_streams import spread
from ..secret_runs import SecretRuns
from ..urls import edit_query, is_signing_scope

REDACTED = redaction.REDACTED

# Shorter than this, a "secret" is more likely a placeholder than a key; cutting it out of every
# string would mangle the cassette.
MIN_SECRET_LENGTH = 8


def credential_lists() -> tuple[Callable[[str | bytes], bool], frozenset[str]]:
    """The relay's credential rules: a header-name test and the body keys (the one place cassettes read them).

    Body keys match exactly in any case, never by substring: ``max_tokens`` and usage counts
    are content, and so is ``token`` in OpenAI's logprobs.
    """
    return redaction.is_credential_header, redaction.CREDENTIAL_BODY_KEYS


def secret_values(headers: Iterable[tuple[Any, Any]]) -> set[str]:
    """The credential values among request headers: whole, and without an auth scheme word
    (``Bearer``, ``Basic``, ``ApiKey``, any one word before the key)."""
    is_header, _ = credential_lists()
    found: set[str] = set()
    for name, value in headers:
        if not is_header(name):
            continue
        text = value.decode("latin-1") if isinstance(value, (bytes, bytearray)) else str(value)
        text = text.strip()
        scheme, space, rest = text.partition(" ")
        signed = _signed(scheme, rest)
        if signed is not None:
            found |= signed
            continue
        # The scheme word is no secret, and its runs would eat the text around an echoed key.
        found.add(rest.strip() if space and scheme.isalpha() else text)
    return {value for value in found if len(value) >= MIN_SECRET_LENGTH}


# Signature V4 schemes (AWS's, and Google Cloud Storage's HMAC keys): ``Credential=<key id>/<date>/<region>/
# <service>/<...>4_request, SignedHeaders=<names>, Signature=<hex>``.
_SIGNED_SCHEMES = ("4-HMAC-SHA256", "4-ECDSA-P256-SHA256")


def _signed(scheme: str, rest: str) -> set[str] | None:
    """The secrets of a Signature V4 ``Authorization``: its key id and its signature; None for another scheme.

    The rest is public text (header names, a date, a region, a service): taken as a secret, its runs of 8
    would be cut from whatever a cassette holds ("content-type", "eu-west-3" in an answer).
    """
    if not scheme.endswith(_SIGNED_SCHEMES):
        return None
    found = set()
    for part in rest.split(","):
        name, _, value = part.strip().partition("=")
        if name == "Credential":
            found.add(value.partition("/")[0])
        elif name == "Signature":
            found.add(value)
    return found


def query_secrets(query: Mapping[Any, Any]) -> set[str]:
    """The credential values of query parameters given as a mapping (a client's ``default_query``,
    ``extra_query``): known before the call is sent, so its miss can be scrubbed of them too."""
    return {
        value
        for name, value in query.items()
        if isinstance(value, str) and len(value) >= MIN_SECRET_LENGTH and redaction.is_query_credential(str(name))
    }


def redact_query(path: str) -> tuple[str, set[str]]:
    """A request path with its credential query values (``?key=...``, ``?sig=...``) redacted, and those values.

    The values are returned so they are cut from every other string too (an error body
    echoing them); a short one is redacted here but not cut elsewhere (see MIN_SECRET_LENGTH).
    """
    found: set[str] = set()

    def blank(name: str, raw_name: str, raw_value: str) -> str | None:
        if not raw_value or not redaction.is_query_credential(name):
            return None
        found.update(
            v for v in (raw_value, unquote_plus(raw_value)) if len(v) >= MIN_SECRET_LENGTH and not is_signing_scope(v)
        )
        return f"{raw_name}={REDACTED}"

    return edit_query(path, blank), found


def redact_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    is_header, _ = credential_lists()
    return {k: (REDACTED if is_header(k) else v) for k, v in headers.items()}


def scrub(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of a JSON document with credential keys redacted at any depth, and ``secrets`` and every
    remembered client key cut from every string (keys too), whole or any run of 8 or more of their
    characters, percent-encoded or not, and from every ``base64`` body (whatever its encoding)."""
    _, keys = credential_lists()
    return _scrub(value, keys, runs_of(secrets))


def runs_of(secrets: Iterable[str] = ()) -> SecretRuns:
    """The remembered client keys and ``secrets`` (a cassette's own), ready to search for."""
    remembered = redaction.remembered()
    more = frozenset(secrets)
    if more <= remembered.secrets:
        return remembered
    return _runs(more | remembered.secrets)


@functools.lru_cache(maxsize=8)
def _runs(secrets: frozenset[str]) -> SecretRuns:
    # Building the search costs more than a match: a cassette's secrets are the same from call to call.
    return SecretRuns(secrets, REDACTED)


def cut_across(secrets: Iterable[str] = ()) -> Callable[[list[str]], list[str]] | None:
    """What cuts ``secrets`` (and every remembered client key) out of one text given in pieces (a field of a
    stream's events, in order): a key a model echoes comes as deltas of a few characters, none of which holds
    a run ``scrub`` would find, while the pieces together spell it. None when there is no secret to cut."""
    runs = runs_of(secrets)
    if not runs:
        return None

    def cut(pieces: list[str]) -> list[str]:
        joined = "".join(pieces)
        spans = runs.spans(joined)
        return spread(pieces, joined, spans) if spans else pieces

    return cut


def may_scrub(text: str, secrets: Iterable[str] = ()) -> bool:
    """Whether ``scrub`` could change the JSON document whose text (``json.dumps``, no ASCII escaping) this is.

    No false "no": with no escaped character in the text, every string in the document
    (keys too) is in it verbatim, so a run of a remembered secret (or of ``secrets``) in one is found in the
    text, and a credential key shows as ``"key":``. An escape, a percent sign or a base64
    body anywhere answers yes.
    """
    if "\\" in text or "%" in text or '"base64":' in text or runs_of(secrets).search(text):
        return True
    _, keys = credential_lists()
    lowered = text.lower()
    return any(f'"{key}":' in lowered for key in keys)


def _text(value: str, runs: redaction.SecretRuns) -> str:
    value = runs.text(value)
    if "%" in value:
        # A key sent in a URL (a redirect, an echoed query) is percent-encoded there.
        plain = unquote(value)
        if plain != value:
            clean = runs.text(plain)
            if clean != plain:
                return clean
    return value


def _base64(value: str, runs: redaction.SecretRuns) -> str:
    try:
        data = base64.b64decode(value, validate=True)
    except ValueError:
        return _text(value, runs)
    clean = runs.bytes(data)
    return value if clean == data else base64.b64encode(clean).decode("ascii")


def _scrub(value: Any, keys: frozenset[str], runs: redaction.SecretRuns) -> Any:
    if isinstance(value, str):
        return _text(value, runs) if runs else value
    if isinstance(value, Mapping):
        # Only a scalar under a credential key is a credential: a tool schema may well
        # describe a "password" property, and that object is the request's content.
        out = {}
        for k, v in value.items():
            if isinstance(k, str) and k.lower() in keys and v is not None and not isinstance(v, (Mapping, list)):
                v = REDACTED
            elif k == "base64" and isinstance(v, str) and runs:
                v = _base64(v, runs)
            else:
                v = _scrub(v, keys, runs)
            out[_text(k, runs) if isinstance(k, str) and runs else k] = v
        return out
    if isinstance(value, list):
        return [_scrub(v, keys, runs) for v in value]
    return value
