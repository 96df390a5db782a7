"""AtofExporter and AtifExporter on their own: files, streams, drops, conversations, tool matching, sinks."""

from __future__ import annotations

import http.server
import io
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from trajectory_support import MODEL, SESSION, run_ours

from relay_runtime import Relay, adapters, session
from relay_runtime.adapters import testing
from relay_runtime.integrations.run_journal import FileStore
from relay_runtime.integrations.trajectory import (
    AtifExporter,
    AtofExporter,
    FileSink,
    FsspecSink,
    HttpSink,
    atif_from_journal,
    validate_atif,
)


@pytest.fixture(autouse=True)
def clean_sessions():
    session.reset_for_tests()
    yield
    session.reset_for_tests()


# -- ATOF ------------------------------------------------------------------------------------


def test_atof_file_appends_or_overwrites(tmp_path):
    path = tmp_path / "run.atof.jsonl"
    relay = Relay()
    for mode, expected in (("append", 3), ("append", 6), ("overwrite", 3)):
        exporter = AtofExporter(path, mode=mode).attach(relay)
        with relay.scope.scope("agent", "agent", input={"q": 1}) as handle:
            relay.scope.mark("note", data={"k": 1}, parent=handle)
        assert exporter.shutdown()
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert len(lines) == expected, mode
    assert [(e["kind"], e.get("scope_category"), e["name"]) for e in lines] == [
        ("scope", "start", "agent"),
        ("mark", None, "note"),
        ("scope", "end", "agent"),
    ]
    start, mark, end = lines
    assert start["data"] == {"q": 1} and start["attributes"] == [] and "attributes" not in mark
    assert mark["parent_uuid"] == start["uuid"] and mark["propagation_root_uuid"] == start["uuid"]
    assert end["metadata"]["relay.outcome"] == "success" and end["metadata"]["otel.status_code"] == "OK"
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_atof_bad_arguments_are_named():
    with pytest.raises(ValueError, match="a path or a stream"):
        AtofExporter()
    with pytest.raises(ValueError, match="a path or a stream"):
        AtofExporter("x", stream=io.StringIO())
    with pytest.raises(ValueError, match="mode must be 'append' or 'overwrite', got 'w'"):
        AtofExporter(stream=io.StringIO(), mode="w")
    with pytest.raises(TypeError, match="writable text stream"):
        AtofExporter(stream=object())  # type: ignore[arg-type]


class _SlowStream(io.StringIO):
    """A sink that holds the writer until released: the agent must go on meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()

    def write(self, text: str) -> int:
        self.entered.set()
        self.release.wait(10)
        return super().write(text)


def test_a_slow_sink_never_holds_the_agent_and_overflow_is_counted():
    relay = Relay()
    stream = _SlowStream()
    exporter = AtofExporter(stream=stream, max_buffered=5).attach(relay)
    with relay.scope.scope("first", "function"):
        pass
    assert stream.entered.wait(5)  # the writer is stuck in the sink with the first two lines
    for i in range(20):
        with relay.scope.scope(f"s{i}", "function"):
            pass
    assert exporter.dropped == 35  # 40 events, 5 buffered
    assert relay.diagnostics()["trajectory.atof_dropped"] == 35
    stream.release.set()
    assert exporter.force_flush(5)
    assert exporter.written == 7
    exporter.shutdown()
    assert not stream.closed  # a stream it was given stays open
    with relay.scope.scope("after", "function"):
        pass
    assert exporter.written == 7


def test_atof_writes_llm_annotations_and_the_tool_call_id():
    ours = run_ours("sync")
    starts = [e for e in ours.atof_lines if e["category"] == "llm" and e["scope_category"] == "start"]
    question = starts[0]["category_profile"]["annotated_request"]["messages"][1]
    assert question["content"] == "What is the weather in Paris?"
    assert starts[0]["data"]["content"]["model"] == MODEL
    ends = [e for e in ours.atof_lines if e["category"] == "llm" and e["scope_category"] == "end"]
    assert ends[0]["metadata"]["relay.error_type"] == "InternalServerError"
    assert ends[1]["category_profile"]["annotated_response"]["tool_calls"][0]["id"] == "call_w1"
    assert ends[1]["data"]["choices"][0]["message"]["tool_calls"][0]["id"] == "call_w1"  # the provider's own body
    (tool,) = [e for e in ours.atof_lines if e["category"] == "tool" and e["scope_category"] == "end"]
    assert tool["category_profile"] == {"tool_call_id": "call_w1"}


# -- ATIF ------------------------------------------------------------------------------------


def _one_turn(session_id: str, reply: str, *, tool: tuple[str, Any] | None = None, prices: Any = None) -> None:
    coordinator = session.SESSION_COORDINATOR
    calls = [{"id": "call_x", "name": "lookup", "arguments": '{"key": "a"}'}] if tool else None
    bodies = [testing.chat_completion_body(None if tool else reply, model=MODEL, tool_calls=calls)]
    scripted = testing.scripted_openai(*(testing.json_reply(b) for b in bodies))
    lease = coordinator.acquire_conversation(
        profile_key=session.current_profile_key(), session_id=session_id, platform="t"
    )
    if prices is not None:
        lease.host.relay.cost.use(prices)
    turn = coordinator.begin_turn(lease, turn_id="r1", task_id="t1")
    adapters.complete(scripted.client, {"model": MODEL, "messages": [{"role": "user", "content": f"hi {session_id}"}]})
    if tool is not None:
        lease.host.relay.tools.execute(tool[0], tool[1], lambda args: "found")  # no tool_call_id given
    coordinator.end_turn(turn, outcome="success")
    coordinator.release_conversation(lease)


def test_atif_keeps_each_conversation_apart_and_asks_which_one():
    everything = AtifExporter().attach(session.SESSION_COORDINATOR)
    only_b = AtifExporter("b").attach(session.SESSION_COORDINATOR)
    _one_turn("a", "for a")
    _one_turn("b", "for b")
    with pytest.raises(ValueError, match=r"saw several conversations \(a, b\): pass export\(session_id=\.\.\.\)"):
        everything.export()
    assert everything.sessions() == ["a", "b"]
    assert [s["message"] for s in everything.export("a")["steps"]] == ["hi a", "for a"]
    assert [s["message"] for s in only_b.export()["steps"]] == ["hi b", "for b"]
    assert only_b.sessions() == ["b"]
    with pytest.raises(ValueError, match="collects session 'b' only, not 'a'"):
        only_b.export("a")
    with pytest.raises(ValueError, match="has seen no conversation yet"):
        AtifExporter().export()
    everything.clear()
    assert everything.sessions() == []
    assert AtifExporter("never").export()["steps"] == []


def test_a_tool_run_without_a_call_id_is_matched_by_name_and_arguments():
    exporter = AtifExporter().attach(session.SESSION_COORDINATOR)
    _one_turn(SESSION, "", tool=("lookup", {"key": "a"}))
    steps = exporter.export()["steps"]
    assert steps[1]["tool_calls"][0]["tool_call_id"] == "call_x"
    assert steps[1]["observation"]["results"][0]["source_call_id"] == "call_x"
    assert steps[1]["observation"]["results"][0]["content"] == "found"


def test_a_tool_nobody_asked_for_becomes_a_system_step():
    exporter = AtifExporter().attach(session.SESSION_COORDINATOR)
    _one_turn(SESSION, "fine", tool=("other", {"key": "z"}))
    trajectory = exporter.export()
    assert trajectory["steps"][-1]["source"] == "system"
    assert "source_call_id" not in trajectory["steps"][-1]["observation"]["results"][0]
    assert validate_atif(trajectory) == []


def test_a_tool_run_as_soon_as_its_call_streamed_in_answers_that_call():
    # An agent that runs a tool once its call is whole, before the stream is drained: the tool ends before the
    # call that asked for it. It was a "tool nobody asked for" step before the user's, the call left unanswered.
    exporter = AtifExporter().attach(session.SESSION_COORDINATOR)
    coordinator = session.SESSION_COORDINATOR
    call = {"id": "call_a", "name": "weather", "arguments": '{"city": "Paris"}'}
    chunks = testing.chat_chunks(["Let me look. "], model=MODEL, tool_call=call, finish_reason="tool_calls")
    scripted = testing.scripted_openai(testing.sse_reply(testing.openai_chat_sse(chunks)), max_retries=0)
    lease = coordinator.acquire_conversation(profile_key=session.current_profile_key(), session_id="e", platform="t")
    relay = lease.host.relay
    turn = coordinator.begin_turn(lease, turn_id="r1", task_id="t1")
    relay.tools.execute("clock", {}, lambda args: "noon", tool_call_id="call_unasked")  # no step asks for it
    for chunk in adapters.stream(
        scripted.client, {"model": MODEL, "messages": [{"role": "user", "content": "Paris?"}]}
    ):
        if chunk.choices and chunk.choices[0].finish_reason == "tool_calls":
            relay.tools.execute("weather", {"city": "Paris"}, lambda args: "sunny", tool_call_id="call_a")
    coordinator.end_turn(turn, outcome="success")
    trajectory = exporter.export()
    steps = trajectory["steps"]
    assert [(s["step_id"], s["source"]) for s in steps] == [(1, "system"), (2, "user"), (3, "agent")]
    assert steps[0]["message"] == "tool clock"
    (result,) = steps[2]["observation"]["results"]
    assert (result["source_call_id"], result["content"]) == ("call_a", "sunny")
    assert validate_atif(trajectory) == []


def test_a_call_that_failed_every_attempt_is_a_step_saying_so():
    exporter = AtifExporter().attach(session.SESSION_COORDINATOR)
    coordinator = session.SESSION_COORDINATOR
    scripted = testing.scripted_openai(testing.error(500), max_retries=0)
    lease = coordinator.acquire_conversation(profile_key=session.current_profile_key(), session_id="f", platform="t")
    turn = coordinator.begin_turn(lease, turn_id="r1", task_id="t1")
    with pytest.raises(Exception, match="500"):
        adapters.complete(scripted.client, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    coordinator.end_turn(turn, outcome="failed")
    steps = exporter.export()["steps"]
    assert [s["source"] for s in steps] == ["user", "agent"]
    assert steps[1]["message"] == "" and steps[1]["extra"]["outcome"] == "failed"
    assert steps[1]["extra"]["error"]["type"] == "InternalServerError"


def test_with_a_price_catalog_each_step_says_what_it_cost():
    from relay_runtime.cost import PriceCatalog

    exporter = AtifExporter().attach(session.SESSION_COORDINATOR)
    catalog = PriceCatalog.from_mapping({"openai": {MODEL: {"input": 1.0, "output": 4.0}}})
    try:
        _one_turn("priced", "ok", prices=catalog)
    finally:
        for host in session.SESSION_COORDINATOR.hosts():
            host.relay.cost.use(None)
    trajectory = exporter.export()
    metrics = trajectory["steps"][1]["metrics"]
    # chat_usage(): 12 prompt and 5 completion tokens at 1 and 4 USD per million.
    assert metrics["cost_usd"] == pytest.approx((12 * 1.0 + 5 * 4.0) / 1e6)
    assert trajectory["final_metrics"]["total_cost_usd"] == metrics["cost_usd"]
    assert validate_atif(trajectory) == []


def test_the_total_cost_counts_the_attempts_a_step_stands_for(tmp_path):
    # An intercept that asks again when the first answer will not do: both answers were paid for.
    from relay_runtime.cost import PriceCatalog
    from relay_runtime.integrations.run_journal import JournalSubscriber, latest_run_summary

    coordinator = session.SESSION_COORDINATOR
    exporter = AtifExporter().attach(coordinator)
    journal = JournalSubscriber(session_dir=tmp_path).attach(coordinator)
    bodies = [testing.chat_completion_body(text, model=MODEL) for text in ("no", "a longer answer")]
    scripted = testing.scripted_openai(*(testing.json_reply(b) for b in bodies), max_retries=0)
    lease = coordinator.acquire_conversation(profile_key=session.current_profile_key(), session_id="w", platform="t")
    relay = lease.host.relay
    relay.cost.use(PriceCatalog.from_mapping({"openai": {MODEL: {"input": 1.0, "output": 4.0}}}))

    def ask_again(name: str, request: Any, call_next: Any) -> Any:
        first = call_next(request)
        return call_next(request) if len(first.choices[0].message.content) < 5 else first

    relay.intercepts.register_llm_execution("ask_again", 0, ask_again)
    try:
        turn = coordinator.begin_turn(lease, turn_id="r1", task_id="t1")
        adapters.complete(scripted.client, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
        coordinator.end_turn(turn, outcome="success")
    finally:
        relay.intercepts.deregister_llm_execution("ask_again")
        relay.cost.use(None)
    assert journal.close()
    trajectory = exporter.export()
    step = trajectory["steps"][1]
    each = (12 * 1.0 + 5 * 4.0) / 1e6  # chat_usage(): 12 prompt and 5 completion tokens
    assert step["metrics"]["cost_usd"] == pytest.approx(each) and step["extra"]["wasted_cost_usd"] == pytest.approx(
        each
    )
    assert trajectory["final_metrics"]["total_cost_usd"] == pytest.approx(2 * each)
    summary = latest_run_summary("w", "r1", session_dir=tmp_path)
    assert summary["cost"]["total"] == pytest.approx(trajectory["final_metrics"]["total_cost_usd"])
    assert validate_atif(trajectory) == []


def test_conversations_run_at_once_on_threads_each_get_their_own_trajectory():
    exporter = AtifExporter().attach(session.SESSION_COORDINATOR)
    names = [f"t{i}" for i in range(6)]
    threads = [threading.Thread(target=_one_turn, args=(name, f"reply {name}")) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(exporter.sessions()) == names
    for name in names:
        assert [s["message"] for s in exporter.export(name)["steps"]] == [f"hi {name}", f"reply {name}"]


def test_a_stream_the_caller_left_early_is_a_cancelled_step():
    exporter = AtifExporter().attach(session.SESSION_COORDINATOR)
    coordinator = session.SESSION_COORDINATOR
    chunks = testing.chat_chunks(["one ", "two ", "three"], model=MODEL)
    scripted = testing.scripted_openai(testing.sse_reply(testing.openai_chat_sse(chunks)))
    lease = coordinator.acquire_conversation(profile_key=session.current_profile_key(), session_id="c", platform="t")
    turn = coordinator.begin_turn(lease, turn_id="r1", task_id="t1")
    stream = adapters.stream(scripted.client, {"model": MODEL, "messages": [{"role": "user", "content": "count"}]})
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content == "one ":
            break
    stream.close()
    coordinator.end_turn(turn, outcome="cancelled")
    trajectory = exporter.export()
    assert [s["source"] for s in trajectory["steps"]] == ["user", "agent"]
    assert trajectory["steps"][1]["extra"]["outcome"] == "cancelled"
    assert "extra" not in trajectory  # the turn ended: complete, however it ended
    assert validate_atif(trajectory) == []


def test_an_agent_appending_to_the_list_it_sent_still_gets_each_question_once():
    exporter = AtifExporter().attach(session.SESSION_COORDINATOR)
    out = io.StringIO()
    atof = AtofExporter(stream=out).attach(session.SESSION_COORDINATOR)
    coordinator = session.SESSION_COORDINATOR
    bodies = [testing.chat_completion_body(f"answer {i}", model=MODEL) for i in range(3)]
    scripted = testing.scripted_openai(*(testing.json_reply(b) for b in bodies))
    lease = coordinator.acquire_conversation(profile_key=session.current_profile_key(), session_id="l", platform="t")
    turn = coordinator.begin_turn(lease, turn_id="r1", task_id="t1")
    messages: list[dict[str, Any]] = []  # one list, appended to after each call, as agents do
    for question in ("first?", "second?", "third?"):
        messages.append({"role": "user", "content": question})
        reply = adapters.complete(scripted.client, {"model": MODEL, "messages": messages})
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    coordinator.end_turn(turn, outcome="success")
    assert [s["message"] for s in exporter.export()["steps"]] == [
        "first?", "answer 0", "second?", "answer 1", "third?", "answer 2",
    ]  # fmt: skip
    atof.shutdown()  # its lines are written after the list grew: each holds the request as it was sent
    starts = [e for e in map(json.loads, out.getvalue().splitlines()) if e.get("category") == "llm"]
    sent = [len(e["data"]["content"]["messages"]) for e in starts if e["scope_category"] == "start"]
    assert sent == [1, 3, 5]


def test_a_late_charge_is_a_mark_of_its_conversations_tree(relay_home):
    # The charge of a call answered after its turn ended comes as a mark under its attempt, which has ended:
    # its line named the attempt as the root of its tree, as if it were a tree of its own.
    from test_cost import _answered_after_its_turn_ended, catalog

    from relay_runtime import cost

    out = io.StringIO()
    atof = AtofExporter(stream=out).attach(session.SESSION_COORDINATOR)
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    cost.attach(host, catalog())
    _answered_after_its_turn_ended(host, "late")
    atof.shutdown()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    conversation = next(e for e in lines if e["kind"] == "scope" and e["name"] == "conversation")
    (late,) = [e for e in lines if e["name"] == cost.LATE_CHARGE_MARK]
    attempt = next(e for e in lines if e["uuid"] == late["parent_uuid"] and e["scope_category"] == "end")
    assert attempt["propagation_root_uuid"] == conversation["uuid"]
    assert late["propagation_root_uuid"] == conversation["uuid"]
    assert {e["propagation_root_uuid"] for e in lines} == {conversation["uuid"]}


def test_a_late_charge_counts_in_the_trajectory_live_and_rebuilt_from_the_journal(relay_home, tmp_path):
    # The answer of a call in flight when its turn ended comes later, and the provider bills it: the step of its
    # call and the trajectory's total cost count it, as the journal's summary does.
    from test_cost import _answered_after_its_turn_ended, catalog

    from relay_runtime import cost
    from relay_runtime.integrations.run_journal import JournalSubscriber, latest_run_summary

    coordinator = session.SESSION_COORDINATOR
    exporter = AtifExporter().attach(coordinator)
    journal = JournalSubscriber(session_dir=tmp_path).attach(coordinator)
    host = coordinator.host(session.current_profile_key())
    cost.attach(host, catalog())
    _answered_after_its_turn_ended(host, "late")
    assert journal.close()
    live = exporter.export("late")
    (step,) = [s for s in live["steps"] if s["source"] == "agent"]
    assert step["extra"]["outcome"] == "cancelled"  # the record ended the attempt with its turn
    assert step["metrics"]["cost_usd"] == pytest.approx(0.001)  # 1000 input tokens of gpt-x
    assert live["final_metrics"]["total_cost_usd"] == pytest.approx(0.001)
    assert latest_run_summary("late", "t-1", session_dir=tmp_path)["cost"]["total"] == pytest.approx(0.001)
    rebuilt = atif_from_journal("late", store=FileStore(tmp_path))
    assert rebuilt["final_metrics"]["total_cost_usd"] == pytest.approx(0.001)
    assert validate_atif(live) == [] and validate_atif(rebuilt) == []


def test_a_stream_priced_by_an_estimate_keeps_its_cost_in_the_trajectory(relay_home, tmp_path):
    # A chat stream not asked for its usage is billed all the same: charged an estimate, with no token counts.
    # Its step said nothing of what it cost, and the trajectory's total fell short of the journal's.
    from test_cost import catalog

    from relay_runtime import cost
    from relay_runtime.cost import Budget
    from relay_runtime.integrations.run_journal import JournalSubscriber, latest_run_summary

    coordinator = session.SESSION_COORDINATOR
    exporter = AtifExporter().attach(coordinator)
    journal = JournalSubscriber(session_dir=tmp_path).attach(coordinator)
    host = coordinator.host(session.current_profile_key())
    cost.attach(host, catalog(), Budget(1.0, per="conversation", warn_at=None))
    chunks = testing.chat_chunks(["an answer ", "without usage"], model="gpt-x")
    scripted = testing.scripted_openai(testing.sse_reply(testing.openai_chat_sse(chunks)))
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="est", platform="t")
    turn = coordinator.begin_turn(lease, turn_id="r1", task_id="t1")
    stream = adapters.stream(scripted.client, {"model": "gpt-x", "messages": [{"role": "user", "content": "go"}]})
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "an answer without usage"
    coordinator.end_turn(turn, outcome="success")
    coordinator.release_conversation(lease)
    assert journal.close()
    trajectory = exporter.export("est")
    (step,) = [s for s in trajectory["steps"] if s["source"] == "agent"]
    total = latest_run_summary("est", "r1", session_dir=tmp_path)["cost"]["total"]
    assert total > 0
    assert step["metrics"] == {"cost_usd": pytest.approx(total)}
    assert trajectory["final_metrics"]["total_cost_usd"] == pytest.approx(total)
    assert validate_atif(trajectory) == []


def test_tool_call_id_must_be_a_non_empty_string():
    relay = Relay()
    for bad in ("", 5):
        with pytest.raises(ValueError, match="tool_call_id must be a non-empty string or None"):
            relay.tools.execute("t", {}, lambda a: None, tool_call_id=bad)  # type: ignore[arg-type]


def test_write_replaces_the_file_whole(tmp_path):
    ours = run_ours("sync")
    path = ours.atif.write(tmp_path / "deep" / "t.json")
    assert json.loads((tmp_path / "deep" / "t.json").read_text()) == ours.atif.export()
    assert path.endswith("t.json") and [p.name for p in (tmp_path / "deep").iterdir()] == ["t.json"]


# -- sinks -----------------------------------------------------------------------------------


class _Endpoint(http.server.BaseHTTPRequestHandler):
    fail_first = 0
    gate: threading.Event | None = None
    arrived: threading.Event | None = None
    bodies: list[dict[str, Any]] = []
    seen = 0

    def do_POST(self) -> None:
        type(self).seen += 1
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.arrived is not None:
            self.arrived.set()
        if self.gate is not None:
            self.gate.wait(10)
        if type(self).seen <= self.fail_first:
            self.send_response(503)
            self.end_headers()
            return
        type(self).bodies.append({"session": self.headers["X-Session-Id"], "body": json.loads(body)})
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[tuple[str, type[_Endpoint]]]:
    handler = type("Handler", (_Endpoint,), {"bodies": [], "seen": 0, "fail_first": 0, "gate": None, "arrived": None})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/atif", handler
    server.shutdown()
    server.server_close()


def test_sinks_get_the_trajectory_when_the_conversation_ends(endpoint, tmp_path):
    url, handler = endpoint
    handler.fail_first = 2  # two 503s, then accepted: within the retries
    handler.gate, handler.arrived = threading.Event(), threading.Event()
    memory = f"memory://atif-{tmp_path.name}/{{session_id}}.json"
    exporter = AtifExporter(
        sinks=[
            HttpSink(url, retries=3, backoff=0.01),
            FileSink(tmp_path / "out" / "{session_id}.json"),
            FsspecSink(memory),
        ]
    ).attach(session.SESSION_COORDINATOR)
    _one_turn("s1", "answer")  # the conversation ends and the agent goes on: the POST is the sinks' business
    assert handler.arrived.wait(10)
    assert handler.seen == 1 and handler.bodies == []  # the endpoint still holds the first POST
    handler.gate.set()
    assert exporter.force_flush(10)
    assert handler.seen == 3 and [b["session"] for b in handler.bodies] == ["s1"]
    expected = exporter.export("s1")
    assert handler.bodies[0]["body"] == expected
    assert json.loads((tmp_path / "out" / "s1.json").read_text()) == expected
    import fsspec

    with fsspec.open(memory.replace("{session_id}", "s1"), "r") as fh:
        assert json.load(fh) == expected
    assert exporter.sink_failures == 0
    exporter.shutdown()


def test_an_http_sink_gives_up_after_its_retries(endpoint):
    url, handler = endpoint
    handler.fail_first = 100
    sink = HttpSink(url, retries=2, backoff=0.01)
    exporter = AtifExporter(sinks=[sink]).attach(session.SESSION_COORDINATOR)
    _one_turn("s2", "answer")
    assert exporter.force_flush(10)
    assert handler.seen == 3 and sink.attempts == 3
    assert exporter.sink_failures == 1
    exporter.publish("s2")  # on demand too
    assert exporter.force_flush(10) and handler.seen == 6
    exporter.shutdown()


def test_sink_arguments_are_checked():
    with pytest.raises(ValueError, match="http"):
        HttpSink("ftp://x")
    with pytest.raises(ValueError, match="retries"):
        HttpSink("http://x", retries=-1)
    with pytest.raises(ValueError, match=r"\{session_id\}"):
        FileSink("out.json")
    with pytest.raises(TypeError, match="send"):
        AtifExporter(sinks=[object()])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="no sinks"):
        AtifExporter().publish("x")
