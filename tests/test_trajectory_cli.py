"""`relay-runtime trajectory export|validate` and ``validate_atif`` on our output and on broken files."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from trajectory_support import SESSION, TURN, run_ours

from relay_runtime import cli, session
from relay_runtime.integrations.trajectory import validate_atif


@pytest.fixture(autouse=True)
def clean_sessions():
    session.reset_for_tests()
    yield
    session.reset_for_tests()


@pytest.fixture
def recorded(tmp_path) -> tuple[Any, dict[str, Any]]:
    ours = run_ours("sync", journal_dir=tmp_path / "journal")
    assert ours.journal is not None and ours.journal.close()
    return tmp_path / "journal", ours.atif.export()


def test_export_writes_the_trajectory_the_live_exporter_gave(recorded, tmp_path, capsys):
    journal, live = recorded
    out = tmp_path / "out" / "t.json"
    argv = ["trajectory", "export", SESSION, TURN, "--format", "atif", "-o", str(out), "--session-dir", str(journal)]
    assert cli.main(argv) == 0
    exported = json.loads(out.read_text())
    assert exported == {**live, "agent": {"name": "agent", "version": "0"}}  # no model name given on the command line
    assert cli.main(["trajectory", "validate", str(out)]) == 0
    assert "valid ATIF (ATIF-v1.7, 3 steps)" in capsys.readouterr().out


def test_export_atof_prints_one_event_a_line(recorded, capsys):
    journal, _ = recorded
    assert cli.main(["trajectory", "export", SESSION, "-", "--format", "atof", "--session-dir", str(journal)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["name"], e["scope_category"]) for e in lines[:3]] == [
        ("turn", "start"),
        ("logical_llm_call", "start"),
        ("openai", "start"),
    ]
    assert all(e["atof_version"] == "0.1" and e["kind"] == "scope" for e in lines)


def test_export_of_nothing_or_bad_ids_is_an_error(tmp_path, capsys):
    assert cli.main(["trajectory", "export", "nobody", "r", "--format", "atif", "--session-dir", str(tmp_path)]) == 1
    assert "no trajectory recorded for session 'nobody' run 'r'" in capsys.readouterr().err
    assert cli.main(["trajectory", "export", "../x", "r", "--format", "atif", "--session-dir", str(tmp_path)]) == 2
    assert "invalid SESSION/RUN" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["trajectory", "export", SESSION, TURN, "--format", "xml"])


@pytest.mark.parametrize("what", ["atif", "atof"])
def test_export_from_a_session_dir_that_is_a_file_is_a_clear_error(tmp_path, capsys, what):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a journal")
    argv = ["trajectory", "export", SESSION, TURN, "--format", what, "--session-dir", str(a_file)]
    assert cli.main(argv) == 2  # before: NotADirectoryError's traceback
    err = capsys.readouterr().err
    assert err.startswith(f"relay-runtime trajectory: cannot read the journal in {a_file}: ") and err.count("\n") == 1


def _broken(trajectory: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """(what was broken, the broken trajectory, the error it must get)."""
    cases: list[tuple[str, Any, str]] = []

    def case(name: str, edit: Any, error: str) -> None:
        broken = copy.deepcopy(trajectory)
        edit(broken)
        cases.append((name, broken, error))

    case("no schema", lambda t: t.pop("schema_version"), "$.schema_version: is required")
    case("old schema", lambda t: t.update(schema_version="2.0"), "$.schema_version: must be an ATIF v1.x version")
    case("no session", lambda t: t.update(session_id=""), "$.session_id: must not be empty")
    case("agent name", lambda t: t["agent"].pop("name"), "$.agent.name: is required")
    case("steps type", lambda t: t.update(steps={}), "$.steps: must be a list, got dict")
    case("step order", lambda t: t["steps"][2].update(step_id=2), "$.steps[2].step_id: must increase: 2 follows 2")
    case("step id", lambda t: t["steps"][0].update(step_id="1"), "$.steps[0].step_id: must be a whole number >= 1")
    case("source", lambda t: t["steps"][0].update(source="robot"), "$.steps[0].source: must be one of user, agent")
    case("message", lambda t: t["steps"][1].pop("message"), "$.steps[1].message: is required")
    case("time", lambda t: t["steps"][1].update(timestamp="yesterday"), "$.steps[1].timestamp: must be an RFC 3339")
    case(
        "arguments",
        lambda t: t["steps"][1]["tool_calls"][0].update(arguments="{}"),
        "$.steps[1].tool_calls[0].arguments: must be an object, got str",
    )
    case(
        "observation",
        lambda t: t["steps"][1]["observation"]["results"][0].update(source_call_id="call_nope"),
        "$.steps[1].observation.results[0].source_call_id: names no tool call of this or an earlier step: 'call_nope'",
    )
    case(
        "tokens",
        lambda t: t["steps"][2]["metrics"].update(prompt_tokens=-1),
        "$.steps[2].metrics.prompt_tokens: must be a whole number >= 0",
    )
    case("user tools", lambda t: t["steps"][0].update(tool_calls=[]), "$.steps[0].tool_calls: only agent steps")
    case("unknown", lambda t: t["steps"][0].update(colour="red"), "$.steps[0].colour: is not a field of an ATIF step")
    case("totals", lambda t: t["final_metrics"].update(total_steps=9), "$.final_metrics.total_steps: says 9")
    return cases


def test_validate_names_each_error_by_its_json_path(recorded, tmp_path, capsys):
    _, live = recorded
    assert validate_atif(live) == []
    for name, broken, error in _broken(live):
        errors = validate_atif(broken)
        assert any(e.startswith(error) for e in errors), (name, errors)
        path = tmp_path / f"{name.replace(' ', '_')}.json"
        path.write_text(json.dumps(broken))
        assert cli.main(["trajectory", "validate", str(path)]) == 1, name
        assert error in capsys.readouterr().out
    assert validate_atif([]) == ["$: a trajectory must be a JSON object, got list"]


def test_validate_rejects_what_is_not_a_json_file(tmp_path, capsys):
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    assert cli.main(["trajectory", "validate", str(junk)]) == 1
    assert "$: not JSON" in capsys.readouterr().out
    assert cli.main(["trajectory", "validate", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err
