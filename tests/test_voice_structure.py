"""The voice relay's files depend one way (a session's state knows nothing of what acts on it; the
routes know no server), and provider events go through tables of small handlers, not long chains."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from relay_runtime.integrations.voice_relay.models import ProviderEventKind
from relay_runtime.integrations.voice_relay.providers.realtime_ws import SERVER_EVENTS
from relay_runtime.integrations.voice_relay.pump import ProviderPump

PACKAGE = Path(__file__).resolve().parent.parent / "integrations" / "voice_relay"
# The rest stays below this (flat validation and the delivery judge are the longest today).
MAX_COMPLEXITY = 18


def _module(path: Path) -> str:
    """"session", "providers.stub"; a package's __init__ is the package ("" for the relay itself)."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Module -> the package modules it imports, type-only imports included."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        name = _module(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                parts = package.split(".") if package else []
                base = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                target = ".".join([*base, node.module] if node.module else base)
                found.add(target)
                found.update(f"{target}.{alias.name}" if target else alias.name for alias in node.names)
        graph[name] = found
    return {name: {t for t in targets if t in graph and t != name} for name, targets in graph.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycles_in_the_voice_relay() -> None:
    assert _cycle(_imports()) is None


@pytest.mark.parametrize(
    ("module", "must_not_import"),
    [
        ("session", {"delivery", "promotion", "runs", "pump", "agent", "client_messages", "server", "routes"}),
        ("delivery", {"promotion", "runs", "pump", "agent"}),
        ("runs", {"promotion", "delivery", "pump", "agent"}),
        ("routes", {"server"}),
        ("providers.realtime_ws", {"promotion", "session", "agent"}),
    ],
)
def test_dependencies_run_one_way(module: str, must_not_import: set[str]) -> None:
    assert not _imports()[module] & must_not_import


def _complexity(node: ast.AST) -> int:
    """McCabe: one plus each decision point."""
    score = 1
    for child in ast.walk(node):
        if isinstance(child, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.IfExp, ast.ExceptHandler,
                              ast.match_case)):
            score += 1
        elif isinstance(child, ast.comprehension):
            score += 1 + len(child.ifs)
        elif isinstance(child, ast.BoolOp):
            score += len(child.values) - 1
    return score


def _functions() -> list[tuple[str, int]]:
    out = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = [n for n in ast.walk(node) if n is not node
                         and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
                score = _complexity(node) - sum(_complexity(n) for n in inner)
                out.append((f"{_module(path)}.{node.name}", score))
    return out


def test_no_long_decision_chains() -> None:
    scores = dict(_functions())
    assert scores["providers.realtime_ws._map"] <= 3 and scores["pump.forward"] <= 3
    assert {name: s for name, s in scores.items() if s > MAX_COMPLEXITY} == {}


def test_every_provider_event_kind_has_a_row() -> None:
    pump = ProviderPump.__new__(ProviderPump)
    ProviderPump.__init__(pump, session=None, runs=None, delivery=None)  # type: ignore[arg-type]
    assert set(pump._handlers) == set(ProviderEventKind)


def test_server_event_table_covers_both_protocol_generations() -> None:
    for name in ("response.output_audio.delta", "response.audio.delta", "response.output_text.delta",
                 "response.text.delta", "response.function_call_arguments.done", "error", "session.updated"):
        assert name in SERVER_EVENTS
