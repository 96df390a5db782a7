"""Trajectories in the open formats evaluation and training tools read, as NeMo Relay writes them.

- ``AtofExporter``: ATOF, one JSON line per scope start, scope end and mark.
- ``AtifExporter``: ATIF v1.7, one trajectory per conversation (``export``, ``write``, sinks).
- ``atif_from_journal`` / ``atof_from_journal``: the same for runs recorded in the run journal
  (file store or Redis), long after they ran.
- ``validate_atif``: a trajectory checked against ATIF v1.7.
- Sinks: ``FileSink``, ``HttpSink``, ``FsspecSink`` (extra ``trajectory``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .atif_exporter import AtifExporter
from .atof_exporter import AtofExporter
from .sinks import FileSink, FsspecSink, HttpSink
from .validate import validate_atif

if TYPE_CHECKING:
    from .from_journal import DamagedJournal, atif_from_journal, atof_from_journal


def __getattr__(name: str) -> Any:
    # Imported on first use: the run journal imports this package's records, and this would import it back.
    if name in ("atif_from_journal", "atof_from_journal", "journal_records", "DamagedJournal"):
        from . import from_journal

        return getattr(from_journal, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AtifExporter",
    "AtofExporter",
    "DamagedJournal",
    "FileSink",
    "FsspecSink",
    "HttpSink",
    "atif_from_journal",
    "atof_from_journal",
    "validate_atif",
]
