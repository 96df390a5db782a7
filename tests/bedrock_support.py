"""A loopback server speaking Amazon Bedrock's runtime API, for real boto3 clients with no network.

``converse`` answers JSON; ``converse-stream`` answers the binary AWS event-stream encoding
(each frame: a prelude of total and header lengths with its CRC32, typed headers, the JSON
payload, and a CRC32 of the whole frame), written by ``frame`` below.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import botocore.config

ACCESS_KEY = "AKIARELAYTESTKEY0001"
# Random, like real ones: the relay blanks any run of 8 characters of a remembered key wherever it
# appears, so a readable fake ("...-session-token-...") would blank ordinary words in later tests.
SECRET_KEY = "9x9oBB7eoxd5HkEUp1X1DWLPdkD0qO9+hzVt3++a"
SESSION_TOKEN = (
    "1e32TbdKVuL9FBswKK7bX3MFc31gts6ZVkU/LDPqt2M1RTKhVp71SH693Q7OtOGs"
    "lYC6F98G0vmaIU571mL4gx8hbWMCWWo5VXgNQrnV3f75RKkzQrQeLeKjzdtSkrt/"
)
REGION = "eu-west-3"
MODEL = "anthropic.claude-3-5-sonnet-20241022-v2:0"


def _header(name: str, value: str) -> bytes:
    encoded = value.encode()
    return bytes([len(name)]) + name.encode() + bytes([7]) + struct.pack(">H", len(encoded)) + encoded


def frame(headers: dict[str, str], payload: dict[str, Any]) -> bytes:
    """One event-stream message."""
    head = b"".join(_header(k, v) for k, v in headers.items())
    body = json.dumps(payload).encode()
    total = 12 + len(head) + len(body) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + head + body
    return message + struct.pack(">I", binascii.crc32(message))


def event(kind: str, payload: dict[str, Any]) -> bytes:
    return frame({":event-type": kind, ":content-type": "application/json", ":message-type": "event"}, payload)


def stream_exception(kind: str, message: str) -> bytes:
    return frame(
        {":exception-type": kind, ":content-type": "application/json", ":message-type": "exception"},
        {"message": message},
    )


USAGE = {"inputTokens": 100, "outputTokens": 20, "totalTokens": 1620, "cacheReadInputTokens": 1000,
         "cacheWriteInputTokens": 500}  # fmt: skip


def text_events(parts: list[str], *, stop: bool = True, usage: dict[str, Any] | None = None) -> bytes:
    out = [event("messageStart", {"role": "assistant"})]
    out += [event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": p}}) for p in parts]
    out.append(event("contentBlockStop", {"contentBlockIndex": 0}))
    if stop:
        out.append(event("messageStop", {"stopReason": "end_turn"}))
        out.append(event("metadata", {"usage": usage or USAGE, "metrics": {"latencyMs": 12}}))
    return b"".join(out)


def tool_events() -> bytes:
    return b"".join([
        event("messageStart", {"role": "assistant"}),
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Looking."}}),
        event("contentBlockStop", {"contentBlockIndex": 0}),
        event("contentBlockStart", {"contentBlockIndex": 1,
                                    "start": {"toolUse": {"toolUseId": "tu-1", "name": "weather"}}}),
        event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"city": '}}}),
        event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '"Paris"}'}}}),
        event("contentBlockStop", {"contentBlockIndex": 1}),
        event("messageStop", {"stopReason": "tool_use"}),
        event("metadata", {"usage": {"inputTokens": 30, "outputTokens": 9, "totalTokens": 39}, "metrics": {}}),
    ])  # fmt: skip


def converse_body(text: str = "hello", *, stop: str = "end_turn", usage: dict[str, Any] | None = None,
                  tool: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    content: list[dict[str, Any]] = [{"text": text}]
    if tool is not None:
        content.append({"toolUse": tool})
    return {"output": {"message": {"role": "assistant", "content": content}}, "stopReason": stop,
            "usage": usage or USAGE, "metrics": {"latencyMs": 12}}  # fmt: skip


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


def json_reply(body: dict[str, Any], status: int = 200, **headers: str) -> Reply:
    return Reply(status, json.dumps(body).encode(), "application/json", headers)


def stream_reply(body: bytes) -> Reply:
    return Reply(200, body, "application/vnd.amazon.eventstream")


def error_reply(status: int, code: str, message: str) -> Reply:
    return Reply(status, json.dumps({"message": message}).encode(), "application/json", {"x-amzn-ErrorType": code})


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class BedrockServer:
    """Answers each request with the next scripted reply (the last one again when the script runs out)."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.seen: list[Seen] = []
        self.default = json_reply(converse_body())
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # One write per reply, sent at once: no delayed-ACK stall between headers and body.
            wbufsize = -1
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                server.seen.append(Seen(self.path, dict(self.headers), json.loads(raw or b"{}")))
                reply = server.replies.pop(0) if server.replies else server.default
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                self.send_header("x-amzn-RequestId", f"req-{len(server.seen)}")
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(reply.body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def client(self, retries: int = 0) -> Any:
        """A real boto3 client of this server with dummy credentials; ``retries``: botocore's, after the first try."""
        return boto3.client(
            "bedrock-runtime",
            region_name=REGION,
            endpoint_url=self.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            aws_session_token=SESSION_TOKEN,
            config=botocore.config.Config(retries={"mode": "standard", "max_attempts": retries}),
        )

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def raw_reply(body: dict[str, Any], **headers: str) -> Reply:
    """An ``invoke_model`` answer: the model's own JSON body."""
    return Reply(200, json.dumps(body).encode(), "application/json", headers)


def chunks(*events: dict[str, Any]) -> bytes:
    """``invoke_model_with_response_stream`` frames: each a ``chunk`` event carrying one model event's JSON."""
    return b"".join(
        event("chunk", {"bytes": base64.b64encode(json.dumps(e).encode()).decode()}) for e in events
    )


def anthropic_stream_events(parts: list[str], *, stop: bool = True) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
         "model": "claude-3-5-sonnet-20241022", "content": [],
         "usage": {"input_tokens": 40, "output_tokens": 1, "cache_read_input_tokens": 200}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ]  # fmt: skip
    out += [{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}} for p in parts]
    if stop:
        out += [
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 6}},
            {"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 240,
                                                                          "outputTokenCount": 6}},
        ]  # fmt: skip
    return out
