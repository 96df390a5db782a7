"""Several processes (pytest-xdist workers, parallel scripts) writing one cassette: nobody's recordings are lost."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from test_cassettes_pytest import SHARED_MODULE

from relay_runtime import adapters, cassettes, session
from relay_runtime.adapters import testing as t
from relay_runtime.redaction import RedactionPolicy, Rule

# One worker: records its own question into the shared cassette once every worker holds the cassette
# open (a barrier of files), so they all read it before any of them saves.
_WORKER = """
import sys, time
from pathlib import Path
from relay_runtime import adapters, cassettes
from relay_runtime.adapters import testing as t

path, mode, name, barrier, count = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]), int(sys.argv[5])
client = t.openai_client(t.Script([t.json_reply(t.chat_completion_body("answer " + name))]))
with cassettes.use(path, mode=mode):
    (barrier / name).touch()
    deadline = time.monotonic() + 60
    while len(list(barrier.iterdir())) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    reply = adapters.complete(client, {"model": "m", "messages": [{"role": "user", "content": name}]})
    assert reply.choices[0].message.content == "answer " + name
"""


def _run_workers(path: Path, mode: str, names: list[str]) -> None:
    barrier = Path(tempfile.mkdtemp(prefix="relay-cassette-barrier-"))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(path), mode, name, str(barrier), str(len(names))],
            stderr=subprocess.PIPE,
        )
        for name in names
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    shutil.rmtree(barrier)


def _questions(path: Path) -> list[str]:
    return sorted(call["request"]["messages"][0]["content"] for call in json.loads(path.read_text())["calls"])


@pytest.mark.parametrize("mode", ["auto", "record"])
def test_processes_recording_one_cassette_at_once_keep_every_recording(tmp_path, mode):
    path = tmp_path / "shared.json"
    names = [f"worker-{i}" for i in range(6)]
    _run_workers(path, mode, names)
    assert _questions(path) == names


def test_concurrent_auto_writers_keep_what_was_recorded_before(tmp_path):
    path = tmp_path / "shared.json"
    _run_workers(path, "auto", ["earlier"])
    _run_workers(path, "auto", ["a", "b", "c"])
    assert _questions(path) == ["a", "b", "c", "earlier"]
    # and a later record session that runs alone still starts the cassette afresh
    _run_workers(path, "record", ["fresh"])
    assert _questions(path) == ["fresh"]


def _pytest_worker(where: Path, test: str, run: str) -> subprocess.Popen[bytes]:
    """A pytest process as a pytest-xdist worker of run ``run`` is one (the environment xdist gives it)."""
    env = {**os.environ, "PYTEST_XDIST_TESTRUNUID": run, "PYTEST_XDIST_WORKER": f"gw-{test}"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--relay-record=all"]
    command.append(f"test_shared.py::{test}")
    return subprocess.Popen(command, cwd=where, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.mark.parametrize("together", [True, False], ids=["at-once", "one-after-the-other"])
def test_xdist_workers_rerecording_a_shared_cassette_keep_each_others_tests_and_drop_the_old_run(tmp_path, together):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_shared.py").write_text(SHARED_MODULE)
    path = tmp_path / "cassettes" / "test_shared" / "agent.json"
    _run_workers(path, "record", ["Stale"])  # what an earlier run recorded
    run = f"run-{uuid.uuid4().hex}"
    procs = []
    for test in ("test_paris", "test_oslo"):
        procs.append(_pytest_worker(tmp_path, test, run))
        if not together:
            procs[-1].wait(timeout=120)
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0, out.decode()
    finally:
        shutil.rmtree(Path(tempfile.gettempdir()) / f"relay-cassettes-{run}", ignore_errors=True)  # the run's claims
    assert _questions(path) == ["Oslo", "Paris"]


def test_a_writer_under_another_redaction_policy_is_refused_not_stamped_with_this_ones(tmp_path):
    """Two sessions (processes, in life) record into one cassette under different policies: the one saving
    second must not write the other's calls under its own fingerprint (their requests hold what it redacts)."""
    email = "jane.doe@example.com"
    path = tmp_path / "c.json"
    coordinator = session.SESSION_COORDINATOR
    client = t.openai_client(t.Script([t.json_reply(t.chat_completion_body(f"answer {i}")) for i in range(2)]))

    def ask(text: str) -> None:
        adapters.complete(client, {"model": "m", "messages": [{"role": "user", "content": text}]})

    before = coordinator.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
    try:
        with pytest.raises(cassettes.CassetteError, match="redaction policy"), cassettes.use(path, mode="auto"):
            ask(f"mail {email}")  # redacted: this session's policy replaces it
            coordinator.redaction.use(None)
            with cassettes.use(path, mode="auto"):  # the other writer, under no policy, saves first
                ask(f"write to {email}")
    finally:
        coordinator.redaction.use(before)
    document = json.loads(path.read_text())
    # What is on disk is the other writer's, under its own (no) policy: never a file claiming the email rule.
    assert "redaction" not in document and len(document["calls"]) == 1


def test_one_session_recording_calls_under_two_redaction_policies_is_refused(tmp_path):
    """The file carries one fingerprint: a call stored under no policy must not end up under the email rule's."""
    email = "jane.doe@example.com"
    path = tmp_path / "c.json"
    coordinator = session.SESSION_COORDINATOR
    client = t.openai_client(t.Script([t.json_reply(t.chat_completion_body(f"answer {i}")) for i in range(2)]))

    def ask(text: str) -> None:
        adapters.complete(client, {"model": "m", "messages": [{"role": "user", "content": text}]})

    before = coordinator.redaction.use(None)
    try:
        with cassettes.use(path, mode="record"):
            ask(f"mail {email}")  # stored as sent: no policy redacts it
            coordinator.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
            with pytest.raises(cassettes.CassetteError, match="redaction policy"):
                ask(f"write to {email}")
    finally:
        coordinator.redaction.use(before)
    document = json.loads(path.read_text())
    assert "redaction" not in document and len(document["calls"]) == 1  # what it holds, under its own policy
