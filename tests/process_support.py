"""Reading a child process's output in tests without ever blocking on it for good (no tests here)."""

from __future__ import annotations

import queue
import threading
from typing import IO


class LineReader:
    """Lines of a child's text stream, read on a daemon thread so every wait has a timeout."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        try:
            for line in stream:
                self._lines.put(line)
        except (OSError, ValueError):  # the test closed the stream after killing the child
            pass
        self._lines.put("")  # end of stream

    def next(self, timeout: float = 30.0) -> str:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output line within {timeout}s") from None
        assert line, "the process ended its output early"
        return line
