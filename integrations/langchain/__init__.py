"""LangChain (``langchain-core`` 1.x; extra ``langchain``): agent runs as relay scopes and managed calls.

    from relay_runtime.integrations.langchain import RelayCallbackHandler, RelayMiddleware

- ``RelayCallbackHandler``: chains, agents, graph nodes, tools and retrievers as scopes of the current
  turn; chat model calls as logical calls whose attempts ``adapters.instrument()`` makes (or the
  handler records from the callbacks when it is off).
- ``RelayMiddleware``: a ``langchain.agents.create_agent`` agent's model calls as logical calls with
  managed attempts and its tool calls as managed tool calls (intercepts and guardrails apply).

Imported lazily: ``import relay_runtime.integrations.langchain`` needs nothing; using a name without
LangChain installed raises an ImportError naming the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..extras import require

if TYPE_CHECKING:
    from .callbacks import RelayCallbackHandler
    from .middleware import RelayMiddleware

__all__ = ["RelayCallbackHandler", "RelayMiddleware"]

_WHERE = {"RelayCallbackHandler": ("callbacks", "langchain_core"), "RelayMiddleware": ("middleware", "langchain")}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, framework = where
    require(framework, "langchain", "langchain")
    return getattr(require(f"{__name__}.{module}", "langchain", "langchain"), name)
