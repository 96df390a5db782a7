"""Which cassette a call goes to: ``use()``, the cassette in use in each context, and ``current()``.

A use belongs to the context that entered it (tasks and handed threads inherit it);
a process-wide list of the cassettes in use answers a call from a context with none.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from .cassette import Cassette, CassetteError, Redact, check_options
from .requests import Normalize

F = TypeVar("F", bound=Callable[..., Any])

# The cassettes in use in this context, innermost last: a task or a thread given the context
# (``propagate_to_thread``, ``ContextExecutor``, asyncio tasks) inherits it, and two concurrent
# uses of different cassettes each get their own calls.
_active: ContextVar[tuple[Cassette, ...]] = ContextVar("relay_cassettes", default=())
# Every cassette in use anywhere in the process, and what the pytest plugin expects (see ``expect``).
# A call from a context that holds none (a worker thread nobody handed the context) goes to the one
# cassette in use if there is only one, and is refused when there are several or a test expects one:
# it must never reach a provider, nor the wrong cassette.
_open: list[Cassette] = []
_expected: list[str] = []
_open_lock = threading.Lock()


# What file systems hold: a name of at most 255 bytes (ext4, APFS, NTFS), a path of at most 4096.
_MAX_NAME_BYTES = 255
_MAX_PATH_BYTES = 4096


def check_path(path: str | os.PathLike[str]) -> None:
    """Refuse a cassette path no file system can hold, before any call is made (not at the save, after them)."""
    text = os.fspath(path)
    if "\0" in text:
        raise ValueError(f"cassette path {text[:80]!r} holds a NUL character, which no file name can")
    encoded = os.fsencode(text)
    if len(encoded) > _MAX_PATH_BYTES:
        raise ValueError(f"cassette path is {len(encoded)} bytes long; file systems take at most {_MAX_PATH_BYTES}")
    for part in Path(text).parts:
        size = len(os.fsencode(part))
        if size > _MAX_NAME_BYTES:
            raise ValueError(
                f"cassette path part {part[:40]!r}... is {size} bytes long; a file name is at most "
                f"{_MAX_NAME_BYTES} (shorten the cassette's name)"
            )


def current() -> Cassette | None:
    """The cassette this call goes to: the innermost one in use in this context, or None (the common case).

    Raises ``CassetteError`` for a call made where no cassette of its own is in use while
    several are (whose is it?), or while a test expects one (see ``expect``).
    """
    if not _open and not _expected:
        return None
    for cassette in reversed(_active.get()):
        if not cassette.closed:
            return cassette
    return _outside_context()


def _outside_context() -> Cassette | None:
    with _open_lock:
        in_use, expected = list(_open), list(_expected)
    if len(in_use) == 1:
        return in_use[0]
    if in_use:
        names = ", ".join(str(c.path) for c in in_use)
        raise CassetteError(
            f"an LLM call was made where no cassette is in use while {len(in_use)} are ({names}), so which "
            "one it belongs to is unknown: start its thread inside the use() with the context handed over "
            "(relay_runtime.propagate_to_thread / ContextExecutor), or make the call inside the use()"
        )
    if expected:
        raise CassetteError(
            f"an LLM call was made while {expected[-1]} expects a cassette, but none is in use here (a fixture "
            "set up before the cassette, or torn down after it?): it would have reached the provider"
        )
    return None


@contextmanager
def expect(what: str) -> Iterator[None]:
    """While in effect, a call that finds no cassette raises instead of reaching a provider.

    The pytest plugin holds one for a marked test from its setup to its teardown, so a call
    made outside the cassette's use (a module fixture, a teardown) never goes live. ``what``
    names the expecting party in the error.
    """
    with _open_lock:
        _expected.append(what)
    try:
        yield
    finally:
        with _open_lock:
            _expected.remove(what)


def _enter(cassette: Cassette) -> None:
    with _open_lock:
        _open.append(cassette)
    _active.set((*_active.get(), cassette))


def _leave(cassette: Cassette) -> None:
    cassette.closed = True  # a context that still lists it (another task's, a generator's) skips it
    with _open_lock:
        for index in range(len(_open) - 1, -1, -1):
            if _open[index] is cassette:
                del _open[index]
                break
    # Not a token reset: a generator's use may end in another context than it began in.
    stack = _active.get()
    if cassette in stack:
        _active.set(tuple(c for c in stack if c is not cassette))


class CassetteUse:
    """What ``use()`` returns: a context manager giving the ``Cassette``, and a decorator (sync or async)."""

    def __init__(self, path: str | os.PathLike[str], **options: Any) -> None:
        if not isinstance(path, str | os.PathLike) or not os.fspath(path):
            raise TypeError(f"cassette path must be a file path (str or os.PathLike), got {path!r}")
        check_path(path)
        self.path = path
        self.options = options
        self._entered: list[Cassette] = []
        check_options(**options)  # a bad option fails at use(), not at the first call

    def __enter__(self) -> Cassette:
        cassette = Cassette(self.path, **self.options)
        _enter(cassette)
        self._entered.append(cassette)
        return cassette

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(raise_misses=exc is None, failed=exc is not None)

    def close(self, *, raise_misses: bool, failed: bool = False) -> None:
        """Stop using the innermost cassette this entered and write it; then raise a miss the code swallowed.

        ``failed``: the code that used it failed (see ``Cassette.save``)."""
        cassette = self._entered.pop()
        _leave(cassette)
        cassette.save(failed=failed)
        if raise_misses and cassette.misses:
            # The agent caught the miss and went on: its outcome is not what the recording says.
            raise cassette.misses[0]

    def __call__(self, fn: F) -> F:
        # A generator's body runs when it is iterated, after the call returned: the cassette
        # is in use from its first step to its end (or close), else its calls would go live.
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def run_generator(*args: Any, **kwargs: Any) -> Any:
                with CassetteUse(self.path, **self.options):
                    return (yield from fn(*args, **kwargs))

            return run_generator  # type: ignore[return-value]
        if inspect.isasyncgenfunction(fn):

            @functools.wraps(fn)
            async def run_async_generator(*args: Any, **kwargs: Any) -> Any:
                inner = fn(*args, **kwargs)
                with CassetteUse(self.path, **self.options):
                    try:  # what ``yield from`` does for a sync generator: sent values and throws reach it
                        item = await inner.__anext__()
                        while True:
                            try:
                                sent = yield item
                            except GeneratorExit:
                                raise
                            except BaseException as exc:
                                item = await inner.athrow(exc)
                            else:
                                item = await inner.asend(sent)
                    except StopAsyncIteration:
                        pass
                    finally:
                        await inner.aclose()

            return run_async_generator  # type: ignore[return-value]
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                with CassetteUse(self.path, **self.options):
                    return await fn(*args, **kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with CassetteUse(self.path, **self.options):
                result = fn(*args, **kwargs)
            if inspect.iscoroutine(result):  # an async callable object, a plain wrapper: its body runs when awaited
                return self._awaited(result)
            return result

        return run  # type: ignore[return-value]

    async def _awaited(self, coroutine: Any) -> Any:
        with CassetteUse(self.path, **self.options):
            return await coroutine


def use(
    path: str | os.PathLike[str],
    *,
    mode: str = "replay",
    timing: str = "instant",
    normalize: Normalize | None = None,
    redact: Redact | None = None,
) -> CassetteUse:
    """Record or replay every LLM call made through the adapters (and instrumented clients) meanwhile.

    ``mode``: ``replay`` (no call reaches a provider; a call with no recording raises
    ``CassetteMiss``), ``record`` (every call goes out and the file is rewritten),
    ``auto`` (replay what is recorded, record the rest). ``timing="recorded"`` replays
    the recorded gaps. ``normalize(request) -> request`` drops more volatile fields
    before matching; ``redact(call) -> call`` cleans a call before it is written.
    """
    return CassetteUse(path, mode=mode, timing=timing, normalize=normalize, redact=redact)
