"""Listing sessions and runs, and finding a run's session through an index instead of a scan.

The index is ``<session_dir>/_run_journal/@runs/<run_id>/<session_id>``: one
empty file per (run, session), made when the run's journal file is made.
``@`` is not an id character, so the index never looks like a session.
Journals written before the index existed are indexed by one scan, the first
time a run is looked up in that directory; ``@runs/.complete`` records that
the scan happened.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from . import paths

INDEX_DIRNAME = "@runs"
_COMPLETE = ".complete"
_scan_lock = threading.Lock()


def journal_root(session_dir: str | os.PathLike[str] | None) -> Path:
    return paths.resolve_session_dir(session_dir) / paths.JOURNAL_DIRNAME


def index_entry(root: Path, session_id: str, run_id: str) -> Path:
    return root / INDEX_DIRNAME / run_id / session_id


def add_to_index(root: Path, session_id: str, run_id: str, *, new_root: bool = False) -> list[Path]:
    """Record that ``session_id`` holds ``run_id``; return the directories made (for the caller to fsync).

    ``new_root``: the caller just made ``root``, so no journal in it predates the index.
    """
    entry = index_entry(root, session_id, run_id)
    made = []
    for d in (root / INDEX_DIRNAME, entry.parent):
        try:
            d.mkdir(mode=0o700)
            made.append(d)
        except FileExistsError:
            pass
    if new_root:
        os.close(os.open(root / INDEX_DIRNAME / _COMPLETE, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    os.close(os.open(entry, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    return made


def _ensure_index(root: Path) -> None:
    """Index the journals written before the index existed (once per directory)."""
    complete = root / INDEX_DIRNAME / _COMPLETE
    if complete.exists():
        return
    with _scan_lock:
        if complete.exists():
            return
        try:
            sessions = [e for e in os.scandir(root) if paths.valid_id(e.name) and e.is_dir()]
        except FileNotFoundError:
            return
        for session in sessions:
            for entry in os.scandir(session.path):
                name = entry.name
                if name.endswith(paths.SUFFIX) and paths.valid_id(name[: -len(paths.SUFFIX)]):
                    add_to_index(root, session.name, name[: -len(paths.SUFFIX)])
        (root / INDEX_DIRNAME).mkdir(mode=0o700, exist_ok=True)
        complete.touch(mode=0o600)


def locate(run_id: str, session_dir: str | os.PathLike[str] | None) -> str | None:
    """The session holding ``run_id``; the most recently written one if several do."""
    paths.check_ids("s", run_id)
    root = journal_root(session_dir)
    _ensure_index(root)
    best: tuple[int, str] | None = None
    try:
        candidates = os.listdir(root / INDEX_DIRNAME / run_id)
    except (FileNotFoundError, NotADirectoryError):
        return None
    for session_id in candidates:
        if not paths.valid_id(session_id):
            continue
        try:
            mtime = os.stat(root / session_id / f"{run_id}{paths.SUFFIX}").st_mtime_ns
        except (FileNotFoundError, NotADirectoryError):
            continue  # indexed, then deleted
        if best is None or mtime > best[0]:
            best = (mtime, session_id)
    return best[1] if best is not None else None


def list_sessions(session_dir: str | os.PathLike[str] | None) -> list[dict[str, Any]]:
    """``[{session_id, updated_at}]``, newest first; ``updated_at`` is when a run of the session was last
    written, to within ``storage.SESSION_TOUCH_SECONDS`` (as the Redis store's, which scores each write)."""
    out: list[dict[str, Any]] = []
    try:
        entries = list(os.scandir(journal_root(session_dir)))
    except FileNotFoundError:
        return []
    for entry in entries:
        if not paths.valid_id(entry.name):
            continue
        try:
            st = entry.stat()
        except FileNotFoundError:
            continue
        if entry.is_dir():
            out.append({"session_id": entry.name, "updated_at": st.st_mtime})
    out.sort(key=lambda item: (-float(item["updated_at"]), item["session_id"]))
    return out


def list_runs(session_id: str, session_dir: str | os.PathLike[str] | None) -> list[dict[str, Any]]:
    """``[{session_id, run_id, updated_at}]`` of one session, newest (last written) first."""
    directory = paths.session_journal_dir(session_id, session_dir)
    out: list[dict[str, Any]] = []
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    for entry in entries:
        name = entry.name
        run_id = name[: -len(paths.SUFFIX)]
        if not name.endswith(paths.SUFFIX) or not paths.valid_id(run_id):
            continue
        try:
            st = entry.stat()
        except FileNotFoundError:
            continue
        out.append({"session_id": session_id, "run_id": run_id, "updated_at": st.st_mtime})
    out.sort(key=lambda item: (-float(item["updated_at"]), item["run_id"]))
    return out
