"""One process of a LangGraph run paused in one process and resumed in another (no tests here).

Run as ``python tests/graph_resume_worker.py PHASE DIR``. ``pause``: a configured approval graph runs to its
interrupt in a managed turn and the checkpointer's state is saved to ``DIR/checkpoint.pickle``. ``resume``: a
new process loads that state into a new checkpointer, acquires the same conversation, begins the same turn and
resumes the graph with ``Command(resume="yes")``. In each, the run journal writes to ``DIR/sessions`` and the
events go to ``DIR/events-PHASE.jsonl``; each prints one JSON line: what the graph said (the interrupt's
question, then the answer).
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from relay_runtime import session
from relay_runtime.integrations.langgraph import configure_graph
from relay_runtime.integrations.run_journal import JournalSubscriber
from relay_runtime.jsonl import JsonlWriter

SESSION_ID, TURN_ID, THREAD = "chat-7", "turn-7", {"configurable": {"thread_id": "thread-1"}}


def approval_graph(saver: InMemorySaver) -> Any:
    def ask(state: Any) -> Any:
        answer = interrupt({"question": "Send the email?"})
        return {"messages": [{"role": "assistant", "content": f"approved: {answer}"}]}

    builder = StateGraph(MessagesState)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    return configure_graph(builder.compile(name="approval", checkpointer=saver))


def main() -> None:
    phase, where = sys.argv[1], Path(sys.argv[2])
    saved = where / "checkpoint.pickle"
    saver = InMemorySaver()
    if phase == "resume":
        storage, writes, blobs = pickle.loads(saved.read_bytes())
        for thread, namespaces in storage.items():
            saver.storage[thread].update(namespaces)
        saver.writes.update(writes)
        saver.blobs.update(blobs)
    journal = JournalSubscriber(session_dir=where / "sessions").attach(session.SESSION_COORDINATOR)
    coordinator = session.SESSION_COORDINATOR
    host = coordinator.host(session.current_profile_key())
    host.retain_managed_execution("worker")
    events = JsonlWriter(where / f"events-{phase}.jsonl")
    host.relay.subscribers.register(events, name="events")
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id=SESSION_ID, platform="test")
    turn = coordinator.begin_turn(lease, turn_id=TURN_ID, task_id="task-7")
    graph = approval_graph(saver)
    try:
        if phase == "pause":
            result = graph.invoke({"messages": [{"role": "user", "content": "Mail Ada?"}]}, THREAD)
            said = result["__interrupt__"][0].value["question"]
        else:
            said = graph.invoke(Command(resume="yes"), THREAD)["messages"][-1].content
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        journal.close()
        events.close()
    if phase == "pause":
        # As plain dicts: the checkpointer's own default factories are lambdas, which do not pickle.
        storage = {thread: dict(namespaces) for thread, namespaces in saver.storage.items()}
        saved.write_bytes(pickle.dumps((storage, dict(saver.writes), dict(saver.blobs))))
    print(json.dumps({"said": said}), flush=True)


if __name__ == "__main__":
    main()
