"""Value types shared by the relay, its providers and its task brokers."""

from __future__ import annotations

import enum
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol


class ProviderEventKind(enum.StrEnum):
    READY = "ready"
    AUDIO_DELTA = "audio_delta"
    AUDIO_DONE = "audio_done"
    INPUT_TRANSCRIPT_DELTA = "input_transcript_delta"
    INPUT_TRANSCRIPT_FINAL = "input_transcript_final"
    OUTPUT_TEXT_DELTA = "output_text_delta"
    RESPONSE_STARTED = "response_started"
    RESPONSE_DONE = "response_done"
    FUNCTION_CALL_STARTED = "function_call_started"
    FUNCTION_CALL_ARGUMENTS_DELTA = "function_call_arguments_delta"
    FUNCTION_CALL_COMPLETED = "function_call_completed"
    ERROR = "error"


@dataclass
class ProviderEvent:
    kind: ProviderEventKind
    response_id: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class ToolCallEvent:
    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class AgentTaskRequest:
    text: str
    profile: str
    session_id: str
    bearer_token: str | None = None
    interface_context: dict[str, Any] | None = None


@dataclass
class BackgroundResult:
    """A finished background run, waiting to be delivered (or delivered) to the user."""

    ok: bool
    answer: str
    tool_count: int = 0
    error: str | None = None
    call_id: str = ""
    queued_count: int = 0
    delivered: bool = False


@dataclass
class ProviderSessionConfig:
    """What a provider needs to open one realtime conversation."""

    model: str
    voice: str
    instructions: str
    tools: list[dict[str, Any]]
    sample_rate: int = 24000
    api_key: str | None = field(default=None, repr=False)
    url: str | None = None


class ProviderConnection(Protocol):
    async def send_audio(self, pcm: bytes, sample_rate: int) -> None: ...
    async def commit_audio(self) -> None: ...
    async def send_text(self, text: str) -> None: ...
    async def clear_audio(self) -> None: ...
    async def cancel_response(self) -> None: ...
    async def send_tool_result(self, call_id: str, output: dict[str, Any]) -> None: ...
    async def append_context_item(self, *, role: str, text: str) -> None: ...
    async def request_response(
        self, *, instructions: str | None = None, exact_text: str | None = None
    ) -> None: ...
    async def close(self) -> None: ...
    def events(self) -> AsyncIterator[ProviderEvent]: ...


class RealtimeProvider(Protocol):
    provider_id: str

    async def connect(self, config: Any) -> ProviderConnection: ...


class TaskBroker(Protocol):
    def stream_task(self, request: AgentTaskRequest) -> AsyncIterator[dict[str, Any]]: ...


# The tools the voice model may call; the names are wire strings clients and prompts rely on.
RUN_TASK_TOOL = "hermes_run_task"
STATUS_TOOL = "hermes_get_status"
CANCEL_TOOL = "hermes_cancel"
CONFIRM_TOOL = "hermes_confirm"


def agent_tool_schemas() -> list[dict[str, Any]]:
    """Function declarations handed to the realtime model at session start."""
    return [
        {
            "type": "function",
            "name": RUN_TASK_TOOL,
            "description": "Hand a task to the agent. Use for anything needing tools, research or memory.",
            "parameters": {
                "type": "object",
                "properties": {
                    "text": {"type": "string", "description": "The task, in the user's words."},
                    "profile": {"type": "string"},
                    "session_id": {"type": "string"},
                    "mode": {"type": "string", "enum": ["chat", "run", "background"]},
                },
                "required": ["text"],
            },
        },
        {
            "type": "function",
            "name": STATUS_TOOL,
            "description": "Report whether an agent task is running and how far it got.",
            "parameters": {"type": "object", "properties": {}},
        },
        {
            "type": "function",
            "name": CANCEL_TOOL,
            "description": "Stop the running agent task.",
            "parameters": {"type": "object", "properties": {}},
        },
        {
            "type": "function",
            "name": CONFIRM_TOOL,
            "description": "Answer the agent's pending confirmation question.",
            "parameters": {
                "type": "object",
                "properties": {"approved": {"type": "boolean"}},
                "required": ["approved"],
            },
        },
    ]


def parse_tool_arguments(raw: Any) -> dict[str, Any]:
    """Providers hand arguments as a JSON string or a dict; anything else is an empty call."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str) and raw.strip():
        try:
            value = json.loads(raw)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}
    return {}
