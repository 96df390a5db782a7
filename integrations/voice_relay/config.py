"""Relay configuration: the static `RelayConfig`, the promotion settings the phone may PATCH,
and the environment knobs for resume and background windows."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

RESULT_DELIVERY_MODES = ("speak_when_idle", "speak_verbatim", "visual_only")
BACKGROUND_MODES = ("chat", "run", "background")


@dataclass
class RelayConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    realtime_voice_enabled: bool = True
    realtime_voice_provider: str = "stub"
    realtime_voice_model: str = ""
    realtime_voice_voice: str = ""
    realtime_voice_sample_rate: int = 24000
    realtime_voice_instructions: str = (
        "You are a concise voice assistant. Hand real work to the agent with hermes_run_task."
    )
    realtime_voice_profile: str = "default"
    realtime_voice_promotion_enabled: bool = True
    realtime_voice_promote_after_ms: int = 4000
    realtime_voice_result_delivery: str = "speak_verbatim"
    realtime_voice_background_default_mode: str = "run"
    realtime_voice_spoken_handoff: bool = True
    realtime_voice_progress_spoken_after_ms: int = 0
    realtime_voice_progress_repeat_ms: int = 0
    realtime_voice_max_background_runs: int = 1
    realtime_voice_config_path: str = ""
    realtime_voice_run_dir: str = ""
    # Bounds on what a client may send; larger messages are refused with a voice.error.
    max_message_bytes: int = 256 * 1024
    max_audio_chunk_bytes: int = 64 * 1024
    # Send the phone a voice.turn.metrics event (the latency the user felt) as each user turn ends.
    realtime_voice_turn_metrics: bool = False
    # What one session's event log may write in all; past it records are dropped and counted.
    max_event_log_bytes: int = 64 * 1024 * 1024
    # Live voice sessions (attached, detached or not yet claimed) one device may hold; more are a 429.
    # Each holds an open event log and its rings: without a cap one token could exhaust the file handles.
    max_sessions_per_device: int = 16
    # Seconds a connection has to send a whole request head (after it opens, or after its last response);
    # a slower one is closed. aiohttp's own wait is an hour: headers trickled a byte at a time held a
    # socket (no token needed) that long. A websocket's handler runs for the session and is never closed.
    header_timeout: float = 10.0
    # Connections one client address may hold at once when served by `relay-runtime voice serve` (503 beyond);
    # behind a reverse proxy every phone shares the proxy's address: raise it there.
    max_connections_per_client: int = 96


@dataclass
class PromotionSettings:
    """The part of the configuration the phone reads and PATCHes at runtime."""

    enabled: bool = True
    promote_after_ms: int = 4000
    background_default_mode: str = "run"
    spoken_handoff: bool = True
    progress_spoken_after_ms: int = 0
    progress_repeat_ms: int = 0
    result_delivery: str = "speak_verbatim"
    max_background_runs: int = 1

    @classmethod
    def from_config(cls, config: RelayConfig) -> PromotionSettings:
        return cls(
            enabled=config.realtime_voice_promotion_enabled,
            promote_after_ms=config.realtime_voice_promote_after_ms,
            background_default_mode=config.realtime_voice_background_default_mode,
            spoken_handoff=config.realtime_voice_spoken_handoff,
            progress_spoken_after_ms=config.realtime_voice_progress_spoken_after_ms,
            progress_repeat_ms=config.realtime_voice_progress_repeat_ms,
            result_delivery=config.realtime_voice_result_delivery,
            max_background_runs=config.realtime_voice_max_background_runs,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def apply_patch(self, patch: Any) -> None:
        """Validate every field of `patch` first, then apply; a bad patch changes nothing."""
        if not isinstance(patch, dict):
            raise ValueError("promotion must be an object")
        known = {f.name: f for f in fields(self)}
        updates: dict[str, Any] = {}
        for key, value in patch.items():
            if key not in known:
                raise ValueError(f"unknown promotion setting {key!r}")
            current = getattr(self, key)
            if isinstance(current, bool):
                if not isinstance(value, bool):
                    raise ValueError(f"promotion.{key} must be a boolean")
            elif isinstance(current, int):
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 3_600_000:
                    raise ValueError(f"promotion.{key} must be an integer between 0 and 3600000")
            elif not isinstance(value, str):
                raise ValueError(f"promotion.{key} must be a string")
            updates[key] = value
        if "result_delivery" in updates and updates["result_delivery"] not in RESULT_DELIVERY_MODES:
            raise ValueError(f"promotion.result_delivery must be one of {', '.join(RESULT_DELIVERY_MODES)}")
        mode = updates.get("background_default_mode")
        if mode is not None and mode not in BACKGROUND_MODES:
            raise ValueError(f"promotion.background_default_mode must be one of {', '.join(BACKGROUND_MODES)}")
        if updates.get("max_background_runs", 1) < 1:
            raise ValueError("promotion.max_background_runs must be at least 1")
        for key, value in updates.items():
            setattr(self, key, value)


@dataclass
class RuntimeSettings:
    """Provider choice plus promotion settings, persisted as JSON (a YAML subset) at the config path."""

    provider: str
    model: str
    voice: str
    promotion: PromotionSettings = field(default_factory=PromotionSettings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "model": self.model,
            "voice": self.voice,
            "promotion": self.promotion.to_dict(),
        }

    def save(self, path: str) -> None:
        if not path:
            return
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2), encoding="utf-8")
        tmp.replace(target)


def _env_ms(name: str, default_ms: int) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default_ms / 1000.0
    try:
        value = int(raw)
    except ValueError:
        logger.warning("ignoring %s=%r: not an integer number of milliseconds", name, raw)
        return default_ms / 1000.0
    if value < 0:
        logger.warning("ignoring %s=%r: negative", name, raw)
        return default_ms / 1000.0
    return value / 1000.0


def resume_ttl_seconds() -> float:
    return _env_ms("RELAY_VOICE_RESUME_TTL_MS", 30_000)


def background_detached_max_seconds() -> float:
    return _env_ms("RELAY_VOICE_BACKGROUND_DETACHED_MAX_MS", 360_000)


def background_run_max_seconds() -> float:
    return _env_ms("RELAY_VOICE_BACKGROUND_RUN_MAX_MS", 300_000)
