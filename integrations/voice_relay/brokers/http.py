"""Streams a remote agent's run over HTTP: POST the task, read newline-delimited JSON events
(plain NDJSON or server-sent-event `data:` lines)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from ..models import AgentTaskRequest

logger = logging.getLogger(__name__)


class HttpTaskBroker:
    def __init__(self, url: str, *, timeout_seconds: float = 330.0, max_line_bytes: int = 1024 * 1024) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"agent url must be http(s), got {url!r}")
        self.url = url
        self.timeout = aiohttp.ClientTimeout(total=timeout_seconds, sock_connect=10)
        self.max_line_bytes = max_line_bytes
        self._http: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=self.timeout, read_bufsize=self.max_line_bytes)
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def stream_task(self, request: AgentTaskRequest) -> AsyncIterator[dict[str, Any]]:
        headers = {"Accept": "application/x-ndjson, text/event-stream"}
        if request.bearer_token:
            headers["Authorization"] = f"Bearer {request.bearer_token}"
        body = {
            "text": request.text,
            "profile": request.profile,
            "session_id": request.session_id,
            "interface_context": request.interface_context or {},
        }
        try:
            async with self._client().post(self.url, json=body, headers=headers) as response:
                if response.status != 200:
                    yield {"type": "voice.error", "message": f"agent returned HTTP {response.status}"}
                    return
                async for raw in response.content:
                    event = self._parse_line(raw)
                    if event is not None:
                        yield event
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            yield {"type": "voice.error", "message": f"agent stream failed: {type(exc).__name__}"}

    @staticmethod
    def _parse_line(raw: bytes) -> dict[str, Any] | None:
        line = raw.strip()
        if not line or line.startswith((b":", b"event:", b"id:", b"retry:")):
            return None
        if line.startswith(b"data:"):
            line = line[5:].strip()
        try:
            event = json.loads(line)
        except ValueError:
            logger.warning("agent stream sent a non-JSON line; skipped")
            return None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            return None
        return event
