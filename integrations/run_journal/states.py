"""Terminal states, and the fold that turns a run's rows into its summary."""

from __future__ import annotations

from typing import Any

from .runtime_model import RuntimeModelFold, is_fallback_warning

COMPLETED = "completed"
TOOL_LIMIT_REACHED = "tool_limit_reached"
INTERRUPTED_BY_USER = "interrupted-by-user"
INTERRUPTED_BY_CRASH = "interrupted-by-crash"
ERRORED = "errored"
RUNNING = "running"
TERMINAL_STATES = (COMPLETED, TOOL_LIMIT_REACHED, INTERRUPTED_BY_USER, INTERRUPTED_BY_CRASH, ERRORED)

_COMPLETION_EVENTS = frozenset(("done", "stream_end"))
_ERROR_EVENTS = frozenset(("apperror", "error"))
_ERROR_TYPES = {
    TOOL_LIMIT_REACHED: TOOL_LIMIT_REACHED,
    "cancelled": INTERRUPTED_BY_USER,
    "canceled": INTERRUPTED_BY_USER,
    "interrupted": INTERRUPTED_BY_CRASH,
}
# Rows after which the assistant starts a new message (its text so far is not the last one).
_MESSAGE_BOUNDARIES = frozenset(("tool", "tool_call"))
_SPAN = "span"  # a node of the run's tree ended (``span_rows``): an attempt's row says how it ended


def _word(payload: Any, key: str) -> str:
    """``payload[key]`` compared as producers spell it: any case, stray whitespace."""
    value = payload.get(key) if isinstance(payload, dict) else None
    return value.strip().lower() if isinstance(value, str) else ""


def terminal_state(event: str, payload: Any) -> str | None:
    """The state a row ends its run in, or ``None`` for a row that does not end it."""
    if event in _COMPLETION_EVENTS:
        # A completion may say it stopped at the tool limit; no other state is taken from it.
        if TOOL_LIMIT_REACHED in (_word(payload, "terminal_state"), _word(payload, "type")) or (
            isinstance(payload, dict) and payload.get(TOOL_LIMIT_REACHED) is True
        ):
            return TOOL_LIMIT_REACHED
        return COMPLETED
    if event == "cancel":
        return INTERRUPTED_BY_USER
    if event in _ERROR_EVENTS:
        return _ERROR_TYPES.get(_word(payload, "type"), ERRORED)
    return None


def _answer_attempt(payload: Any) -> str | None:
    """The outcome of the attempt a ``span`` row ends, if it is one of the answer's (an auxiliary call's
    text is never streamed); None for any other row."""
    if not isinstance(payload, dict) or payload.get("kind") != "attempt":
        return None
    role = payload.get("call_role")
    if isinstance(role, str) and role.startswith("auxiliary"):
        return None
    outcome = payload.get("outcome")
    return outcome if isinstance(outcome, str) else ""


def _ended_call(payload: Any) -> bool:
    """Whether a ``span`` row ends a logical call."""
    return isinstance(payload, dict) and payload.get("kind") == "logical_call"


def ends_run(row: dict[str, Any]) -> bool:
    """Whether a journal row (as read back) is one of the run's terminal rows."""
    event = row.get("event")
    return isinstance(event, str) and terminal_state(event, row.get("payload")) is not None


class SummaryFold:
    """Everything a summary says about a run, built row by row in file order."""

    __slots__ = (
        "_answer",
        "_cost",
        "_current_text",
        "_last_text",
        "_model",
        "_since",
        "count",
        "last_event",
        "last_seq",
        "run_id",
        "session_id",
        "started_at",
        "stream_end_at",
        "stream_end_state",
        "terminal_row_at",
        "terminal_row_state",
    )

    def __init__(self, session_id: str, run_id: str) -> None:
        self.session_id = session_id
        self.run_id = run_id
        self.count = 0
        self.last_seq = 0
        self.last_event: str | None = None
        self.terminal_row_state: str | None = None  # latest terminal row other than stream_end
        self.stream_end_state: str | None = None
        # When the run started and when its terminal row was written (the rows' created_at).
        self.started_at: float | None = None
        self.terminal_row_at: float | None = None
        self.stream_end_at: float | None = None
        # The parts of the message being streamed, and of the last message that had text
        # (often the same list); joined once, in result(), so a long run stays linear.
        self._current_text: list[str] = []
        self._last_text: list[str] = self._current_text
        # Where the text of the attempt in flight begins in the current message: a stream's rows come before
        # its attempt's ``span`` row, and a fallback's first words before its warning. None until an attempt's
        # row is seen (a journal another producer wrote, without them: its warnings come before the words).
        self._since: int | None = None
        # The logical call (its api_request_id) whose answer the current message holds last, and where it begins: a
        # call answered twice (an intercept asking again, keeping one answer or making one of both) says its answer
        # once, the one its caller got.
        self._answer: tuple[str, int] | None = None
        self._model = RuntimeModelFold(session_id, run_id)
        self._cost: dict[str, Any] | None = None

    def feed(self, row: dict[str, Any]) -> None:
        self.count += 1
        seq = row.get("seq")
        if isinstance(seq, int):
            self.last_seq = max(self.last_seq, seq)
        event = row.get("event")
        payload = row.get("payload")
        self.last_event = event if isinstance(event, str) else None
        self._model.feed(row)
        if not isinstance(event, str):
            return
        created_at = row.get("created_at")
        if not isinstance(created_at, (int, float)) or isinstance(created_at, bool):
            created_at = None
        if self.started_at is None:
            self.started_at = created_at
        state = terminal_state(event, payload)
        if state is not None:
            if event == "stream_end":
                self.stream_end_state, self.stream_end_at = state, created_at
            else:
                self.terminal_row_state, self.terminal_row_at = state, created_at
        elif event == "token":
            text = payload.get("text") if isinstance(payload, dict) else None
            if isinstance(text, str) and text:
                self._current_text.append(text)
                self._last_text = self._current_text
        elif event == COST_EVENT:
            self._add_cost(payload)
        elif event == _SPAN:
            outcome = _answer_attempt(payload)
            if outcome is not None:
                if outcome in ("failed", "cancelled") and len(self._current_text) > (self._since or 0):
                    # A stream that broke after some text: its retry says the answer again, not more of it.
                    self._current_text = []
                    self._answer = None
                elif outcome == "success":
                    self._answered(payload, self._since or 0)
                self._since = len(self._current_text)
            elif _ended_call(payload) and self._answered(payload, self._since, after=True):
                # What an execution intercept answered in place of the call's last provider call came after it.
                self._since = len(self._current_text)
        elif event in _MESSAGE_BOUNDARIES:
            self._current_text = []  # a tool call ends the message
            self._answer = None
            self._since = None if self._since is None else 0
        elif is_fallback_warning(event, payload):
            # A fallback restarts the answer on another route, with the words it streamed before its warning.
            moved = self._current_text[self._since :] if self._since is not None else []
            self._current_text = moved
            self._answer = None
            self._since = None if self._since is None else 0
            if moved:
                self._last_text = moved

    def _answered(self, payload: Any, begin: int | None, after: bool = False) -> bool:
        """The text from ``begin`` on is the answer of the logical call ``payload`` (a ``span`` row) names: when the
        message holds an earlier answer of that call just before it, this one takes its place. True if it did.
        ``after``: only if there is text from ``begin`` on (the call's own row, after what answered in its place)."""
        call = payload.get("api_request_id") if isinstance(payload, dict) else None
        if not isinstance(call, str) or begin is None or (after and len(self._current_text) <= begin):
            return False
        prior = self._answer
        if prior is None or prior[0] != call or prior[1] > begin:
            self._answer = (call, begin)
            return False
        text = self._current_text
        self._current_text = text[: prior[1]] + text[begin:]
        if self._last_text is text:
            self._last_text = self._current_text
        return True  # the call's answer still begins where its earlier one did

    def _add_cost(self, payload: Any) -> None:
        """One attempt's ``cost`` row: summed from the rows, so a run that crashed still shows its spend."""
        if not isinstance(payload, dict):
            return
        cost = self._cost
        if cost is None:
            cost = self._cost = {"total": 0.0, "wasted": 0.0, "currency": None, "attempts": 0, "unpriced": 0}
        amount = payload.get("amount")
        if isinstance(amount, bool) or not isinstance(amount, int | float) or amount != amount or amount < 0:
            cost["unpriced"] += 1
            return
        cost["attempts"] += 1
        cost["total"] += amount
        if payload.get("wasted") is True:
            cost["wasted"] += amount
        currency = payload.get("currency")
        if isinstance(currency, str) and cost["currency"] is None:
            cost["currency"] = currency

    def result(self) -> dict[str, Any]:
        state = self.terminal_row_state or self.stream_end_state
        terminal = state is not None
        if state is None and self.count:
            state = RUNNING
        return {
            "session_id": self.session_id,
            "run_id": self.run_id,
            "stream_id": self.run_id,
            "event_count": self.count,
            "last_seq": self.last_seq,
            "last_event_id": f"{self.run_id}:{self.last_seq}" if self.last_seq else None,
            "terminal": terminal,
            "terminal_state": state,
            "last_event": self.last_event,
            "last_assistant_text": "".join(self._last_text),
            "runtime_model": self._model.value,
            "started_at": self.started_at,
            "ended_at": self.terminal_row_at if self.terminal_row_state else self.stream_end_at,
            **({"cost": dict(self._cost)} if self._cost is not None else {}),
        }


# One attempt's cost (``relay_runtime.cost.AttemptCost.as_dict()``), written when the attempt ends.
COST_EVENT = "cost"


def summarize(session_id: str, run_id: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    fold = SummaryFold(session_id, run_id)
    for row in rows:
        fold.feed(row)
    return fold.result()


def copy_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """A deep copy for this shape: every value is immutable except the runtime_model and cost dicts."""
    out = dict(summary)
    for key in ("runtime_model", "cost"):
        value = out.get(key)
        if value is not None:
            out[key] = dict(value)
    return out
