"""Voice sessions as relay_runtime traces: the session leases a conversation, provider responses
are scopes under it, tool calls are marks. Agent runs add turns through the in-process broker."""

from __future__ import annotations

import logging
from collections import OrderedDict

from relay_runtime import ScopeHandle, ScopeType
from relay_runtime import session as relay_session
from relay_runtime.scopes import Scopes

from .models import ProviderEvent, ProviderEventKind

logger = logging.getLogger(__name__)

VOICE_RESPONSE_KIND = "voice_response"
TOOL_CALL_MARK = "voice.tool_call"
_MAX_OPEN_RESPONSES = 32


class VoiceTrace:
    def __init__(self, *, profile_key: str, session_id: str, model: str, voice_session_id: str) -> None:
        self.lease = relay_session.SESSION_COORDINATOR.acquire_conversation(
            profile_key=profile_key, session_id=session_id, platform="voice", model=model
        )
        self.voice_session_id = voice_session_id
        self._responses: OrderedDict[str, ScopeHandle] = OrderedDict()

    @property
    def _scopes(self) -> Scopes:
        return self.lease.host.relay.scope

    def on_provider_event(self, event: ProviderEvent) -> None:
        kind = event.kind
        if kind is ProviderEventKind.RESPONSE_STARTED:
            rid = event.response_id
            if not rid or rid in self._responses or self.lease.released:
                return
            if len(self._responses) >= _MAX_OPEN_RESPONSES:
                # A provider that never reports done must not grow this without bound.
                _, stale = self._responses.popitem(last=False)
                self._scopes.pop(stale, output={"outcome": "cancelled"})
            self._responses[rid] = self._scopes.push(
                "voice.response",
                ScopeType.FUNCTION,
                parent=self.lease.conversation,
                attach=False,
                metadata={"relay.kind": VOICE_RESPONSE_KIND, "response_id": rid,
                          "voice_session_id": self.voice_session_id},
            )
        elif kind is ProviderEventKind.RESPONSE_DONE:
            handle = self._responses.pop(event.response_id, None)
            if handle is not None:
                status = str(event.payload.get("status") or "completed")
                outcome = "cancelled" if status == "cancelled" else "failed" if status == "failed" else "success"
                self._scopes.pop(handle, output={"outcome": outcome, "status": status})
        elif kind is ProviderEventKind.FUNCTION_CALL_COMPLETED:
            call = event.payload.get("call")
            parent = self._responses.get(event.response_id) or self.lease.conversation
            if not self.lease.released:
                self._scopes.mark(
                    TOOL_CALL_MARK,
                    {"call_id": getattr(call, "call_id", ""), "name": getattr(call, "name", "")},
                    parent=parent,
                )

    def close(self) -> None:
        while self._responses:
            _, handle = self._responses.popitem()
            self._scopes.pop(handle, output={"outcome": "cancelled"})
        relay_session.SESSION_COORDINATOR.release_conversation(self.lease)
