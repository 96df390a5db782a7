"""The realtime voice relay: phone websocket <-> realtime voice model <-> agent task broker."""

from __future__ import annotations

from .config import RelayConfig
from .models import AgentTaskRequest, ProviderEvent, ProviderEventKind, ToolCallEvent
from .server import create_app

__all__ = ["AgentTaskRequest", "ProviderEvent", "ProviderEventKind", "RelayConfig", "ToolCallEvent", "create_app"]
