"""One voice session's state: event numbering, replay rings, the attached socket, detach and resume."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from relay_runtime.redaction import scrub_text, told

from .bounded import CappedMap
from .config import PromotionSettings, background_detached_max_seconds, resume_ttl_seconds
from .event_log import DEFAULT_MAX_BYTES, EventLog, validate_session_id
from .log_redaction import LogRedaction, PolicyOf
from .voice_auth import digests_match, token_digest

if TYPE_CHECKING:
    from .models import BackgroundResult, ProviderConnection

logger = logging.getLogger(__name__)

EVENT_RING_SIZE = 256
AUDIO_RING_SIZE = 96
# Outgoing events buffered per socket; a full ring replay must fit, live traffic beyond it means
# the client is not reading and gets dropped (it can resume).
OUTBOX_SIZE = 1024
AUDIO_DELTA = "voice.output_audio.delta"
# Provider responses started and not yet reported done. A provider keeps one or two open; one that
# never reports done must not grow the table, so past this the oldest is dropped (and logged).
MAX_ACTIVE_RESPONSES = 16

# Close codes of the resume protocol.
CLOSE_SUPERSEDED = 4000
CLOSE_INVALID_TOKEN = 4003
CLOSE_EXPIRED = 4008
CLOSE_NOT_CLAIMED = 4009
CLOSE_SLOW_CONSUMER = 4010
CLOSE_SESSION_ENDED = 4011
# RFC 6455 "try again later": the provider could not be reached; the session is kept for a retry.
CLOSE_TRY_AGAIN = 1013

# Why a resume was refused (wire strings).
INVALID_RESUME_TOKEN = "invalid_resume_token"
RESUME_EXPIRED = "resume_expired"
SESSION_CLOSED = "session_closed"


class SessionObserver(Protocol):
    """Watches a session's traffic (the tracing does); the session knows no more of it than this."""

    def user_turn(self, trigger: str) -> None: ...
    def emitted(self, event: dict[str, Any]) -> None: ...
    def sent(self, event: dict[str, Any], in_ns: int, out_ns: int) -> None: ...


def resume_close_code(reason: str) -> int:
    return CLOSE_INVALID_TOKEN if reason == INVALID_RESUME_TOKEN else CLOSE_EXPIRED


def _token_matches(digest: str, token: Any) -> bool:
    return isinstance(token, str) and digests_match(digest, token)


def _scrubbed(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with every remembered client key blanked from its text: an agent's or a provider's
    error may quote the key it was refused (a 401 body), and events go to the phone and the log."""
    for key, value in fields.items():
        if type(value) is str:
            clean = scrub_text(value)
            if clean is not value:
                fields[key] = clean
    return fields


def _wire(event: dict[str, Any]) -> str:
    audio = event.get("audio")
    if isinstance(audio, (bytes, bytearray)):
        event = {**event, "audio": base64.b64encode(audio).decode("ascii")}
    return json.dumps(event, separators=(",", ":"), default=str)


class Outbox:
    """The bounded queue and writer task of one attached websocket."""

    def __init__(self, ws: web.WebSocketResponse, request: web.Request, session_id: str) -> None:
        self.ws = ws
        self.request = request
        self.session_id = session_id
        # (event, when the provider event it answers came in, monotonic ns; 0 if none).
        self.queue: asyncio.Queue[tuple[dict[str, Any], int]] = asyncio.Queue(maxsize=OUTBOX_SIZE)
        self.observer: SessionObserver | None = None
        self.dropped = False
        self.sent = 0
        self._closer: asyncio.Task[None] | None = None
        self._writer = asyncio.create_task(self._write_loop(), name=f"voice-outbox-{session_id}")

    def put(self, event: dict[str, Any], in_ns: int = 0) -> bool:
        if self.dropped:
            return False
        try:
            self.queue.put_nowait((event, in_ns))
        except asyncio.QueueFull:
            logger.warning("voice session %s: client not reading, dropping its socket", self.session_id)
            self.drop(CLOSE_SLOW_CONSUMER, "slow consumer")
            return False
        return True

    async def _write_loop(self) -> None:
        try:
            while True:
                event, in_ns = await self.queue.get()
                await self.ws.send_str(_wire(event))
                self.sent += 1
                observer = self.observer
                if observer is not None:
                    observer.sent(event, in_ns, time.monotonic_ns())
        except (ConnectionError, RuntimeError, asyncio.CancelledError):
            return

    def drop(self, code: int, reason: str) -> None:
        """Stop writing and close the socket without waiting on a peer that may never read."""
        if self.dropped:
            return
        self.dropped = True
        self._writer.cancel()
        self._closer = asyncio.create_task(self._close(code, reason))

    async def _close(self, code: int, reason: str) -> None:
        try:
            await asyncio.wait_for(self.ws.close(code=code, message=reason.encode()), timeout=1.0)
        except (TimeoutError, ConnectionError, RuntimeError):
            transport = self.request.transport
            if transport is not None:
                transport.abort()

    async def flush_and_close(self, code: int, reason: str, timeout: float = 2.0) -> None:
        """Let queued events go out (bounded), then close; for orderly endings like resume_failed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.queue.empty() and not self.dropped and loop.time() < deadline:
            await asyncio.sleep(0.005)
        if self.dropped:
            return
        self.dropped = True
        self._writer.cancel()
        # Awaited, not spawned: the handler returning first would close with 1000 instead of `code`.
        await self._close(code, reason)


@dataclass(frozen=True)
class EndedSession:
    """What is kept of a closed session, so a phone that comes back late learns why it cannot resume."""

    session_id: str
    device_id: str
    resume_digest: str
    reason: str  # RESUME_EXPIRED or SESSION_CLOSED

    def check_resume(self, token: Any) -> str:
        return self.reason if _token_matches(self.resume_digest, token) else INVALID_RESUME_TOKEN


@dataclass
class ResumeCursor:
    last_event_id: int = 0
    last_audio_event_id: int = 0
    last_played_audio_event_id: int = 0
    last_input_chunk_id: int = 0
    # Audio after this id is replayed. It is the played cursor: audio that reached the phone but never
    # left its speaker is still unheard, so it comes again; audio it played never does. None: the phone
    # sent no audio cursor at all, so audio is replayed by last_event_id like any other event.
    audio_replay_after: int | None = None

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> ResumeCursor:
        values = {}
        for name in ("last_event_id", "last_audio_event_id", "last_played_audio_event_id", "last_input_chunk_id"):
            raw = message.get(name, 0)
            if raw is None:
                raw = 0
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
                raise ValueError(f"{name} must be a non-negative integer")
            values[name] = raw
        played, received = values["last_played_audio_event_id"], values["last_audio_event_id"]
        has_played = message.get("last_played_audio_event_id") is not None
        has_received = message.get("last_audio_event_id") is not None
        audio_replay_after: int | None = played
        if not has_played:
            # A phone that does not track playback: the received cursor is the best it can tell us.
            audio_replay_after = received if has_received else None
        elif has_received and played > received:
            raise ValueError(
                f"last_played_audio_event_id ({played}) cannot exceed last_audio_event_id ({received}): "
                "audio cannot be played before it is received"
            )
        return cls(**values, audio_replay_after=audio_replay_after)


class VoiceSession:
    def __init__(
        self,
        *,
        device_id: str,
        chat_session_id: str,
        provider_id: str,
        model: str,
        voice: str,
        sample_rate: int,
        profile: str,
        promotion: PromotionSettings,
        run_dir: Path,
        event_log_max_bytes: int = DEFAULT_MAX_BYTES,
        redaction: PolicyOf | None = None,
    ) -> None:
        self.session_id = validate_session_id(secrets.token_urlsafe(18))
        resume_token = secrets.token_urlsafe(32)
        self._resume_digest = token_digest(resume_token)
        # Handed to the creator once (the POST response); only the digest stays on the session.
        self.issued_resume_token: str | None = resume_token
        self.device_id = device_id
        self.chat_session_id = chat_session_id
        self.provider_id = provider_id
        self.model = model
        self.voice = voice
        self.sample_rate = sample_rate
        self.profile = profile
        self.created_at = time.time()

        self.promotion_enabled = promotion.enabled
        self.promote_after_ms = promotion.promote_after_ms
        self.result_delivery = promotion.result_delivery
        self.spoken_handoff = promotion.spoken_handoff
        self.background_default_mode = promotion.background_default_mode
        self.progress_spoken_after_ms = promotion.progress_spoken_after_ms
        self.max_background_runs = promotion.max_background_runs

        self.event_log = EventLog(run_dir / "voice-sessions" / f"{self.session_id}.jsonl",
                                  max_bytes=event_log_max_bytes,
                                  redaction=LogRedaction(redaction) if redaction is not None else None)
        self._next_event_id = 0
        self._next_audio_event_id = 0
        self.event_ring: deque[dict[str, Any]] = deque(maxlen=EVENT_RING_SIZE)
        self.audio_ring: deque[dict[str, Any]] = deque(maxlen=AUDIO_RING_SIZE)

        self.outbox: Outbox | None = None
        self.observer: SessionObserver | None = None
        # While a provider event is being forwarded: when it came in (monotonic ns), for the hop.
        self.hop_in_ns = 0
        self.started = False
        self.connect_failures = 0
        self.closed = False
        self.detached_at: float | None = None
        self.resume_deadline: float | None = None
        self.resume_ttl_seconds = resume_ttl_seconds()
        self.deadline_changed = asyncio.Event()
        # Background runs and their deliveries hold a detached session open.
        self._holds = 0

        self.connection: ProviderConnection | None = None
        # Results that finished while no phone was attached, oldest first, until a resume delivers them.
        self.pending_background_results: deque[BackgroundResult] = deque()
        self.native_pending_delivery_note: str | None = None
        self.playback_drained = asyncio.Event()
        self.audio_since_drain = False
        self.last_mic_activity = 0.0
        self.last_input_chunk_id = 0
        # Response id -> when it started (monotonic), oldest first.
        self.active_responses: CappedMap[str, float] = CappedMap(MAX_ACTIVE_RESPONSES)
        self.spoken_responses: deque[str] = deque(maxlen=64)
        self.started_responses: deque[str] = deque(maxlen=64)
        self.tasks: set[asyncio.Task[Any]] = set()

    @property
    def pending_background_result(self) -> BackgroundResult | None:
        """The oldest result waiting for a resume, if any."""
        return self.pending_background_results[0] if self.pending_background_results else None

    @property
    def event_log_path(self) -> Path:
        return self.event_log.path

    # -- events -----------------------------------------------------------------------------------

    def emit(self, event_type: str, /, *, record: bool = True, **fields: Any) -> dict[str, Any]:
        """Number, record, log and (if a socket is attached) send one event."""
        self._next_event_id += 1
        event: dict[str, Any] = {"type": event_type, **_scrubbed(fields)}
        event["event_id"] = self._next_event_id
        event["at_ms"] = int(time.time() * 1000)
        if event_type == AUDIO_DELTA:
            self._next_audio_event_id += 1
            event["audio_event_id"] = self._next_audio_event_id
            if record:
                self.audio_ring.append(event)
        elif record:
            self.event_ring.append(event)
        self.event_log.write(event)
        if self.observer is not None:
            self.observer.emitted(event)
        if self.outbox is not None:
            self.outbox.put(event, self.hop_in_ns)
        return event

    def user_speech_ended(self, trigger: str) -> None:
        """The phone says the user finished speaking (a commit or a typed message): a user turn."""
        if self.observer is not None:
            self.observer.user_turn(trigger)

    def told(self, exc: BaseException, as_text: Callable[[BaseException], str] = repr) -> str:
        """``exc`` as a log (the process's, the session's) may quote it: remembered secrets, a URL's password
        and credential-keyed values blanked, the redaction policy applied (a tool's error may quote what the
        caller said)."""
        redaction = self.event_log.redaction
        return told(exc, redaction.policy() if redaction is not None else None, as_text)

    def log(self, name: str, **fields: Any) -> None:
        """A decision worth keeping in the session log that the phone does not need."""
        self.event_log.log(name, session_id=self.session_id, **_scrubbed(fields))

    def response_started(self, response_id: str) -> None:
        evicted = self.active_responses.put(response_id, time.monotonic())
        if evicted is not None:
            old_id, started_at = evicted
            self.log("voice.realtime_agent.active_response_evicted", response_id=old_id,
                     age_ms=int((time.monotonic() - started_at) * 1000),
                     evicted_total=self.active_responses.evicted)

    def response_done(self, response_id: str) -> None:
        self.active_responses.pop(response_id)

    def replay_after(self, cursor: ResumeCursor) -> list[dict[str, Any]]:
        """Recorded events after the phone's cursors, in event order, each once."""
        events = [e for e in self.event_ring if e["event_id"] > cursor.last_event_id]
        events.extend(
            e
            for e in self.audio_ring
            if (e["event_id"] > cursor.last_event_id if cursor.audio_replay_after is None
                else e["audio_event_id"] > cursor.audio_replay_after)
        )
        events.sort(key=lambda e: e["event_id"])
        return [{**e, "replayed": True} for e in events]

    # -- socket ownership ---------------------------------------------------------------------------

    def attach(self, outbox: Outbox) -> Outbox | None:
        """Make `outbox` the live socket; returns the one it superseded, if any."""
        previous = self.outbox
        self.outbox = outbox
        outbox.observer = self.observer
        self.started = True
        self.detached_at = None
        self.resume_deadline = None
        self.deadline_changed.set()
        return previous if previous is not outbox else None

    def detach(self, outbox: Outbox) -> bool:
        """Forget `outbox` if it is still the live one; True when the session is now detached."""
        if self.outbox is not outbox or self.closed:
            return False
        self.outbox = None
        self.detached_at = time.monotonic()
        self.emit("voice.session.detached")
        self._recompute_deadline()
        return True

    def check_resume(self, token: Any) -> str | None:
        """None if `token` may take over this session, else the wire reason why not."""
        if not _token_matches(self._resume_digest, token):
            return INVALID_RESUME_TOKEN
        if self.closed:
            return SESSION_CLOSED
        if self.resume_deadline is not None and time.monotonic() > self.resume_deadline:
            return RESUME_EXPIRED
        return None

    def ended(self, reason: str) -> EndedSession:
        return EndedSession(self.session_id, self.device_id, self._resume_digest, reason)

    # -- background-aware resume window -------------------------------------------------------------

    @property
    def work_active(self) -> bool:
        """A background run or a delivery is in progress (an undelivered result alone is not work)."""
        return self._holds > 0

    @property
    def background_active(self) -> bool:
        return self._holds > 0 or bool(self.pending_background_results)

    def hold(self) -> None:
        self._holds += 1
        self._recompute_deadline()

    def release(self) -> None:
        self._holds = max(0, self._holds - 1)
        if self.detached_at is not None and not self.background_active and self.resume_deadline is not None:
            # The run ended while detached: keep a grace window from now so its result can be fetched.
            self.resume_deadline = max(self.resume_deadline, time.monotonic() + self.resume_ttl_seconds)
        self._recompute_deadline()

    def _recompute_deadline(self) -> None:
        if self.detached_at is None:
            return
        window = self.resume_ttl_seconds
        if self.background_active:
            window = max(window, background_detached_max_seconds())
        self.resume_deadline = max(self.resume_deadline or 0.0, self.detached_at + window)
        self.deadline_changed.set()

    # -- lifetime -------------------------------------------------------------------------------------

    def spawn(self, coro: Any, *, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=f"{name}-{self.session_id[:8]}")
        self.tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            logger.error("voice session %s task %s failed: %s", self.session_id, task.get_name(), self.told(exc))
            self.log("voice.realtime_agent.task_failed", task=task.get_name(), error=self.told(exc))

    def cancel_tasks(self, keep: Iterable[asyncio.Task[Any]] = ()) -> None:
        skip = set(keep)
        for task in list(self.tasks):
            if task not in skip:
                task.cancel()
