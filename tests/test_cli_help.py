"""`relay-runtime --help` and each subcommand's `--help` say what they do; junk input is named, not drawn."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay_runtime import cli


def help_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own --help
        code = exc.code
    assert code == 0
    return capsys.readouterr().out


def test_top_level_help_describes_every_command(capsys) -> None:
    out = help_of(["--help"], capsys)
    described = {}
    for line in out.splitlines():
        parts = line.split(None, 1)
        if line.startswith("  ") and len(parts) == 2:
            described[parts[0]] = parts[1]
    assert set(described) == {"trace", "journal", "voice", "trajectory"}
    assert "ATIF" in described["trajectory"]
    assert "scope tree" in described["trace"]
    assert "journal" in described["journal"]
    assert "relay" in described["voice"]
    assert all(len(text) > 15 and "`" not in text for text in described.values())


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["trace", "--help"], "Draw the scope tree of a run from a JSONL event file"),
        (["journal", "--help"], "the rows JournalSubscriber wrote for each turn"),
        (["journal", "show", "--help"], "Print a run's rows and its summary"),
        (["journal", "tail", "--help"], "exit at its terminal row"),
        (["voice", "--help"], "The realtime voice relay"),
        (["voice", "serve", "--help"], "print a device token"),
    ],
)
def test_each_subcommand_help_says_what_it_does(argv, says, capsys) -> None:
    out = " ".join(help_of(argv, capsys).split())
    assert says in out


def test_trace_of_a_file_that_is_not_a_trace_fails_and_says_so(tmp_path: Path, capsys) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list\n- milk\n{\"a\": 1}\n")
    assert cli.main(["trace", str(notes)]) == 2
    captured = capsys.readouterr()
    assert "is not a JSONL trace" in captured.err and str(notes) in captured.err
    assert captured.out == ""
    binary = tmp_path / "image.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    assert cli.main(["trace", str(binary)]) == 2
    assert "relay-runtime trace:" in capsys.readouterr().err
