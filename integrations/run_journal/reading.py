"""Reading a journal file: whole, or only what follows a cursor, never failing on a bad line.

Lines are split on ``\\n`` bytes only: rows are written with ``ensure_ascii=False``
and ``str.splitlines`` would also break on U+2028 and friends inside strings.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

_BLOCK = 8192
_PREVIEW = 200


def parse_line(line: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """``(row, None)`` for a journal row, ``(None, reason)`` for anything else."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None, "invalid JSON"
    if not isinstance(value, dict):
        return None, "not a JSON object"
    seq = value.get("seq")
    if type(seq) is not int or seq < 1:
        return None, "row without a positive integer seq"
    return value, None


def malformed_entry(offset: int, line: bytes, reason: str, *, terminated: bool) -> dict[str, Any]:
    return {
        "offset": offset,
        "reason": reason if terminated else f"torn last line ({reason})",
        "text": line[:_PREVIEW].decode("utf-8", "replace"),
    }


def _split(data: bytes, base: int) -> list[tuple[int, bytes, bool]]:
    """``(offset, line, terminated)`` for each non-empty line of ``data`` starting at file offset ``base``."""
    out = []
    pos = 0
    end = len(data)
    while pos < end:
        nl = data.find(b"\n", pos)
        if nl < 0:
            out.append((base + pos, data[pos:], False))
            break
        if nl > pos and not data[pos:nl].isspace():
            out.append((base + pos, data[pos:nl], True))
        pos = nl + 1
    return out


def read_all(path: Path, max_seq: int | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """Every row (up to ``max_seq``), the malformed lines, and the file's stat after the read (or None)."""
    try:
        with open(path, "rb") as f:
            before = os.fstat(f.fileno())
            data = f.read()
            after = os.fstat(f.fileno())
    except FileNotFoundError:
        return [], [], None
    rows: list[dict[str, Any]] = []
    malformed: list[dict[str, Any]] = []
    for offset, line, terminated in _split(data, 0):
        row, reason = parse_line(line)
        if row is None:
            malformed.append(malformed_entry(offset, line, reason or "", terminated=terminated))
        elif max_seq is None or row["seq"] <= max_seq:
            rows.append(row)
    stable = signature(before) == signature(after) and after.st_size == len(data)
    return rows, malformed, after if stable else None


def read_after(
    path: Path, after_seq: int, max_seq: int | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows with ``seq > after_seq``, reading backwards from the end until the cursor is passed.

    Rows are appended in seq order, so the cost follows the number of rows
    after the cursor, not the size of the file.
    """
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the ``with`` below; a missing file is no journal yet
    except FileNotFoundError:
        return [], []
    with f:
        # ``end`` is always the file size or just past a newline, so every line
        # handed to ``_split`` is whole and only the file's last one can be torn.
        end = os.fstat(f.fileno()).st_size
        found: list[dict[str, Any]] = []
        malformed: list[dict[str, Any]] = []
        block = _BLOCK
        while end > 0:
            start = max(0, end - block)
            f.seek(start)
            data = f.read(end - start)
            if start > 0:
                first_nl = data.find(b"\n")
                if first_nl < 0:  # a line longer than the block: look further back
                    block *= 2
                    continue
                start += first_nl + 1
                data = data[first_nl + 1 :]
            for offset, line, terminated in reversed(_split(data, start)):
                row, reason = parse_line(line)
                if row is None:
                    malformed.append(malformed_entry(offset, line, reason or "", terminated=terminated))
                    continue
                seq = row["seq"]
                if seq <= after_seq:
                    end = 0
                    break
                if max_seq is None or seq <= max_seq:
                    found.append(row)
            else:
                end = start
                block = min(block * 2, 1 << 20)
        found.reverse()
        malformed.reverse()
        return found, malformed


def signature(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
