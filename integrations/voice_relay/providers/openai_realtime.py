"""OpenAI Realtime (GA interface) over a websocket."""

from __future__ import annotations

from typing import Any

from .realtime_ws import RealtimeWebsocketConnection, RealtimeWebsocketProvider


class OpenAIRealtimeConnection(RealtimeWebsocketConnection):
    label = "OpenAI Realtime"

    def session_update(self) -> dict[str, Any]:
        pcm = {"type": "audio/pcm", "rate": self.config.sample_rate}
        return {
            "type": "realtime",
            "model": self.config.model,
            "instructions": self.config.instructions,
            "output_modalities": ["audio"],
            "audio": {
                "input": {
                    "format": pcm,
                    "transcription": {"model": "gpt-4o-mini-transcribe"},
                    "turn_detection": {"type": "server_vad"},
                },
                "output": {"format": pcm, "voice": self.config.voice},
            },
            "tools": self.config.tools,
            "tool_choice": "auto",
        }


class OpenAIRealtimeProvider(RealtimeWebsocketProvider):
    provider_id = "openai_realtime"
    connection_class = OpenAIRealtimeConnection
