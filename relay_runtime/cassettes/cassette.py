"""A cassette file: matching calls to recordings, handing out and collecting their exchanges.

The core knows a cassette as a list of calls, each a neutral request (what is
matched) and what the adapter that served it stored beside it (HTTP exchanges for
the SDK clients, provider events for a realtime session). The adapters do the
serving; the core only matches, orders, scrubs and writes.
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..conversation_urls import recorded as recorded_conversation
from ..files import directory_locked, replace_atomically
from ..urls import is_signing_scope
from . import answers, matching, policy, secrets, verify
from .requests import Normalize, canonical, normalized

if TYPE_CHECKING:
    from ..redaction_policy import RedactionPolicy

MODES = ("replay", "record", "auto")
TIMINGS = ("instant", "recorded")
FORMAT_KEY = "relay_runtime_cassette"
FORMAT_VERSION = 1

Redact = Callable[[dict[str, Any]], dict[str, Any]]
# What a message shows of a call the redact= hook fails on (it is given one cut short there): nothing.
WITHHELD = "(withheld: the cassette's redact= hook failed on it)"
E = TypeVar("E", bound="CassetteError")


class CassetteError(RuntimeError):
    """A cassette cannot be read, written or used as asked."""

    # Raised from inside an SDK's HTTP read (a miss past a cut stream): a managed stream raises it as
    # itself where the SDK wrapped it (``streams.surfaced``).
    relay_surfaces = True


class CassetteMiss(CassetteError, LookupError):
    """A call found nothing to replay (or asked for more than was recorded)."""


# How to tell a recorded call that ended in a failure a later try may not meet (a 429, a 5xx, a lost
# connection) from what an adapter stored for it: each adapter that stores calls registers its check.
_transient_checks: list[Callable[[dict[str, Any]], bool]] = []


def register_transient_check(check: Callable[[dict[str, Any]], bool]) -> None:
    """Add ``check(call) -> bool``: whether a recorded call ended in a passing failure (see ``Cassette.save``)."""
    if check not in _transient_checks:
        _transient_checks.append(check)


def ended_transiently(call: dict[str, Any]) -> bool:
    return any(check(call) for check in _transient_checks)


# Set by an adapter on an HTTP try its caller's cancellation cut off before the answer was complete (a stream
# cancelled mid-read, with its status and first events already noted). Never written: see ``unanswered``.
CANCELLED = "cancelled"
DIAG_CANCELLED = "cassette.cancelled_not_recorded"


def note_cancelled(exchange: dict[str, Any]) -> None:
    """``exchange``, an HTTP try being recorded, was cancelled before its answer was complete."""
    exchange[CANCELLED] = True


def unanswered(call: dict[str, Any]) -> bool:
    """Whether a call being recorded was cut off before it had its answer: its last HTTP try was cancelled, or
    has neither a status nor an error (cancelled before either was known: a whole body still being read, a
    stream an adapter reads whole first). Such a call is not written (``Cassette.save``): nothing answered it,
    and stored it would replay as a failure the live call never had, or as damage that re-recording repeats.
    A request not recorded replays as any other: ``auto`` records it next time, ``replay`` raises its miss."""
    tries = call.get("http")
    last = tries[-1] if isinstance(tries, list) and tries else None
    if not isinstance(last, dict):
        return False
    return last.get(CANCELLED) is True or ("status" not in last and "error" not in last)


def check_options(*, mode: str = "replay", timing: str = "instant", normalize: Any = None, redact: Any = None) -> None:
    if mode not in MODES:
        raise ValueError(f"cassette mode must be one of {', '.join(MODES)}; got {mode!r}")
    if timing not in TIMINGS:
        raise ValueError(f"cassette timing must be one of {', '.join(TIMINGS)}; got {timing!r}")
    if normalize is not None and not callable(normalize):
        raise TypeError(f"cassette normalize= must be callable, got {type(normalize).__name__}")
    if redact is not None and not callable(redact):
        raise TypeError(f"cassette redact= must be callable, got {type(redact).__name__}")


class CallTape:
    """One call's recording: replayed item by item, or filled in as the provider answers."""

    __slots__ = ("_positions", "cassette", "miss", "record", "replaying", "request")

    def __init__(self, cassette: Cassette, request: dict[str, Any], record: dict[str, Any], replaying: bool) -> None:
        self.cassette = cassette
        self.request = request
        self.record = record
        self.replaying = replaying
        # What this call asked for past its recording, or the damage it met, if anything (the first).
        self.miss: CassetteError | None = None
        self._positions: dict[str, int] = {}

    @property
    def timing(self) -> str:
        return self.cassette.timing

    def next(self, key: str = "http") -> dict[str, Any]:
        """The next recorded item of ``key`` (an HTTP try, a provider step); a CassetteMiss past the end."""
        items = self.record.get(key) or []
        if not isinstance(items, list):
            raise self._damage_error(f"'{key}' must be a list, not {type(items).__name__}")
        position = self._positions.get(key, 0)
        if position >= len(items):
            raise self._missed(
                CassetteMiss(
                    f"cassette {self.cassette.path}: this call made more {key} requests than the "
                    f"{len(items)} recorded (did max_retries or the provider's answers change?)\n"
                    f"request:\n{self.cassette.shown(self.request)}"
                )
            )
        self._positions[key] = position + 1
        item = items[position]
        if not isinstance(item, dict):
            raise self.damaged("it is not an object", key)
        return item

    def remaining(self, key: str = "http") -> int:
        """How many recorded items of ``key`` are still to be played after those handed out."""
        items = self.record.get(key)
        return max(0, len(items) - self._positions.get(key, 0)) if isinstance(items, list) else 0

    def damaged(self, problem: str, key: str = "http") -> CassetteError:
        """The error for a recorded item of this call that cannot be played: the file, the entry, the problem."""
        position = self._positions.get(key, 1) - 1
        return self._damage_error(f"{key}[{position}] is damaged: {problem}")

    def _damage_error(self, problem: str) -> CassetteError:
        number = next((i + 1 for i, c in enumerate(self.cassette.recorded) if c is self.record), 0)
        return self._missed(
            CassetteError(
                f"cassette {self.cassette.path}: call #{number}: {problem} (fix it or re-record)\n"
                f"request:\n{self.cassette.shown(self.request, limit=2000)}"
            )
        )

    def _missed(self, miss: E) -> E:
        # The SDK retries what its transport raised: the first failure is the one to report.
        if self.miss is None:
            self.miss = miss
        return self.cassette.missed(miss)

    def add(self, key: str = "http", item: dict[str, Any] | None = None) -> dict[str, Any]:
        """Append a new item to ``key`` (filled in later by the caller, e.g. as a stream is read)."""
        item = {} if item is None else item
        self.record.setdefault(key, []).append(item)
        return item

    def add_secrets(self, values: Iterable[str]) -> None:
        self.cassette.add_secrets(values)


class Cassette:
    """One cassette file while it is in use (see ``use``)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        mode: str = "replay",
        timing: str = "instant",
        normalize: Normalize | None = None,
        redact: Redact | None = None,
    ) -> None:
        check_options(mode=mode, timing=timing, normalize=normalize, redact=redact)
        self.path = Path(path)
        self.mode = mode
        self.timing = timing
        self.normalize = normalize
        self.redact = redact
        self.secrets: set[str] = set()
        self.closed = False
        # The redaction policy's fingerprint the file was recorded under, and the policy of this session's calls.
        self.fingerprint: str | None = None
        self.policy: RedactionPolicy | None = None
        self.rewrites = answers.Rewrites()  # what whole-field rules made of this session's answers
        self.misses: list[CassetteError] = []  # misses, and damage met, in the order met
        self._lock = threading.Lock()
        self._seen = _identity(self.path)  # the file as this session found it (before reading it)
        self.recorded: list[dict[str, Any]] = [] if mode == "record" else self._load()
        self._used = [False] * len(self.recorded)
        # Match key -> indices of recordings not yet replayed, in recorded order (built at the first call).
        self._waiting: dict[str, deque[int]] | None = None
        self.new: list[dict[str, Any]] = []

    # -- reading ---------------------------------------------------------------------------

    def _load(self) -> list[dict[str, Any]]:
        if not self.path.exists() and self.mode == "replay":
            raise CassetteError(
                f"cassette {self.path} does not exist: record it once with mode='record' or 'auto' "
                f"(under pytest: --relay-record=new)"
            )
        return self._read()

    def _read(self) -> list[dict[str, Any]]:
        """The calls the file holds now (none if it does not exist)."""
        if not self.path.exists():
            return []
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CassetteError(f"cassette {self.path} cannot be read: {exc}") from exc
        version = document.get(FORMAT_KEY) if isinstance(document, dict) else None
        if type(version) is not int or version != FORMAT_VERSION:  # true == 1 in JSON's Python
            raise CassetteError(f"cassette {self.path} is not a version {FORMAT_VERSION} relay-runtime cassette")
        calls = document.get("calls")
        if not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("request"), dict) for c in calls
        ):
            raise CassetteError(f"cassette {self.path}: 'calls' must be a list of objects with a 'request' object")
        recorded_under = document.get(policy.FINGERPRINT_KEY)
        self.fingerprint = recorded_under if isinstance(recorded_under, str) else None
        return calls

    def _key(self, request: Mapping[str, Any]) -> str:
        return canonical(normalized(request, self.normalize))

    def _match_key(self, request: Mapping[str, Any]) -> str:
        """What a request is matched on: compared as it would be stored, a credential in it redacted.
        Most requests hold none, which their key's text shows (a hook may hide it there)."""
        key = self._key(request)
        held = self.secrets
        if self.normalize is not None or secrets.may_scrub(key, held):
            key = self._key(secrets.scrub(request, held))
        return key

    def add_secrets(self, values: Iterable[str]) -> None:
        """Credential values calls send or hold (a key header, a query key): cut from what is matched,
        written and shown. An adapter adds a call's before ``begin``, so its miss is scrubbed of them."""
        new = set(values) - self.secrets
        if new:
            # A new set, not the old one changed: another thread may be scrubbing with the old one.
            self.secrets = self.secrets | new

    def _queues(self) -> dict[str, deque[int]]:
        if self._waiting is None:
            self._waiting = {}
            for index, call in enumerate(self.recorded):
                self._waiting.setdefault(self._key(call["request"]), deque()).append(index)
        return self._waiting

    # -- one call --------------------------------------------------------------------------

    def begin(self, request: dict[str, Any]) -> CallTape:
        """The tape for one call: the first unreplayed recording of this request, or a new recording.

        In replay mode a request with no recording left raises ``CassetteMiss`` showing
        the closest recorded request and a diff, both as the file holds them (``as_stored``).
        """
        redaction = policy.policy_in_force()
        if redaction is not None:
            request = policy.redact_request(redaction, request)
        if self.recorded and self.mode != "record":
            wrong = policy.mismatch(self.path, self.fingerprint, redaction)
            if wrong is not None:
                raise CassetteError(wrong)
        if self.new:
            # The file carries one policy's fingerprint: a call of this session stored under another would
            # hold, under the fingerprint written, values that policy redacts (or lack values it keeps).
            earlier = self.policy.fingerprint if self.policy is not None else None
            wrong = policy.mismatch(self.path, earlier, redaction)
            if wrong is not None:
                raise CassetteError(f"{wrong} (this session recorded its earlier calls under the first)")
        self.policy = redaction
        taken: list[str] = []
        recorded_conversation(request, taken)  # an address's signature, cut from an error body echoing it too
        self.add_secrets(v for v in taken if len(v) >= secrets.MIN_SECRET_LENGTH and not is_signing_scope(v))
        key = self._match_key(request)
        with self._lock:
            if self.mode != "record":
                waiting = self._queues().get(key)
                if waiting:
                    index = waiting.popleft()
                    self._used[index] = True
                    return CallTape(self, request, self.recorded[index], replaying=True)
                if self.mode == "replay":
                    raise self.missed(CassetteMiss(self._miss_message(request, key)))
            record: dict[str, Any] = {"request": request}
            self.new.append(record)
            if redaction is not None and redaction.rewrites_answers:
                self.rewrites.watch(redaction, record)
            return CallTape(self, request, record, replaying=False)

    def missed(self, miss: E) -> E:
        """Remember a miss (so one an agent swallowed still fails the test), and hand it back to raise."""
        self.misses.append(miss)
        return miss

    def _miss_message(self, request: dict[str, Any], key: str) -> str:
        """Why ``request`` (as ``begin`` took it) found nothing, showing it only as this cassette stores it:
        the message reaches the caller, CI logs, and events and spans as the attempt's error."""
        head = f"cassette {self.path}: no recorded call matches this request"
        replayed = sum(1 for c in self.recorded if self._key(c["request"]) == key)
        if replayed:
            return (
                f"{head}: all {replayed} recordings of it were already replayed (this run makes the call more "
                f"often than the recording did)\nrequest:\n{self.shown(request)}"
            )
        stored = self.as_stored(request)
        if stored is None:
            return f"{head}\nrequest: {WITHHELD}"
        live = normalized(stored, self.normalize)
        recorded = [normalized(c["request"], self.normalize) for c in self.recorded]
        index = matching.closest(live, recorded)
        if index is None:
            return f"{head}: the cassette holds no calls\nrequest:\n{matching.pretty(stored)}"
        # What was compared, against what is shown: a difference only the redact= hook hides is named, not shown.
        hidden = matching.withheld(
            recorded[index], normalized(secrets.scrub(request, self.secrets), self.normalize), live
        )
        named = f"\nalso differ, values withheld by the cassette's redaction: {', '.join(hidden)}" if hidden else ""
        return (
            f"{head}.\nclosest recorded call (#{index + 1} of {len(recorded)}), diff recorded -> this call:\n"
            f"{matching.diff(recorded[index], live)}{named}\n"
            f"(re-record with mode='record'/'auto', or under pytest --relay-record=new|all)"
        )

    def as_stored(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """``request`` (as ``begin`` took it: the redaction policy applied) as this cassette writes it, for
        every message built from a request; None when the ``redact=`` hook fails on a call of the request alone."""
        call = self.as_written({"request": request})
        return None if call is None else call["request"]

    def as_written(self, call: dict[str, Any]) -> dict[str, Any] | None:
        """What a message may show of ``call`` (its request, and what is recorded for it so far or this run
        did): ``written``, or None when the ``redact=`` hook fails on it (it is given a call cut short)."""
        try:
            return self.written(call)
        except Exception:
            return None

    def shown(self, request: dict[str, Any], limit: int | None = None) -> str:
        """``request`` as a message prints it: as stored (``as_stored``), indented, cut at ``limit`` characters."""
        stored = self.as_stored(request)
        text = WITHHELD if stored is None else matching.pretty(stored)
        return text if limit is None else text[:limit]

    def unused(self) -> list[dict[str, Any]]:
        """Recorded requests nothing replayed (a test that took another path, or a stale cassette)."""
        return [c["request"] for c, used in zip(self.recorded, self._used, strict=True) if not used]

    # -- writing ---------------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        return self.mode == "record" or bool(self.new)

    def save(self, *, failed: bool = False) -> None:
        """Write the cassette if this session recorded anything: scrubbed, user-redacted, atomically.

        ``record`` writes every call as it went. ``auto`` writes what a later run needs to replay this
        one (see ``_kept``). ``failed``: the code that used the cassette (the test) failed.

        Several processes may record into one cassette at once (pytest-xdist workers, parallel scripts):
        each saves under a lock on the cassette's directory, and what another wrote since this session
        read the file is kept beside this session's calls, never overwritten.
        """
        self.rewrites.close()
        new = self._answered()
        new = new if self.mode == "record" else self._kept(new, failed)
        unread = next((i for i, call in enumerate(new, 1) if self.rewrites.unread(call)), None)
        if unread is not None:
            raise CassetteError(answers.unread_message(self.path, unread))
        if self.mode != "record" and not new:
            return
        with directory_locked(self.path.parent):
            changed = _identity(self.path) != self._seen
            if self.mode == "record":  # started afresh, but other writers' recordings since are theirs
                if changed and not new:
                    return  # nothing of this session's to add to what another writer saved
                before = self._read() if changed else []
            else:
                before = self._read() if changed else self.recorded
            # Another writer's calls were stored under its policy: stamped with this one's fingerprint, the
            # file would claim they hold none of what this policy redacts.
            wrong = policy.mismatch(self.path, self.fingerprint, self.policy) if changed and before else None
            if wrong is not None:
                raise CassetteError(f"{wrong} (another session saved it under its policy while this one ran)")
            self._write(before + new)

    def _answered(self) -> list[dict[str, Any]]:
        """This session's calls but those cut off before their answer (``unanswered``), counted in the
        diagnostics of the relay recording here as ``cassette.cancelled_not_recorded``."""
        answered = [call for call in self.new if not unanswered(call)]
        dropped = len(self.new) - len(answered)
        if dropped:
            _relay_here().diag.count(DIAG_CANCELLED, dropped)
        return answered

    def _kept(self, new: list[dict[str, Any]], failed: bool) -> list[dict[str, Any]]:
        """The calls this session recorded that ``auto`` keeps.

        A call that ended in a passing failure (a 429, a 5xx, a lost connection: the adapters say which)
        is not kept when a later call of the same request got an answer (the caller's retry got past
        it: a later run, like a live one now, gets the answer first time) nor when the session failed
        (kept, the outage would fail every later run that a live call would pass; that run records
        it afresh). Otherwise it is the outcome the run saw and went on with, and is kept; so are the
        SDK's own retries inside a call that got its answer, and every other error.
        """
        kept: list[dict[str, Any]] = []
        answered: set[str] = set()
        for call in reversed(new):
            key = self._match_key(call["request"])
            if not ended_transiently(call):
                answered.add(key)
            elif failed or key in answered:
                continue
            kept.append(call)
        kept.reverse()
        return kept

    def written(self, call: dict[str, Any]) -> dict[str, Any]:
        """``call`` as the file holds it (its request redacted by the policy already, in ``begin``): its tools'
        results blanked, its answers through the policy's span rules, credentials scrubbed, the ``redact=`` hook,
        scrubbed again; a CassetteError when it still holds a value a whole-field rule changed (``verify``).
        The one place this is done: what a message shows of a request is what is written (``as_stored``)."""
        held, original = self.secrets, call
        changes = self.rewrites.of(call)  # by the call's identity: before it is copied below
        # A tool's result sent back as text (``api_key='sk-...'``) and a presigned URL's signature are conversation,
        # which the credential walk leaves alone: blanked as the attempt's records blank them (and as matching
        # compares them, default_normalize).
        request = call["request"]
        results = recorded_conversation(request)
        if results is not request:
            call = {**call, "request": dict(results)}
        if self.policy is not None:
            if changes:
                call = answers.rewritten(call, changes)
            call = policy.redact_answers(self.policy, call)
        call = secrets.scrub(call, held)
        if self.redact is not None:
            call = self.redact(call)
            if not isinstance(call, dict) or not isinstance(call.get("request"), dict):
                raise CassetteError("cassette redact= hook must return the call dict with its 'request'")
            # The hook may have put a secret back in a new shape; the built-in rules run last.
            call = secrets.scrub(call, held)
        across = secrets.cut_across(held)
        out = call if across is None else policy.streams_across(across, call)
        kind = None if changes is None else verify.unhonoured(out, changes)
        if kind is not None:  # as it would be written: a value a whole-field rule changed, still there
            number = next((i for i, c in enumerate(self.new, 1) if c is original), 0)
            raise CassetteError(verify.message(self.path, number, kind))
        return out

    def _write(self, calls: list[dict[str, Any]]) -> None:
        cleaned = [self.written(call) for call in calls]
        document: dict[str, Any] = {FORMAT_KEY: FORMAT_VERSION}
        if self.policy is not None:
            document[policy.FINGERPRINT_KEY] = self.policy.fingerprint
        document["calls"] = cleaned
        text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
        replace_atomically(self.path, text)


def _relay_here() -> Any:
    """The relay of the turn active where the cassette is saved (the calls' own), else the process's default."""
    from .. import session  # here: the session layer is built on much that imports the cassettes

    turn = session.active_turn()
    return turn.relay if turn is not None else session.SESSION_COORDINATOR.default_host().relay


def _identity(path: Path) -> tuple[int, int, int] | None:
    """Which version of a file this is: a save replaces the file, so a new version is a new inode."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)
