"""Which LangChain run's scope the code running here is inside of.

The handler sets a run's scope as the framework scope where LangChain starts the run, and LangChain runs the
run's code in a copy of that context with the run's child config set (``var_child_runnable_config``, whose
callbacks name the run as their parent). A chain that is *streamed* starts in the caller's context and ends only
when its stream does: between chunks the caller's own code runs there, with the chain's scope still set but
none of LangChain's config of that chain. What that code starts (a model call of its own, a tool) is not the
chain's: it nests where the caller was before the stream began, the framework scope set before the chain's.
"""

from __future__ import annotations

from contextvars import Token
from typing import Any
from uuid import UUID

from langchain_core.runnables.config import var_child_runnable_config

from relay_runtime.scopes import ScopeHandle

from ..frameworks import FrameworkRun
from .retried import ModelRun

RUN_ID = "langchain.run_id"


def scope_here(scope: ScopeHandle, runs: dict[int, FrameworkRun | ModelRun]) -> ScopeHandle | None:
    """``scope`` (a LangChain run's) when the code running here is inside its run, else the framework scope set
    before it. ``runs``: the runs the handlers follow, by id."""
    config = var_child_runnable_config.get()
    if config is not None:
        parent = getattr(config.get("callbacks"), "parent_run_id", None)
        if not isinstance(parent, UUID):
            return scope  # LangChain's config names no run: nothing tells otherwise
        run = runs.get(parent.int)
        handle = run.handle if run is not None else None
        if handle is None:
            return scope  # a run no handler follows: nothing tells otherwise
        while handle is not None:
            if handle is scope:
                return scope  # inside the run, or inside a run it started
            handle = handle.parent
    return _before(scope, runs)


def _before(scope: ScopeHandle, runs: dict[int, FrameworkRun | ModelRun]) -> ScopeHandle | None:
    try:
        run = runs.get(UUID(str((scope.metadata or {})[RUN_ID])).int)
    except (KeyError, ValueError):
        return scope
    token: Token[Any] | None = run.token if run is not None else None
    if token is None:
        return scope
    before = token.old_value
    return before if isinstance(before, ScopeHandle) else None
