"""What ``instrument()`` covers beyond the SDK resource classes it names, and a count of what still escapes.

- **Copies.** Some SDK classes take the first-party methods as their own at import
  (``anthropic.lib.vertex`` and ``anthropic.lib.bedrock`` define beta ``Messages`` classes whose
  ``create = FirstPartyMessagesAPI.create``): wrapping the first-party class never reaches them.
  ``copies`` finds every loaded SDK resource class holding one of those functions (or a wrapper
  an earlier ``instrument()`` left there, which ``uninstrument()`` switched off), so they are
  wrapped the same way.
- **The net.** Whatever still reaches an LLM endpoint through an SDK client without passing
  dispatch (a copy made by code not loaded yet, a raw ``client.post("/v1/messages")``, an SDK
  path nobody wrapped) is counted as ``adapters.untraced_calls`` and
  ``adapters.untraced_calls.request:<path>`` in ``relay.diagnostics()``: never silent.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

# Modules known to copy first-party methods: imported before the copies are looked for, so that
# they are wrapped now (and restored by ``uninstrument()``) rather than copying a wrapper later.
COPYING_MODULES = (
    "anthropic.lib.vertex._beta_messages",
    "anthropic.lib.bedrock._beta_messages",
)

# The SDKs' resource base classes: every resource class (a copy included) derives from one.
RESOURCE_BASES = (
    ("openai._resource", "SyncAPIResource"),
    ("openai._resource", "AsyncAPIResource"),
    ("anthropic._resource", "SyncAPIResource"),
    ("anthropic._resource", "AsyncAPIResource"),
)

# The SDKs' base clients, whose ``request()`` every SDK call goes through (once per call, outside
# the SDK's retry loop); and the paths of the APIs dispatch traces, which the net watches.
CLIENT_BASES = (
    ("openai._base_client", "SyncAPIClient"),
    ("openai._base_client", "AsyncAPIClient"),
    ("anthropic._base_client", "SyncAPIClient"),
    ("anthropic._base_client", "AsyncAPIClient"),
)
LLM_PATHS = frozenset({"/chat/completions", "/responses", "/v1/messages"})


def import_copying_modules() -> None:
    for name in COPYING_MODULES:
        if name.partition(".")[0] not in sys.modules:
            continue  # an SDK nobody imported copies nothing yet
        try:
            importlib.import_module(name)
        except ImportError:
            continue


def _loaded_class(module_name: str, class_name: str) -> type | None:
    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return None
    cls = getattr(module, class_name, None)
    return cls if isinstance(cls, type) else None


def _subclasses(root: type) -> Iterator[type]:
    seen: set[type] = set()
    todo = [root]
    while todo:
        cls = todo.pop()
        subs: list[type] = cls.__subclasses__()
        for sub in subs:
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
                yield sub


def copies(originals: dict[Any, tuple[str, str]], skip: set[type]) -> list[tuple[type, str, str]]:
    """``(class, method, api mode)`` for every loaded SDK resource class outside ``skip`` whose own
    ``method`` is one of ``originals`` (function -> (mode, method)).

    A wrapper an earlier ``instrument()`` left in a copy (copied while it was on, switched off
    since) matches too: wrapt proxies hash and compare as the function they wrap.
    """
    found: list[tuple[type, str, str]] = []
    methods = {method for _mode, method in originals.values()}
    for module_name, class_name in RESOURCE_BASES:
        base = _loaded_class(module_name, class_name)
        if base is None:
            continue
        for cls in _subclasses(base):
            if cls in skip:
                continue
            own = vars(cls)
            for method in methods:
                value = own.get(method)
                if value is None or not callable(value):
                    continue
                try:
                    mode, named = originals.get(value, ("", ""))
                except TypeError:  # unhashable
                    continue
                if named == method:
                    found.append((cls, method, mode))
    return found


def client_bases() -> list[type]:
    return [cls for module, name in CLIENT_BASES if (cls := _loaded_class(module, name)) is not None]


# (class, the request() it had) for every base client the net is on; a plain function, not a
# wrapt wrapper, so that a dispatched SDK call pays one context variable read, not a proxy's binding.
_netted: list[tuple[type, Any]] = []
_on = False
_REQUEST = "request"


def install_net(count: Callable[[str], None], inside: ContextVar[bool]) -> list[str]:
    """Put the net on every SDK base client's ``request()``; returns what it wrapped now."""
    global _on
    done = []
    for base in client_bases():
        current = vars(base).get(_REQUEST)
        if current is None or getattr(current, "relay_net", False):
            continue
        make = _async_net if inspect.iscoroutinefunction(current) else _net
        setattr(base, _REQUEST, make(current, count, inside))
        _netted.append((base, current))
        done.append(f"{base.__module__}.{base.__qualname__}.request")
    _on = bool(_netted)
    return done


def remove_net() -> None:
    global _on
    _on = False
    while _netted:
        base, original = _netted.pop()
        if getattr(vars(base).get(_REQUEST), "relay_net", False):
            setattr(base, _REQUEST, original)


def _escaped(args: tuple[Any, ...], kwargs: dict[str, Any], count: Callable[[str], None]) -> None:
    if _on:
        path = llm_path(args, kwargs)
        if path is not None:
            count(f"request:{path}")


def _net(original: Callable[..., Any], count: Callable[[str], None], inside: ContextVar[bool]) -> Callable[..., Any]:
    @functools.wraps(original)
    def request(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not inside.get():  # not dispatch's own SDK call
            _escaped(args, kwargs, count)
        return original(self, *args, **kwargs)

    request.relay_net = True  # type: ignore[attr-defined]
    return request


def _async_net(
    original: Callable[..., Any], count: Callable[[str], None], inside: ContextVar[bool]
) -> Callable[..., Any]:
    @functools.wraps(original)
    async def request(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not inside.get():
            _escaped(args, kwargs, count)
        return await original(self, *args, **kwargs)

    request.relay_net = True  # type: ignore[attr-defined]
    return request


def llm_path(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The LLM API path a ``request(cast_to, options, ...)`` call posts to, else None."""
    options = args[1] if len(args) > 1 else kwargs.get("options")
    method = getattr(options, "method", None)
    url = getattr(options, "url", None)
    if not isinstance(method, str) or method.lower() != "post" or not isinstance(url, str):
        return None
    path = url.partition("?")[0]
    if "://" in path:  # an absolute URL: its path only
        path = "/" + path.split("://", 1)[1].partition("/")[2]
    if path in LLM_PATHS:
        return path
    if path.startswith("/v1/") and path[3:] in LLM_PATHS:  # an OpenAI path spelled with its version
        return path[3:]
    return None
