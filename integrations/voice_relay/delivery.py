"""Delivering a finished background result to the user, exactly once.

Paths: visual text; the provider's own voice (summary or verbatim), guarded by the
forced-summary validator; the relay's fallback speech when injection fails or the summary is bad;
deferral while the phone is detached; text when the spoken delivery is preempted or never
confirmed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .models import BackgroundResult, ProviderEvent, ProviderEventKind
from .speakable import speakable, structured
from .summary_validator import can_commit_early, judge_summary
from .tts import speech_duration_ms, tone_frames

if TYPE_CHECKING:
    from .session import VoiceSession

logger = logging.getLogger(__name__)

NOTE_MAX_CHARS = 400
_BUFFERED_KINDS = frozenset(
    {
        ProviderEventKind.RESPONSE_STARTED,
        ProviderEventKind.OUTPUT_TEXT_DELTA,
        ProviderEventKind.AUDIO_DELTA,
        ProviderEventKind.AUDIO_DONE,
        ProviderEventKind.RESPONSE_DONE,
    }
)
_relay_response_ids = itertools.count(1)


def summary_prompt(answer: str) -> str:
    return (
        "The background task you handed off earlier has finished. This is the final spoken answer "
        "step: tell the user the result now, briefly and naturally, in your own words. Do not say "
        "you are still working on it, do not ask for any identifier, and do not call tools.\n\n"
        f"Result:\n{answer}"
    )


def verbatim_prompt(answer: str) -> str:
    return (
        "The background task you handed off earlier has finished. This is the final spoken answer "
        "step: read the result below to the user word for word as written, adding nothing and "
        "leaving nothing out. Do not call tools.\n\n"
        f"Result:\n{answer}"
    )


@dataclass
class DeliveryTiming:
    floor_max_seconds: float = 12.0
    mic_quiet_seconds: float = 1.5
    confirm_seconds: float = 30.0
    poll_seconds: float = 0.05


@dataclass
class _Injected:
    """A delivery the provider was asked to speak, while its response is judged."""

    result: BackgroundResult
    # What the provider was asked to say; its response is judged against this.
    spoken: str
    outcome: asyncio.Future[tuple[str, str]]
    response_id: str | None = None
    buffer: list[ProviderEvent] = field(default_factory=list)
    text: str = ""
    committed: bool = False


class DeliveryManager:
    def __init__(
        self,
        session: VoiceSession,
        forward: Callable[[ProviderEvent], None],
        timing: DeliveryTiming | None = None,
    ) -> None:
        self.session = session
        self._forward = forward
        self.timing = timing or DeliveryTiming()
        self._lock = asyncio.Lock()
        self._injected: _Injected | None = None
        self.last_result: BackgroundResult | None = None
        # The phone's respeak under way, for the session (a resumed socket included): one at a time, not a
        # speech (and a task) per message.
        self.respeak: asyncio.Task[Any] | None = None

    # -- entry points --------------------------------------------------------------------------------

    async def deliver(self, result: BackgroundResult) -> None:
        session = self.session
        session.hold()
        try:
            async with self._lock:
                await self._deliver_locked(result)
        finally:
            session.release()

    async def _deliver_locked(self, result: BackgroundResult) -> None:
        session = self.session
        if result.delivered or session.closed:
            return
        self.last_result = result
        answer = result.answer if result.ok else f"The background task failed: {result.error or 'unknown error'}."
        if not result.ok or not answer.strip() or session.result_delivery == "visual_only":
            self._deliver_text(result, answer, "visual_only")
            return
        await self._wait_for_floor()
        if session.outbox is None or session.connection is None:
            # Never speak into the void: hold it for the next resume.
            session.pending_background_results.append(result)
            session.log("voice.realtime_agent.result_deferred", call_id=result.call_id)
            return
        await self._inject(result)

    def take_pending_on_resume(self) -> None:
        pending = self.session.pending_background_results
        if not pending:
            return
        results = list(pending)
        pending.clear()
        self.session.spawn(self._deliver_in_order(results), name="voice-deliver-deferred")

    async def _deliver_in_order(self, results: list[BackgroundResult]) -> None:
        for result in results:
            await self.deliver(result)

    # -- provider delivery ---------------------------------------------------------------------------

    async def _inject(self, result: BackgroundResult) -> None:
        session = self.session
        connection = session.connection
        assert connection is not None
        # Structured output has no word-for-word reading: it is summarised even in verbatim mode.
        verbatim = session.result_delivery == "speak_verbatim" and structured(result.answer) is None
        spoken = speakable(result.answer)
        prompt = verbatim_prompt(spoken) if verbatim else summary_prompt(spoken)
        loop = asyncio.get_running_loop()
        injected = _Injected(result=result, spoken=spoken, outcome=loop.create_future())
        self._injected = injected
        try:
            if verbatim:
                await connection.request_response(instructions=prompt, exact_text=spoken)
            else:
                await connection.request_response(instructions=prompt)
        except Exception as exc:
            self._injected = None
            session.log(
                "voice.realtime_agent.summary_send_failed", error=type(exc).__name__, detail=session.told(exc, str)
            )
            self._fallback(result, reason="summary_send_failed")
            return
        session.log("voice.realtime_agent.result_injected", call_id=result.call_id, verbatim=verbatim)
        try:
            how, reason = await asyncio.wait_for(asyncio.shield(injected.outcome), self.timing.confirm_seconds)
        except TimeoutError:
            how, reason = "unconfirmed", "not spoken in time"
        finally:
            if self._injected is injected:
                self._injected = None
        if how == "spoken":
            result.delivered = True
            session.log("voice.realtime_agent.result_delivered", call_id=result.call_id, response_id=reason)
        elif how == "bad_summary":
            await self._recover_bad_summary(result, reason)
        elif how == "preempted":
            session.log("voice.realtime_agent.delivery_preempted", call_id=result.call_id)
            await self._cancel_provider_response()
            self._deliver_text(result, result.answer, "visual_only")
        else:
            session.log("voice.realtime_agent.delivery_unconfirmed", call_id=result.call_id)
            self._deliver_text(result, result.answer, "visual_only")

    async def _recover_bad_summary(self, result: BackgroundResult, reason: str) -> None:
        session = self.session
        session.log("voice.response.forced_summary_fallback", reason=reason, call_id=result.call_id)
        note = f"ALREADY COMPLETED: the background task finished and the user was given its answer: {result.answer}"
        session.native_pending_delivery_note = note[:NOTE_MAX_CHARS]
        connection = session.connection
        if connection is not None:
            try:
                # Seeded into the provider's history so follow-ups are answerable without a re-run.
                await connection.append_context_item(role="assistant", text=speakable(result.answer))
                session.log("voice.realtime_agent.result_seeded", call_id=result.call_id)
            except Exception as exc:
                session.log("voice.realtime_agent.result_seed_failed", error=type(exc).__name__)
        self._fallback(result, reason=reason)

    async def _cancel_provider_response(self) -> None:
        connection = self.session.connection
        if connection is None:
            return
        try:
            await connection.cancel_response()
        except Exception as exc:
            self.session.log("voice.realtime_agent.cancel_failed", error=type(exc).__name__)

    # -- relay-side delivery ---------------------------------------------------------------------------

    def _fallback(self, result: BackgroundResult, *, reason: str) -> None:
        """Speak the answer with the relay's own voice: text plus tone audio, tagged as fallback."""
        if not result.delivered:
            self.session.log("voice.response.delivery_fallback", reason=reason, call_id=result.call_id)
        self._relay_response(result, speakable(result.answer), "fallback", speak=True)

    def _deliver_text(self, result: BackgroundResult, text: str, delivery: str) -> None:
        self._relay_response(result, text, delivery, speak=False)

    def _relay_response(self, result: BackgroundResult, text: str, delivery: str, *, speak: bool) -> None:
        """One response in the relay's own name; marking `result` delivered keeps it to one per result."""
        if result.delivered:
            return
        result.delivered = True
        session = self.session
        tags: dict[str, Any] = {
            "response_id": f"relay-{next(_relay_response_ids)}",
            "source": "hermes",
            "delivery": delivery,
        }
        session.emit("voice.response.started", **tags)
        session.emit("voice.response.delta", delta=text, **tags)
        if speak:
            for frame in tone_frames(speech_duration_ms(text), sample_rate=session.sample_rate):
                session.emit("voice.output_audio.delta", audio=frame, sample_rate=session.sample_rate, **tags)
            session.emit("voice.output_audio.done", **tags)
        session.emit("voice.response.done", **tags)

    async def _wait_for_floor(self) -> None:
        """Wait (bounded) until the provider is not speaking and the mic has been quiet a moment."""
        session = self.session
        timing = self.timing
        deadline = time.monotonic() + timing.floor_max_seconds
        while time.monotonic() < deadline and session.outbox is not None:
            quiet = time.monotonic() - session.last_mic_activity >= timing.mic_quiet_seconds
            if quiet and not session.active_responses and self._injected is None:
                return
            await asyncio.sleep(timing.poll_seconds)

    # -- called by the provider pump ---------------------------------------------------------------

    def intercept(self, event: ProviderEvent) -> bool:
        """Buffer the provider's answer to an injected delivery; True when `event` was consumed."""
        injected = self._injected
        if injected is None or injected.outcome.done() or event.kind not in _BUFFERED_KINDS:
            return False
        if injected.response_id is None:
            if not event.response_id:
                return False
            injected.response_id = event.response_id
        elif event.response_id and event.response_id != injected.response_id:
            return False
        if injected.committed:
            if event.kind is ProviderEventKind.RESPONSE_DONE:
                self._forward(event)
                injected.outcome.set_result(("spoken", injected.response_id))
                return True
            return False
        injected.buffer.append(event)
        answer = injected.spoken
        if event.kind is ProviderEventKind.OUTPUT_TEXT_DELTA:
            injected.text += str(event.payload.get("delta") or "")
            if can_commit_early(injected.text, answer):
                self._flush(injected)
        elif event.kind is ProviderEventKind.RESPONSE_DONE:
            reason = judge_summary(injected.text, answer)
            if reason is None:
                self._flush(injected)
                injected.outcome.set_result(("spoken", injected.response_id))
            else:
                injected.buffer.clear()
                injected.outcome.set_result(("bad_summary", reason))
        return True

    def _flush(self, injected: _Injected) -> None:
        injected.committed = True
        buffered, injected.buffer = injected.buffer, []
        for event in buffered:
            self._forward(event)

    def on_user_final_transcript(self) -> None:
        """Barge-in: the user spoke over a delivery that has not been committed to speech."""
        injected = self._injected
        if injected is not None and not injected.committed and not injected.outcome.done():
            injected.buffer.clear()
            injected.outcome.set_result(("preempted", ""))

    @property
    def active(self) -> bool:
        return self._injected is not None
