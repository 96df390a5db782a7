"""The credentials a failed call was actually sent with, remembered so that no record of its error holds them.

A client's static key is remembered before every call (``dispatch.prepare``), but many
credentials never sit in ``client.api_key``: a key provider's or an Azure AD token
provider's token (fetched inside the SDK, on the first try), an Azure AD token, a
Vertex access token, a gateway's key in ``default_headers``, a key in ``default_query``.
A provider or a gateway that echoes the credential in its error would put it in the
error message, and so in events, spans and journal rows. The SDKs' status and
connection errors carry the last request they sent: its credential headers and
credential query parameters are remembered here, on the error path only, before the
error is recorded. A successful call pays nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from relay_runtime import redaction
from relay_runtime.cassettes import secrets

from . import sdk_retries


def remember_from_error(error: BaseException) -> None:
    """Remember the credentials of the HTTP request ``error`` says it was raised for, and of the last request
    the SDK sent here (newer SDKs add the credential while sending, not to the request an error carries)."""
    try:
        # httpx's own errors raise from ``.request`` when none was set.
        request = getattr(error, "request", None)
    except RuntimeError:
        request = None
    _remember(request)
    sent = sdk_retries.last_sent()
    if sent is not None and sent is not request:
        _remember(sent)


def _remember(request: Any) -> None:
    headers = getattr(request, "headers", None)
    raw = getattr(headers, "raw", None)
    if isinstance(raw, list):
        remember_sent(raw, getattr(request, "url", None))


def remember_sent(headers: Iterable[tuple[Any, Any]], url: Any = None) -> None:
    """Remember the credential values among the headers (name, value pairs) and the query of ``url``
    a request was sent with: what an SDK whose requests are not httpx's (google-genai's) hands over."""
    found = secrets.secret_values(headers)
    if url is not None:
        found |= secrets.redact_query(str(url))[1]
    for value in found:
        redaction.remember_secret(value)
