"""One installed name: the wheel, the editable install and a checkout all expose only ``relay_runtime``."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Imports every layer and reports, for each module loaded from this project, the name it was loaded under.
PROBE = textwrap.dedent(
    """
    import json, os, sys
    import relay_runtime.adapters, relay_runtime.integrations.otel
    import relay_runtime.integrations.run_journal, relay_runtime.integrations.voice_relay
    from relay_runtime import session
    from relay_runtime.adapters import instrument
    import relay_runtime.integrations
    root = os.path.realpath(os.path.dirname(relay_runtime.__file__))
    layers = tuple(
        os.path.realpath(os.path.dirname(package.__file__)) + os.sep
        for package in (relay_runtime, relay_runtime.adapters, relay_runtime.integrations)
    )
    names = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and os.path.realpath(path).startswith(layers):
            names.setdefault(os.path.realpath(path), []).append(name)
    print(json.dumps({
        "package": root,
        "modules": names,
        "registry_module": instrument.__module__,
        "coordinator_module": type(session.SESSION_COORDINATOR).__module__,
    }))
    """
)


def _probe(python: str, cwd: Path, env: dict[str, str] | None = None) -> dict:
    done = subprocess.run(
        [python, "-c", PROBE], cwd=cwd, capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _assert_one_name_each(report: dict) -> None:
    doubled = {path: names for path, names in report["modules"].items() if len(names) > 1}
    assert not doubled, f"modules imported under two names: {doubled}"
    names = [name for names in report["modules"].values() for name in names]
    assert names, "the probe loaded nothing from the project"
    assert all(name == "relay_runtime" or name.startswith("relay_runtime.") for name in names), names
    assert report["registry_module"] == "relay_runtime.adapters.instrument"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("relay_runtime-*.whl")
    return built


def test_wheel_installs_only_relay_runtime(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top = {name.split("/", 1)[0] for name in names}
        entry_points = archive.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert {name for name in top if not name.endswith(".dist-info")} == {"relay_runtime"}
    assert "relay_runtime/adapters/dispatch.py" in names
    assert "relay_runtime/integrations/voice_relay/server.py" in names
    assert "relay_runtime/py.typed" in names
    assert "relay_runtime/integrations/run_journal/ui/app.js" in names  # the run page is package data
    # Every entry point names a module under the one package.
    targets = [line.split("=", 1)[1].strip() for line in entry_points.splitlines() if "=" in line]
    assert targets and all(target.startswith("relay_runtime.") for target in targets), targets


def test_wheel_in_a_clean_venv_imports_from_outside_the_repository(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = str(env_dir / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The dependencies come from this environment's site-packages, read as a plain path: its .pth files
    # (among them the editable install's finder) are not run, so only the wheel provides relay_runtime.
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    elsewhere = tmp_path / "user-project"
    (elsewhere / "adapters").mkdir(parents=True)  # a user's own package of the same name no longer collides
    (elsewhere / "adapters" / "__init__.py").write_text("MINE = True\n")
    report = _probe(python, elsewhere)
    assert report["package"].startswith(str(env_dir)), report["package"]
    _assert_one_name_each(report)

    help_text = subprocess.run(
        [str(env_dir / "bin" / "relay-runtime"), "--help"], cwd=elsewhere, capture_output=True, text=True, check=False
    )
    assert help_text.returncode == 0, help_text.stderr
    assert "journal" in help_text.stdout and "voice" in help_text.stdout and "trace" in help_text.stdout
    plugins = subprocess.run(
        [
            python,
            "-c",
            "from importlib.metadata import entry_points\n"
            "for ep in entry_points(group='pytest11'):\n"
            "    if ep.value.startswith('relay_runtime'): print(ep.load().__name__)",
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=False,
    )
    assert plugins.returncode == 0, plugins.stderr
    assert sorted(plugins.stdout.split()) == ["relay_runtime.adapters.pytest_plugin", "relay_runtime.pytest_plugin"]


@pytest.mark.parametrize("where", ["repository root", "elsewhere"])
def test_checkout_and_editable_install_load_each_module_once(where: str, tmp_path: Path) -> None:
    # From the root, the folder relay_runtime/ comes first on sys.path; elsewhere, the editable install's mapping.
    cwd = ROOT if where == "repository root" else tmp_path
    report = _probe(sys.executable, cwd)
    assert Path(report["package"]) == ROOT / "relay_runtime"
    _assert_one_name_each(report)


def test_core_imports_no_adapter_and_no_integration() -> None:
    code = (
        "import sys, relay_runtime, relay_runtime.session, relay_runtime.calls, relay_runtime.auxiliary\n"
        "import relay_runtime.cli, relay_runtime.pytest_plugin\n"
        "print([m for m in sys.modules if m.startswith(('relay_runtime.adapters', 'relay_runtime.integrations'))])"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_pytest_and_the_demo_run_from_the_repository_root(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env["RELAY_DEMO_DIR"] = str(tmp_path / "demo-output")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_core_ids.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout
    demo = subprocess.run(
        [sys.executable, "examples/demo.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "relay_runtime.adapters" not in demo.stderr


def test_no_code_of_the_project_imports_the_old_top_level_names() -> None:
    # From the repository root the folders adapters/ and integrations/ are importable as top-level
    # packages too; importing them that way would load every module a second time under another name.
    offenders = []
    for path in sorted(ROOT.glob("**/*.py")):
        if any(part.startswith(".") or part in {"build", "dist"} for part in path.relative_to(ROOT).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] in {"adapters", "integrations"}:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert offenders == []
