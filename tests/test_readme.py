"""Every Python block of README.md runs, top to bottom in one namespace, as a reader pasting it would.

A block preceded by ``<!-- readme: not run -->`` is skipped; one preceded by
``<!-- readme: pytest -->`` is a test file, run by pytest. Shell blocks (no
language, or ``sh``) are not run. Tracebacks name README.md and its line numbers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!--\s*readme:\s*(not run|pytest)\s*-->\s*$")


@dataclass
class Block:
    line: int  # 1-based line of the block's first code line
    language: str
    marker: str | None
    code: str


def blocks(text: str) -> list[Block]:
    found: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        marker = None
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        if j >= 0 and (m := MARKER.match(lines[j].strip())):
            marker = m.group(1)
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        found.append(Block(i + 2, opening.group(1), marker, "\n".join(lines[i + 1 : end]) + "\n"))
        i = end + 1
    return found


def python_blocks() -> list[Block]:
    return [b for b in blocks(README.read_text(encoding="utf-8")) if b.language == "python"]


DRIVER = textwrap.dedent(
    """
    import json, sys
    namespace = {"__name__": "__readme__"}
    for line, code in json.load(sys.stdin):
        exec(compile("\\n" * (line - 1) + code, "README.md", "exec"), namespace)
    """
)


def test_the_readme_has_the_blocks_a_newcomer_needs() -> None:
    found = python_blocks()
    assert len(found) >= 8
    text = README.read_text(encoding="utf-8")
    assert "## Five-minute tour" in text
    tour = next(b for b in found if ".attach(coordinator)" in b.code)
    assert tour.marker is None and "@auxiliary_call" in tour.code and "scripted_openai" in tour.code
    for name in ("relay_turn", "relay_events", "scripted_openai", "scripted_anthropic", "relay_home", "relay_host"):
        assert f"`{name}`" in text
    assert [b for b in found if b.marker == "pytest"], "the example test is missing"


def test_every_python_block_runs(tmp_path: Path) -> None:
    import json

    runnable = [(b.line, b.code) for b in python_blocks() if b.marker is None]
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k not in ("RELAY_HOME", "CI_READONLY")
    }
    env["RELAY_HOME"] = str(tmp_path / "home")
    result = subprocess.run(
        [sys.executable, "-c", DRIVER],
        input=json.dumps(runnable),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Paris." in result.stdout  # the tour's answer
    assert '"name": "invoke_agent tour-agent"' in result.stdout  # and its spans, on the console


def test_the_readme_example_test_passes(tmp_path: Path) -> None:
    (example,) = [b for b in python_blocks() if b.marker == "pytest"]
    test_file = tmp_path / "test_readme_example.py"
    test_file.write_text("\n" * (example.line - 1) + example.code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-4000:]
    assert "1 passed" in result.stdout


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        ("```python\nx = 1\n```\n", [("python", None)]),
        ("<!-- readme: not run -->\n```python\nx\n```\n```\nmake test\n```\n", [("python", "not run"), ("", None)]),
        ("<!-- readme: pytest -->\n\n```python\ndef test(): pass\n```\n", [("python", "pytest")]),
    ],
)
def test_block_extraction(snippet: str, expected: list[tuple[str, str | None]]) -> None:
    assert [(b.language, b.marker) for b in blocks(snippet)] == expected
