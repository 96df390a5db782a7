"""The file store on a full disk: a write the disk cuts short, in a real process whose file size limit
(``RLIMIT_FSIZE``) stands for the disk's free space, so the cut falls on an exact byte."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# Child: writes row 1, then row 2 with the file's limit ``room`` bytes past where row 2 would end
# (negative: cut short), retries a failed append once the limit is lifted, as a caller would once
# space is freed, appends a third row, and prints what each append said and what a reader then reads.
_CHILD = """
import json, os, resource, sys
from relay_runtime.integrations.run_journal import append_run_event, read_run_events
journal, probe, room = sys.argv[1], sys.argv[2], int(sys.argv[3])
row = ("s", "r", "token", {"text": "the second row"})
for where in (journal, probe):
    append_run_event("s", "r", "token", {"text": "first"}, session_dir=where, created_at=1000.0)
probe_file = os.path.join(probe, "_run_journal", "s", "r.jsonl")
before = os.path.getsize(probe_file)
append_run_event(*row, session_dir=probe, created_at=1000.0)
row_bytes = os.path.getsize(probe_file) - before
size = os.path.getsize(os.path.join(journal, "_run_journal", "s", "r.jsonl"))
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (size + row_bytes + room, hard))
said = []
try:
    said.append(append_run_event(*row, session_dir=journal, created_at=1000.0)["seq"])
except OSError as exc:
    said.append(type(exc).__name__)
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    said.append(append_run_event(*row, session_dir=journal, created_at=1000.0)["seq"])
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
said.append(append_run_event("s", "r", "token", {"text": "third"}, session_dir=journal)["seq"])
read = read_run_events("s", "r", session_dir=journal)
print(json.dumps({"said": said, "rows": [[r["seq"], r["payload"]["text"]] for r in read["events"]]}))
"""


def _cut(tmp_path: Path, room: int) -> dict[str, list]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "journal"), str(tmp_path / "probe"), str(room)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, list] = json.loads(done.stdout)
    return result


def test_a_row_the_disk_cuts_short_is_stored_once_and_reported_as_it_is_read(tmp_path):
    # Cut short of only its newline, the row is whole and readers read it: the append must say it was
    # written, or the caller retries and the row is there twice. Cut anywhere else, the torn line is
    # no row: the append fails and the retry takes its seq.
    said_written = _cut(tmp_path / "newline", -1)
    said_failed = _cut(tmp_path / "midway", -5)
    for result in (said_written, said_failed):
        assert result["rows"] == [[1, "first"], [2, "the second row"], [3, "third"]]
    assert said_written["said"] == [2, 3]
    assert said_failed["said"] == ["OSError", 2, 3]
