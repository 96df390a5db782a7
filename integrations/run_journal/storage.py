"""Appending rows: one file per run, gapless seq across threads, processes and restarts.

Every append takes an exclusive ``flock`` on the run's file, learns the last
seq (from memory when the file is exactly as this process left it, else from
the file's tail), and writes one line with ``O_APPEND``. The lock covers
read-last-seq + write, so concurrent writers never share or skip a seq.
"""

from __future__ import annotations

import fcntl
import json
import math
import mmap
import os
import re
import threading
import time
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any

from relay_runtime.redaction import redact_value

from . import paths
from .listing import add_to_index, index_entry
from .reading import last_row_seq
from .run_marks import open_mark, read_mark, write_mark
from .states import TERMINAL_STATES, terminal_state

VERSION = 1
FSYNC_ENV = "RELAY_JOURNAL_FSYNC"
FSYNC_TERMINAL = "terminal"  # terminal rows only (and the directory when the file is created)
FSYNC_EAGER = "eager"  # every row
_FSYNC_POLICIES = (FSYNC_TERMINAL, FSYNC_EAGER)
_MAX_OPEN = 64
MAX_ROW_ENV = "RELAY_JOURNAL_MAX_ROW_BYTES"
DEFAULT_MAX_ROW_BYTES = 8 * 1024 * 1024
MIN_MAX_ROW_BYTES = 16 * 1024
_SEED_SCAN_MAX = 256 * 1024 * 1024  # the longest line read to learn a run's last seq
MAX_EVENT_LENGTH = 256
_ROW_OVERHEAD = 1024  # everything in a row but its payload, with ids and event name at their longest
_PREVIEW_CHARS = 4096
# How often a run being written marks its session as written (the session directory's mtime, by which the
# run list finds the newest sessions): at most one system call a second per run, not one per row.
SESSION_TOUCH_SECONDS = 1.0
_KEPT_SCALAR_CHARS = 200

COUNTS: Counter[str] = Counter()  # process-wide: rows stored truncated
_counts_lock = threading.Lock()


def fsync_policy(override: str | None = None) -> str:
    policy = override if override is not None else os.environ.get(FSYNC_ENV) or FSYNC_TERMINAL
    if policy not in _FSYNC_POLICIES:
        raise ValueError(f"run journal fsync policy must be one of {list(_FSYNC_POLICIES)}, got {policy!r}")
    return policy


def row_cap(override: int | None = None) -> int:
    """The largest row (in bytes) the writer stores whole and the readers read: ``override``, else
    ``$RELAY_JOURNAL_MAX_ROW_BYTES``, else 8 MiB."""
    value: Any = override
    if value is None:
        raw = os.environ.get(MAX_ROW_ENV)
        if not raw:
            return DEFAULT_MAX_ROW_BYTES
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{MAX_ROW_ENV} must be a whole number of bytes, got {raw!r}") from None
    if type(value) is not int or value < MIN_MAX_ROW_BYTES:
        raise ValueError(f"max_row_bytes must be an integer of at least {MIN_MAX_ROW_BYTES}, got {value!r}")
    return value


def is_truncated(row: Any) -> bool:
    """Whether a row's payload was replaced by the truncation marker."""
    payload = row.get("payload") if isinstance(row, dict) else None
    return isinstance(payload, dict) and payload.get("truncated") is True and "original_bytes" in payload


def _truncated(payload: Any, encoded: bytes, cap: int) -> dict[str, Any]:
    """What is stored instead of a payload too large for one row: its small scalar fields, size and start."""
    marker: dict[str, Any] = {}
    if isinstance(payload, dict):
        for key, value in payload.items():
            if len(marker) >= 32:
                break
            if isinstance(key, str) and len(key) <= _KEPT_SCALAR_CHARS and (
                value is None
                or isinstance(value, bool | int | float)
                or (isinstance(value, str) and len(value) <= _KEPT_SCALAR_CHARS)
            ):
                marker[key] = value
    marker.update(
        truncated=True,
        original_bytes=len(encoded),
        max_row_bytes=cap,
        preview=encoded[:_PREVIEW_CHARS].decode("utf-8", "ignore"),
    )
    with _counts_lock:
        COUNTS["journal.truncated"] += 1
    return marker


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_EVENT_JSON: dict[str, str] = {}
_STATE_JSON = {state: _encode(state) for state in (None, *TERMINAL_STATES)}


_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def readable_json(value: Any, indent: int | None = None) -> str:
    """JSON for people (any value read back from a journal, NaN included), compact unless indented,
    surrogates escaped."""
    text = json.dumps(value, ensure_ascii=False, indent=indent, separators=None if indent else (",", ":"))
    return text if text.isascii() or not _SURROGATE.search(text) else _SURROGATE.sub(_escaped, text)


def encode_json(value: Any, what: str = "payload") -> str:
    """Compact JSON, UTF-8 text except for lone surrogates (a stream cut inside a pair), which have no UTF-8
    form: they are written as ``\\uXXXX`` escapes, so the line stays UTF-8 and reads back to the same string."""
    try:
        text = _encode(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"run journal {what} is not JSON-serializable: {exc}") from exc
    # Surrogates can only stand inside JSON strings, where an escape means the same character.
    return text if text.isascii() or not _SURROGATE.search(text) else _SURROGATE.sub(_escaped, text)


def _encode_time(value: Any) -> str:
    if type(value) is float and math.isfinite(value):
        return repr(value)  # what json would write, without its call overhead
    # Readers take a row whose created_at is not a number for damage: never write one.
    if type(value) is not int:
        raise ValueError(f"run journal created_at must be a finite number of seconds, got {value!r}")
    return str(value)


class _RunFile:
    """One open run file in this process; ``_lock`` orders this process's threads, flock the rest."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd = -1
        self._pid = -1
        self._ino = -1
        # What the file looked like right after our last append: if it still does, nobody else wrote.
        self._size = -1
        self._last_seq = 0
        self._mark: mmap.mmap | None = None  # the run's high-water mark (see run_marks)
        self._touched = -math.inf  # when this process last marked the run's session as written (monotonic)

    def append(self, run_id: str, tail: str, seq: int | None, sync: bool, cap: int = DEFAULT_MAX_ROW_BYTES) -> int:
        """Write ``tail`` (everything after the seq) as the run's next row; return its seq."""
        with self._lock:
            while True:
                fd = self._open()
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    st = os.fstat(fd)
                    # Removed or replaced under us (rename over it drops its last link too):
                    # locking the old inode would exclude nobody, so reopen by name.
                    if st.st_nlink:
                        return self._append_locked(fd, st, run_id, tail, seq, sync, cap)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                self._close()

    def close(self) -> None:
        with self._lock:
            self._close()

    def __del__(self) -> None:
        # Evicted from the cache while another thread still appended through it.
        if self._fd >= 0:
            os.close(self._fd)

    def _append_locked(
        self, fd: int, st: os.stat_result, run_id: str, tail: str, seq: int | None, sync: bool, cap: int
    ) -> int:
        if st.st_ino != self._ino or st.st_size != self._size:
            self._ino = st.st_ino
            scanned, torn = _scan_tail(fd, st.st_size, cap)
            # A file cut short or replaced no longer shows every seq handed out: the mark (and what this
            # process handed out itself) does, so seq never goes back and no cursor sees a seq twice.
            self._last_seq = max(scanned, self._last_seq, read_mark(self._mark))
        else:
            torn = False
        next_seq = self._last_seq + 1
        if seq is not None and seq != next_seq:
            raise ValueError(f"seq {seq} is not the run's next seq {next_seq}")
        # Ids are [A-Za-z0-9_.-]: they need no escaping inside a JSON string.
        line = f'{{"version":{VERSION},"event_id":"{run_id}:{next_seq}","seq":{next_seq}{tail}'
        data = b"\n" + line.encode() if torn else line.encode()
        _write_all(fd, data)
        # After the row: a writer killed mid-row leaves a torn line no reader serves, and its seq is handed
        # out again. A store into shared memory, no system call: it reaches the file even if this process is
        # killed. Not fsynced: the mark only has to outlast the file being cut or removed; after a power loss
        # the fsynced rows still hold the seq.
        write_mark(self._mark, next_seq)
        self._size = st.st_size + len(data)
        self._last_seq = next_seq
        if sync:
            os.fsync(fd)
        now = time.monotonic()
        if now - self._touched >= SESSION_TOUCH_SECONDS:
            self._touched = now
            _touch_session(os.path.dirname(self.path))
        return next_seq

    def _open(self) -> int:
        if self._fd >= 0:
            if self._pid == os.getpid():
                return self._fd
            # Inherited through fork: flock is held per open file description, so sharing
            # the parent's would let both processes take the "exclusive" lock at once.
            os.close(self._fd)
            self._fd = -1
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags)
        except FileNotFoundError:
            fd = self._create(flags)
        if self._mark is None:
            try:
                self._mark = open_mark(self.path)
            except BaseException:
                os.close(fd)
                raise
        self._fd, self._ino, self._size, self._pid = fd, -1, -1, os.getpid()
        return fd

    def _create(self, flags: int) -> int:
        file = Path(self.path)
        directory = file.parent
        made = _make_dirs(directory)
        # Indexed first: an entry without its file is skipped by lookups, a file without its entry is lost to them.
        root, session_id, run_id = directory.parent, directory.name, file.name[: -len(paths.SUFFIX)]
        made += add_to_index(root, session_id, run_id, new_root=root in made)
        try:
            fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another writer created it first
            return os.open(self.path, flags)
        # The new name (and any directory made for it) must survive a crash as
        # surely as the terminal row that will be fsynced into it.
        for d in {directory, index_entry(root, session_id, run_id).parent, *(m.parent for m in made)}:
            _fsync_dir(d)
        return fd

    def _close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
        if self._mark is not None:
            mark, self._mark = self._mark, None
            mark.close()


def _touch_session(directory: str) -> None:
    """The session's directory marked as written now: a file's creation alone moves its mtime, and the run list
    (``listing.list_sessions``, newest first, bounded) would lose a long run of an older session, live or not,
    behind sessions that started runs since. Best effort: a directory we may not touch costs only that."""
    try:
        os.utime(directory)
    except OSError:
        pass


def _scan_tail(fd: int, size: int, cap: int) -> tuple[int, bool]:
    """(last valid seq, whether the file ends in a torn line) read backwards from the end."""
    if size == 0:
        return 0, False
    torn = os.pread(fd, 1, size - 1) != b"\n"
    # Rows over this writer's cap are still read whole: another writer may have a larger cap, and
    # skipping its last row would hand out its seq again. Only lines no writer could make are skipped.
    with open(fd, "rb", buffering=0, closefd=False) as f:
        return last_row_seq(f, size, max(cap, _SEED_SCAN_MAX)), torn


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    try:
        while view:  # only a signal or a full disk cuts a regular-file write short
            view = view[os.write(fd, view) :]
    except OSError:
        if len(view) != 1:  # a full disk left the row whole but its newline: readers read it, so it stands
            raise


def _make_dirs(directory: Path) -> list[Path]:
    """Create ``directory`` and missing parents (0700); return the ones this call made."""
    missing = []
    d = directory
    while not d.exists():
        missing.append(d)
        d = d.parent
    made = []
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
            made.append(d)
        except FileExistsError:
            pass
    return made


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _OpenFiles:
    """The run files this process keeps open, least recently used closed first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: OrderedDict[str, _RunFile] = OrderedDict()

    def get(self, path: str) -> _RunFile:
        with self._lock:
            f = self._files.get(path)
            if f is None:
                f = self._files[path] = _RunFile(path)
                evicted = self._files.popitem(last=False)[1] if len(self._files) > _MAX_OPEN else None
            else:
                self._files.move_to_end(path)
                evicted = None
        if evicted is not None:
            evicted.close()
        return f

    def after_fork(self) -> None:
        # The child must not share the parent's open file descriptions: flock is
        # held per description, so sharing one would let both write the same seq.
        self._lock = threading.Lock()
        for f in self._files.values():
            fd, f._fd, f._mark = f._fd, -1, None  # the child maps the mark again when it next appends
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._files = OrderedDict()


OPEN_FILES = _OpenFiles()
os.register_at_fork(after_in_child=OPEN_FILES.after_fork)


def append_run_event(
    session_id: str,
    run_id: str,
    event: str,
    payload: Any = None,
    *,
    session_dir: str | os.PathLike[str] | None = None,
    seq: int | None = None,
    created_at: Any = None,
    fsync: str | None = None,
    max_row_bytes: int | None = None,
) -> dict[str, Any]:
    """Append one row and return it.

    ``seq`` makes the append conditional: it must be the run's next seq.
    ``fsync`` overrides the policy (``"terminal"`` or ``"eager"``; default from
    ``RELAY_JOURNAL_FSYNC``). A payload that would make the row longer than
    ``max_row_bytes`` (see :func:`row_cap`) is stored truncated, with a marker.
    """
    path = paths.run_file(session_id, run_id, session_dir)
    return append_to(
        OPEN_FILES.get(path), session_id, run_id, event, payload, seq, created_at, fsync_policy(fsync),
        row_cap(max_row_bytes),
    )


def run_file_for(session_id: str, run_id: str, session_dir: str | os.PathLike[str]) -> _RunFile:
    """The run file a long-lived writer may hold on to (it then skips the path lookup per row)."""
    return OPEN_FILES.get(paths.run_file(session_id, run_id, session_dir))


def append_to(
    run_file: _RunFile,
    session_id: str,
    run_id: str,
    event: str,
    payload: Any,
    seq: int | None,
    created_at: Any,
    policy: str,
    cap: int = DEFAULT_MAX_ROW_BYTES,
) -> dict[str, Any]:
    """Append to a run file whose ids were checked when its path was built."""
    if seq is not None and (type(seq) is not int or seq < 1):
        raise ValueError(f"seq must be a positive integer, got {seq!r}")
    row = EncodedRow(session_id, run_id, event, payload, created_at, cap)
    sync = row.state is not None or policy == FSYNC_EAGER
    return row.row(run_file.append(run_id, row.tail + "\n", seq, sync, cap))


class EncodedRow:
    """A row checked and encoded once, before any store assigns its seq (retries resend the same bytes).

    A payload that would make the row longer than ``cap`` is replaced by the truncation marker.
    """

    __slots__ = ("created_at", "event", "payload", "run_id", "session_id", "state", "tail")

    def __init__(
        self,
        session_id: str,
        run_id: str,
        event: str,
        payload: Any,
        created_at: Any,
        cap: int = DEFAULT_MAX_ROW_BYTES,
    ) -> None:
        if not isinstance(event, str) or not event:
            raise ValueError(f"run journal event must be a non-empty string, got {event!r}")
        if len(event) > MAX_EVENT_LENGTH:
            raise ValueError(f"run journal event names are at most {MAX_EVENT_LENGTH} characters, got {len(event)}")
        # Whatever a producer hands over (a tool's arguments, its result), credentials are never stored.
        payload = {} if payload is None else redact_value(payload)
        if created_at is None:
            created_at = time.time()
        state = terminal_state(event, payload)
        name = _EVENT_JSON.get(event)
        if name is None:
            name = encode_json(event, "event name")
            if len(_EVENT_JSON) < 256:  # event names are a small vocabulary; anything else is encoded each time
                _EVENT_JSON[event] = name
        body = encode_json(payload)
        # Characters are at most 4 bytes: only a long payload needs encoding to be measured.
        if len(body) * 4 > cap - _ROW_OVERHEAD and len(encoded := body.encode()) > cap - _ROW_OVERHEAD:
            payload = _truncated(payload, encoded, cap)
            body = encode_json(payload)
        self.session_id = session_id
        self.run_id = run_id
        self.event = event
        self.payload = payload
        self.created_at = created_at
        self.state = state
        # Everything after the seq: ids are [A-Za-z0-9_.-] and need no escaping inside a JSON string.
        self.tail = (
            f',"run_id":"{run_id}","session_id":"{session_id}","event":{name},"type":{name}'
            f',"created_at":{_encode_time(created_at)},"terminal":{"false" if state is None else "true"}'
            f',"terminal_state":{_STATE_JSON[state]},"payload":{body}}}'
        )

    def row(self, seq: int) -> dict[str, Any]:
        """The row as stored with ``seq``, without reading it back."""
        return {
            "version": VERSION,
            "event_id": f"{self.run_id}:{seq}",
            "seq": seq,
            "run_id": self.run_id,
            "session_id": self.session_id,
            "event": self.event,
            "type": self.event,
            "created_at": self.created_at,
            "terminal": self.state is not None,
            "terminal_state": self.state,
            "payload": self.payload,
        }


def shrunk(row: EncodedRow, cap: int) -> EncodedRow | None:
    """``row`` with its payload replaced by the truncation marker (its small fields, so the same terminal
    state), or ``None`` when it already is one: for a store that refused the row whole."""
    if is_truncated({"payload": row.payload}):
        return None
    marker = _truncated(row.payload, encode_json(row.payload).encode(), cap)
    return EncodedRow(row.session_id, row.run_id, row.event, marker, row.created_at, cap)
