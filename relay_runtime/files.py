"""Files the core writes whole (cassettes, spend records): a reader sees the old file or the new one, never a part;
writers in several processes can take turns."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]


def replace_atomically(path: Path, text: str, *, durable: bool = False) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it over ``path``.

    ``durable`` fsyncs the data before the rename, for records that must survive a crash (a budget's spend).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


@contextmanager
def directory_locked(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock shared by every process that writes files in ``directory`` (made if missing).

    The directory itself is locked, not a file in it: files written by ``replace_atomically`` are
    replaced, so a lock on one would be a lock on a file nobody else opens; and no lock file is left
    behind beside the user's files. Without ``fcntl`` (Windows) it does not lock.
    """
    directory.mkdir(parents=True, exist_ok=True)
    if fcntl is None:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
