"""The main job: an agent session of two turns against a local scripted provider.

No keys, no network: the real ``openai`` and ``anthropic`` SDK clients talk to
a scripted in-process transport. What it shows:

- turn 1: an auxiliary summary whose first answer is invalid and is retried,
  then a title whose primary provider fails (the SDK's own retries included)
  and falls back to another provider: each one logical call;
- turn 2: a streamed draft closed early by the caller, a tool call, and a
  final answer.

Every call is priced (the demo's own prices, over the ``genai-prices`` data set
when it is installed) and the run's cost is printed at the end, with the share
wasted on attempts that failed. Every event goes to a JSONL file (drawn as a tree at the end), to the run
journal, and to OpenTelemetry: spans are printed compactly here, and sent over
OTLP too when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import anthropic
import openai
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import ConsoleSpanExporter

from relay_runtime import adapters, cost, session
from relay_runtime.adapters.testing import (
    Script,
    anthropic_client,
    anthropic_message_body,
    chat_chunks,
    chat_completion_body,
    error,
    json_reply,
    openai_chat_sse,
    openai_client,
    sse_reply,
)
from relay_runtime.auxiliary import auxiliary_call, set_route, validate_response
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.integrations.otel.providers import otlp_endpoint_configured, span_exporters
from relay_runtime.integrations.run_journal import JournalSubscriber, latest_run_summary
from relay_runtime.jsonl import JsonlWriter, read_events
from relay_runtime.trace_tree import build, render

OUT = Path(os.environ.get("RELAY_DEMO_DIR", "demo-output"))
NOTES = "Q3 planning: ship the journal, cut p99 latency, hire two engineers."


def compact_span(span: ReadableSpan) -> str:
    attrs = span.attributes or {}
    keep = ("gen_ai.request.model", "gen_ai.response.model", "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens", "gen_ai.usage.cost.amount", "relay.retry_count", "relay.sdk_retries",
            "relay.outcome", "error.type")
    short = {k: k.rsplit(".", 1)[-1] if k.startswith("gen_ai.usage") else k for k in keep}
    short["gen_ai.usage.cost.amount"] = "cost"
    shown = " ".join(f"{short[k]}={attrs[k]}" for k in keep if k in attrs)
    ms = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
    return f"  span {span.name:<28} {span.kind.name:<8} {ms:6.1f} ms  {shown}\n"


def scripted_clients() -> tuple[Any, Any]:
    primary = Script(
        [
            json_reply(chat_completion_body("", model="gpt-demo")),  # an empty answer: invalid
            json_reply(chat_completion_body("Ship the journal, cut p99, hire two.", model="gpt-demo")),
            error(503, "overloaded"),  # the title call: the SDK retries once by itself ...
            error(503, "overloaded"),  # ... and then gives up
            sse_reply(openai_chat_sse(chat_chunks(["Dear team, ", "this quarter ", "we will ", "ship."],
                                                  model="gpt-demo"))),
            json_reply(chat_completion_body("Plan sent: journal, latency, hiring.", model="gpt-demo")),
        ]
    )
    backup = Script([json_reply(anthropic_message_body("Q3: Journal, Latency, Hiring", model="claude-demo"))])
    return openai_client(primary, max_retries=1), anthropic_client(backup)


@auxiliary_call
def summarise(task: str, client: Any) -> Any:
    set_route("openai", "gpt-demo", "chat_completions")
    request = {"model": "gpt-demo", "messages": [{"role": "user", "content": f"Summarise: {NOTES}"}]}
    for _attempt in range(3):
        try:
            return validate_response(adapters.complete(client, request), task)
        except RuntimeError as exc:
            print(f"  {exc}; retrying")
    raise RuntimeError("no valid summary")


@auxiliary_call
def title(task: str, primary: Any, backup: Any) -> Any:
    set_route("openai", "gpt-demo", "chat_completions")
    try:
        return validate_response(
            adapters.complete(primary, {"model": "gpt-demo", "messages": [{"role": "user", "content": NOTES}]}),
            task,
        )
    except openai.APIStatusError as exc:
        print(f"  primary failed ({exc.status_code}); falling back to anthropic")
    set_route("anthropic", "claude-demo", "anthropic_messages")
    return validate_response(
        adapters.complete(
            backup, {"model": "claude-demo", "max_tokens": 64, "messages": [{"role": "user", "content": NOTES}]}
        ),
        task,
    )


def price_catalog() -> cost.PriceCatalog:
    """The demo's models at made-up prices (USD per million tokens), over the real data set when installed."""
    own = cost.PriceCatalog.from_mapping(
        {
            "openai": {"gpt-demo": {"input": 2.5, "output": 10.0, "cache_read": 1.25}},
            "anthropic": {"claude-demo": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}},
        }
    )
    try:
        return own.overlay(cost.PriceCatalog.default())
    except ImportError:  # the `cost` extra is not installed
        return own


def search_notes(args: dict[str, Any]) -> list[str]:
    return [line for line in NOTES.split(", ") if args["query"] in line]


def run() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    os.environ.setdefault(session.HOME_ENV, str(OUT / "home"))
    coordinator = session.SESSION_COORDINATOR
    host = coordinator.host(session.current_profile_key())
    relay = host.relay

    events_path = OUT / "events.jsonl"
    jsonl = JsonlWriter(events_path)
    relay.subscribers.register(jsonl, name="demo.jsonl")
    journal = JournalSubscriber(relay, session_dir=OUT / "journal")
    journal.register()
    exporters = [ConsoleSpanExporter(out=sys.stdout, formatter=compact_span)]
    if otlp_endpoint_configured("TRACES"):
        exporters += span_exporters(["otlp"])
    exporter = OTelExporter(span_exporters=exporters).attach(relay)
    host.retain_managed_execution("demo")
    cost.attach(host, price_catalog())

    primary, backup = scripted_clients()
    lease = coordinator.acquire_conversation(
        profile_key=host.profile_key, session_id="demo-session", platform="demo"
    )

    print("turn 1: summary (retried) and title (fallback)")
    turn = coordinator.begin_turn(lease, turn_id="turn-1", task_id="plan-digest")
    print(f"  summary: {summarise('compression', primary).choices[0].message.content}")
    print(f"  title:   {title('title_generation', primary, backup).content[0].text}")
    coordinator.end_turn(turn, outcome="success")

    print("turn 2: a draft streamed and closed early, a tool call, the answer")
    turn = coordinator.begin_turn(lease, turn_id="turn-2", task_id="send-plan")
    draft = adapters.stream(
        primary, {"model": "gpt-demo", "stream": True, "messages": [{"role": "user", "content": "Draft it"}]}
    )
    pieces = [chunk.choices[0].delta.content or "" for chunk, _ in zip(draft, range(3), strict=False)]
    draft.close()
    print(f"  draft (closed after 3 chunks): {''.join(pieces)!r}")
    found = relay.tools.execute("search_notes", {"query": "journal"}, search_notes)
    print(f"  tool search_notes -> {found}")
    answer = adapters.complete(primary, {"model": "gpt-demo", "messages": [{"role": "user", "content": "Send"}]})
    print(f"  answer: {answer.choices[0].message.content}")
    coordinator.end_turn(turn, outcome="success")
    coordinator.release_conversation(lease)
    spent = lease.conversation.cost  # the conversation's roll-up of every attempt's cost

    journal.flush(5)
    print("\nOpenTelemetry spans (GenAI semantic conventions):")
    sys.stdout.flush()
    exporter.shutdown()
    jsonl.close()

    print("\nThe trace tree (relay-runtime trace demo-output/events.jsonl):")
    print(render(build(read_events(events_path)), color=sys.stdout.isatty()))
    summary = latest_run_summary("demo-session", "turn-2", session_dir=OUT / "journal")
    print(f"\nRun journal: {OUT / 'journal'} (turn-2: {summary['event_count'] if summary else 0} rows, "
          f"{summary['terminal_state'] if summary else 'missing'})")
    share = f" ({spent.wasted / spent.total:.0%})" if spent.total else ""
    print(f"This run cost {spent.total:.6f} {spent.currency or 'USD'} over {spent.attempts} priced attempts, "
          f"{spent.wasted:.6f} of it wasted on attempts that failed{share}"
          + (f"; {spent.unpriced} attempts had no cost reported (a lower bound)" if spent.unpriced else ""))
    print(f"Events: {events_path}; relay diagnostics: {relay.diagnostics() or 'nothing swallowed'}")
    print(
        "\nWatch the run in a browser:\n"
        f"  .venv/bin/relay-runtime journal serve --session-dir {OUT / 'journal'}\n"
        "  then open http://127.0.0.1:8766/ui/sessions/demo-session/runs/turn-2"
    )


if __name__ == "__main__":
    for module in (openai, anthropic):  # the SDKs' own log lines about retries are noise here
        import logging

        logging.getLogger(module.__name__).setLevel(logging.ERROR)
    run()
