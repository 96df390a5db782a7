"""Voice sessions as relay_runtime traces, with the latency a voice user feels.

Scopes (all plain scopes of the leased conversation's relay; none is a coordinator turn, so the
agent run a user turn triggers still opens the conversation's one managed turn):

    conversation                    leased for the voice session (shared with its agent runs)
      voice.session                 one per voice session: totals at its end
        voice.turn                  one per user turn: end of user speech .. the answer was sent
          voice.response            each provider response started during the turn
            mark voice.tool_call
        voice.response              responses outside a turn (deliveries, handoffs)
        voice.detached              phone gone .. phone back

Measures go in the end metadata under ``MEASURES_KEY`` as a flat dict of wire names
(``relay.voice.*``); durations are seconds. Exporters read that one key.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from relay_runtime import ScopeHandle, ScopeType
from relay_runtime import session as relay_session
from relay_runtime.scopes import Scopes

from .models import ProviderEvent, ProviderEventKind
from .session import AUDIO_DELTA, VoiceSession

logger = logging.getLogger(__name__)

MEASURES_KEY = "relay.voice"
PERCEIVED_LATENCY = "relay.voice.perceived_latency"
TIME_TO_FIRST_AUDIO = "relay.voice.time_to_first_audio"
TIME_TO_FIRST_TEXT = "relay.voice.time_to_first_text"
HOP_LATENCY = "relay.voice.hop_latency"
RECONNECT_GAP = "relay.voice.reconnect_gap"
BARGE_INS = "relay.voice.barge_ins"
UNPLAYED_AUDIO = "relay.voice.unplayed_audio"
UNPLAYED_AUDIO_TOTAL = "relay.voice.unplayed_audio_total"
FAST_LANE_RUNS = "relay.voice.fast_lane_runs"
BACKGROUND_RUNS = "relay.voice.background_runs"
TURNS = "relay.voice.turns"
RECONNECTS = "relay.voice.reconnects"
# The GenAI realtime draft's name for a live generation's first output chunk (on voice.response).
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"

VOICE_RESPONSE_KIND = "voice_response"
VOICE_TURN_KIND = "voice_turn"
VOICE_SESSION_KIND = "voice_session"
VOICE_DETACHED_KIND = "voice_detached"
TOOL_CALL_MARK = "voice.tool_call"
_MAX_OPEN_RESPONSES = 32
_MAX_UNTRANSCRIBED = 2
_MAX_TURN_RESPONSES = 64
HOP_SAMPLES_KEPT = 8192
_NS = 1e9

TurnListener = Callable[[VoiceSession, dict[str, Any]], None]


def turn_metrics_fields(measures: dict[str, Any]) -> dict[str, Any]:
    """A turn's measures as wire fields: short names, durations in whole milliseconds."""
    out: dict[str, Any] = {}
    for name, value in measures.items():
        short = name.removeprefix("relay.voice.")
        if isinstance(value, float):
            out[f"{short}_ms"] = round(value * 1000, 1)
        else:
            out[short] = value
    return out


def format_turn(measures: dict[str, Any]) -> str:
    """One line per turn for a terminal: the latency a voice user felt, in milliseconds."""
    fields = turn_metrics_fields(measures)
    parts = [f"turn {fields.pop('turn', '?')} ({fields.pop('trigger', '?')})"]
    parts += [f"{name}={value}" for name, value in fields.items()]
    return "  ".join(parts)


@dataclass
class _Turn:
    handle: ScopeHandle
    index: int
    trigger: str
    started_ns: int
    first_audio_in_ns: int = 0
    first_text_in_ns: int = 0
    first_audio_out_ns: int = 0
    audio_in_seconds: float = 0.0
    max_hop_ns: int = 0
    answered: bool = False
    # Provider responses started during this turn: only their output answers it (audio of an
    # earlier answer still streaming is not this turn's first audio).
    response_ids: set[str] = field(default_factory=set)
    # Set at its start: this utterance cut into the relay's answer, and how much of it went unheard.
    barge_in: bool = False
    unplayed_seconds: float = 0.0


class VoiceTrace:
    def __init__(
        self,
        session: VoiceSession,
        *,
        profile_key: str,
        conversation_id: str,
        on_turn: TurnListener | None = None,
    ) -> None:
        self.session = session
        self.lease = relay_session.SESSION_COORDINATOR.acquire_conversation(
            profile_key=profile_key, session_id=conversation_id, platform="voice", model=session.model
        )
        self.on_turn = on_turn
        self._session_scope = self._scopes.push(
            "voice.session", ScopeType.FUNCTION, parent=self.lease.conversation, attach=False,
            metadata={"relay.kind": VOICE_SESSION_KIND, "voice_session_id": session.session_id,
                      "provider": session.provider_id, "model": session.model},
        )
        self._responses: OrderedDict[str, tuple[ScopeHandle, int]] = OrderedDict()
        self._turn: _Turn | None = None
        # The last turn that sent audio, kept after it ends: its audio may still be playing.
        self._last_spoken: _Turn | None = None
        # The turn that barged in, and the responses it cut off (still open when it started).
        self._cut_off: tuple[_Turn, set[str]] | None = None
        # Commits whose final transcript has not come yet (a provider may never send one).
        self._untranscribed_commits = 0
        self._detached: tuple[ScopeHandle, int] | None = None
        self._totals: dict[str, float] = {TURNS: 0, BARGE_INS: 0, UNPLAYED_AUDIO_TOTAL: 0.0, FAST_LANE_RUNS: 0,
                                          BACKGROUND_RUNS: 0, RECONNECTS: 0}
        # Recent relay hops (provider event in -> phone event out), for benchmarks and diagnostics.
        self.hop_samples: deque[int] = deque(maxlen=HOP_SAMPLES_KEPT)
        self.closed = False
        self._provider_handlers: dict[ProviderEventKind, Callable[[ProviderEvent, int], None]] = {
            ProviderEventKind.RESPONSE_STARTED: self._response_started,
            ProviderEventKind.RESPONSE_DONE: self._response_done,
            ProviderEventKind.AUDIO_DELTA: self._audio_in,
            ProviderEventKind.OUTPUT_TEXT_DELTA: self._text_in,
            ProviderEventKind.INPUT_TRANSCRIPT_FINAL: self._transcript_final,
            ProviderEventKind.FUNCTION_CALL_COMPLETED: self._tool_call,
        }

    @property
    def _scopes(self) -> Scopes:
        return self.lease.host.relay.scope

    # -- user turns -----------------------------------------------------------------------------------

    def user_turn(self, trigger: str, now_ns: int | None = None) -> None:
        """The user stopped speaking (a commit, a typed message, or the provider's final transcript).

        Speaking while the relay still answers, or while its last answer's audio can still be playing
        (the phone plays in real time from the first byte), is a barge-in: the new turn counts it,
        with the generated audio the user can not have heard.
        """
        if self.closed:
            return
        now = time.monotonic_ns() if now_ns is None else now_ns
        spoken = self._last_spoken
        unplayed = 0.0
        if spoken is not None:
            heard = (now - spoken.first_audio_out_ns) / _NS
            unplayed = max(0.0, spoken.audio_in_seconds - heard)
        barge_in = bool(self._responses) or unplayed > 0
        previous = self._turn
        if previous is not None:
            self._end_turn(previous, "cancelled" if barge_in else "success")
        self._totals[TURNS] += 1
        index = int(self._totals[TURNS])
        handle = self._scopes.push(
            "voice.turn", ScopeType.FUNCTION, parent=self._session_scope, attach=False,
            metadata={"relay.kind": VOICE_TURN_KIND, "voice_session_id": self.session.session_id,
                      "turn": index, "trigger": trigger},
        )
        self._turn = _Turn(handle, index, trigger, now, barge_in=barge_in,
                           unplayed_seconds=unplayed if barge_in else 0.0)
        if trigger == "commit":
            self._untranscribed_commits = min(self._untranscribed_commits + 1, _MAX_UNTRANSCRIBED)
        # Audio still arriving for the answers it cut off is never heard either; it counts here.
        cut_off = set(spoken.response_ids) if spoken is not None else set()
        if previous is not None:
            cut_off |= previous.response_ids
        self._cut_off = (self._turn, cut_off & set(self._responses)) if barge_in else None
        self._last_spoken = None
        self._totals[BARGE_INS] += int(barge_in)
        self._totals[UNPLAYED_AUDIO_TOTAL] += self._turn.unplayed_seconds

    def _end_turn(self, turn: _Turn, outcome: str) -> None:
        self._turn = None
        measures: dict[str, Any] = {BARGE_INS: int(turn.barge_in)}
        if turn.barge_in:
            measures[UNPLAYED_AUDIO] = turn.unplayed_seconds
        if turn.first_audio_out_ns:
            measures[PERCEIVED_LATENCY] = (turn.first_audio_out_ns - turn.started_ns) / _NS
        if turn.first_audio_in_ns:
            measures[TIME_TO_FIRST_AUDIO] = (turn.first_audio_in_ns - turn.started_ns) / _NS
        if turn.first_text_in_ns:
            measures[TIME_TO_FIRST_TEXT] = (turn.first_text_in_ns - turn.started_ns) / _NS
        if turn.max_hop_ns:
            measures[HOP_LATENCY] = turn.max_hop_ns / _NS
        self._scopes.pop(turn.handle, output={"outcome": outcome}, metadata={MEASURES_KEY: measures})
        if self.on_turn is not None:
            try:
                self.on_turn(self.session, {"turn": turn.index, "trigger": turn.trigger, **measures})
            except Exception:  # a listener must never break the session
                logger.exception("voice turn listener failed")

    # -- provider events in -----------------------------------------------------------------------------

    def on_provider_event(self, event: ProviderEvent, in_ns: int) -> None:
        handler = self._provider_handlers.get(event.kind)
        if handler is not None and not self.closed:
            handler(event, in_ns)

    def _response_started(self, event: ProviderEvent, in_ns: int) -> None:
        rid = event.response_id
        if not rid or rid in self._responses:
            return
        if len(self._responses) >= _MAX_OPEN_RESPONSES:
            # A provider that never reports done must not grow this without bound.
            _, (stale, _) = self._responses.popitem(last=False)
            self._scopes.pop(stale, output={"outcome": "cancelled"})
        turn = self._turn
        parent = self._session_scope
        if turn is not None:
            parent = turn.handle
            if len(turn.response_ids) < _MAX_TURN_RESPONSES:  # a provider that never stops starting some
                turn.response_ids.add(rid)
        handle = self._scopes.push(
            "voice.response", ScopeType.FUNCTION, parent=parent, attach=False,
            metadata={"relay.kind": VOICE_RESPONSE_KIND, "response_id": rid,
                      "voice_session_id": self.session.session_id},
        )
        self._responses[rid] = (handle, 0)

    def _first_chunk(self, rid: str, in_ns: int) -> None:
        entry = self._responses.get(rid)
        if entry is not None and not entry[1]:
            self._responses[rid] = (entry[0], in_ns)

    def _response_done(self, event: ProviderEvent, in_ns: int) -> None:
        if self._cut_off is not None:
            self._cut_off[1].discard(event.response_id)
        entry = self._responses.pop(event.response_id, None)
        if entry is None:
            return
        handle, first_chunk_ns = entry
        status = str(event.payload.get("status") or "completed")
        outcome = "cancelled" if status == "cancelled" else "failed" if status == "failed" else "success"
        metadata = {MEASURES_KEY: {TIME_TO_FIRST_CHUNK: (first_chunk_ns - handle.start_ns) / _NS}} \
            if first_chunk_ns and handle.start_ns else None
        self._scopes.pop(handle, output={"outcome": outcome, "status": status}, metadata=metadata)

    def _audio_seconds(self, event: ProviderEvent) -> float:
        audio = event.payload.get("audio")
        rate = int(event.payload.get("sample_rate") or self.session.sample_rate)
        return len(audio) / (2 * rate) if isinstance(audio, (bytes, bytearray)) and rate > 0 else 0.0

    def _audio_in(self, event: ProviderEvent, in_ns: int) -> None:
        rid = event.response_id
        self._first_chunk(rid, time.time_ns())
        cut_off = self._cut_off
        if cut_off is not None and rid in cut_off[1]:
            seconds = self._audio_seconds(event)
            cut_off[0].unplayed_seconds += seconds
            self._totals[UNPLAYED_AUDIO_TOTAL] += seconds
            return
        turn = self._turn
        if turn is None or rid not in turn.response_ids:
            return
        turn.audio_in_seconds += self._audio_seconds(event)
        if not turn.first_audio_in_ns:
            turn.first_audio_in_ns = in_ns

    def _text_in(self, event: ProviderEvent, in_ns: int) -> None:
        self._first_chunk(event.response_id, time.time_ns())
        turn = self._turn
        if (turn is not None and not turn.first_text_in_ns and event.response_id in turn.response_ids
                and event.payload.get("delta")):
            turn.first_text_in_ns = in_ns

    def _transcript_final(self, event: ProviderEvent, in_ns: int) -> None:
        if self._untranscribed_commits:
            # The transcript of speech the phone already committed (it may come after the answer
            # began), not a new utterance.
            self._untranscribed_commits -= 1
            return
        self.user_turn("transcript", in_ns)

    def _tool_call(self, event: ProviderEvent, in_ns: int) -> None:
        call = event.payload.get("call")
        entry = self._responses.get(event.response_id)
        parent = entry[0] if entry is not None else self._session_scope
        self._scopes.mark(TOOL_CALL_MARK, {"call_id": getattr(call, "call_id", ""), "name": getattr(call, "name", "")},
                          parent=parent)

    # -- phone events out (the session's observer) ------------------------------------------------------

    def emitted(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "hermes.run.promoted":
            self._totals[BACKGROUND_RUNS] += 1
        elif kind == "hermes.run.completed" and event.get("lane") == "fast":
            self._totals[FAST_LANE_RUNS] += 1

    def sent(self, event: dict[str, Any], in_ns: int, out_ns: int) -> None:
        hop = out_ns - in_ns if in_ns else 0
        if hop:
            self.hop_samples.append(hop)
        turn = self._turn
        if turn is None:
            return
        if hop > turn.max_hop_ns:
            turn.max_hop_ns = hop
        if event.get("response_id") not in turn.response_ids:
            return
        kind = event["type"]
        if kind == AUDIO_DELTA:
            if not turn.first_audio_out_ns:
                turn.first_audio_out_ns = out_ns
                self._last_spoken = turn
            turn.answered = True
        elif kind == "voice.response.delta" and event.get("delta"):
            turn.answered = True
        elif kind == "voice.response.done" and turn.answered and not self._responses:
            self._end_turn(turn, "success")

    # -- reconnects and the end ---------------------------------------------------------------------------

    def detached(self) -> None:
        if self.closed or self._detached is not None:
            return
        handle = self._scopes.push("voice.detached", ScopeType.FUNCTION, parent=self._session_scope, attach=False,
                                   metadata={"relay.kind": VOICE_DETACHED_KIND})
        self._detached = (handle, time.monotonic_ns())

    def resumed(self) -> None:
        if self._detached is None:
            return
        (handle, since), self._detached = self._detached, None
        self._totals[RECONNECTS] += 1
        gap = (time.monotonic_ns() - since) / _NS
        self._scopes.pop(handle, output={"outcome": "success"}, metadata={MEASURES_KEY: {RECONNECT_GAP: gap}})

    def close(self) -> None:
        if self.closed:
            return
        if self._turn is not None:
            self._end_turn(self._turn, "cancelled")
        self.closed = True
        if self._detached is not None:
            self._scopes.pop(self._detached[0], output={"outcome": "cancelled"})
            self._detached = None
        while self._responses:
            _, (handle, _) = self._responses.popitem()
            self._scopes.pop(handle, output={"outcome": "cancelled"})
        totals = {name: int(value) if name != UNPLAYED_AUDIO_TOTAL else value for name, value in self._totals.items()}
        self._scopes.pop(self._session_scope, output={"outcome": "success"}, metadata={MEASURES_KEY: totals})
        relay_session.SESSION_COORDINATOR.release_conversation(self.lease)
