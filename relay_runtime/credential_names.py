"""Which names say a credential: headers, query parameters, request body keys, and keys of recorded data.

Each rule is asked once per name and remembered (``_judged_once``): names repeat from call to call.
The lists and what each is for are in ``redaction``'s docstring, which keeps what is done with them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

CREDENTIAL_HEADER_NAMES = frozenset(
    {"authorization", "proxy-authorization", "cookie", "api-key", "api_key", "x-api-key"}
)
CREDENTIAL_HEADER_PATTERNS = ("*-subscription-key", "*-api-key", "*token*", "*secret*")
CREDENTIAL_BODY_KEYS = frozenset(
    {"api_key", "apikey", "access_token", "refresh_token", "client_secret", "secret", "password", "authorization"}
    # Anthropic's mcp_servers[].authorization_token: the bearer token of a remote MCP server.
    | {"authorization_token"}
    # A header's name used as a body key (a gateway that takes its key in the body, headers forwarded as data).
    | {"api-key", "x-api-key"}
)

_SUFFIXES = tuple(p[1:] for p in CREDENTIAL_HEADER_PATTERNS if p.startswith("*") and not p.endswith("*"))
_INFIXES = tuple(p[1:-1] for p in CREDENTIAL_HEADER_PATTERNS if p.startswith("*") and p.endswith("*"))

VERDICTS_MAX = 4096


class _Judged(Protocol):
    verdicts: dict[Any, bool]

    def __call__(self, name: Any) -> bool: ...


def _judged_once(judge: Callable[[Any], bool]) -> _Judged:
    """``judge``, remembering each name's verdict: names repeat from call to call. Bounded, since names are
    caller data; only text and bytes are remembered. Hot loops read ``.verdicts`` themselves, a call saved
    per key, and call the function on a miss."""
    verdicts: dict[Any, bool] = {}

    def judged(name: Any) -> bool:
        verdict = verdicts.get(name)
        if verdict is None:
            verdict = judge(name)
            if len(verdicts) < VERDICTS_MAX and isinstance(name, (str, bytes)):
                verdicts[name] = verdict
        return verdict

    functools.update_wrapper(judged, judge)
    judged.verdicts = verdicts  # type: ignore[attr-defined]
    return judged  # type: ignore[return-value]


def _as_text(name: Any) -> str:
    # Header names may be bytes (httpx accepts them); str(b"...") would hide "authorization".
    return name.decode("latin-1") if isinstance(name, (bytes, bytearray)) else str(name)


@_judged_once
def is_credential_header(name: str | bytes) -> bool:
    lowered = _as_text(name).strip().lower()
    return (
        lowered in CREDENTIAL_HEADER_NAMES
        or lowered.endswith(_SUFFIXES)
        or any(infix in lowered for infix in _INFIXES)
        or is_credential_name(name)
    )


# Query parameter and header names that say credential (the name rule of cassettes' query strings and
# headers, request and response): exact names, then ``*-key`` / ``*-token`` / ``*-auth`` / ``*-authorization``
# (a second bearer beside the API's own: Cloud Run's ``X-Serverless-Authorization``) / ``*-credential`` (a
# presigned URL's signer: S3's ``X-Amz-Credential`` starts with the access key's id) / ``x-auth-*`` with ``_``
# read as ``-``. ``author`` is no credential, and an idempotency key is a request id.
CREDENTIAL_NAMES = frozenset(
    {"key", "api-key", "apikey", "token", "access-token", "sig", "signature", "secret", "password", "credential"}
    | {"subscription-key", "cookie", "set-cookie", "authorization", "proxy-authorization", "auth"}
)
# ``-apikey``: a gateway's ``x-apikey`` (Apigee's), one word where others write ``-api-key``.
_NAME_SUFFIXES = ("-key", "-apikey", "-token", "-auth", "-authorization", "-secret", "-signature", "-password",
                  "-credential")  # fmt: skip
_NAME_PREFIXES = ("x-auth-",)
_NOT_CREDENTIAL_NAMES = frozenset({"idempotency-key", "x-idempotency-key"})


@_judged_once
def is_credential_name(name: str | bytes) -> bool:
    """A query parameter or header name that says it holds a credential (see ``CREDENTIAL_NAMES``)."""
    lowered = _as_text(name).strip().lower().replace("_", "-")
    return lowered not in _NOT_CREDENTIAL_NAMES and (
        lowered in CREDENTIAL_NAMES or lowered.endswith(_NAME_SUFFIXES) or lowered.startswith(_NAME_PREFIXES)
    )


@_judged_once
def is_credential_key(key: Any) -> bool:
    """A body or query key that holds a credential: an exact name from the list, any case."""
    return isinstance(key, (str, bytes)) and _as_text(key).strip().lower() in CREDENTIAL_BODY_KEYS


# Recorded data (``redact_value``): the body keys, and names that say credential whatever comes before
# (``github_token``, ``OPENAI_API_KEY``, ``aws_secret_access_key``). Plural counts (``max_tokens``) end otherwise.
CREDENTIAL_DATA_KEYS = CREDENTIAL_BODY_KEYS | {
    "token", "auth_token", "proxy-authorization", "cookie", "set-cookie", "private_key", "secret_access_key",
}  # fmt: skip
CREDENTIAL_DATA_KEY_SUFFIXES = (
    "_api_key", "-api-key", "_secret", "-secret", "_token", "-token", "_private_key", "_secret_access_key",
)  # fmt: skip


@_judged_once
def is_credential_data_key(key: Any) -> bool:
    """A key of recorded data whose value is a credential, any case (``CREDENTIAL_DATA_KEYS``, or a name
    ending in ``CREDENTIAL_DATA_KEY_SUFFIXES``): the rule of ``redact_value`` and of the OTel content capture."""
    if not isinstance(key, (str, bytes)):
        return False
    lowered = _as_text(key).strip().lower()
    return lowered in CREDENTIAL_DATA_KEYS or lowered.endswith(CREDENTIAL_DATA_KEY_SUFFIXES)
