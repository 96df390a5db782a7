"""The run page: a list of runs and a live view of one run, served beside the journal's HTTP routes.

The page is plain HTML, CSS and JavaScript shipped in ``ui/``; it reads the same snapshot and SSE
routes as any other client. With a token, the page trades it once (``POST /ui/login``) for an
HttpOnly, SameSite=Strict cookie, so no script keeps the token (and a browser's ``EventSource``,
which cannot send an ``Authorization`` header, can use the cookie); the token never goes into a URL.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from importlib import resources
from typing import Any

from aiohttp import web

from . import paths
from .limits import FailedLogins
from .storage import readable_json
from .store import RunJournalStore

COOKIE = "relay_journal_auth"
LOGIN_PATH = "/ui/login"
# Pages and their assets hold no journal data, so they are served without a token: the page has
# to load before it can ask for one.
PUBLIC_PREFIXES = ("/ui/",)
PUBLIC_PATHS = frozenset(("/", "/favicon.ico"))
MAX_LOGIN_BODY = 4096
LOGIN_BODY_SECONDS = 10.0  # a login body trickled in slower than this is refused (408)
MAX_LISTED_RUNS = 200  # the newest ones: the list is for a person, not an export
_ASSETS = {
    "app.js": "text/javascript",
    "style.css": "text/css",
}
_PAGES = ("index.html", "run.html")


def cookie_value(token: str) -> str:
    """What the cookie holds: derived from the token, so it survives a server restart with the same token."""
    return hmac.new(token.encode(), b"relay-runtime journal page", hashlib.sha256).hexdigest()


def is_public(path: str) -> bool:
    """Paths served without a token: the pages, their assets, and the login that checks the token itself."""
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


def _load(name: str) -> bytes:
    return resources.files(__package__).joinpath("ui", name).read_bytes()


class _Files:
    """The page's files, read once from the package."""

    def __init__(self) -> None:
        self.pages = {name: _load(name) for name in _PAGES}
        self.assets = {name: (_load(name), kind) for name, kind in _ASSETS.items()}


_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    # Only our own script and style; nothing inline, nothing from elsewhere.
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
    ),
    "Referrer-Policy": "no-referrer",
}

FILES: web.AppKey[_Files] = web.AppKey("run_journal_page_files", _Files)
TOKEN: web.AppKey[str | None] = web.AppKey("run_journal_page_token", str)
STORE: web.AppKey[RunJournalStore] = web.AppKey("run_journal_page_store", RunJournalStore)
FAILED_LOGINS: web.AppKey[FailedLogins] = web.AppKey("run_journal_failed_logins", FailedLogins)


def add_page(app: web.Application, *, store: RunJournalStore, token: str | None) -> None:
    """Serve the page on ``app`` (the journal's routes app); ``token`` is the one its guard checks."""
    app[FILES] = _Files()
    app[TOKEN] = token
    app[STORE] = store
    app.router.add_get("/", _index)
    app.router.add_get("/ui/sessions/{session_id}/runs/{run_id}", _run_page)
    app.router.add_get("/ui/static/{name}", _asset)
    app.router.add_post(LOGIN_PATH, _login)
    app.router.add_get("/api/runs", _runs)


def list_runs(store: RunJournalStore, limit: int = MAX_LISTED_RUNS) -> list[dict[str, Any]]:
    """The newest runs of every session, each with its state, start, duration and cost (when priced).

    A session's ``updated_at`` is when a run of it was last written, so the newest ``limit`` runs are all in
    the newest ``limit`` sessions: thousands of sessions cost one listing, not thousands.
    """
    sessions = store.list_sessions()[:limit]
    runs = [run for listed in sessions for run in store.list_runs(listed["session_id"])]
    runs.sort(key=lambda run: run["updated_at"], reverse=True)
    listed = []
    for run in runs[:limit]:
        summary = store.summary(run["session_id"], run["run_id"])
        if not summary or not summary["event_count"]:
            continue
        started, ended = summary.get("started_at"), summary.get("ended_at")
        listed.append(
            {
                "session_id": run["session_id"],
                "run_id": run["run_id"],
                "updated_at": run["updated_at"],
                "terminal_state": summary["terminal_state"],
                "started_at": started,
                "duration_s": ended - started if started is not None and ended is not None else None,
                "cost": summary.get("cost"),
            }
        )
    return listed


async def _runs(request: web.Request) -> web.Response:
    runs = await asyncio.to_thread(list_runs, request.app[STORE])
    # Surrogates escaped: half a pair read back from a row has no UTF-8 form, and the answer would be a 500.
    return web.json_response({"runs": runs}, dumps=readable_json)


def _html(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="text/html", charset="utf-8", headers=_HEADERS)


async def _index(request: web.Request) -> web.Response:
    return _html(request.app[FILES].pages["index.html"])


async def _run_page(request: web.Request) -> web.Response:
    # The page carries no ids (its script reads them from the address), but a page for ids that
    # no route would accept is a clear 400 now rather than a page that fails later.
    if not (paths.valid_id(request.match_info["session_id"]) and paths.valid_id(request.match_info["run_id"])):
        return _refused(400, "invalid session_id/run_id: ids are 1-200 of [A-Za-z0-9_.-], not '.' or '..'")
    return _html(request.app[FILES].pages["run.html"])


async def _asset(request: web.Request) -> web.Response:
    found = request.app[FILES].assets.get(request.match_info["name"])
    if found is None:
        raise web.HTTPNotFound(text="no such file")
    body, kind = found
    return web.Response(body=body, content_type=kind, charset="utf-8", headers=_HEADERS)


def _refused(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def too_many_failures(request: web.Request) -> web.Response | None:
    """A 429 for an address that has guessed wrong too often lately (its token is not even checked)."""
    wait = request.app[FAILED_LOGINS].retry_after(request.remote)
    if not wait:
        return None
    response = _refused(429, "too many wrong tokens from this address: try again later")
    response.headers["Retry-After"] = str(int(wait) + 1)
    return response


async def refuse_failed_login(request: web.Request) -> None:
    """Count a wrong token against its address, and answer it a little late."""
    failures = request.app[FAILED_LOGINS]
    failures.failed(request.remote)
    await asyncio.sleep(failures.delay)


async def _login_body(request: web.Request) -> bytes | web.Response:
    if request.content_length is not None and request.content_length > MAX_LOGIN_BODY:
        return _refused(413, f"a login body is at most {MAX_LOGIN_BODY} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(LOGIN_BODY_SECONDS):
            # read() hands over what has arrived so far: read on to the end, not just the first packet.
            while chunk := await request.content.read(MAX_LOGIN_BODY + 1 - size):
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_LOGIN_BODY:
                    return _refused(413, f"a login body is at most {MAX_LOGIN_BODY} bytes")
    except TimeoutError:
        return _refused(408, f"the login body did not arrive within {LOGIN_BODY_SECONDS:g}s")
    except ConnectionError:  # the client went away mid-body: nobody is left to answer
        return _refused(400, "the login body was cut short")
    return b"".join(chunks)


async def _login(request: web.Request) -> web.Response:
    token = request.app[TOKEN]
    if token is None:
        return web.Response(status=204)  # nothing to trade: the journal is open
    refused = too_many_failures(request)
    if refused is not None:
        return refused
    raw = await _login_body(request)
    if isinstance(raw, web.Response):
        return raw
    try:
        body: Any = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return _refused(400, 'the body must be JSON: {"token": "..."}')
    presented = body.get("token") if isinstance(body, dict) else None
    if not isinstance(presented, str):
        return _refused(400, 'the body must be JSON: {"token": "..."}')
    # surrogatepass: a lone surrogate from JSON is just another wrong token, not an error.
    offered = hashlib.sha256(presented.encode("utf-8", "surrogatepass")).digest()
    if not hmac.compare_digest(offered, hashlib.sha256(token.encode()).digest()):
        await refuse_failed_login(request)
        return _refused(401, "wrong token")
    response = web.Response(status=204)
    response.set_cookie(
        COOKIE, cookie_value(token), httponly=True, samesite="Strict", path="/", secure=request.secure or None
    )
    return response
