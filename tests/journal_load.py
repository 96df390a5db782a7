"""Driving a journal server under load (no tests here; shared with benchmarks/bench_journal.py).

The server is ``relay-runtime journal serve`` in a process of its own on
loopback, so its memory is its own (read from ``/proc/<pid>/status``) and a
hung server can always be killed. Every wait has a timeout.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from process_support import LineReader

from relay_runtime.integrations.run_journal import RunJournalWriter

_SERVE = "from relay_runtime.integrations.run_journal.cli import main; raise SystemExit(main())"


class ServerProcess:
    """A journal server process; ``with ServerProcess(dir) as srv: srv.url``."""

    def __init__(
        self,
        session_dir: Path | None,
        *,
        write_timeout: float = 30.0,
        heartbeat: float = 15.0,
        env: dict[str, str] | None = None,
        extra: tuple[str, ...] = (),
        log: Path | None = None,
    ) -> None:
        # Without a session dir the server serves the store RELAY_JOURNAL_URL names (in ``env``).
        where = ("--session-dir", str(session_dir)) if session_dir is not None else ()
        self.args = [
            sys.executable,
            "-c",
            _SERVE,
            "serve",
            *where,
            "--port",
            "0",
            "--write-timeout",
            str(write_timeout),
            "--heartbeat",
            str(heartbeat),
            *extra,
        ]
        self.log = log  # where the server's stderr (its log) goes; nowhere without it
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> ServerProcess:
        stderr = open(self.log, "w") if self.log is not None else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=stderr, text=True, env=self.env)
        finally:
            if self.log is not None:
                stderr.close()  # type: ignore[union-attr]
        assert self.proc.stdout is not None
        line = LineReader(self.proc.stdout).next(timeout=30)
        self.url = line.rsplit(" at ", 1)[1].strip().rstrip("/")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL if it does not stop within ``timeout``; the exit code (None if killed)."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc is not None else None
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            return None
        finally:
            if proc.stdout is not None:
                proc.stdout.close()

    def memory_kib(self) -> dict[str, int]:
        """``{"VmRSS": ..., "VmHWM": ...}`` of the server process, in KiB (VmHWM is its peak)."""
        assert self.proc is not None
        out = {}
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = int(value.split()[0])
        return out

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_run(
    session_dir: Path,
    run_id: str,
    total_bytes: int,
    *,
    row_bytes: int = 1000,
    session_id: str = "load",
    done: bool = True,
) -> int:
    """A run of token rows of about ``row_bytes`` each up to ``total_bytes``; returns its number of rows."""
    writer = RunJournalWriter(session_id, run_id, session_dir=session_dir)
    text = "x" * max(1, row_bytes - 230)
    rows = 0
    while rows * row_bytes < total_bytes:
        writer.append_sse_event("token", {"text": text})
        rows += 1
    if done:
        writer.append_sse_event("done", {})
        rows += 1
    return rows


@dataclass
class Replay:
    status: int
    bytes: int
    messages: int
    last_id: str
    seconds: float


async def replay(
    session: aiohttp.ClientSession, url: str, *, headers: dict[str, str] | None = None, timeout: float = 120.0
) -> Replay:
    """Read one SSE stream to its end, counting bytes and messages (ids), without keeping the body."""
    start = time.perf_counter()

    async def read() -> Replay:
        async with session.get(url, headers=headers) as resp:
            size = messages = 0
            tail = b""
            last_id = ""
            async for chunk in resp.content.iter_chunked(256 * 1024):
                size += len(chunk)
                data = tail + chunk
                messages += data.count(b"\nid: ") + (1 if data.startswith(b"id: ") and not tail else 0)
                at = data.rfind(b"id: ")
                if at >= 0 and data.find(b"\n", at) > 0:
                    last_id = data[at + 4 : data.find(b"\n", at)].decode()
                tail = data[-8:]
            return Replay(resp.status, size, messages, last_id, time.perf_counter() - start)

    return await asyncio.wait_for(read(), timeout)


def stalled_reader(url: str, path: str, *, rcvbuf: int = 4096) -> socket.socket:
    """A client that asks for an SSE stream and then never reads: the server's writes back up."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect((host, int(port)))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n".encode())
    return sock


def closed_by_peer(sock: socket.socket, timeout: float = 10.0) -> bool:
    """Drain ``sock``; True once the server has closed (or reset) it, False if it is still open at ``timeout``."""
    deadline = time.monotonic() + timeout
    sock.settimeout(0.5)
    while time.monotonic() < deadline:
        try:
            if not sock.recv(1 << 20):
                return True
        except TimeoutError:
            continue
        except ConnectionResetError:
            return True
    return False


async def get_json(session: aiohttp.ClientSession, url: str, timeout: float = 30.0) -> Any:
    async with asyncio.timeout(timeout), session.get(url) as resp:
        return resp.status, await resp.json()
