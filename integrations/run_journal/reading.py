"""Reading a journal file: whole, after a cursor, or a page at a time, never failing on a bad line.

Lines are split on ``\\n`` bytes only: rows are written with ``ensure_ascii=False``
and ``str.splitlines`` would also break on U+2028 and friends inside strings.

Memory is bounded by the row cap, not the file: a line longer than
``max_line`` (a row torn by a crash, or garbage) is skipped while it is read,
reported as malformed, and never held.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from .states import TERMINAL_STATES

_BLOCK = 64 * 1024
_BACK_BLOCK = 8192
_PREVIEW = 200
# The writer puts the seq first, so a line's seq is read from its first bytes, whatever its size.
_SEQ_PREFIX = re.compile(
    rb'\{\s*"version"\s*:\s*\d+\s*,\s*"event_id"\s*:\s*"[^"\\]*"\s*,\s*"seq"\s*:\s*(\d{1,18})\s*[,}]'
)
_PREFIX_BYTES = 512

# offset, the line (None: longer than the cap), terminated by a newline, offset just past it
Line = tuple[int, bytes | None, bool, int]


class RawRow(dict[str, Any]):
    """A row that keeps the exact line it was read from, so a server can send it on without encoding it again."""

    __slots__ = ("raw",)

    def __init__(self, row: dict[str, Any], raw: bytes) -> None:
        super().__init__(row)
        self.raw = raw


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Strict JSON: Python would read NaN and Infinity, which no writer stores and no browser parses.
_decode = json.JSONDecoder(parse_constant=_not_json).decode


def parse_line(line: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """``(row, None)`` for a journal row, ``(None, reason)`` for anything else."""
    try:
        value = _decode(line.decode())
    except (ValueError, RecursionError):
        return None, "invalid JSON"
    if not isinstance(value, dict):
        return None, "not a JSON object"
    seq = value.get("seq")
    if type(seq) is not int or seq < 1:
        return None, "row without a positive integer seq"
    wrong = shape_error(value, seq)
    if wrong is not None:
        return None, f"not a journal row: {wrong}"
    return value, None


_STATES = frozenset(TERMINAL_STATES)


def shape_error(row: dict[str, Any], seq: int) -> str | None:
    """What makes an object with a seq something no writer stores as a row (None: it is a row).

    A line that only looks like a row (a hand edit, a foreign writer, a version this reader does not
    know) must not take a seq, reach a browser or count in a summary: it is damage, reported as such.
    The payload may be any JSON value: readers ignore what they cannot use in it (RUN_JOURNAL.md).
    """
    run_id = row.get("run_id")
    event = row.get("event")
    created_at = row.get("created_at")
    terminal = row.get("terminal")
    state = row.get("terminal_state")
    if type(row.get("version")) is not int or row["version"] != 1:  # JSON's true is a Python 1
        return "version is not 1"
    if type(run_id) is not str:
        return "run_id is not a string"
    if type(row.get("session_id")) is not str:
        return "session_id is not a string"
    if row.get("event_id") != f"{run_id}:{seq}":
        return "event_id is not <run_id>:<seq>"
    if type(event) is not str or not event:
        return "event is not a non-empty string"
    if row.get("type") != event:
        return "type is not the event"
    if type(created_at) is not float and type(created_at) is not int:
        return "created_at is not a number"
    if type(terminal) is not bool:
        return "terminal is not true or false"
    if state is not None and state not in _STATES:
        return "terminal_state is not a terminal state"
    if (state is not None) is not terminal:
        return "terminal_state does not match terminal"
    if "payload" not in row:
        return "payload is missing"
    return None


def malformed_entry(offset: int, line: bytes | None, reason: str, *, terminated: bool) -> dict[str, Any]:
    return {
        "offset": offset,
        "reason": reason if terminated else f"torn last line ({reason})",
        "text": (line or b"")[:_PREVIEW].decode("utf-8", "replace"),
    }


def iter_lines(f: IO[bytes], start: int, max_line: int) -> Iterator[Line]:
    """Each non-blank line from file offset ``start`` to the end of ``f``.

    A line longer than ``max_line`` comes as ``None`` (with the first bytes read so far
    dropped too): it is skipped as it is read, so it never costs more than one block.
    """
    f.seek(start)
    line_start = start
    pending: list[bytes] = []
    pending_len = 0
    too_long = False
    offset = start
    while True:
        data = f.read(_BLOCK)
        if not data:
            break
        pos = 0
        while True:
            nl = data.find(b"\n", pos)
            if nl < 0:
                rest = len(data) - pos
                if not too_long and pending_len + rest > max_line:
                    too_long, pending, pending_len = True, [], 0
                elif not too_long:
                    pending.append(data[pos:])
                    pending_len += rest
                break
            end = offset + nl + 1
            if too_long or pending_len + nl - pos > max_line:
                yield line_start, None, True, end
            else:
                line = b"".join((*pending, data[pos:nl])) if pending else data[pos:nl]
                if line and not line.isspace():
                    yield line_start, line, True, end
            too_long, pending, pending_len = False, [], 0
            pos = nl + 1
            line_start = offset + pos
        offset += len(data)
    if too_long:
        yield line_start, None, False, offset
    elif pending_len:
        line = b"".join(pending)
        if not line.isspace():
            yield line_start, line, False, offset


def parse(offset: int, line: bytes | None, terminated: bool, max_line: int) -> tuple[dict[str, Any] | None, Any]:
    """``(row, None)`` or ``(None, malformed entry)`` for one line from :func:`iter_lines`."""
    if line is None:
        return None, malformed_entry(offset, None, f"row longer than {max_line} bytes", terminated=terminated)
    row, reason = parse_line(line)
    if row is None:
        return None, malformed_entry(offset, line, reason or "", terminated=terminated)
    return row, None


class Gaps:
    """Reports the seqs missing between rows read in order (a file cut short, rows removed by hand).

    Seq has no gaps and never goes back (the writer keeps a high-water mark), so a jump means rows were
    lost: a reader says so under ``malformed`` instead of showing a run that seems to start late.
    """

    __slots__ = ("last",)

    def __init__(self, after_seq: int = 0) -> None:
        self.last = after_seq

    def check(self, row: dict[str, Any], offset: int) -> dict[str, Any] | None:
        seq, first = row["seq"], self.last + 1
        self.last = max(self.last, seq)
        if seq <= first:
            return None
        what = f"row {first} is missing" if seq - 1 == first else f"rows {first}-{seq - 1} are missing"
        return {"offset": offset, "reason": what, "text": ""}


def read_all(
    path: Path, max_seq: int | None = None, *, max_line: int, start: int = 0, after_seq: int = 0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """Rows from ``start`` to the end (up to ``max_seq``; those after ``after_seq``), the malformed lines and
    missing seqs, and the file's stat after the read if no append raced it (else ``None``)."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the ``with`` below; a missing file is no journal yet
    except FileNotFoundError:
        return [], [], None
    rows: list[dict[str, Any]] = []
    malformed: list[dict[str, Any]] = []
    gaps = Gaps(after_seq)
    with f:
        before = os.fstat(f.fileno())
        for offset, line, terminated, _ in iter_lines(f, start, max_line):
            row, bad = parse(offset, line, terminated, max_line)
            if row is None:
                malformed.append(bad)
            elif row["seq"] > after_seq and (max_seq is None or row["seq"] <= max_seq):
                if (gap := gaps.check(row, offset)) is not None:
                    malformed.append(gap)
                rows.append(row)
        after = os.fstat(f.fileno())
        end = f.tell()
    stable = signature(before) == signature(after) and after.st_size == end
    return rows, malformed, after if stable else None


def read_after(
    path: Path, after_seq: int, max_seq: int | None = None, *, max_line: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows with ``seq > after_seq``: found by reading backwards from the end, then read forwards.

    Rows are appended in seq order, so the cost follows what comes after the cursor, not the file's size.
    """
    start = offset_after(path, after_seq, max_line=max_line)
    rows, malformed, _ = read_all(path, max_seq, max_line=max_line, start=start, after_seq=after_seq)
    return rows, malformed


def read_page(f: IO[bytes], start: int, *, max_bytes: int, max_line: int) -> tuple[list[dict[str, Any]], int, bool]:
    """Whole rows from offset ``start``, about ``max_bytes`` of them (at least one row).

    Returns ``(rows, next offset, whether it stopped at max_bytes)``. Malformed lines are passed
    over; an unterminated last line is left for the next page (it may still be being written)
    unless it is a whole row: a row is one JSON object, so no part of one short of its end parses,
    and a row that lost only its newline (a short write) is as much the run's as the summary says.
    """
    rows: list[dict[str, Any]] = []
    taken = 0
    next_offset = start
    for offset, line, terminated, end in iter_lines(f, start, max_line):
        row, _ = parse(offset, line, terminated, max_line)
        if not terminated and row is None:
            break
        next_offset = end
        if row is not None and line is not None:
            rows.append(RawRow(row, line))
            taken += len(line)
            if taken >= max_bytes:
                return rows, next_offset, True
    return rows, next_offset, False


def _newlines_backward(f: IO[bytes], end: int) -> Iterator[int]:
    """Offsets of the newlines before ``end``, last first; one block of memory at a time."""
    block = _BACK_BLOCK
    while end > 0:
        start = max(0, end - block)
        f.seek(start)
        data = f.read(end - start)
        i = len(data)
        while (i := data.rfind(b"\n", 0, i)) >= 0:
            yield start + i
        end = start
        block = min(block * 2, _BLOCK * 16)


def _at_or_before(f: IO[bytes], start: int, end: int, after_seq: int, max_line: int) -> bool:
    """Whether the line at ``[start, end)`` is a row with ``seq <= after_seq`` (where a cursor search stops).

    A line whose first bytes show a later seq is passed over unparsed, whatever its size; one that would
    stop the search is parsed whole first: a damaged line laid out like a row must not stop it, or the
    rows between it and the cursor would be skipped.
    """
    f.seek(start)
    match = _SEQ_PREFIX.match(f.read(min(end - start, _PREFIX_BYTES)))
    if (match is not None and int(match.group(1)) > after_seq) or end - start > max_line:
        return False
    f.seek(start)
    row, _ = parse_line(f.read(end - start))
    return row is not None and row["seq"] <= after_seq


def last_row_seq(f: IO[bytes], size: int, max_line: int) -> int:
    """The seq of the file's last valid row (0 if none), read backwards; lines over the cap are skipped unread."""
    end = size
    for nl in itertools.chain(_newlines_backward(f, size), (-1,)):
        start = nl + 1
        if start < end <= start + max_line + 1:  # + 1: the line's own newline
            f.seek(start)
            row, _ = parse_line(f.read(end - start))
            if row is not None:
                return int(row["seq"])
        end = start
    return 0


def offset_after(path: str | os.PathLike[str], after_seq: int, *, max_line: int) -> int:
    """Where the first line after the row with ``seq == after_seq`` (or the last row before it) starts."""
    if after_seq <= 0:
        return 0
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the ``with`` below
    except FileNotFoundError:
        return 0
    with f:
        end = os.fstat(f.fileno()).st_size
        for nl in itertools.chain(_newlines_backward(f, end), (-1,)):
            line_start = nl + 1
            if line_start < end and _at_or_before(f, line_start, end, after_seq, max_line):
                return end
            end = line_start
    return 0


def signature(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
