"""``RelayCallbackHandler``: LangChain runs (chains, agents, graph nodes, tools, retrievers) as relay scopes.

    agent.invoke(inputs, config={"callbacks": [RelayCallbackHandler()]})

Each run becomes a scope under the scope of its parent run (the outermost under the current turn),
with its inputs, outputs and errors; a root run is an ``agent`` scope, the others ``function``,
``tool`` and ``retriever`` scopes. Runs LangChain marks hidden (its own plumbing) get no scope.
A chat model run is a logical call under its parent run's scope: the attempt ``adapters.instrument()``
makes for its provider call joins it (so there is never a second one); without ``instrument()``
the handler records the attempt from what the callbacks report (model, usage, finish reason);
with single clients instrumented (``instrument(client)``), at the call's end, and only if the
model's client was not one of them (its attempt then stands: one attempt per provider call).
Inside a ``RelayMiddleware`` model or tool call the middleware's records stand and the handler adds none.
A model run that retries or falls back from a failed one (the same messages, under the same parent run) is
an attempt of the failed run's logical call, not a call of its own (see ``retried``).

Several relay handlers on one run (``configure_graph``'s and one passed in ``config["callbacks"]``, or
two passed by layers that each add theirs) record it once: the runs every handler follows are kept in
one registry, and a run some handler already follows is not followed again.

Scopes are opened *detached*: LangChain ends runs in its own order (parallel branches, streams
closed late) and from other contexts, which a scope stack cannot follow. Code running inside a
run finds its scope through ``frameworks.framework_scope``; the caller's own code between a streamed
chain's chunks, where that scope stays set, does not (``inside``). The handler fails open: its own errors
are counted in the relay's diagnostics, never raised into the agent.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from relay_runtime import conventions as cv
from relay_runtime import session
from relay_runtime.attempt_views import recorded_view
from relay_runtime.redaction import redact_metadata
from relay_runtime.scopes import ScopeHandle, outcome_of
from relay_runtime.session import Turn
from relay_runtime.tools import control_flow_output
from relay_runtime.types import ScopeType

from ..frameworks import (
    FrameworkRun,
    current_parent,
    deferred,
    deferred_answer,
    enter_scope,
    leave_scope,
    still_here,
)
from . import models, retried
from .codec import CODECS, codec_for, plain
from .inside import RUN_ID, scope_here
from .tools import ToolFailed, is_control_flow, is_error_message, is_managed

# Read once: every chat model run goes through these.
_managed_turn = session.managed_turn
_middleware_call = models.middleware_call
_held = retried.HELD
# The module, not its ``instrument`` (the package's function of that name): its flags are read on every model call,
# without the frames of ``is_instrumented()`` and ``clients_instrumented()``.
_instrumenting = importlib.import_module("relay_runtime.adapters.instrument")
_PRIMARY = "primary"
_EMPTY: dict[str, Any] = {}
_CANCELLED = "cancelled"
_new = object.__new__
_init_run = retried.ModelRun.__init__

FRAMEWORK = cv.FRAMEWORK
_HIDDEN = "langsmith:hidden"

# Every relay handler's runs, by run id: each callback reaches every handler on the run, and the first
# to see a run's start follows it for all of them (see the module docstring); any of them ends it.
# Runs leave it at their end; the bound only matters for runs whose end never comes (an abandoned
# stream), the oldest of which are then forgotten. Keyed by the id's ``int``: a ``UUID`` hashes through
# a Python method (``UUID.__hash__``, from C: twice per model call), its ``int`` in C.
_RUNS: dict[int, FrameworkRun | retried.ModelRun] = {}
_MAX_RUNS = 100_000
_runs_lock = threading.Lock()


def _scope_here(scope: ScopeHandle) -> ScopeHandle | None:
    return scope_here(scope, _RUNS)


# A chain streamed into the caller's code leaves its scope set there between chunks (see ``inside``).
still_here(RUN_ID, _scope_here)


def _forget_oldest() -> None:
    with _runs_lock:
        while len(_RUNS) >= _MAX_RUNS:
            try:
                del _RUNS[next(iter(_RUNS))]
            except (StopIteration, KeyError, RuntimeError):  # emptied or changed by another thread meanwhile
                return


class RelayCallbackHandler(BaseCallbackHandler):
    """LangChain callbacks -> relay scopes of the turn managed where the run starts."""

    run_inline = True  # called in the run's own context, so what runs inside sees its scope
    raise_error = False
    # LangChain asks one of these before each callback it makes: plain attributes, where the base class's
    # properties cost a Python call each time (two per model call, two per chain, tool or retriever run).
    ignore_llm = ignore_retry = ignore_chain = ignore_agent = ignore_retriever = ignore_chat_model = False
    ignore_custom_event = False

    def __init__(self, *, framework: str = "langchain") -> None:
        super().__init__()
        self.framework = framework
        self._runs = _RUNS  # shared by every relay handler: see the module docstring

    def followed(self, run_id: Any) -> FrameworkRun | retried.ModelRun | None:
        """The run ``run_id`` names, if a relay handler follows it (None for an id that is no ``UUID``)."""
        return self._runs.get(run_id.int) if isinstance(run_id, UUID) else None

    def _follow(self, run_id: UUID, run: FrameworkRun) -> None:
        if len(_RUNS) >= _MAX_RUNS:
            _forget_oldest()
        _RUNS[run_id.int] = run

    # -- bookkeeping ------------------------------------------------------------------------------

    def _parent(self, turn: Turn, parent_run_id: UUID | None) -> ScopeHandle | None:
        run = self._runs.get(parent_run_id.int) if parent_run_id is not None else None
        if run is not None:
            handle = run.handle
            if handle is not None and not handle.ended:
                return handle
        return current_parent(turn)

    def _guarded(self, turn: Turn | None, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            if turn is not None:
                turn.relay.diag.failure("subscriber_errors", exc, f"{self.framework} callback {what}")
            return None

    def _open(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        name: str,
        scope_type: str | None,
        inputs: Any,
        tags: list[str] | None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if run_id.int in _RUNS:  # another relay handler on this run follows it
            return
        turn = session.managed_turn()
        if turn is None:
            return
        self._guarded(turn, "start", self._push, turn, run_id, parent_run_id, name, scope_type, inputs, tags, metadata)

    def _push(
        self,
        turn: Turn,
        run_id: UUID,
        parent_run_id: UUID | None,
        name: str,
        scope_type: str | None,
        inputs: Any,
        tags: list[str] | None,
        metadata: dict[str, Any] | None,
    ) -> None:
        parent = self._parent(turn, parent_run_id)
        if tags and _HIDDEN in tags:
            self._follow(run_id, FrameworkRun(turn, parent))
            return
        if scope_type is None:
            known = parent_run_id is not None and parent_run_id.int in self._runs
            scope_type = ScopeType.FUNCTION.value if known else ScopeType.AGENT.value
        if not isinstance(name, str):  # a run named by something else than text: the scope is named by its text
            name = str(name) or "run"
        # The handler's own keys hold its framework's name and the run's id: only what the run brought (a graph
        # node's name, a tool call's id) is read for credentials, and the scope opened with ``opened``, which reads
        # no metadata again (a graph and its node: two chain scopes a run, about 100 Python opcodes each).
        meta = {FRAMEWORK: self.framework, RUN_ID: str(run_id)}
        if metadata:
            meta.update(redact_metadata(metadata))
        handle = turn.relay.scope.opened(name, scope_type, parent, plain(inputs), meta, None, False)
        self._follow(run_id, FrameworkRun(turn, handle, own=True, token=enter_scope(handle)))

    def _close(self, run_id: UUID, output: Any = None, error: BaseException | None = None) -> None:
        run = self._runs.pop(run_id.int, None)
        if run is None:
            return
        if run.own and run.handle is not None:
            if _held:
                # A failed model run under it was not retried.
                self._guarded(run.turn, "end", retried.release, run.handle.uuid)
            if error is not None and outcome_of(error) == _CANCELLED:
                self._guarded(run.turn, "end", _cancel_model_runs, run.handle.uuid, error)
        self._guarded(run.turn, "end", self._end, run, output, error)

    def _end(self, run: FrameworkRun, output: Any, error: BaseException | None) -> None:
        if run.call is not None:
            run.call.close(error)
        if not run.own or run.handle is None:
            return
        leave_scope(run.token)
        if error is not None and is_control_flow(error):
            run.end(output=control_flow_output(error), outcome="success")
            return
        run.end(output=plain(output) if error is None else None, error=error)

    # -- chains, agents, graph nodes --------------------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = kwargs.get("name") or _name_of(serialized) or "chain"
        node = (metadata or {}).get("langgraph_node")
        extra = {"langgraph.node": node} if node and node == name else None
        self._open(run_id, parent_run_id, name, None, inputs, tags, extra)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._close(run_id, outputs)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._close(run_id, error=error)

    # -- tools and retrievers ---------------------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if run_id.int in _RUNS:  # another relay handler on this run follows it
            return
        turn = session.managed_turn()
        if turn is None:
            return
        call_id = kwargs.get("tool_call_id")
        if is_managed(call_id):  # the middleware's managed call is this tool's scope
            self._follow(run_id, FrameworkRun(turn, turn.relay.scope.current()))
            return
        name = kwargs.get("name") or _name_of(serialized) or "tool"
        meta = {cv.KIND: cv.TOOL, FRAMEWORK: self.framework, **({"tool_call_id": call_id} if call_id else {})}
        self._open(
            run_id, parent_run_id, name, ScopeType.TOOL.value, inputs if inputs is not None else input_str, tags, meta
        )

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        # A tool's handled error (``handle_tool_error``) comes here as its answer: an error ToolMessage.
        if is_error_message(output):
            self._close(run_id, error=ToolFailed(output))
        else:
            self._close(run_id, output)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._close(run_id, error=error)

    def on_retriever_start(
        self,
        serialized: dict[str, Any] | None,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = kwargs.get("name") or _name_of(serialized) or "retriever"
        self._open(run_id, parent_run_id, name, ScopeType.RETRIEVER.value, {"query": query}, tags)

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        docs = [
            {"page_content": getattr(d, "page_content", d), "metadata": getattr(d, "metadata", None)}
            for d in documents or ()
        ]
        self._close(run_id, docs)

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._close(run_id, error=error)

    # -- chat models ------------------------------------------------------------------------------

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        # Unused, but named: LangChain passes them, and a keyword that lands in ``**kwargs`` is first compared
        # by value with every parameter's name (about 900 instructions each, on every model call).
        invocation_params: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
        name: str | None = None,
        batch_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        turn = _managed_turn()
        if turn is None or _middleware_call.get() is not None:
            return
        key = run_id.int
        if key in _RUNS:  # another relay handler on this run follows it
            return
        if len(_RUNS) >= _MAX_RUNS:
            _forget_oldest()
        asked = messages[0] if messages else []
        # ``_guarded`` inlined: this runs for every model call.
        try:
            parent = current_parent(turn) if parent_run_id is None else self._parent(turn, parent_run_id)
            # A run's scope: its end releases a failed call held there.
            held_under = parent.uuid if parent is not None and RUN_ID in (parent.metadata or _EMPTY) else None
            call = retried.retried(held_under, asked) if held_under is not None and _held else None
            if call is None:
                # ``ModelRun(turn, None, _PRIMARY, parent)`` without the class call: ``type.__call__`` runs ``__init__``
                # in an evaluation loop of its own, where a call made here runs it in this one.
                call = _new(retried.ModelRun)
                _init_run(call, turn, None, _PRIMARY, parent)
                call.messages = asked
                call.held_under = held_under
            _RUNS[key] = call  # followed, the run being its call
            if _instrumenting._classes:  # ``is_instrumented()``
                call.join()  # the SDK call inside is the attempt
                return
            meta = metadata or _EMPTY
            provider = meta.get("ls_provider") or "langchain"
            codec = CODECS.get(provider) or codec_for(provider)
            model = meta.get("ls_model_name")
            content = {"model": model, "messages": asked}
            # The view of what its start records: a signed image address, a tool's key, blanked alike.
            view = deferred((recorded_view, codec, content))
            if _instrumenting._single_clients:  # ``clients_instrumented()``: the model's client may be one of them
                call.witness(codec.provider, model, view, codec=codec, sent=content)
            else:  # ``witness``' own first case, without its frame: nothing else can record the attempt
                call.observe(codec.provider, model, view, None, codec, content)
        except Exception as exc:
            # Followed all the same (with no call, if it failed before that): another relay handler on the run
            # does not record it either.
            _RUNS.setdefault(key, FrameworkRun(turn, None))
            turn.relay.diag.failure("subscriber_errors", exc, f"{self.framework} callback chat model start")

    def on_llm_new_token(
        self,
        token: Any,
        *,
        run_id: UUID,
        chunk: Any = None,  # unused, named: see ``on_chat_model_start``
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        # A streamed call's provider call has been made: its join ends now, not at the stream's end. Between
        # chunks the caller's own code runs in the context the join was made in (a sync or async generator
        # yields into it), and a stream left unfinished may never end there: what it calls is no attempt here.
        run = _RUNS.get(run_id.int)
        if type(run) is retried.ModelRun and run._joined is not None:
            run.unjoin()

    def on_llm_end(
        self,
        response: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,  # unused, named: see ``on_chat_model_start``
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        call = _RUNS.pop(run_id.int, None)
        if type(call) is not retried.ModelRun:  # none, or one whose start failed
            return
        try:
            if call._joined is not None or call._witnessed is not None:  # (``leave``'s own test, without its frame)
                call.leave()  # first: it records the witnessed attempt when no SDK attempt joined
            observed = call.observed
            if observed is not None:
                # An ``LLMResult`` (one list of generations per prompt, a chat model's first holding its message):
                # read straight, as LangChain makes it; anything else ends the call all the same, with no answer.
                try:
                    message = response.generations[0][0].message
                    meta = message.response_metadata or _EMPTY
                except (AttributeError, LookupError, TypeError):
                    message, meta = None, _EMPTY
                model = meta.get("model_name") or (getattr(response, "llm_output", None) or _EMPTY).get("model_name")
                # The codec its start found (``observe`` holds it), not looked up again by the provider's name.
                codec = call._observed_codec or codec_for(observed.name)
                annotated = deferred_answer((codec.annotate_response, message))
                # The answer object itself, as a managed attempt's end holds its SDK's: what the view has no field
                # for (reasoning blocks, the provider's metadata) is read from it, by records and rules alike. The
                # logical call completes with it (what else ``close`` does is done above, or has nothing to do).
                call.end_observed(response, annotated, None, model, True)
            else:
                call.close()
        except Exception as exc:
            call.turn.relay.diag.failure("subscriber_errors", exc, f"{self.framework} callback chat model end")

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._runs.pop(run_id.int, None)
        if type(run) is not retried.ModelRun:  # none, or one whose start failed
            return
        if run.held_under is not None and isinstance(error, Exception):
            # Its parent may call the model again for the same answer (a retry, a fallback): see ``retried``.
            self._guarded(run.turn, "chat model error", retried.hold, run, error)
        else:
            self._guarded(run.turn, "chat model error", run.close, error)


def _cancel_model_runs(parent: str, error: BaseException) -> None:
    """The run whose scope is ``parent`` was cancelled: the model runs still open under it were too, though
    LangChain reports no end for them (an async model call awaits its provider call in a ``gather``, and
    the gather's cancellation skips the callbacks). Their calls end cancelled now, before their parent,
    rather than open until the turn's end and then closed with the turn's outcome. Only on a cancellation,
    a rare end: the runs followed are looked through, where every model call would pay for an index."""
    for key, run in list(_RUNS.items()):
        if type(run) is retried.ModelRun and run.held_under == parent and _RUNS.pop(key, None) is run:
            run.close(error)  # (not ended meanwhile by another thread)


def _name_of(serialized: dict[str, Any] | None) -> str | None:
    if not serialized:
        return None
    name = serialized.get("name")
    if isinstance(name, str) and name:
        return name
    ident = serialized.get("id")
    return ident[-1] if isinstance(ident, list) and ident else None
