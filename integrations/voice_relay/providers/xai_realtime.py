"""xAI's realtime voice API over a websocket (same event names as OpenAI Realtime)."""

from __future__ import annotations

from typing import Any

from .realtime_ws import RealtimeWebsocketConnection, RealtimeWebsocketProvider


class XAIRealtimeConnection(RealtimeWebsocketConnection):
    label = "xAI Realtime"

    def session_update(self) -> dict[str, Any]:
        pcm = {"type": "audio/pcm", "rate": self.config.sample_rate}
        return {
            "voice": self.config.voice,
            "instructions": self.config.instructions,
            "turn_detection": {"type": "server_vad"},
            "audio": {"input": {"format": pcm}, "output": {"format": pcm}},
            "tools": self.config.tools,
        }


class XAIRealtimeProvider(RealtimeWebsocketProvider):
    provider_id = "xai_realtime"
    connection_class = XAIRealtimeConnection
