"""The JSONL writer and ``relay-runtime trace``: a recorded run drawn as its scope tree."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from core_support import DictCodec, chunks, request, response

from relay_runtime import LLMRequest, Relay, ScopeType, cli
from relay_runtime.jsonl import JsonlWriter, read_events
from relay_runtime.trace_tree import RED, RESET, YELLOW


def _record_run(path: Path) -> None:
    relay = Relay()
    writer = JsonlWriter(path, chunks=True)
    relay.subscribers.register(writer, name="jsonl", chunks=writer.chunks)

    def down(req: LLMRequest) -> Any:
        raise ConnectionError("upstream 502")

    with relay.scope.scope("conversation", ScopeType.AGENT), relay.scope.scope("turn"):
        relay.llm.execute("openai", request(), lambda r: response(), codec=DictCodec())
        with pytest.raises(ConnectionError):
            relay.llm.execute("openai", request(), down)
        relay.tools.execute("weather", {"city": "Oslo"}, lambda args: {"temp": 21})
        stream = relay.llm.stream("anthropic", request(), lambda r: iter(chunks(3)), codec=DictCodec())
        next(stream)
        stream.close()
    writer.close()


def test_writer_appends_one_private_json_object_per_event(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "run.jsonl"
    _record_run(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["kind"] for r in rows].count("scope_start") == 6
    assert [r["kind"] for r in rows].count("scope_end") == 6
    assert len([r for r in rows if r.get("name") == "llm.chunk"]) == 1
    first_llm_end = next(r for r in rows if r["kind"] == "scope_end" and r["name"] == "openai")
    usage = first_llm_end["annotated_response"]["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (3, 5)
    assert list(read_events(path)) == rows


def test_trace_draws_the_tree_with_durations_outcomes_tokens_and_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run.jsonl"
    _record_run(path)
    assert cli.main(["trace", "--color", "never", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6
    assert lines[0].startswith("conversation [agent]") and lines[0].endswith("success")
    assert lines[1].startswith("└─ turn [function]")
    assert lines[2].startswith("   ├─ openai [llm]  m-1-2024")
    assert "tokens in=3 out=5" in lines[2] and lines[2].endswith("success")
    assert lines[3].startswith("   ├─ openai [llm]") and lines[3].endswith("failed  ConnectionError: upstream 502")
    assert lines[4].startswith("   ├─ weather [tool]")
    assert lines[5].startswith("   └─ anthropic [llm]") and lines[5].endswith("cancelled")
    assert all(" ms" in line for line in lines)


def test_trace_highlights_errors_in_colour(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.jsonl"
    _record_run(path)
    assert cli.main(["trace", "--color", "always", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[3].startswith("   ├─ " + RED) and out[3].endswith(RESET) and "upstream 502" in out[3]
    assert YELLOW in out[5]
    assert RED not in out[2]


def test_trace_survives_bad_lines_open_scopes_and_missing_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "partial.jsonl"
    relay = Relay()
    writer = JsonlWriter(path)
    relay.subscribers.register(writer)
    relay.scope.push("still-running")
    writer.close()
    with open(path, "a") as fh:
        fh.write("not json\n[1, 2]\n\n")
    assert cli.main(["trace", "--color", "never", str(path)]) == 0
    assert capsys.readouterr().out.strip() == "still-running [function]  (open)"

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert cli.main(["trace", str(empty)]) == 0
    assert "(no scopes in this file)" in capsys.readouterr().out

    assert cli.main(["trace", str(tmp_path / "nope.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_cli_usage_and_unknown_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: relay-runtime" in capsys.readouterr().out
    assert cli.main(["--help"]) == 0
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_trace_shows_cost_per_node_and_the_wasted_share(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from relay_runtime.cost import PriceCatalog

    path = tmp_path / "run.jsonl"
    relay = Relay()
    relay.cost.use(PriceCatalog.from_mapping({"dictchat": {"m-1-2024": {"input": 1000.0, "output": 2000.0}}}))
    writer = JsonlWriter(path)
    relay.subscribers.register(writer, name="jsonl")
    seen: list[int] = []

    def reject_first(name: str, req: LLMRequest, resp: Any) -> Any:
        seen.append(1)
        if len(seen) == 1:
            raise ValueError("rejected")
        return resp

    relay.intercepts.register_llm_response("reject-first", 0, False, reject_first)
    with relay.scope.scope("turn"):
        with pytest.raises(ValueError):
            relay.llm.execute("openai", request(), lambda r: response(), codec=DictCodec())
        relay.llm.execute("openai", request(), lambda r: response(), codec=DictCodec())
        relay.llm.execute("openai", request(), lambda r: response(model="unpriced"), codec=DictCodec())
    writer.close()
    assert cli.main(["trace", "--color", "never", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    # 3 input tokens at 1000 and 5 output at 2000 per million: 0.013 an attempt.
    assert "cost 0.039000 USD" not in lines[0]
    assert "cost 0.026000 USD, wasted 0.013000 USD (50%), 1 unpriced (a lower bound)" in lines[0]
    assert "cost 0.013000 USD wasted" in lines[1] and lines[1].endswith("failed  ValueError: rejected")
    assert "cost 0.013000 USD" in lines[2] and "wasted" not in lines[2]
    assert "cost unpriced (no price: model)" in lines[3]


def test_a_scope_whose_attempts_all_lack_a_cost_says_unknown_not_zero() -> None:
    from relay_runtime.trace_tree import _describe_cost

    assert _describe_cost({"total": 0.0, "wasted": 0.0, "currency": "USD", "attempts": 0, "unpriced": 2}) == (
        "cost unknown (2 attempts without one)"
    )
    assert _describe_cost({"total": 0.0, "wasted": 0.0, "currency": "USD", "attempts": 1}) == "cost 0.000000 USD"


def test_trace_draws_hand_edited_events_and_parent_cycles_without_a_traceback(tmp_path: Path) -> None:
    """A field of the wrong type is shown as unknown; a scope in a parent loop is still drawn (a root)."""
    import subprocess
    import sys

    rows = [
        {"kind": "scope_start", "uuid": "a", "name": "self-parented", "parent_uuid": "a", "timestamp": 1},
        {"kind": "scope_start", "uuid": "b", "name": "loop-b", "parent_uuid": "c", "timestamp": 1},
        {"kind": "scope_start", "uuid": "c", "name": "loop-c", "parent_uuid": "b", "timestamp": 1},
        {"kind": "scope_start", "uuid": "d", "name": ["odd"], "scope_type": 3, "timestamp": "soon"},
        {
            "kind": "scope_end",
            "uuid": "d",
            "timestamp": [],
            "outcome": 7,
            "error_type": {"x": 1},
            "model_name": 5,
            "annotated_response": {"usage": {"input_tokens": "many"}, "model": []},
        },
    ]
    path = tmp_path / "edited.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    run = subprocess.run(
        [sys.executable, "-m", "relay_runtime.cli", "trace", "--color", "never", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "self-parented [None]  (open)"
    assert lines[1:3] == ["loop-b [None]  (open)", "└─ loop-c [None]  (open)"]
    assert lines[3] == "['odd'] [3]  {'x': 1}" and len(lines) == 4  # ended (not "open"), its duration unknown
