"""The realtime agent: owns voice sessions, connects each to its provider, and serves the phone's
websocket (first attach, resume, message loop, detach and expiry)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from relay_runtime import session as relay_session
from relay_runtime.redaction import RedactionPolicy, remember_secret

from .client_messages import ClientMessageError, ClientMessages, parse_client_message
from .config import PromotionSettings, RelayConfig
from .delivery import DeliveryManager, DeliveryTiming
from .models import ProviderSessionConfig, RealtimeProvider, TaskBroker, agent_tool_schemas
from .promotion import RunCoordinator
from .provider_options import provider_options
from .pump import ProviderPump
from .session import (
    CLOSE_NOT_CLAIMED,
    CLOSE_SESSION_ENDED,
    CLOSE_SUPERSEDED,
    CLOSE_TRY_AGAIN,
    RESUME_EXPIRED,
    SESSION_CLOSED,
    EndedSession,
    Outbox,
    ResumeCursor,
    VoiceSession,
    resume_close_code,
)
from .tracing import TurnListener, VoiceTrace, turn_metrics_fields

logger = logging.getLogger(__name__)

CLAIM_TIMEOUT_SECONDS = 10.0
TRANSPORT_SLACK = 4
CLOSE_MESSAGE_TOO_BIG = 1009
# Failed provider connects one session may retry (each retry is an outbound connection the phone
# triggers); the last one ends the session.
MAX_CONNECT_ATTEMPTS = 5
# Closed sessions remembered so a late resume hears why it failed; older ones just 404.
ENDED_SESSIONS_KEPT = 1024
RESUME_PROTOCOL = "relay-voice/1"


@dataclass
class SessionParts:
    """What acts on one connected session: its run coordinator, delivery, provider pump and trace."""

    runs: RunCoordinator
    delivery: DeliveryManager
    pump: ProviderPump
    trace: VoiceTrace | None


class RealtimeAgent:
    def __init__(
        self,
        config: RelayConfig,
        *,
        task_broker: TaskBroker,
        native_providers: dict[str, RealtimeProvider],
        run_dir: Path,
        profile_key: str | None = None,
    ) -> None:
        self.config = config
        self.task_broker = task_broker
        self.native_providers = native_providers
        self.sessions: dict[str, VoiceSession] = {}
        self.ended_sessions: OrderedDict[str, EndedSession] = OrderedDict()
        self.run_dir = run_dir
        self.profile_key = profile_key or relay_session.current_profile_key()
        self.delivery_timing = DeliveryTiming()
        # The parts that act on each connected session; the session itself knows none of them.
        self.parts: dict[str, SessionParts] = {}
        # Called with (session, measures) as each user turn ends; the CLI prints them.
        self.turn_listeners: list[TurnListener] = []

    # -- creation ------------------------------------------------------------------------------------

    def create_session(
        self,
        *,
        device_id: str,
        provider_id: str,
        model: str,
        voice: str,
        chat_session_id: str,
        promotion: PromotionSettings,
    ) -> VoiceSession:
        options = provider_options(provider_id)
        session = VoiceSession(
            device_id=device_id,
            chat_session_id=chat_session_id,
            provider_id=provider_id,
            model=model or options.model,
            voice=voice or options.voice,
            sample_rate=self.config.realtime_voice_sample_rate,
            profile=self.config.realtime_voice_profile,
            promotion=promotion,
            run_dir=self.run_dir,
            event_log_max_bytes=self.config.max_event_log_bytes,
            redaction=self._redaction_policy,
        )
        self.sessions[session.session_id] = session
        session.log("voice.session.created", provider=provider_id, model=session.model, voice=session.voice)
        session.spawn(self._expire_if_never_attached(session), name="voice-unclaimed-expiry")
        return session

    async def _expire_if_never_attached(self, session: VoiceSession) -> None:
        # A created session holds its event log open; one nobody connects to must not pile up.
        await asyncio.sleep(session.resume_ttl_seconds)
        if not session.started and not session.closed:
            session.log("voice.session.expired", attached=False)
            await self.close_session(session, reason=RESUME_EXPIRED)

    def describe(self, session: VoiceSession, resume_token: str) -> dict[str, Any]:
        return {
            "success": True,
            "session_id": session.session_id,
            "websocket_path": f"/voice/realtime-agent/{session.session_id}",
            "resume_token": resume_token,
            "resume_supported": True,
            "resume_ttl_ms": int(session.resume_ttl_seconds * 1000),
            "provider": session.provider_id,
            "model": session.model,
            "voice": session.voice,
            "sample_rate": session.sample_rate,
            "event_log_path": str(session.event_log_path),
            "protocol": RESUME_PROTOCOL,
            "chat_session_id": session.chat_session_id,
            "result_delivery": session.result_delivery,
            "tools": [tool["name"] for tool in agent_tool_schemas()],
        }

    async def _start_session(self, session: VoiceSession) -> None:
        """Connect the provider and wire the session's run coordinator, delivery and pump."""
        provider = self.native_providers[session.provider_id]
        options = provider_options(session.provider_id)
        provider_config = ProviderSessionConfig(
            model=session.model,
            voice=session.voice,
            instructions=self.config.realtime_voice_instructions,
            tools=agent_tool_schemas(),
            sample_rate=session.sample_rate,
            api_key=options.api_key,
            url=options.url,
        )
        remember_secret(provider_config.api_key)
        session.connection = await provider.connect(provider_config)
        trace = self._open_trace(session)
        pump: ProviderPump | None = None

        def forward(event: Any) -> None:
            assert pump is not None
            pump.forward(event)

        delivery = DeliveryManager(session, forward, self.delivery_timing)
        runs = RunCoordinator(session, lambda: self.task_broker, delivery)
        pump = ProviderPump(session, runs, delivery, trace)
        self.parts[session.session_id] = SessionParts(runs, delivery, pump, trace)
        session.spawn(pump.run(), name="voice-pump")

    def _redaction_policy(self) -> RedactionPolicy | None:
        """The policy of the relay the sessions record to (its host's), read as each record is written."""
        return relay_session.SESSION_COORDINATOR.host(self.profile_key).relay.redaction.policy

    def _open_trace(self, session: VoiceSession) -> VoiceTrace | None:
        try:
            # The conversation of the chat the voice session speaks for, so its agent runs (the
            # conversation's coordinator turns) land in the same trace as its user turns.
            trace = VoiceTrace(session, profile_key=self.profile_key,
                               conversation_id=session.chat_session_id or session.session_id,
                               on_turn=self._turn_ended)
        except Exception as exc:  # tracing must never stop a call from happening
            logger.warning("voice session %s: tracing unavailable: %s", session.session_id, session.told(exc))
            return None
        session.observer = trace
        return trace

    def _turn_ended(self, session: VoiceSession, measures: dict[str, Any]) -> None:
        if self.config.realtime_voice_turn_metrics:
            session.emit("voice.turn.metrics", record=False, **turn_metrics_fields(measures))
        for listener in self.turn_listeners:
            listener(session, measures)

    # -- the websocket ---------------------------------------------------------------------------------

    async def websocket(
        self, request: web.Request, session: VoiceSession | EndedSession
    ) -> web.WebSocketResponse:
        # The transport admits some slack over the limit so the relay itself can refuse an oversized
        # message with the voice.error it promises; past the slack, aiohttp drops it unread (1009).
        ws = web.WebSocketResponse(max_msg_size=self.config.max_message_bytes * TRANSPORT_SLACK, autoping=True)
        await ws.prepare(request)
        outbox = Outbox(ws, request, session.session_id)
        try:
            if isinstance(session, EndedSession):
                await self._refuse_ended(session, outbox, ws)
            else:
                await self._serve(session, outbox, ws)
        finally:
            if not outbox.dropped:
                outbox.drop(1000, "bye")
        return ws

    async def _serve(self, session: VoiceSession, outbox: Outbox, ws: web.WebSocketResponse) -> None:
        attached = False
        try:
            if not session.started:
                attached = await self._first_attach(session, outbox)
            else:
                attached = await self._claim(session, outbox, ws)
            if attached:
                await self._message_loop(session, outbox, ws)
        finally:
            if attached and session.detach(outbox):
                parts = self.parts.get(session.session_id)
                if parts is not None and parts.trace is not None:
                    parts.trace.detached()
                session.spawn(self._expire_when_due(session), name="voice-expiry")

    async def _first_attach(self, session: VoiceSession, outbox: Outbox) -> bool:
        session.started = True
        try:
            await self._start_session(session)
        except Exception as exc:
            # A refused handshake's repr carries the provider's answer, which may echo the key.
            logger.warning("voice session %s: provider connect failed: %s", session.session_id, session.told(exc))
            session.connect_failures += 1
            retryable = session.connect_failures < MAX_CONNECT_ATTEMPTS
            # Numbered and logged like any event, though no socket is attached to send it through.
            outbox.put(session.emit("voice.error", record=False, code="provider_connect_failed", retryable=retryable,
                                    attempt=session.connect_failures,
                                    message=f"could not connect to the voice provider: {type(exc).__name__}"))
            if retryable:
                # The session stays as it was before this socket: the phone opens the same websocket
                # path again and it is a first attach once more (no resume token needed).
                session.started = False
                session.spawn(self._expire_if_never_attached(session), name="voice-unclaimed-expiry")
                await outbox.flush_and_close(CLOSE_TRY_AGAIN, "provider connect failed, retry")
                return False
            # Closed before the socket is, so a phone that reconnects at once finds it ended.
            await self.close_session(session, reason="provider_connect_failed")
            await outbox.flush_and_close(CLOSE_SESSION_ENDED, "provider connect failed")
            return False
        session.attach(outbox)
        session.emit(
            "voice.session.ready",
            session_id=session.session_id,
            provider=session.provider_id,
            model=session.model,
            voice=session.voice,
            sample_rate=session.sample_rate,
            protocol=RESUME_PROTOCOL,
            resume_supported=True,
            resume_ttl_ms=int(session.resume_ttl_seconds * 1000),
        )
        return True

    async def _read_claim(self, outbox: Outbox, ws: web.WebSocketResponse) -> dict[str, Any] | None:
        """The socket's first message if it is a session.resume; otherwise refuse the socket."""
        message = None
        try:
            msg = await ws.receive(timeout=CLAIM_TIMEOUT_SECONDS)
        except TimeoutError:
            msg = None
        if msg is not None and msg.type is WSMsgType.TEXT and len(msg.data) <= self.config.max_message_bytes:
            try:
                message = parse_client_message(msg.data)
            except ClientMessageError:
                message = None
        if message is None or message["type"] != "session.resume":
            await self._refuse(outbox, "session_not_claimed", CLOSE_NOT_CLAIMED)
            return None
        return message

    async def _claim(self, session: VoiceSession, outbox: Outbox, ws: web.WebSocketResponse) -> bool:
        """A socket on a started session must prove it holds the resume token before anything else."""
        message = await self._read_claim(outbox, ws)
        if message is None:
            return False
        reason = session.check_resume(message.get("resume_token"))
        if reason is not None:
            session.log("voice.session.resume_failed", reason=reason)
            return await self._refuse(outbox, reason, resume_close_code(reason))
        try:
            cursor = ResumeCursor.from_message(message)
        except ValueError as exc:
            outbox.put({"type": "voice.error", "code": "bad_resume_cursor", "message": str(exc)})
            return await self._refuse(outbox, "session_not_claimed", CLOSE_NOT_CLAIMED)
        self._resume(session, outbox, cursor)
        return True

    async def _refuse_ended(self, ended: EndedSession, outbox: Outbox, ws: web.WebSocketResponse) -> None:
        message = await self._read_claim(outbox, ws)
        if message is not None:
            reason = ended.check_resume(message.get("resume_token"))
            await self._refuse(outbox, reason, resume_close_code(reason))

    async def _refuse(self, outbox: Outbox, reason: str, code: int) -> bool:
        outbox.put({"type": "voice.session.resume_failed", "reason": reason, "at_ms": int(time.time() * 1000)})
        await outbox.flush_and_close(code, reason)
        return False

    def _resume(self, session: VoiceSession, outbox: Outbox, cursor: ResumeCursor) -> None:
        # Synchronous from snapshot to switch-over, so no live event slips between replay and resume.
        replay = session.replay_after(cursor)
        previous = session.attach(outbox)
        if previous is not None:
            previous.drop(CLOSE_SUPERSEDED, "superseded by a resumed socket")
        parts = self.parts.get(session.session_id)
        if parts is not None and parts.trace is not None:
            parts.trace.resumed()
        session.log("voice.session.resumed", last_event_id=cursor.last_event_id,
                    client_last_input_chunk_id=cursor.last_input_chunk_id,
                    last_played_audio_event_id=cursor.last_played_audio_event_id, replayed=len(replay))
        # The last input chunk the relay received: the phone re-sends the ones after it.
        session.emit("voice.session.resumed", record=False, session_id=session.session_id,
                     last_input_chunk_id=session.last_input_chunk_id)
        session.emit("voice.replay.started", record=False, count=len(replay))
        for event in replay:
            outbox.put(event)
        session.emit("voice.replay.done", record=False, count=len(replay))
        if parts is not None:
            parts.delivery.take_pending_on_resume()

    async def _message_loop(self, session: VoiceSession, outbox: Outbox, ws: web.WebSocketResponse) -> None:
        parts = self.parts[session.session_id]
        handler = ClientMessages(
            session,
            parts.runs,
            parts.delivery,
            max_audio_chunk_bytes=self.config.max_audio_chunk_bytes,
            close_session=lambda reason: self.close_session(session, reason=reason),
        )
        limit = self.config.max_message_bytes
        async for msg in ws:
            if session.outbox is not outbox or session.closed:
                break
            if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY) and len(msg.data) > limit:
                # The session survives: only this socket ends, and the phone may resume.
                handler.error("message_too_large", f"message of {len(msg.data)} bytes is over the {limit} byte limit")
                await outbox.flush_and_close(CLOSE_MESSAGE_TOO_BIG, "message too large")
                break
            if msg.type is WSMsgType.TEXT:
                await handler.handle_text(msg.data)
            elif msg.type is WSMsgType.BINARY:
                handler.error("binary_not_supported", "send audio as input_audio.append with base64 'audio'")
            elif msg.type is WSMsgType.ERROR:
                session.log("voice.client.socket_error", error=type(ws.exception()).__name__)
                break

    # -- expiry and teardown ------------------------------------------------------------------------------

    async def _expire_when_due(self, session: VoiceSession) -> None:
        while not session.closed and session.detached_at is not None:
            deadline = session.resume_deadline or time.monotonic()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if session.work_active:
                    # Held open by a run or a delivery still in progress: look again a little later.
                    # A result waiting for resume holds only for the stretched window itself.
                    session.resume_deadline = time.monotonic() + session.resume_ttl_seconds
                    continue
                session.log("voice.session.expired")
                await self.close_session(session, reason=RESUME_EXPIRED)
                return
            session.deadline_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(session.deadline_changed.wait(), remaining)

    async def close_session(self, session: VoiceSession, *, reason: str) -> None:
        if session.closed:
            return
        session.closed = True
        session.log("voice.session.closed", reason=reason)
        current = asyncio.current_task()
        parts = self.parts.pop(session.session_id, None)
        if parts is not None:
            await parts.runs.cancel_active(reason="session_closed")
        session.cancel_tasks(keep=[current] if current is not None else [])
        if session.outbox is not None:
            session.emit("voice.session.closed", record=False, reason=reason)
            await session.outbox.flush_and_close(1000, reason, timeout=0.5)
            session.outbox = None
        if session.connection is not None:
            try:
                await session.connection.close()
            except Exception as exc:
                logger.debug("provider close failed: %r", exc)
        if parts is not None and parts.trace is not None:
            parts.trace.close()
        session.event_log.close()
        self.sessions.pop(session.session_id, None)
        self.ended_sessions[session.session_id] = session.ended(
            RESUME_EXPIRED if reason == RESUME_EXPIRED else SESSION_CLOSED
        )
        while len(self.ended_sessions) > ENDED_SESSIONS_KEPT:
            self.ended_sessions.popitem(last=False)

    async def shutdown(self) -> None:
        sessions = list(self.sessions.values())
        tasks = [task for session in sessions for task in session.tasks]
        for session in sessions:
            await self.close_session(session, reason="server_shutdown")
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)
