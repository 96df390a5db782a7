"""End to end: a relay run exported over OTLP/HTTP to a real Arize Phoenix, read back over its REST API.

Phoenix runs from its own virtual environment (``bash tests/phoenix/setup.sh``
builds ``.phoenix-venv``; ``PHOENIX_VENV`` points elsewhere), started here on
loopback with a free port and a temporary working directory, and stopped by
its process group. Without that venv the test is skipped locally and fails
under ``CI=true``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from otel_support import span_path  # noqa: F401  (each test runs on both span paths)

from relay_runtime import adapters, auxiliary, session
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.otel import OTelExporter

pytestmark = pytest.mark.usefixtures("span_path")

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("PHOENIX_VENV") or ROOT / ".phoenix-venv")
PHOENIX = VENV / "bin" / "phoenix"
START_TIMEOUT_S = 180.0
READ_TIMEOUT_S = 60.0


def _require_phoenix() -> None:
    if PHOENIX.exists():
        return
    message = f"Arize Phoenix is not installed at {VENV}: run `bash tests/phoenix/setup.sh` to build its venv"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class Phoenix:
    def __init__(self, workdir: Path) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        tmp = workdir / "tmp"
        tmp.mkdir(parents=True)
        env = {
            **os.environ,
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": "0",
            "PHOENIX_WORKING_DIR": str(workdir),
            "TMPDIR": str(tmp),
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }
        for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_EXPORTER", "PHOENIX_COLLECTOR_ENDPOINT"):
            env.pop(var, None)
        self.log_path = workdir / "phoenix.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [str(PHOENIX), "serve"],
            env=env,
            cwd=workdir,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Phoenix exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                status, _ = _get(f"{self.base}/healthz", timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"Phoenix not ready after {START_TIMEOUT_S}s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()

    def spans(self, project: str, expected: int) -> list[dict[str, Any]]:
        """Poll the project's spans until ``expected`` arrived (Phoenix inserts in batches)."""
        deadline = time.monotonic() + READ_TIMEOUT_S
        got: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            status, body = _get(f"{self.base}/v1/projects/{project}/spans?limit=1000")
            if status == 200:
                got = json.loads(body)["data"]
                if len(got) >= expected:
                    return got
            time.sleep(0.5)
        raise AssertionError(f"Phoenix has {len(got)} of {expected} spans in {project!r}:\n{self.log_tail()}")


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    _require_phoenix()
    server = Phoenix(tmp_path_factory.mktemp("phoenix"))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _run_agent(
    project: str, phoenix: Phoenix, conventions: tuple[str, ...], monkeypatch: Any, path: str, *, capture: bool = False
) -> str:
    """One conversation, one turn: a failed OpenAI attempt, an Anthropic fallback, a tool.

    Real SDK clients over a scripted transport, through the adapters.
    """
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", f"openinference.project.name={project}")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "relay-e2e")
    host = session.SESSION_COORDINATOR.host(f"profile-{project}")
    exporter = OTelExporter(
        span_exporters=[OTLPSpanExporter(endpoint=f"{phoenix.base}/v1/traces", timeout=10)],
        conventions=conventions,
        capture_content=capture,
    ).attach(host)
    # The default setup (a bounded batch processor) builds spans at their end; Phoenix must not tell.
    assert (exporter._fast is not None) is (path == "deferred")
    lease = session.SESSION_COORDINATOR.acquire_conversation(
        profile_key=host.profile_key, session_id=f"sess-{project}", platform="e2e", agent_name=f"agent-{project}"
    )
    turn = session.SESSION_COORDINATOR.begin_turn(lease, turn_id="t1", task_id="k1")
    messages = [{"role": "user", "content": "hi"}]
    primary = t.scripted_openai(t.error(503, "upstream overloaded"), max_retries=0)
    usage = t.anthropic_usage(20, 8, cache_read=30)
    fallback = t.scripted_anthropic(t.json_reply(t.anthropic_message_body("ok", model="claude-e2e-1", usage=usage)))

    @auxiliary.auxiliary_call
    def answer(task: str) -> Any:
        auxiliary.set_route("openai", "gpt-e2e", "chat_completions")
        try:
            return adapters.complete(primary.client, {"model": "gpt-e2e", "messages": messages})
        except openai.InternalServerError:
            auxiliary.set_route("anthropic", "claude-e2e", "anthropic_messages")
            response = adapters.complete(
                fallback.client, {"model": "claude-e2e", "max_tokens": 64, "messages": messages}
            )
            return auxiliary.validate_response(response, task)

    answer("reply")
    host.relay.tools.execute("lookup", {"q": "x"}, lambda a: "found")
    session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
    session.SESSION_COORDINATOR.release_conversation(lease)
    exporter.shutdown()
    assert exporter.diagnostics().get("otel.spans_export_failed", 0) == 0
    return f"agent-{project}"


def _check_tree(spans: list[dict[str, Any]], profile: str) -> dict[str, dict[str, Any]]:
    by_name: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        by_name.setdefault(s["name"], []).append(s)
    assert sorted(by_name) == sorted(
        [
            f"invoke_agent {profile}",
            "turn",
            "logical_llm_call",
            "chat gpt-e2e",
            "chat claude-e2e",
            "execute_tool lookup",
        ]
    )
    one = {name: found[0] for name, found in by_name.items()}
    assert all(len(found) == 1 for found in by_name.values())

    def parent(name: str) -> str | None:
        pid = one[name]["parent_id"]
        if pid is None:
            return None
        (p,) = [n for n, s in one.items() if s["context"]["span_id"] == pid]
        return p

    assert parent(f"invoke_agent {profile}") is None
    assert parent("turn") == f"invoke_agent {profile}"
    assert parent("logical_llm_call") == "turn"
    assert parent("chat gpt-e2e") == parent("chat claude-e2e") == "logical_llm_call"
    assert parent("execute_tool lookup") == "turn"
    assert len({s["context"]["trace_id"] for s in spans}) == 1

    kinds = {name: s["span_kind"] for name, s in one.items()}
    assert kinds[f"invoke_agent {profile}"] == "AGENT"
    assert kinds["chat gpt-e2e"] == kinds["chat claude-e2e"] == "LLM"
    assert kinds["execute_tool lookup"] == "TOOL"

    failed, ok = one["chat gpt-e2e"], one["chat claude-e2e"]
    assert failed["status_code"] == "ERROR" and "upstream overloaded" in failed["status_message"]
    assert ok["status_code"] != "ERROR"
    a = ok["attributes"]
    assert a["gen_ai.request.model"] == "claude-e2e"
    assert a["gen_ai.response.model"] == "claude-e2e-1"
    assert a["llm.model_name"] in ("claude-e2e", "claude-e2e-1")
    assert a["gen_ai.usage.input_tokens"] == 50  # Anthropic: input + cache read
    assert a["llm.token_count.prompt"] == 50
    assert a["llm.token_count.completion"] == 8
    assert a["llm.token_count.total"] == 58
    assert a["gen_ai.conversation.id"].startswith("sess-")
    return one


def test_phoenix_reads_gen_ai_spans_without_any_custom_work(phoenix, relay_home, monkeypatch, request):
    path = request.getfixturevalue("span_path")
    project = f"relay-genai-{path}"
    profile = _run_agent(project, phoenix, ("gen_ai",), monkeypatch, path)
    spans = phoenix.spans(project, expected=6)
    one = _check_tree(spans, profile)
    # Only gen_ai.* was sent: Phoenix derived the LLM view itself.
    assert "openinference.span.kind" not in json.dumps(one["chat claude-e2e"]["attributes"])


def test_phoenix_reads_openinference_spans(phoenix, relay_home, monkeypatch, request):
    path = request.getfixturevalue("span_path")
    project = f"relay-oi-{path}"
    profile = _run_agent(project, phoenix, ("gen_ai", "openinference"), monkeypatch, path)
    spans = phoenix.spans(project, expected=6)
    one = _check_tree(spans, profile)
    assert one["turn"]["span_kind"] == "CHAIN"
    assert one["logical_llm_call"]["span_kind"] == "CHAIN"
    assert one["chat claude-e2e"]["attributes"]["llm.provider"] == "anthropic"
    assert one["chat claude-e2e"]["attributes"]["session.id"] == f"sess-{project}"


@pytest.mark.parametrize("conventions", [("gen_ai",), ("gen_ai", "openinference")], ids=["gen_ai", "openinference"])
def test_phoenix_shows_captured_messages(phoenix, relay_home, monkeypatch, request, conventions):
    path = request.getfixturevalue("span_path")
    project = f"relay-content-{conventions[-1]}-{path}"
    agent = _run_agent(project, phoenix, conventions, monkeypatch, path, capture=True)
    one = _check_tree(phoenix.spans(project, expected=6), agent)
    # What Phoenix's LLM view renders as the span's messages (it maps gen_ai.* onto these itself).
    for name, reply in (("chat gpt-e2e", None), ("chat claude-e2e", "ok")):
        a = one[name]["attributes"]
        assert (a["llm.input_messages.0.message.role"], a["llm.input_messages.0.message.content"]) == ("user", "hi")
        if reply is not None:
            assert a["llm.output_messages.0.message.role"] == "assistant"
            assert a["llm.output_messages.0.message.content"] == reply
        assert "sk-test" not in json.dumps(a)
