"""A real ``redis-server`` for the journal's Redis tests, on a free loopback port with its own data dir (no tests here).

The server runs with its append-only file on and ``appendfsync always``, so a
test may SIGKILL it and restart it on the same port and data dir: whatever it
acknowledged before the kill must be there after.

Without ``redis-server`` on PATH (Debian: ``apt-get install redis-server``) the
tests that need it skip, except under ``CI=true`` where they fail: CI installs it
(``.ci/run``), so its absence there is a broken build, not a reason to pass.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay_runtime.integrations.run_journal import FileStore, paths

_START_TIMEOUT = 20.0


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def unavailable(reason: str) -> None:
    """Skip outside CI, fail under ``CI=true``."""
    if _in_ci():
        pytest.fail(f"Redis store tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(f"Redis store tests skipped: {reason} (apt-get install redis-server)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process; ``kill()`` is SIGKILL, ``start()`` brings it back on the same port and data."""

    def __init__(self, data_dir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            unavailable("redis-server is not installed")
        self.binary = str(binary)
        self.data_dir = data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log = self.data_dir / "redis.log"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _args(self) -> list[str]:
        return [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.data_dir),
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--save", "",
            "--daemonize", "no",
            "--logfile", str(self.log),
            "--protected-mode", "yes",
        ]  # fmt: skip

    def start(self) -> RedisServer:
        """Start (or restart) the server; a first start picks a free port, retrying if another process takes it."""
        attempts = 1 if self.port else 5
        last = ""
        for _ in range(attempts):
            if not self.port or attempts > 1:
                self.port = _free_port()
            self.process = subprocess.Popen(self._args(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            if self._wait_ready():
                return self
            last = self._tail_log()
            self._reap()
        unavailable(f"redis-server did not start on 127.0.0.1:{self.port}: {last}")
        raise AssertionError("unreachable")

    def _wait_ready(self) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return True  # a server still loading its AOF answers -LOADING instead
            except OSError:
                pass
            time.sleep(0.02)
        return False

    def _tail_log(self) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-3:])
        except OSError:
            return "no log"

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final fsync; only what ``appendfsync always`` already wrote survives."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self._reap()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self._reap()

    def _reap(self) -> None:
        if self.process is not None:
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None


@contextlib.contextmanager
def running_redis(data_dir: Path) -> Iterator[RedisServer]:
    server = RedisServer(data_dir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One server shared by the session's tests; each test keeps to its own key prefix (``redis_prefix``)."""
    with running_redis(tmp_path_factory.mktemp("redis-shared")) as server:
        yield server


@pytest.fixture
def own_redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A server for this test alone: for tests that kill and restart it."""
    with running_redis(tmp_path / "redis") as server:
        yield server


@pytest.fixture
def redis_prefix() -> str:
    return f"relay-test:{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["file", "redis"])
def journal_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Each store-level test runs on the file store and on Redis (one shared server, a prefix per test)."""
    if request.param == "file":
        yield FileStore(tmp_path / "journal")
        return
    from relay_runtime.integrations.run_journal import RedisStreamStore

    server = request.getfixturevalue("redis_server")
    store = RedisStreamStore(server.url, prefix=f"relay-test:{uuid.uuid4().hex[:12]}")
    try:
        yield store
    finally:
        store.close()


def inject_junk(store: Any, session_id: str, run_id: str, text: str) -> None:
    """Put something that is not a row after the run's last row, as a crash or a foreign writer would."""
    if isinstance(store, FileStore):
        path = paths.run_path(session_id, run_id, store.session_dir)
        with open(path, "ab") as f:
            f.write(text.encode() + b"\n")
        return
    last = store.run_stats(session_id, run_id)["seq"]
    store.client.xadd(store.keys.stream(session_id, run_id), {"r": text}, id=f"{last}-1")


class DroppingProxy:
    """A TCP proxy to Redis that can swallow the next reply and cut the connection: a lost reply."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.drop_next_reply = threading.Event()
        self.dropped = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, replies: bool) -> None:
        try:
            while data := src.recv(65536):
                if replies and self.drop_next_reply.is_set():
                    self.drop_next_reply.clear()
                    self.dropped += 1
                    break  # the command ran on the server; its answer never reaches the client
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
