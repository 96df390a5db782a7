"""Where a run's journal lives, and the id checks that guard every path built from ids."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

JOURNAL_DIRNAME = "_run_journal"
SUFFIX = ".jsonl"

_ID = re.compile(r"[A-Za-z0-9_.-]+")
# Long enough for any uuid-ish id, short enough that "<run_id>.jsonl" stays under NAME_MAX (255).
MAX_ID_LENGTH = 200


def valid_id(value: object) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_ID_LENGTH
        and value not in (".", "..")
        and _ID.fullmatch(value) is not None
    )


def check_ids(session_id: object, run_id: object) -> None:
    """Raise before any path is built: an id is a single path component or nothing."""
    if not (valid_id(session_id) and valid_id(run_id)):
        raise ValueError("invalid session_id/run_id")


def default_session_dir() -> Path:
    home = os.environ.get("RELAY_HOME")
    return Path(home) / "sessions" if home else Path.home() / ".relay-runtime" / "sessions"


def _root(session_dir: str | os.PathLike[str] | None) -> str:
    if session_dir is not None:
        return os.fspath(session_dir)
    # Looked up on the package at call time: embedders and tests replace
    # ``relay_runtime.integrations.run_journal._default_session_dir`` to move every journal at once.
    package = sys.modules.get("relay_runtime.integrations.run_journal")
    hook = getattr(package, "_default_session_dir", None) if package is not None else None
    return os.fspath(hook() if hook is not None else default_session_dir())


def resolve_session_dir(session_dir: str | os.PathLike[str] | None) -> Path:
    return Path(_root(session_dir))


def session_journal_dir(session_id: str, session_dir: str | os.PathLike[str] | None = None) -> Path:
    if not valid_id(session_id):
        raise ValueError("invalid session_id/run_id")
    return resolve_session_dir(session_dir) / JOURNAL_DIRNAME / session_id


_FILES: dict[tuple[str, str, str], str] = {}
_FILES_MAX = 4096


def run_file(session_id: str, run_id: str, session_dir: str | os.PathLike[str] | None = None) -> str:
    """``run_path`` as a string, remembered: the append path needs one per row.

    Only checked ids ever enter the cache, so a hit needs no second check.
    """
    if type(session_id) is not str or type(run_id) is not str:
        raise ValueError("invalid session_id/run_id")
    key = (_root(session_dir), session_id, run_id)
    path = _FILES.get(key)
    if path is None:
        check_ids(session_id, run_id)
        path = os.path.join(key[0], JOURNAL_DIRNAME, session_id, run_id + SUFFIX)
        if len(_FILES) >= _FILES_MAX:
            _FILES.clear()
        _FILES[key] = path
    return path


def run_path(session_id: str, run_id: str, session_dir: str | os.PathLike[str] | None = None) -> Path:
    return Path(run_file(session_id, run_id, session_dir))
