"""An install of the core alone (no provider SDK, so no httpx2): pytest and the core still work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _without_httpx2(tmp_path: Path) -> dict[str, str]:
    """An environment where ``import httpx2`` fails as it does when no SDK is installed."""
    shadow = tmp_path / "shadow"
    (shadow / "httpx2").mkdir(parents=True)
    (shadow / "httpx2" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'httpx2'\", name='httpx2')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(shadow), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def test_pytest_runs_and_the_sdk_fixtures_say_what_to_install(tmp_path: Path) -> None:
    env = _without_httpx2(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_agent.py").write_text(
        "def test_core(relay_turn, relay_events):\n"
        "    assert relay_events.events == []\n"
        "\n"
        "def test_sdk(scripted_openai):\n"
        "    pass\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_agent.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "1 passed, 1 error" in done.stdout, done.stdout + done.stderr
    assert "scripted_openai needs the provider SDKs: pip install 'relay-runtime[openai,anthropic]'" in done.stdout

    use = subprocess.run(
        [sys.executable, "-c", "from relay_runtime import adapters\nadapters.complete"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert use.returncode == 1
    assert "relay_runtime.adapters.complete needs a provider SDK: pip install 'relay-runtime[openai]'" in use.stderr
