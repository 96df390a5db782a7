"""The ``Relay`` facade: one scope tree, one subscriber list, one intercept registry."""

from __future__ import annotations

from typing import Any

from .cost.control import RelayCost
from .diagnostics import Diagnostics
from .intercepts import Intercepts
from .llm import LLM
from .redaction_install import RelayRedaction
from .scopes import Scopes
from .subscribers import Subscribers
from .tools import Tools
from .types import LLMRequestInterceptOutcome


class Relay:
    """Scopes, intercepts, subscribers and managed calls that belong together.

    A process can hold several (the session layer keeps one per profile); each
    has its own scope stack, so their trees never mix.
    """

    LLMRequestInterceptOutcome = LLMRequestInterceptOutcome

    def __init__(self, name: str = "default") -> None:
        self.name = name
        self.diag = Diagnostics(self._redaction_policy)  # read when a failure is logged, once subscribers exist
        self.subscribers = Subscribers(self.diag)
        self.scope = Scopes(self)
        self.intercepts = Intercepts(self.scope)
        self.cost = RelayCost(self)
        self.redaction = RelayRedaction(self)
        self.llm = LLM(self)
        self.tools = Tools(self)

    def _redaction_policy(self) -> Any:
        return self.subscribers.policy

    def diagnostics(self) -> dict[str, Any]:
        """Counts of what the relay swallowed on purpose: subscriber errors, its own bookkeeping errors, drops."""
        return self.diag.snapshot()

    def count(self, key: str, n: int = 1) -> None:
        """For consumers (exporters, journals) to report drops and failures in ``diagnostics()``."""
        self.diag.count(key, n)

    def __repr__(self) -> str:
        return f"<Relay {self.name!r}>"


_default: Relay | None = None


def default_relay() -> Relay:
    global _default
    if _default is None:
        _default = Relay()
    return _default
