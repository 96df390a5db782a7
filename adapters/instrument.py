"""Zero-code tracing: ``instrument(client)`` for one client, ``instrument()`` for every provider SDK installed.

``instrument()`` walks the provider registry (``adapters.providers``): each adapter wraps its SDK's
classes (or does nothing when its SDK is not installed) and says which names it wrapped.
``instrument(client)`` hands the client to the adapter that knows it. What each adapter wraps, and
how, is in its own module (``adapters.openai_anthropic``, ``adapters.bedrock``); the shared wrapper
machinery is ``adapters.wrapping``.
"""

from __future__ import annotations

from typing import Any

from . import endpoints, providers
from .wrapping import ManagedCreate as ManagedCreate  # re-exported: tests and integrations check for it
from .wrapping import ManagedCreate as ManagedMethod  # noqa: F401  (its older name)
from .wrapping import lock

# Whether any adapter's classes are wrapped: set by ``instrument()`` and ``uninstrument()``, the only ways
# in, since framework integrations ask ``is_instrumented()`` on every model call.
_classes = False
# Whether ``instrument(client)`` ever instrumented a single client (never cleared: one client's
# ``uninstrument`` leaves the others as they are). A framework integration that cannot tell which
# client a model call uses reads it to know whether an SDK attempt may still join that call.
_single_clients = False
# ``include_usage`` of the last ``instrument()`` that wrapped classes: the pytest plugin puts back what a test
# took off as it was.
_classes_usage = False


def _adapter_of(client: Any) -> providers.ProviderAdapter:
    adapter = providers.for_client(client)
    if adapter is None:
        raise TypeError(
            f"cannot instrument {type(client).__name__}: it is not a client of a provider SDK relay-runtime knows "
            f"(no chat.completions, responses or messages; not a bedrock-runtime client)"
        )
    return adapter


def instrument(client: Any = None, *, include_usage: bool = False, provider: str | None = None) -> Any:
    """Route SDK calls through the relay: one client's, or (no argument) every client's.

    ``instrument(client)``: idempotent, returns the client; raises TypeError for an object no
    provider adapter knows. ``instrument()``: wraps the classes of every provider SDK installed
    (OpenAI, Anthropic, botocore's ``bedrock-runtime`` client, ...); returns the names wrapped now.
    A part an SDK version lacks is skipped with one ``UnknownSDKWarning`` naming it.
    ``include_usage=True`` makes OpenAI chat streams ask for their token usage (the caller
    sees one more chunk, with no choices).
    ``provider="groq"`` (one client only) names the provider its calls reach, over ``set_route``
    and the client's base URL (see ``adapters.endpoints``): a convention's name (``mistral_ai``),
    an alias (``mistral``, ``azure``) or an OpenAI-compatible endpoint (``vllm``, ``openrouter``).
    """
    global _single_clients, _classes_usage
    named = None if provider is None else endpoints.named(provider)
    if client is None:
        if named is not None:
            raise TypeError("instrument(provider=...) names one client's provider: pass the client too")
        done: list[str] = []
        with lock:
            try:
                for adapter in providers.adapters():
                    done += adapter.instrument_classes(include_usage=include_usage)
            finally:
                _note_classes()
            if done:
                _classes_usage = include_usage
        return done
    adapter = _adapter_of(client)
    _single_clients = True
    return adapter.instrument_client(client, include_usage=include_usage, provider=named)


def uninstrument(client: Any = None) -> Any:
    """Put back exactly what ``instrument`` replaced; a no-op where it never was."""
    if client is None:
        with lock:
            try:
                for each in providers.adapters():
                    each.uninstrument_classes()
            finally:
                _note_classes()
        return None
    adapter = providers.for_client(client)
    return client if adapter is None else adapter.uninstrument_client(client)


def _note_classes() -> None:
    global _classes
    _classes = any(each.classes_instrumented() for each in providers.adapters())


def clients_instrumented() -> bool:
    """Whether ``instrument(client)`` has instrumented any single client in this process (some may be
    uninstrumented since): a call on a client nobody can see may then be an attempt of its own."""
    return _single_clients


def classes_include_usage() -> bool:
    """``include_usage`` of the ``instrument()`` that wrapped the SDK classes now wrapped."""
    return _classes_usage


def is_instrumented(client: Any = None) -> bool:
    """Whether this client's own methods are wrapped (no argument: whether any SDK's classes are)."""
    if client is None:
        return _classes
    adapter = providers.for_client(client)
    return adapter is not None and adapter.is_client_instrumented(client)
