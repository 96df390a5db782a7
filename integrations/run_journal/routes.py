"""HTTP: a run's live snapshot, and its rows as server-sent events with reconnect.

The routes use only the store interface (``store.RunJournalStore``), so any
store serves them. ``find_run_summary`` and ``read_run_events`` are module
attributes that ``_run_journal_live_snapshot`` looks up at call time, so a
host can still point that projection at other lookups.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
from typing import Any

from aiohttp import web

from . import paths
from .journal import read_run_events
from .page import COOKIE, add_page, cookie_value, is_public
from .states import summarize
from .store import FileStore, RunJournalStore

__all__ = [
    "create_app",
    "find_run_summary",
    "read_run_events",
]

STORE: web.AppKey[RunJournalStore] = web.AppKey("run_journal_store", RunJournalStore)
HEARTBEAT: web.AppKey[float] = web.AppKey("run_journal_heartbeat", float)


def find_run_summary(
    run_id: str,
    *,
    session_id: str | None = None,
    session_dir: str | os.PathLike[str] | None = None,
    store: RunJournalStore | None = None,
) -> dict[str, Any] | None:
    """The summary of ``run_id`` (``None`` if it has no rows); without ``session_id`` the store locates it."""
    if store is None:
        store = FileStore(session_dir)
    elif session_dir is not None:
        raise ValueError("give a store or a session_dir, not both")
    if session_id is None:
        session_id = store.locate(run_id)
        if session_id is None:
            return None
    summary = store.summary(session_id, run_id)
    return summary if summary and summary["event_count"] else None


def _project(session_id: str, run_id: str, window: dict[str, Any]) -> dict[str, Any]:
    """Summary fields, last assistant text and runtime model, all computed over the same rows."""
    snapshot = summarize(session_id, run_id, window["events"])
    snapshot["malformed_count"] = len(window["malformed"])
    return snapshot


def _live_snapshot(store: RunJournalStore, run_id: str, session_id: str | None) -> dict[str, Any] | None:
    summary = find_run_summary(run_id, session_id=session_id, store=store)
    if summary is None:
        return None
    session_id = summary["session_id"]
    return _project(session_id, run_id, store.read(session_id, run_id))


def _run_journal_live_snapshot(
    run_id: str, session_dir: str | os.PathLike[str] | None = None, session_id: str | None = None
) -> dict[str, Any] | None:
    """The live snapshot through this module's ``find_run_summary`` / ``read_run_events`` (replaceable)."""
    kwargs: dict[str, Any] = {"session_dir": session_dir} if session_dir is not None else {}
    lookup = {**kwargs, "session_id": session_id} if session_id else kwargs
    summary = find_run_summary(run_id, **lookup)
    if summary is None:
        return None
    session_id = summary["session_id"]
    return _project(session_id, run_id, read_run_events(session_id, run_id, **kwargs))


def _runtime_journal_snapshot_for_session_payload(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The part of a snapshot a session's JSON carries about its current run."""
    model = snapshot.get("runtime_model")
    return {
        "active_stream_id": None if snapshot.get("terminal") else snapshot.get("run_id"),
        "stream_id": snapshot.get("run_id"),
        "terminal_state": snapshot.get("terminal_state"),
        "last_event_id": snapshot.get("last_event_id"),
        "last_assistant_text": snapshot.get("last_assistant_text", ""),
        "runtime_model": dict(model) if isinstance(model, dict) else None,
    }


# --- aiohttp ---------------------------------------------------------------------------------------


def create_app(
    *,
    store: RunJournalStore | None = None,
    session_dir: str | os.PathLike[str] | None = None,
    poll_interval: float = 0.05,
    heartbeat: float = 15.0,
    bearer_token: str | None = None,
    page: bool = False,
) -> web.Application:
    """``GET /runs/{run_id}`` (snapshot) and ``GET /runs/{run_id}/events`` (SSE).

    Both take an optional ``?session_id=``; without it the store locates the run.
    ``store`` defaults to the file store at ``session_dir`` (polled every ``poll_interval`` seconds).
    With ``bearer_token`` every request must carry ``Authorization: Bearer <token>`` (else 401):
    rows hold what the assistant said, so anything beyond loopback should set one.
    With ``page`` it also serves the run page (``/``, ``/ui/...``, ``/api/runs``; see ``page.py``).
    """
    if bearer_token is not None and not bearer_token:
        raise ValueError("bearer_token must be a non-empty string (or None for no auth)")
    if store is None:
        store = FileStore(session_dir, poll=poll_interval)
    elif session_dir is not None:
        raise ValueError("give a store or a session_dir, not both")
    app = web.Application(middlewares=[_bearer_guard(bearer_token)] if bearer_token else [])
    app[STORE] = store
    app[HEARTBEAT] = heartbeat
    app.router.add_get("/runs/{run_id}", _snapshot_handler)
    app.router.add_get("/runs/{run_id}/events", _events_handler)
    if page:
        add_page(app, store=store, token=bearer_token)
    return app


def _bearer_guard(token: str) -> Any:
    # Only digests are kept, and digests are compared in constant time. The run page's cookie
    # (traded for the token at /ui/login: EventSource cannot send a header) counts as the token.
    expected = hashlib.sha256(token.encode()).digest()
    expected_cookie = hashlib.sha256(cookie_value(token).encode()).digest()

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        digest = hashlib.sha256(presented.strip().encode("utf-8", "surrogateescape")).digest()
        cookie = hashlib.sha256(request.cookies.get(COOKIE, "").encode("utf-8", "surrogateescape")).digest()
        allowed = (scheme.lower() == "bearer" and hmac.compare_digest(digest, expected)) or hmac.compare_digest(
            cookie, expected_cookie
        )
        if not allowed and not is_public(request.path):
            return web.json_response(
                {"error": "unauthorized"}, status=401, headers={"WWW-Authenticate": 'Bearer realm="run-journal"'}
            )
        response: web.StreamResponse = await handler(request)
        return response

    return guard


def _bad_request(message: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=json.dumps({"error": message}), content_type="application/json")


def _not_found(run_id: str) -> web.HTTPNotFound:
    return web.HTTPNotFound(text=json.dumps({"error": f"no run {run_id!r}"}), content_type="application/json")


def _request_ids(request: web.Request) -> tuple[str, str | None]:
    run_id = request.match_info["run_id"]
    session_id = request.query.get("session_id")
    if not paths.valid_id(run_id) or (session_id is not None and not paths.valid_id(session_id)):
        raise _bad_request("invalid session_id/run_id: ids are 1-200 of [A-Za-z0-9_.-], not '.' or '..'")
    return run_id, session_id


async def _snapshot_handler(request: web.Request) -> web.Response:
    run_id, session_id = _request_ids(request)
    result = await asyncio.to_thread(_live_snapshot, request.app[STORE], run_id, session_id)
    if result is None:
        raise _not_found(run_id)
    return web.json_response(result, dumps=lambda v: json.dumps(v, ensure_ascii=False))


def _cursor(request: web.Request, run_id: str) -> int:
    last_event_id = request.headers.get("Last-Event-ID")
    if last_event_id:
        owner, sep, seq = last_event_id.rpartition(":")
        if not sep or owner != run_id or not seq.isdigit():
            raise _bad_request(f"Last-Event-ID must be '{run_id}:<seq>', got {last_event_id!r}")
        return int(seq)
    after = request.query.get("after_seq")
    if after is None or after == "":
        return 0
    if not after.isdigit():
        raise _bad_request(f"after_seq must be a non-negative integer, got {after!r}")
    return int(after)


def _sse_message(row: dict[str, Any]) -> bytes:
    event = row.get("event")
    lines = [f"id: {row['run_id']}:{row['seq']}"]
    if isinstance(event, str) and event and "\n" not in event and "\r" not in event:
        lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(row, ensure_ascii=False, separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode()


async def _events_handler(request: web.Request) -> web.StreamResponse:
    run_id, session_id = _request_ids(request)
    cursor = _cursor(request, run_id)
    store = request.app[STORE]
    summary = await asyncio.to_thread(find_run_summary, run_id, session_id=session_id, store=store)
    if summary is None:
        raise _not_found(run_id)
    session_id = summary["session_id"]
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    rows_iter = store.follow(session_id, run_id, after_seq=cursor, idle=request.app[HEARTBEAT])
    try:
        async for rows in rows_iter:
            if rows:
                await response.write(b"".join(_sse_message(row) for row in rows))
            else:
                await response.write(b": keepalive\n\n")
    finally:
        aclose = getattr(rows_iter, "aclose", None)  # an async generator: end it here, not at garbage collection
        if aclose is not None:
            await aclose()
    await response.write_eof()
    return response
