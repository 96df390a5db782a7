"""``configure_graph``: a compiled LangGraph graph whose runs, nodes, interrupts and resumes are recorded.

The graph's base config gets a ``RelayGraphCallbackHandler`` (``RelayCallbackHandler`` plus LangGraph's
lifecycle callbacks), so every invocation records without the caller passing callbacks, and a LangGraph
server that refuses callback objects in a request still records. Graph and node runs are scopes;
an interrupt is a ``graph.interrupt`` mark with its payloads (``id``, ``value``) on the graph's scope,
a resume a ``graph.resume`` mark with the checkpoint and the resume value the caller passed in
``Command(resume=...)``; both on the top graph's scope alone, however deep the paused node is. The
interrupted node's scope ends as a success with ``{"control_flow": "GraphInterrupt"}``: pausing for a
human is not a failure.

A ``RelayCallbackHandler`` passed as well (``config={"callbacks": [...]}``, or already in the graph's
config) records nothing twice: relay handlers share the runs they follow (see ``callbacks``).
"""

from __future__ import annotations

from typing import Any, TypeVar, cast
from uuid import UUID

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import merge_configs
from langgraph.callbacks import GraphCallbackHandler, GraphInterruptEvent, GraphResumeEvent
from langgraph.types import Command

from ..langchain.callbacks import RelayCallbackHandler
from ..langchain.codec import plain

INTERRUPT = "graph.interrupt"
RESUME = "graph.resume"

G = TypeVar("G")


class RelayGraphCallbackHandler(RelayCallbackHandler, GraphCallbackHandler):
    """``RelayCallbackHandler`` with LangGraph's interrupt and resume as marks."""

    def __init__(self) -> None:
        super().__init__(framework="langgraph")
        self._resume_values: dict[UUID, Any] = {}

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if isinstance(inputs, Command) and inputs.resume is not None:
            self._resume_values[run_id] = inputs.resume
        super().on_chain_start(serialized, inputs, run_id=run_id, **kwargs)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._resume_values.pop(run_id, None)
        super().on_chain_end(outputs, run_id=run_id, **kwargs)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._resume_values.pop(run_id, None)
        super().on_chain_error(error, run_id=run_id, **kwargs)

    def on_interrupt(self, event: GraphInterruptEvent) -> None:
        payloads = [{"id": getattr(i, "id", None), "value": plain(getattr(i, "value", i))} for i in event.interrupts]
        self._mark(event.run_id, INTERRUPT, {**_where(event), "interrupts": payloads})

    def on_resume(self, event: GraphResumeEvent) -> None:
        if event.checkpoint_ns:
            # A subgraph resuming with the graph it runs in: LangGraph tells each nested graph's resume,
            # but an interrupt to the top graph alone; the top graph's mark is the one resume, with its value.
            return
        data = _where(event)
        if event.run_id in self._resume_values:
            data["resume"] = plain(self._resume_values[event.run_id])
        self._mark(event.run_id, RESUME, data)

    def _mark(self, run_id: UUID | None, name: str, data: dict[str, Any]) -> None:
        run = self.followed(run_id)
        if run is None or run.handle is None:
            return
        handle = run.handle
        self._guarded(run.turn, name, lambda: run.turn.relay.scope.mark(name, data, parent=handle))


def _where(event: Any) -> dict[str, Any]:
    return {"status": event.status, "checkpoint_id": event.checkpoint_id, "checkpoint_ns": list(event.checkpoint_ns)}


def configure_graph(graph: G) -> G:
    """Add a ``RelayGraphCallbackHandler`` to the compiled graph's base config (once), in place; returns it.

    Added also beside a plain ``RelayCallbackHandler`` there: the runs are recorded once all the same,
    and only the graph handler records the interrupt and resume marks."""
    config = getattr(graph, "config", None)
    if not hasattr(graph, "config"):
        raise TypeError(f"configure_graph takes a compiled LangGraph graph, got {type(graph).__name__}")
    config = cast("RunnableConfig", config or {})
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        handlers = [*callbacks.handlers, *callbacks.inheritable_handlers]
    else:
        handlers = list(callbacks or [])
    if not any(isinstance(h, RelayGraphCallbackHandler) for h in handlers):
        graph.config = merge_configs(config, {"callbacks": [RelayGraphCallbackHandler()]})
    return graph
