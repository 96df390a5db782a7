"""A Bedrock event stream as cassette data, and back.

A stream's answer is AWS's binary event-stream framing (a prelude, typed headers, the payload, CRCs):
stored as it came, as base64, no rule of a redaction policy could read it, and an e-mail, a key or a
card the model streamed would sit in the cassette whole. So it is stored as its events, each with its
headers and its payload as JSON (an ``invoke_model_with_response_stream`` chunk's base64 ``bytes``,
JSON too, decoded as well): the policy reads them like any other answer, across events, and replay
frames them again. A stream that does not decode, or with a header that is not text, stays base64.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from typing import Any

_STRING = 7  # the header value type of a UTF-8 string


def records(body: bytes) -> list[dict[str, Any]] | None:
    """The events of ``body`` as data (None: not an event stream this module can store readably)."""
    from botocore.eventstream import EventStreamBuffer, EventStreamError  # type: ignore[import-untyped, unused-ignore]

    buffer = EventStreamBuffer()
    buffer.add_data(body)
    out: list[dict[str, Any]] = []
    try:
        for message in buffer:
            headers = message.headers
            if not all(isinstance(v, str) for v in headers.values()):
                return None
            out.append({"headers": dict(headers), **_payload_record(message.payload)})
    except EventStreamError:
        return None
    return out if out else None


def damage(events: list[Any]) -> str | None:
    """What is wrong with recorded events (``records``' shape), or None: what framing them again would
    raise on (``struct.error``, ``binascii.Error``) or botocore would read past (an event framed from no
    headers, an event payload that is no object)."""
    for index, event in enumerate(events):
        if type(event) is not dict:
            return f"events[{index}] must be an object"
        headers = event.get("headers")
        if type(headers) is not dict or not all(_header_fits(k, v) for k, v in headers.items()):
            return f"events[{index}].headers must be an object of strings (names up to 255 bytes)"
        if ":message-type" not in headers:  # botocore skips such an event: the answer would lose it silently
            return f"events[{index}].headers has no :message-type"
        if "bytes_json" in event:
            continue  # any JSON: the model's own event, which botocore hands on as bytes
        if "json" in event:
            if type(event["json"]) is not dict:
                return f"events[{index}].json must be an object"
            continue
        if type(event.get("base64")) is not str:
            return f"events[{index}] has no payload (json, bytes_json or base64)"
        try:
            base64.b64decode(event["base64"], validate=True)
        except ValueError:
            return f"events[{index}].base64 is not base64"
    return None


def _header_fits(name: Any, value: Any) -> bool:
    # A header's name length is one byte and its value's two in the framing (``_message``).
    return (
        type(name) is str
        and type(value) is str
        and len(name.encode("utf-8")) <= 255
        and len(value.encode("utf-8")) <= 0xFFFF
    )


def _payload_record(payload: bytes) -> dict[str, Any]:
    try:
        value = json.loads(payload)
    except ValueError:
        return {"base64": base64.b64encode(payload).decode("ascii")}
    inner = value.get("bytes") if isinstance(value, dict) and len(value) == 1 else None
    if isinstance(inner, str):
        try:
            return {"bytes_json": json.loads(base64.b64decode(inner, validate=True))}
        except (ValueError, binascii.Error):
            pass
    return {"json": value}


def encode(events: list[Any]) -> bytes:
    """``records``' events framed as the event stream they were."""
    return b"".join(_message(event) for event in events if isinstance(event, dict))


def _message(event: dict[str, Any]) -> bytes:
    if "bytes_json" in event:
        inner = json.dumps(event["bytes_json"], ensure_ascii=False).encode("utf-8")
        payload = json.dumps({"bytes": base64.b64encode(inner).decode("ascii")}).encode("utf-8")
    elif "json" in event:
        payload = json.dumps(event["json"], ensure_ascii=False).encode("utf-8")
    else:
        payload = base64.b64decode(str(event.get("base64", "")))
    headers = b""
    for name, value in (event.get("headers") or {}).items():
        raw_name, raw_value = str(name).encode("utf-8"), str(value).encode("utf-8")
        headers += struct.pack(">B", len(raw_name)) + raw_name + struct.pack(">BH", _STRING, len(raw_value)) + raw_value
    total = 12 + len(headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + headers + payload
    return message + struct.pack(">I", binascii.crc32(message))
