"""pytest: ``@pytest.mark.relay_cassette("name")`` and ``--relay-record=none|new|all``.

A marked test runs inside ``cassettes.use(<test dir>/cassettes/<module>/<name>.json)``
(name: the test's own by default, after its classes:
``TestX.test_y-param``; an id a file name cannot hold gets a hash). ``none`` (the default) only replays, so CI never
reaches a provider; ``new`` records the calls no recording matches; ``all`` records
every call afresh (a cassette several tests share, once per run: under pytest-xdist,
once for all workers). The ``relay_cassette`` fixture is the ``Cassette`` in use (None
for an unmarked test).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from ..files import directory_locked
from .cassette import Cassette, CassetteMiss
from .in_use import CassetteUse, expect

MODES_BY_OPTION = {"none": "replay", "new": "auto", "all": "record"}
_OPTIONS = frozenset({"timing", "normalize", "redact"})
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_NAME = 120  # a file name is at most 255 bytes
_call_report = pytest.StashKey[pytest.TestReport]()
# Cassettes this run has recorded afresh: a later test on one of them adds to it (see relay_cassette).
_rerecorded = pytest.StashKey[set[Path]]()
# Per test module: the default cassette names of its tests (see ``cassette_path``).
_names = pytest.StashKey[dict[str, set[str]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("relay-runtime").addoption(
        "--relay-record",
        choices=sorted(MODES_BY_OPTION),
        default="none",
        help="relay_cassette tests: none = replay only (default), new = record calls with no recording, "
        "all = record every call again",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "relay_cassette(name=None, *, timing='instant', normalize=None, redact=None): record/replay this test's "
        "LLM calls in cassettes/<test module>/<name>.json beside the test",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if report.when == "call":
        item.stash[_call_report] = report
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
    """A marked test expects its cassette from its setup to its teardown: a call its fixtures make
    outside the cassette's use (set up before it, torn down after it) raises instead of going live."""
    if item.get_closest_marker("relay_cassette") is None:
        return (yield)
    with expect(f"test {item.nodeid}"):
        return (yield)


def cassette_path(node: pytest.Item, name: str | None) -> Path:
    """``<test dir>/cassettes/<module>/<name>.json``; a given name must be a plain file name."""
    module = Path(str(node.path))
    folder = module.parent / "cassettes" / module.stem
    if name is None:
        test_name = _test_name(node)
        path = folder / f"{_default_name(test_name)}.json"
        legacy = _default_name(test_name, legacy=True)
        if not path.exists() and (folder / f"{legacy}.json").exists() and not _claimed(node, legacy):
            # Recorded before ids had a separator of their own (``test_x_a`` for ``test_x[a]``), and no test of the
            # module is named so: still this test's cassette.
            return folder / f"{legacy}.json"
        return path
    if not isinstance(name, str) or not name or name in (".", "..") or _UNSAFE.search(name):
        raise pytest.UsageError(
            f"relay_cassette name must be a plain file name (letters, digits, '.', '_', '-'), got {name!r}"
        )
    elif len(name) > _MAX_NAME:
        raise pytest.UsageError(f"relay_cassette name is {len(name)} characters long; at most {_MAX_NAME}")
    return folder / f"{name}.json"


def _test_name(node: pytest.Item) -> str:
    # Tests in classes are named with their classes: two classes may hold a test of one name.
    classes = [parent.name for parent in node.listchain() if isinstance(parent, pytest.Class)]
    return ".".join([*classes, node.name])


def _claimed(node: pytest.Item, legacy: str) -> bool:
    """Whether a test of ``node``'s module may have ``legacy`` as its own default cassette name: one collected
    now, or one this run did not select (a node id, ``-k``), which only the module's own functions tell."""
    names = _own_names(node)
    return legacy in names or any(legacy.startswith(f"{name}-") for name in names)


def _own_names(node: pytest.Item) -> set[str]:
    """The default cassette names of the collected tests of ``node``'s module and the qualified names of every
    function it holds (``TestX.test_y``: a parametrized one's names are these and an id), worked out once per
    module."""
    names = node.session.stash.setdefault(_names, {})
    key = str(node.path)
    found = names.get(key)
    if found is None:
        found = {_default_name(_test_name(item)) for item in node.session.items if str(item.path) == key}
        module = getattr(node, "module", None)
        found.update(_functions(vars(module) if module is not None else {}, ""))
        names[key] = found
    return found


def _functions(namespace: dict[str, Any], prefix: str, depth: int = 0) -> Iterator[str]:
    """The names of the functions in ``namespace`` and in its classes, each after its classes, as tests are
    named: whatever pytest's ``python_functions`` pattern, a name that could be a test's is claimed."""
    for name, value in list(namespace.items()):
        if inspect.isfunction(value):
            yield prefix + name
        elif inspect.isclass(value) and depth < 4 and not name.startswith("__"):
            inherited = {k: v for base in reversed(value.__mro__) for k, v in vars(base).items()}  # as collected
            yield from _functions(inherited, f"{prefix}{name}.", depth + 1)


def _default_name(test_name: str, *, legacy: bool = False) -> str:
    """``test_x[chat]`` -> ``test_x-chat``; an id a file name cannot hold as it is gets a hash of the whole name.

    A function's name holds no ``-``, so no test's own name is another's with an id (``legacy``: the ``_`` that
    made ``test_x[a]`` and ``test_x_a`` share one cassette, each replaying the other's answers). Without the
    hash ``[a/b]`` and ``[a b]`` (or any two ids differing in such characters) would share, and overwrite, one
    cassette; a very long id would be no file name at all.
    """
    simple = test_name.replace("[", "_" if legacy else "-").removesuffix("]")
    if simple and not _UNSAFE.search(simple) and simple == simple.strip("._") and len(simple) <= _MAX_NAME:
        return simple
    plain = _UNSAFE.sub("_", test_name).strip("._")[:_MAX_NAME] or "cassette"
    return f"{plain}-{hashlib.sha256(test_name.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


@pytest.fixture(autouse=True)
def relay_cassette(request: pytest.FixtureRequest) -> Iterator[Cassette | None]:
    marker = request.node.get_closest_marker("relay_cassette")
    if marker is None:
        yield None
        return
    if len(marker.args) > 1:
        raise pytest.UsageError("relay_cassette takes at most one positional argument, the cassette's name")
    options = dict(marker.kwargs)
    name = options.pop("name", marker.args[0] if marker.args else None)
    unknown = set(options) - _OPTIONS
    if unknown:
        raise pytest.UsageError(f"relay_cassette got unknown options {sorted(unknown)}; known: {sorted(_OPTIONS)}")
    mode = MODES_BY_OPTION[request.config.getoption("relay_record")]
    path = cassette_path(request.node, name)
    if mode == "record" and not _first_in_run(request.config, path):
        # A cassette several tests share is started afresh by the first of them only: the
        # next ones keep what this run recorded (replaying it as the replay will) and add theirs.
        mode = "auto"
    use = CassetteUse(path, mode=mode, **options)
    cassette = use.__enter__()
    try:
        yield cassette
    finally:
        report = request.node.stash.get(_call_report, None)
        # A miss the test already failed on is not reported twice; one the agent swallowed fails it here.
        failed = report is not None and report.failed
        failed_on_miss = failed and report is not None and _mentions_miss(report)
        use.close(raise_misses=not failed_on_miss, failed=failed)


def _first_in_run(config: pytest.Config, path: Path) -> bool:
    """Whether this is the first test of the run to use the cassette at ``path`` (it records it afresh).

    Under pytest-xdist every worker is a process of its own: the first to get the cassette claims it
    for the whole run (a marker per run in the temp directory) and removes the old recording there and
    then, under the cassette directory's lock, so no worker that gets it later replays or keeps what an
    earlier run recorded, and each worker's recordings are merged into the file as it saves.
    """
    resolved = path.resolve()
    seen = config.stash.setdefault(_rerecorded, set())
    if resolved in seen:
        return False
    seen.add(resolved)
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        return True
    claims = Path(tempfile.gettempdir()) / f"relay-cassettes-{_UNSAFE.sub('_', run)[:64]}"
    claim = claims / hashlib.sha256(os.fsencode(resolved)).hexdigest()
    with directory_locked(resolved.parent):
        if claim.exists():
            return False
        claims.mkdir(mode=0o700, exist_ok=True)
        claim.touch()
        resolved.unlink(missing_ok=True)
    return True


def _mentions_miss(report: pytest.TestReport) -> bool:
    return CassetteMiss.__name__ in str(report.longrepr)
