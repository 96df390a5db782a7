"""What one entry of a run's Redis stream holds: its row, parsed (or why it is none), and its size, by which
a reader sizes its next page."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .reading import RawRow, parse_line
from .redis_keys import ROW_FIELD

READ_BATCH = 512  # entries asked for at once, at most
_PREVIEW = 200


def page_count(row_bytes: int, budget: int) -> int:
    """How many entries of ``row_bytes`` each fit ``budget`` bytes (one at least, ``READ_BATCH`` at most)."""
    return max(1, min(READ_BATCH, budget // max(row_bytes, 1)))


def largest(entries: Any) -> int:
    """The size of the largest row among ``entries``."""
    return max(len(fields.get(ROW_FIELD) or b"") for _, fields in entries)


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_entries(
    entries: Sequence[Any], rows: list[dict[str, Any]], malformed: list[dict[str, Any]], *, raw: bool = False
) -> None:
    """Split stream entries into rows and reports of entries that are not rows (never raising).

    ``raw``: rows keep the JSON they were stored as (``RawRow``), so a server sends it on as is.
    """
    for entry_id, fields in entries:
        ident = text(entry_id)
        data = fields.get(ROW_FIELD) if isinstance(fields, dict) else None
        if data is None:
            malformed.append({"offset": ident, "reason": "stream entry without a row", "text": repr(fields)[:_PREVIEW]})
            continue
        row, reason = parse_line(data)
        if row is None:
            malformed.append({"offset": ident, "reason": reason or "", "text": _preview(data)})
        elif f"{row['seq']}-0" != ident:
            malformed.append(
                {
                    "offset": ident,
                    "reason": f"row seq {row['seq']} does not match its stream entry",
                    "text": _preview(data),
                }
            )
        else:
            rows.append(RawRow(row, data) if raw else row)


def _preview(data: bytes) -> str:
    return data[:_PREVIEW].decode("utf-8", "replace")
