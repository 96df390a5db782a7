"""HTTP: a run's live snapshot, and its rows as server-sent events with reconnect.

``find_run_summary`` and ``read_run_events`` are module attributes looked up at
call time, so a host (or a test) can point the routes at another store.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

from aiohttp import web

from . import paths
from .journal import latest_run_summary, read_run_events
from .page import COOKIE, cookie_value, is_public
from .reading import signature
from .states import ends_run, summarize

__all__ = [
    "create_app",
    "find_run_summary",
    "read_run_events",
]

SESSION_DIR: web.AppKey[Path | None] = web.AppKey("run_journal_session_dir", Path)
POLL_INTERVAL: web.AppKey[float] = web.AppKey("run_journal_poll_interval", float)
HEARTBEAT: web.AppKey[float] = web.AppKey("run_journal_heartbeat", float)


def find_run_summary(
    run_id: str, *, session_id: str | None = None, session_dir: str | os.PathLike[str] | None = None
) -> dict[str, Any] | None:
    """The summary of ``run_id``; without ``session_id`` the session is found from the journal's files.

    If several sessions hold a run of that id, the most recently written one wins.
    """
    if session_id is not None:
        summary = latest_run_summary(session_id, run_id, session_dir=session_dir)
        return summary if summary and summary["event_count"] else None
    paths.check_ids("s", run_id)
    root = paths.resolve_session_dir(session_dir) / paths.JOURNAL_DIRNAME
    best: tuple[int, str] | None = None
    try:
        sessions = list(os.scandir(root))
    except FileNotFoundError:
        return None
    for entry in sessions:
        if not paths.valid_id(entry.name):
            continue
        try:
            mtime = os.stat(Path(entry.path) / f"{run_id}{paths.SUFFIX}").st_mtime_ns
        except (FileNotFoundError, NotADirectoryError):
            continue
        if best is None or mtime > best[0]:
            best = (mtime, entry.name)
    if best is None:
        return None
    return latest_run_summary(best[1], run_id, session_dir=session_dir)


def _store_kwargs(session_dir: Path | None, **more: Any) -> dict[str, Any]:
    # Only pass what was configured: replacements of the two lookups may take ids alone.
    kwargs = {k: v for k, v in more.items() if v is not None}
    if session_dir is not None:
        kwargs["session_dir"] = session_dir
    return kwargs


def _run_journal_live_snapshot(
    run_id: str, session_dir: Path | None = None, session_id: str | None = None
) -> dict[str, Any] | None:
    """Summary fields, last assistant text and runtime model, all computed over the same rows."""
    summary = find_run_summary(run_id, **_store_kwargs(session_dir, session_id=session_id))
    if summary is None:
        return None
    session_id = summary["session_id"]
    window = read_run_events(session_id, run_id, **_store_kwargs(session_dir))
    snapshot = summarize(session_id, run_id, window["events"])
    snapshot["malformed_count"] = len(window["malformed"])
    return snapshot


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
    session_dir: str | os.PathLike[str] | None = None,
    poll_interval: float = 0.05,
    heartbeat: float = 15.0,
    bearer_token: str | None = None,
) -> web.Application:
    """``GET /runs/{run_id}`` (snapshot) and ``GET /runs/{run_id}/events`` (SSE).

    Both take an optional ``?session_id=``; without it the run's session is found on disk.
    With ``bearer_token`` every request must carry ``Authorization: Bearer <token>`` (else 401):
    rows hold what the assistant said, so anything beyond loopback should set one.
    """
    if bearer_token is not None and not bearer_token:
        raise ValueError("bearer_token must be a non-empty string (or None for no auth)")
    app = web.Application(middlewares=[_bearer_guard(bearer_token)] if bearer_token else [])
    app[SESSION_DIR] = Path(session_dir) if session_dir is not None else None
    app[POLL_INTERVAL] = poll_interval
    app[HEARTBEAT] = heartbeat
    app.router.add_get("/runs/{run_id}", _snapshot_handler)
    app.router.add_get("/runs/{run_id}/events", _events_handler)
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


async def _in_thread(fn: Any, *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


async def _snapshot_handler(request: web.Request) -> web.Response:
    run_id, session_id = _request_ids(request)
    session_dir = request.app[SESSION_DIR]

    result = await _in_thread(_run_journal_live_snapshot, run_id, session_dir, session_id)
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
    session_dir = request.app[SESSION_DIR]
    kwargs = _store_kwargs(session_dir)
    lookup = _store_kwargs(session_dir, session_id=session_id)
    summary = await _in_thread(lambda: find_run_summary(run_id, **lookup))
    if summary is None:
        raise _not_found(run_id)
    session_id = summary["session_id"]
    path = paths.run_path(session_id, run_id, session_dir)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    # A run that had already ended only has its replay left to send.
    finished = bool(summary["terminal"])
    poll = request.app[POLL_INTERVAL]
    heartbeat = request.app[HEARTBEAT]
    loop = asyncio.get_running_loop()
    last_sig: tuple[int, ...] | None = None
    quiet_since = loop.time()
    while True:
        try:
            sig: tuple[int, ...] | None = signature(os.stat(path))
        except FileNotFoundError:
            sig = None
        if sig != last_sig:
            last_sig = sig
            window = await _in_thread(lambda c=cursor: read_run_events(session_id, run_id, after_seq=c, **kwargs))
            rows = window["events"]
            if rows:
                await response.write(b"".join(_sse_message(row) for row in rows))
                cursor = rows[-1]["seq"]
                quiet_since = loop.time()
                if any(ends_run(row) for row in rows):
                    break
                continue
        if finished:
            break
        if loop.time() - quiet_since >= heartbeat:
            await response.write(b": keepalive\n\n")
            quiet_since = loop.time()
        await asyncio.sleep(poll)
    await response.write_eof()
    return response
