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
import logging
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from aiohttp import web

from . import paths
from .default_store import env_store
from .errors import JournalUnavailable
from .journal import read_run_events
from .limits import FailedLogins, QuietClientErrors, SlotsPerClient, StreamsPerClient, StreamTasks
from .origins import check_allowed_hosts, site_guard
from .page import COOKIE, FAILED_LOGINS, add_page, cookie_value, is_public, refuse_failed_login, too_many_failures
from .serving import DEFAULT_HEADER_TIMEOUT
from .states import SummaryFold
from .storage import COUNTS as STORAGE_COUNTS
from .store import FileStore, RunJournalStore, read_pages

__all__ = [
    "create_app",
    "find_run_summary",
    "read_run_events",
]

STORE: web.AppKey[RunJournalStore] = web.AppKey("run_journal_store", RunJournalStore)
HEARTBEAT: web.AppKey[float] = web.AppKey("run_journal_heartbeat", float)
WRITE_TIMEOUT: web.AppKey[float] = web.AppKey("run_journal_write_timeout", float)
# SSE clients open, completed, dropped for not reading, gone away: for operators and tests.
STATS: web.AppKey[Counter[str]] = web.AppKey("run_journal_stats")
# Snapshots folded at once (CPU and a page of rows each), however many clients ask.
SNAPSHOT_SLOTS: web.AppKey[asyncio.Semaphore] = web.AppKey("run_journal_snapshot_slots")
_SNAPSHOTS_AT_ONCE = 2
STREAMS: web.AppKey[StreamTasks] = web.AppKey("run_journal_streams", StreamTasks)
STREAMS_PER_CLIENT: web.AppKey[StreamsPerClient] = web.AppKey("run_journal_streams_per_client", StreamsPerClient)
# Snapshots one address is sent at once (more wait): each holds its answer (the run's last text) until taken.
SNAPSHOTS_PER_CLIENT: web.AppKey[SlotsPerClient] = web.AppKey("run_journal_snapshots_per_client", SlotsPerClient)
_SNAPSHOTS_PER_CLIENT = 4
log = logging.getLogger(__name__)


def find_run_summary(
    run_id: str,
    *,
    session_id: str | None = None,
    session_dir: str | os.PathLike[str] | None = None,
    store: RunJournalStore | None = None,
) -> dict[str, Any] | None:
    """The summary of ``run_id`` (``None`` if it has no rows); without ``session_id`` the store locates it."""
    if store is None:
        store = (env_store() if session_dir is None else None) or FileStore(session_dir)
    elif session_dir is not None:
        raise ValueError("give a store or a session_dir, not both")
    if session_id is None:
        session_id = store.locate(run_id)
        if session_id is None:
            return None
    summary = store.summary(session_id, run_id)
    return summary if summary and summary["event_count"] else None


def _fold(session_id: str, run_id: str, pages: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Summary fields, last assistant text and runtime model, all computed over the same rows, a page at a time."""
    fold = SummaryFold(session_id, run_id)
    malformed = 0
    for page in pages:
        for row in page["events"]:
            fold.feed(row)
        malformed += len(page["malformed"])
    snapshot = fold.result()
    snapshot["malformed_count"] = malformed
    return snapshot


def _project(session_id: str, run_id: str, window: dict[str, Any]) -> dict[str, Any]:
    return _fold(session_id, run_id, (window,))


def _live_snapshot(store: RunJournalStore, run_id: str, session_id: str | None) -> dict[str, Any] | None:
    """The snapshot folded while the store pages the run out: memory follows a page and the answer, not the run."""
    if session_id is None:
        session_id = store.locate(run_id)
        if session_id is None:
            return None
    pages = read_pages(store, session_id, run_id)
    try:
        snapshot = _fold(session_id, run_id, pages)
    finally:
        pages.close()
    return snapshot if snapshot["event_count"] else None


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
    write_timeout: float = 30.0,
    bearer_token: str | None = None,
    page: bool = False,
    max_streams_per_client: int = 64,
    allowed_hosts: Iterable[str] = (),
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
) -> web.Application:
    """``GET /runs/{run_id}`` (snapshot), ``GET /runs/{run_id}/events`` (SSE) and ``GET /stats`` (counters).

    The run routes take an optional ``?session_id=``; without it the store locates the run.
    ``store`` defaults to the file store at ``session_dir`` (polled every ``poll_interval`` seconds), or
    without ``session_dir`` to the store ``RELAY_JOURNAL_URL`` names when it is set.
    An SSE client that takes more than ``write_timeout`` seconds to accept a piece of the stream
    is dropped (and counted): a reader that stopped reading holds no more than one piece.
    With ``bearer_token`` every request must carry ``Authorization: Bearer <token>`` (else 401):
    rows hold what the assistant said, so anything beyond loopback should set one.
    With ``page`` it also serves the run page (``/``, ``/ui/...``, ``/api/runs``; see ``page.py``).
    One client address holds at most ``max_streams_per_client`` SSE streams at once (429 beyond), and
    after 10 wrong tokens in a minute it is refused (429) without its token being checked.
    Without ``bearer_token`` only requests naming a loopback name, the address they reached, or one of
    ``allowed_hosts`` in ``Host`` are served (403 else: a DNS-rebinding page cannot read runs); with or
    without it, SSE and state-changing requests sent from another site's page (``Origin``) get 403.
    A connection that has not sent a whole request head ``header_timeout`` seconds after it opened (or
    after its last response) is closed: trickled headers hold a socket for seconds (see ``serving.py``
    for the per-address connection cap, which is the listening site's).
    """
    if bearer_token is not None and not bearer_token:
        raise ValueError("bearer_token must be a non-empty string (or None for no auth)")
    for name, value in (("heartbeat", heartbeat), ("write_timeout", write_timeout), ("header_timeout", header_timeout)):
        # An infinite timeout (or True, a bool) is no timeout: a reader that stopped reading would hold on for ever.
        if isinstance(value, bool) or not (isinstance(value, int | float) and 0 < value < math.inf):
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    if store is None:
        store = (env_store() if session_dir is None else None) or FileStore(session_dir, poll=poll_interval)
    elif session_dir is not None:
        raise ValueError("give a store or a session_dir, not both")
    if type(max_streams_per_client) is not int or max_streams_per_client < 1:
        raise ValueError(f"max_streams_per_client must be a positive integer, got {max_streams_per_client!r}")
    hosts = check_allowed_hosts(allowed_hosts)
    guards = [site_guard(hosts, check_host=not bearer_token)]
    if bearer_token:
        guards.append(_bearer_guard(bearer_token))
    app = web.Application(
        middlewares=[*guards, _unavailable_guard],
        # Junk the HTTP parser refuses is the client's fault: one INFO line, not an ERROR traceback.
        # The keep-alive timer closes a connection still waiting for its request's head, never one whose
        # handler runs: it is the header-read timeout (aiohttp's default waits an hour).
        handler_args={
            "logger": QuietClientErrors(logging.getLogger("aiohttp.server"), {}),
            "keepalive_timeout": float(header_timeout),
        },
    )
    app[FAILED_LOGINS] = FailedLogins()
    app[STREAMS_PER_CLIENT] = StreamsPerClient(max_streams_per_client)
    app[SNAPSHOTS_PER_CLIENT] = SlotsPerClient(_SNAPSHOTS_PER_CLIENT)
    app[STORE] = store
    app[HEARTBEAT] = float(heartbeat)
    app[WRITE_TIMEOUT] = float(write_timeout)
    stats: Counter[str] = Counter()
    app[STATS] = stats
    app[SNAPSHOT_SLOTS] = asyncio.Semaphore(_SNAPSHOTS_AT_ONCE)
    app[STREAMS] = StreamTasks()
    app.on_shutdown.append(_end_streams)
    # No HEAD: it would compute a snapshot to throw away, or follow a live run with nobody reading.
    app.router.add_get("/runs/{run_id}", _snapshot_handler, allow_head=False)
    app.router.add_get("/runs/{run_id}/events", _events_handler, allow_head=False)
    app.router.add_get("/stats", _stats_handler)
    if page:
        add_page(app, store=store, token=bearer_token)
    return app


def _unauthorized() -> web.Response:
    return web.json_response(
        {"error": "unauthorized"}, status=401, headers={"WWW-Authenticate": 'Bearer realm="run-journal"'}
    )


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
            if "Authorization" not in request.headers:
                return _unauthorized()  # no token offered (a page finding out it must ask): not a guess
            wait = too_many_failures(request)
            if wait is not None:
                return wait
            await refuse_failed_login(request)
            return _unauthorized()
        response: web.StreamResponse = await handler(request)
        return response

    return guard


@web.middleware
async def _unavailable_guard(request: web.Request, handler: Any) -> web.StreamResponse:
    """The store unreachable (Redis down or restarting): a 503 the client may retry, never a 500."""
    try:
        response: web.StreamResponse = await handler(request)
    except JournalUnavailable as exc:
        log.warning("run journal: %s %s: %s", request.method, request.path, exc)
        return web.json_response(
            {"error": "run journal store unavailable, retry shortly"}, status=503, headers={"Retry-After": "1"}
        )
    return response


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


def _too_many(request: web.Request, limit: StreamsPerClient | SlotsPerClient, what: str) -> web.HTTPTooManyRequests:
    request.app[STATS][f"{what}_refused_per_client"] += 1
    return web.HTTPTooManyRequests(
        text=json.dumps({"error": f"at most {limit.limit} {what} responses at once per client"}),
        content_type="application/json",
        headers={"Retry-After": "5"},
    )


async def _snapshot_handler(request: web.Request) -> web.StreamResponse:
    run_id, session_id = _request_ids(request)
    # A client that stops reading holds its answer until the write timeout: a few per address, and
    # not the folding slots, so it holds up nobody else.
    per_client = request.app[SNAPSHOTS_PER_CLIENT]
    async with per_client.slot(request.remote, request.app[WRITE_TIMEOUT]) as had:
        if not had:
            raise _too_many(request, per_client, "snapshot")
        return await _snapshot(request, run_id, session_id)


async def _snapshot(request: web.Request, run_id: str, session_id: str | None) -> web.StreamResponse:
    async with request.app[SNAPSHOT_SLOTS]:
        result = await asyncio.to_thread(_live_snapshot, request.app[STORE], run_id, session_id)
    if result is None:
        raise _not_found(run_id)
    response = web.StreamResponse(headers={"Content-Type": "application/json; charset=utf-8"})
    pieces = _json_pieces(result)
    del result
    try:
        await response.prepare(request)
        for piece in pieces:
            await _send(response, piece, request.app[WRITE_TIMEOUT])
        await _send(response, None, request.app[WRITE_TIMEOUT])
    except (_SlowClient, ConnectionError):
        log.debug("run journal: a snapshot of run %s was not taken in time or its client went away", run_id)
        if request.transport is not None:
            request.transport.abort()
    return response


async def _stats_handler(request: web.Request) -> web.Response:
    stats = request.app[STATS]
    body = {key: stats[key] for key in stats}
    body["rows_truncated"] = STORAGE_COUNTS["journal.truncated"]
    return web.json_response(body)


# ASCII digits only, and few enough to be a seq: ``isdigit()`` also accepts "²", which int() refuses,
# and int() refuses thousands of digits.
_SEQ = re.compile(r"[0-9]{1,18}")


def _seq(text: str) -> int | None:
    text = text.strip()
    return int(text) if _SEQ.fullmatch(text) else None


def _cursor(request: web.Request, run_id: str, last_seq: int) -> int:
    """The seq to replay after, as browsers' EventSource needs it: never an error.

    ``?after_seq=`` wins over ``Last-Event-ID`` whenever it is given (even when it does not parse).
    A cursor that does not parse, names another run, or lies past the run's last row replays the
    whole run: an error would stop EventSource for good, and replaying too much is safer than
    skipping rows.
    """
    after = request.query.get("after_seq")
    if after:
        seq = _seq(after)
    else:
        owner, sep, tail = request.headers.get("Last-Event-ID", "").strip().rpartition(":")
        seq = _seq(tail) if sep and owner == run_id else None
    return seq if seq is not None and seq <= last_seq else 0


def _dumps(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate read back from a row: escape it rather than fail
        text = json.dumps(value, separators=(",", ":"))
    return text


def _json_pieces(snapshot: dict[str, Any]) -> Iterator[bytes]:
    """The snapshot as JSON in pieces: its last assistant text (as long as the run's text) is never
    encoded whole, so answering holds the text once, not three times."""
    text = snapshot.pop("last_assistant_text", "")
    head = _dumps(snapshot)
    yield (head[:-1] + ',"last_assistant_text":"').encode()
    for start in range(0, len(text), _PIECE):
        yield _dumps(text[start : start + _PIECE])[1:-1].encode()
    yield b'"}'


def _sse_message(row: dict[str, Any], run_id: str) -> bytes:
    # The id names the run asked for (a checked id), never the row's own field: a row written by
    # someone else could carry a line break there and forge messages.
    event = row.get("event")
    lines = [f"id: {run_id}:{row['seq']}"]
    if isinstance(event, str) and event and "\n" not in event and "\r" not in event:
        lines.append(f"event: {event}")
    head = ("\n".join(lines) + "\ndata: ").encode("utf-8", "backslashreplace")
    # The JSON the row was stored as is sent as it is, unless it holds a line break (JSON whitespace, but
    # an SSE one): a file row is one line, but another writer may have stored a Redis entry indented.
    raw = getattr(row, "raw", None)
    if isinstance(raw, bytes) and b"\n" not in raw and b"\r" not in raw:
        return b"".join((head, raw, b"\n\n"))
    return head + _dumps(row).encode() + b"\n\n"


_PIECE = 64 * 1024  # what one write hands the transport: a stalled reader holds about this much


def _pieces(rows: list[dict[str, Any]], run_id: str) -> Any:
    """The rows' SSE messages in pieces of about ``_PIECE`` bytes (one large row is cut up too)."""
    batch: list[bytes] = []
    size = 0
    for row in rows:
        message = _sse_message(row, run_id)
        if len(message) >= _PIECE:
            if batch:
                yield b"".join(batch)
                batch, size = [], 0
            view = memoryview(message)
            for start in range(0, len(view), _PIECE):
                yield view[start : start + _PIECE]
            continue
        batch.append(message)
        size += len(message)
        if size >= _PIECE:
            yield b"".join(batch)
            batch, size = [], 0
    if batch:
        yield b"".join(batch)


class _SlowClient(Exception):
    pass


async def _send(response: web.StreamResponse, data: Any, timeout: float) -> None:
    """Write ``data`` (``None``: end the response); ``_SlowClient`` if the client takes over ``timeout`` seconds."""
    try:
        await asyncio.wait_for(response.write(data) if data is not None else response.write_eof(), timeout)
    except TimeoutError:
        raise _SlowClient from None


async def _end_streams(app: web.Application) -> None:
    app[STREAMS].end_all()


async def _events_handler(request: web.Request) -> web.StreamResponse:
    # Registered for the stop's cancellation from its first await: a handler still looking its run up
    # when the server begins to stop would otherwise open a live stream that nothing ends, and the
    # runner's graceful stop would wait on it.
    task = asyncio.current_task()
    streams = request.app[STREAMS]
    if not streams.enter(task):
        return web.json_response({"error": "the server is stopping"}, status=503, headers={"Connection": "close"})
    try:
        run_id, session_id = _request_ids(request)
        # Taken before the run is looked up (which reads it): a client at its cap costs no read.
        per_client = request.app[STREAMS_PER_CLIENT]
        if not per_client.take(request.remote):
            raise _too_many(request, per_client, "sse")
        try:
            store = request.app[STORE]
            summary = await asyncio.to_thread(find_run_summary, run_id, session_id=session_id, store=store)
            if summary is None:
                raise _not_found(run_id)
            cursor = _cursor(request, run_id, summary["last_seq"])
            return await _stream(request, store, summary["session_id"], run_id, cursor)
        finally:
            per_client.release(request.remote)
    finally:
        streams.leave(task)


async def _stream(
    request: web.Request, store: RunJournalStore, session_id: str, run_id: str, cursor: int
) -> web.StreamResponse:
    stats, timeout = request.app[STATS], request.app[WRITE_TIMEOUT]
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    rows_iter = store.follow(session_id, run_id, after_seq=cursor, idle=request.app[HEARTBEAT])
    stats["sse_open"] += 1
    try:
        await response.prepare(request)
        async for rows in rows_iter:
            if not rows:
                await _send(response, b": keepalive\n\n", timeout)
            for piece in _pieces(rows, run_id):
                await _send(response, piece, timeout)
        await _send(response, None, timeout)
        stats["sse_completed"] += 1
    except JournalUnavailable as exc:
        # Headers are sent: end the stream; the browser reconnects after the last id it got.
        stats["sse_store_unavailable"] += 1
        log.warning("run journal: SSE stream of run %s ended, store unavailable: %s", run_id, exc)
    except _SlowClient:
        stats["sse_dropped_slow"] += 1
        log.info("run journal: dropped an SSE client of run %s that stopped reading (%ss)", run_id, timeout)
        if request.transport is not None:
            request.transport.abort()  # what it was not reading is released with the connection
    except ConnectionError:
        stats["sse_disconnected"] += 1
        log.debug("run journal: SSE client of run %s went away", run_id)
    except asyncio.CancelledError:
        # The server cancels a handler whose connection was lost while it waited, or when it shuts down.
        gone = request.transport is None or request.transport.is_closing()
        stats["sse_disconnected" if gone else "sse_cancelled"] += 1
        log.debug("run journal: SSE stream of run %s cancelled: %s", run_id, "client went away" if gone else "stopping")
        raise
    finally:
        stats["sse_open"] -= 1
        aclose = getattr(rows_iter, "aclose", None)  # an async generator: end it here, not at garbage collection
        if aclose is not None:
            await aclose()
    return response
