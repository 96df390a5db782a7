"""The registry of provider adapters that ``instrument()`` walks.

A provider adapter is a module (or any object) with the functions below; each provider SDK has one
(``adapters.openai_anthropic``, ``adapters.bedrock``, ...). A new provider is one module registered
here, not edits across ``adapters/``. Adapters must import their SDK lazily: the registry imports
every built-in adapter, and one whose SDK is not installed has nothing to wrap (``instrument()``
skips it silently).

``for_client`` asks each adapter in order whether a client is its own: adapters that recognise
their SDK's client class come first, the OpenAI / Anthropic adapter (which also accepts
look-alike objects with a ``chat.completions``, ``responses`` or ``messages``) last.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from .endpoints import Endpoint


class ProviderAdapter(Protocol):
    NAME: str

    def is_client(self, client: Any) -> bool: ...

    def instrument_client(
        self, client: Any, *, include_usage: bool = False, provider: Endpoint | None = None
    ) -> Any: ...

    def uninstrument_client(self, client: Any) -> Any: ...

    def is_client_instrumented(self, client: Any) -> bool: ...

    def instrument_classes(self, *, include_usage: bool = False) -> list[str]: ...

    def uninstrument_classes(self) -> None: ...

    def classes_instrumented(self) -> bool: ...


# Built-in adapters, by module under ``relay_runtime.adapters``, most specific client test first.
BUILTIN: tuple[str, ...] = ("bedrock", "openai_anthropic")

_registered: list[ProviderAdapter] = []
_loaded = False


def register(adapter: ProviderAdapter) -> None:
    """Add a provider adapter, asked before the built-in ones; registering one twice is a no-op."""
    if adapter not in _registered:
        _registered.insert(0, adapter)


def unregister(adapter: ProviderAdapter) -> None:
    """Take a registered adapter out (its wrappers stay until ``uninstrument``); a no-op if it is not in."""
    if adapter in _registered:
        _registered.remove(adapter)


def adapters() -> list[ProviderAdapter]:
    """Every adapter: those registered, then the built-in ones (imported the first time)."""
    global _loaded
    if not _loaded:
        package = __name__.rpartition(".")[0]
        for name in BUILTIN:
            module: Any = importlib.import_module(f"{package}.{name}")
            if module not in _registered:
                _registered.append(module)
        _loaded = True
    return _registered


def for_client(client: Any) -> ProviderAdapter | None:
    """The adapter whose SDK made ``client`` (None: no adapter knows it)."""
    for adapter in adapters():
        if adapter.is_client(client):
            return adapter
    return None
