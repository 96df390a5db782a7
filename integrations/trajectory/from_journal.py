"""Trajectories of runs recorded in the past: read back from the run journal (file store or Redis).

The journal's rows carry the trajectory records (``traj``) the live exporters build from, so
``atif_from_journal`` gives what a live ``AtifExporter`` gave, and ``atof_from_journal`` the
ATOF lines of the turn's scopes (the conversation scope itself is not journaled, nor are the
provider's raw response bodies: an LLM end line carries the normalized response instead).
A row the journal had to cut to its row cap still becomes a step, marked ``extra.truncated``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from relay_runtime.types import ScopeType

from ..run_journal import paths
from ..run_journal.storage import is_truncated
from ..run_journal.store import RunJournalStore, resolve_store
from .atof import ATOF_VERSION
from .build import TrajectoryBuilder
from .deltas import rebuild_request
from .plain import rfc3339
from .records import ATTEMPT, CALL, TOOL, TOOL_END, TURN, TURN_END
from .validate import validate_atif

PathLike = str | os.PathLike[str]
_T = TypeVar("_T")
_KIND_OF_SPAN = {"attempt": ATTEMPT, "logical_call": CALL}


class DamagedJournal(ValueError):
    """A journal row's trajectory record is not one we wrote (edited by hand, damaged, another tool's)."""


# A record's fields the exporters index and sort by, and the types they must have.
_ID_FIELDS = ("id",)
_ORDER_FIELDS = ("os", "oe")
_TIME_FIELDS = ("start", "end")
# Times are written as RFC 3339, whose years have four digits: 1970 to the end of 9999, in nanoseconds.
_LAST_NS = 253_402_300_800 * 1_000_000_000 - 1


def _nanoseconds(seconds: Any) -> int | None:
    """A row's ``created_at`` (seconds) in nanoseconds; None for what is no time RFC 3339 can write."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds <= _LAST_NS / 1e9:
        return None  # NaN fails the comparison too
    return int(seconds * 1e9)


def _checked(record: dict[str, Any], where: str) -> dict[str, Any]:
    for key in _ID_FIELDS:
        value = record.get(key)
        if not isinstance(value, str):
            raise DamagedJournal(f"{where}: its trajectory record's {key!r} must be a string, got {value!r:.80}")
    for key in _ORDER_FIELDS + _TIME_FIELDS:
        value = record.get(key)
        if value is not None and type(value) is not int:
            raise DamagedJournal(f"{where}: its trajectory record's {key!r} must be a whole number, got {value!r:.80}")
    for key in _TIME_FIELDS:
        value = record.get(key)
        if value is not None and not 0 <= value <= _LAST_NS:
            raise DamagedJournal(
                f"{where}: its trajectory record's {key!r} must be nanoseconds from 1970 to the end of 9999, "
                f"got {value!r:.80}"
            )
    parent = record.get("parent")
    if parent is not None and not isinstance(parent, str):
        raise DamagedJournal(f"{where}: its trajectory record's 'parent' must be a string, got {parent!r:.80}")
    return record


def _check(session_id: Any, run_id: Any) -> None:
    if not paths.valid_id(session_id):
        raise ValueError(f"invalid session_id {session_id!r}")
    if run_id is not None and not paths.valid_id(run_id):
        raise ValueError(f"invalid run_id {run_id!r}")


def _record_of(row: dict[str, Any]) -> dict[str, Any] | None:
    """The trajectory record a row carries; for a row cut by the cap, what its kept fields still say."""
    payload = row.get("payload")
    if not isinstance(payload, dict):
        return None
    traj = payload.get("traj")
    if isinstance(traj, dict) and isinstance(traj.get("k"), str):
        dropped = payload.get("dropped_rows")
        if traj.get("k") == TURN_END and type(dropped) is int and dropped > 0:
            # The writer dropped rows of this run under load (its end row says how many): records with them.
            return {**traj, "dropped_rows": dropped}
        return traj
    if not is_truncated(row):
        return None
    event = row.get("event")
    at = _nanoseconds(row.get("created_at"))
    if event == "span" and payload.get("kind") in _KIND_OF_SPAN and isinstance(payload.get("id"), str):
        usage = {
            k: payload[k]
            for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens")
            if isinstance(payload.get(k), int)
        }
        record: dict[str, Any] = {
            "k": _KIND_OF_SPAN[payload["kind"]], "id": payload["id"], "parent": payload.get("parent_id"),
            "name": payload.get("name"), "outcome": payload.get("outcome"), "end": at, "truncated": True,
        }  # fmt: skip
        if payload.get("model"):
            record["model_name"] = payload["model"]
        if isinstance(payload.get("provider"), str):
            record["provider"] = payload["provider"]  # how its input tokens count (Anthropic's leave out the cache)
        if usage:
            record["resp"] = {"usage": usage}
        return record
    if event == "tool_result":
        return None  # without its id nothing names the tool it ended
    return None


def _runs(store: RunJournalStore, session_id: str, run_id: str | None) -> list[tuple[str, list[dict[str, Any]]]]:
    """The id and rows of the run, or of every run of the session in the order they started."""
    ids = [run_id] if run_id is not None else [r["run_id"] for r in store.list_runs(session_id)]
    runs: list[tuple[int, str, list[dict[str, Any]]]] = []
    for rid in ids:
        rows = store.read(session_id, rid).get("events") or []
        start = next(
            (r["payload"]["traj"].get("start") for r in rows
             if isinstance(r.get("payload"), dict) and isinstance(r["payload"].get("traj"), dict)
             and r["payload"]["traj"].get("k") == TURN),
            None,
        )  # fmt: skip
        first = (_nanoseconds(rows[0].get("created_at")) if rows and isinstance(rows[0], dict) else None) or 0
        runs.append((start if type(start) is int else first, rid, rows))
    runs.sort(key=lambda item: (item[0], item[1]))
    return [(rid, rows) for _, rid, rows in runs]


def _refused(store: RunJournalStore, session_id: str, run_id: str) -> int:
    """The rows of a run its store refused at the run's size cap (a Redis store counts them, ``run_stats``; the
    file store refuses none): their trajectory records are lost, as those of rows its writer dropped are."""
    stats = getattr(store, "run_stats", None)
    refused = stats(session_id, run_id).get("refused") if callable(stats) else None
    return refused if type(refused) is int and refused > 0 else 0


def journal_records(
    session_id: str,
    run_id: str | None = None,
    *,
    store: RunJournalStore | None = None,
    session_dir: PathLike | None = None,
) -> list[dict[str, Any]]:
    """The trajectory records the journal holds for one run, or for every run of the session in order."""
    _check(session_id, run_id)
    chosen = resolve_store(store, session_dir)
    records: list[dict[str, Any]] = []
    for rid, rows in _runs(chosen, session_id, run_id):
        first = len(records)
        for index, row in enumerate(rows):
            record = _record_of(row) if isinstance(row, dict) else None
            if record is not None:
                where = f"session {session_id!r} run {row.get('run_id', run_id)!r} row {index}"
                records.append(_checked(record, where))
        refused = _refused(chosen, session_id, rid) if len(records) > first else 0
        if refused:
            # Counted with the rows the writer dropped, on the run's end record (its last, if it has none).
            at = next((i for i in range(len(records) - 1, first - 1, -1) if records[i].get("k") == TURN_END), -1)
            dropped = records[at].get("dropped_rows")
            records[at] = {**records[at], "dropped_rows": refused + (dropped if type(dropped) is int else 0)}
    return records


def _built(what: Callable[[], _T], session_id: str, run_id: str | None) -> _T:
    """``what()``, with a record the checks above let through but the exporters cannot read as a clear error."""
    try:
        return what()
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        if isinstance(exc, DamagedJournal):
            raise
        run = f" run {run_id!r}" if run_id else ""
        raise DamagedJournal(
            f"session {session_id!r}{run}: a trajectory record in the journal is damaged ({type(exc).__name__}: {exc})"
        ) from exc


def atif_from_journal(
    session_id: str,
    run_id: str | None = None,
    *,
    store: RunJournalStore | None = None,
    session_dir: PathLike | None = None,
    agent_name: str = "agent",
    agent_version: str = "0",
    model_name: str | None = None,
    tool_definitions: list[dict[str, Any]] | None = None,
    extra: Any = None,
) -> dict[str, Any]:
    """The ATIF trajectory of one run (a turn), or with ``run_id=None`` of every run of the session.

    A run still in progress exports what it has, with ``extra.incomplete: true``; so does a run whose
    writer dropped rows under load, or whose rows a Redis store refused at the run's size cap, with
    ``extra.dropped_rows`` (its end row's count plus the store's): steps may be missing.
    """
    records = journal_records(session_id, run_id, store=store, session_dir=session_dir)
    if not records:
        raise LookupError(f"no trajectory recorded for session {session_id!r}" + (f" run {run_id!r}" if run_id else ""))
    trajectory = _built(
        lambda: (
            TrajectoryBuilder()
            .add_all(records)
            .trajectory(
                session_id,
                agent_name=agent_name,
                agent_version=agent_version,
                model_name=model_name,
                tool_definitions=tool_definitions,
                extra=extra,
            )
        ),
        session_id,
        run_id,
    )
    # Records of the right types can still say what no trajectory may (a step's text an object, a
    # negative token count): such a journal was not written by us, and its trajectory would be false.
    errors = validate_atif(trajectory)
    if errors:
        run = f" run {run_id!r}" if run_id else ""
        shown = "; ".join(errors[:3]) + (f"; and {len(errors) - 3} more" if len(errors) > 3 else "")
        raise DamagedJournal(f"session {session_id!r}{run}: its trajectory records make no valid ATIF: {shown}")
    return trajectory


def _line(
    record: dict[str, Any], start: bool, category: str, root: str | None, data: Any, profile: Any, meta: Any
) -> dict[str, Any]:
    return {
        "atof_version": ATOF_VERSION,
        "kind": "scope",
        "scope_category": "start" if start else "end",
        "uuid": record["id"],
        "parent_uuid": record.get("parent"),
        "propagation_root_uuid": root,
        "timestamp": rfc3339(record["start" if start else "end"])
        if isinstance(record.get("start" if start else "end"), int)
        else None,
        "name": record.get("name"),
        "category": category,
        "category_profile": profile,
        "data": data,
        "data_schema": None,
        "metadata": meta,
        "attributes": [],
    }


def atof_from_journal(
    session_id: str,
    run_id: str | None = None,
    *,
    store: RunJournalStore | None = None,
    session_dir: PathLike | None = None,
) -> list[dict[str, Any]]:
    """The ATOF events (one dict a line) of the run's scopes, or of every run of the session, in event order."""
    _check(session_id, run_id)
    # Requests are deltas against earlier ones, possibly of earlier runs: those are read too.
    everything = journal_records(session_id, None, store=store, session_dir=session_dir)
    wanted = everything if run_id is None else journal_records(session_id, run_id, store=store, session_dir=session_dir)
    if not wanted:
        raise LookupError(f"no trajectory recorded for session {session_id!r}" + (f" run {run_id!r}" if run_id else ""))
    return _built(lambda: _atof_lines(everything, wanted), session_id, run_id)


def _atof_lines(everything: list[dict[str, Any]], wanted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    requests: dict[str, dict[str, Any]] = {}
    for record in everything:
        if record.get("k") == ATTEMPT and isinstance(record.get("req"), dict):
            rebuilt = rebuild_request(record["req"], requests)
            if rebuilt is not None:
                requests[record["id"]] = rebuilt
    turns = {r["id"]: r for r in wanted if r.get("k") == TURN}
    tools = {r["id"]: r for r in wanted if r.get("k") == TOOL}
    lines: list[tuple[int, dict[str, Any]]] = []
    parents = {r["id"]: r.get("parent") for r in everything if "parent" in r}

    def root_of(record: dict[str, Any]) -> str | None:
        """The top of the record's tree: the conversation scope its turn was opened in."""
        uuid = record["id"]
        seen = 0
        while parents.get(uuid) is not None and seen < 64:
            uuid, seen = parents[uuid], seen + 1
        return uuid

    for record in wanted:
        kind = record.get("k")
        if kind == TURN:
            meta = {"relay.kind": "turn", "turn_id": record.get("run_id"), "task_id": record.get("task_id"),
                    "session_id": record.get("session_id")}  # fmt: skip
            lines.append(
                (record["os"], _line(record, True, ScopeType.FUNCTION.value, root_of(record), None, None, meta))
            )
        elif kind == TURN_END:
            turn = turns.get(record["id"], {})
            merged = {**turn, **record}
            meta = {"relay.kind": "turn", "turn_id": turn.get("run_id"), "task_id": turn.get("task_id"),
                    "session_id": turn.get("session_id")}  # fmt: skip
            _outcome(meta, record)
            data = {"outcome": record["outcome"]} if record.get("outcome") else None
            line = _line(merged, False, ScopeType.FUNCTION.value, root_of(record), data, None, meta)
            lines.append((record.get("oe", 0), line))
        elif kind == TOOL:
            profile = {"tool_call_id": record["tool_call_id"]} if record.get("tool_call_id") else None
            meta = {"relay.kind": "tool"}
            line = _line(record, True, ScopeType.TOOL.value, root_of(record), record.get("args"), profile, meta)
            lines.append((record["os"], line))
        elif kind == TOOL_END:
            started = tools.get(record["id"], {})
            merged = {**started, **record}
            profile = {"tool_call_id": started["tool_call_id"]} if started.get("tool_call_id") else None
            meta = {"relay.kind": "tool"}
            _outcome(meta, record)
            line = _line(merged, False, ScopeType.TOOL.value, root_of(record), record.get("result"), profile, meta)
            lines.append((record.get("oe", 0), line))
        elif kind in (CALL, ATTEMPT) and not record.get("truncated"):
            root = root_of(record)
            category = ScopeType.LLM.value if kind == ATTEMPT else ScopeType.FUNCTION.value
            meta_start = {
                "relay.kind": "llm_attempt" if kind == ATTEMPT else "logical_llm_call",
                **(record.get("meta") or {}),
            }
            meta_end = dict(meta_start)
            _outcome(meta_end, record)
            if kind == ATTEMPT:
                request = requests.get(record["id"])
                headers = (record.get("req") or {}).get("headers") or {}
                start_data = {"headers": headers, "content": request} if request is not None else None
                model = record.get("model_name")
                start_profile = {"model_name": model}
                end_profile = {"model_name": model, "annotated_response": record.get("resp")}
                lines.append((record["os"], _line(record, True, category, root, start_data, start_profile, meta_start)))
                lines.append((record["oe"], _line(record, False, category, root, None, end_profile, meta_end)))
            else:
                lines.append((record["os"], _line(record, True, category, root, None, None, meta_start)))
                lines.append((record["oe"], _line(record, False, category, root, None, None, meta_end)))
    lines.sort(key=lambda item: item[0])
    return [line for _, line in lines]


def _outcome(meta: dict[str, Any], record: dict[str, Any]) -> None:
    outcome = record.get("outcome")
    if outcome:
        meta["relay.outcome"] = outcome
        meta["otel.status_code"] = "OK" if outcome == "success" else "ERROR"
    error = record.get("error")
    if isinstance(error, dict):
        meta["relay.error_type"] = error.get("type")
        meta["relay.error_message"] = error.get("message")
    if isinstance(record.get("cost"), dict):
        meta["relay.cost"] = record["cost"]
