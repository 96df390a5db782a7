"""Provider adapters: codecs for the OpenAI and Anthropic SDKs, dispatch, and ``instrument()``.

from relay_runtime import adapters
response = adapters.complete(client, {"model": "gpt-4o", "messages": [...]})
for chunk in adapters.stream(client, {...}): ...
adapters.instrument(client)   # or: every traced method of this client becomes a managed call
adapters.instrument()         # or: of every client, through the SDK classes (uninstrument() undoes it)
"""

from typing import TYPE_CHECKING, NoReturn

try:
    from .dispatch import acomplete, astream, complete, stream
    from .instrument import instrument, uninstrument
except ModuleNotFoundError as _exc:
    # A core-only install (no provider SDK, so no httpx2): importing the package, as pytest
    # does for this package's plugin, must not fail; using it says what to install.
    if _exc.name != "httpx2" or TYPE_CHECKING:
        raise
    MISSING: ModuleNotFoundError | None = _exc

    def __getattr__(name: str) -> NoReturn:
        if name.startswith("__"):
            raise AttributeError(name)
        raise ModuleNotFoundError(
            f"relay_runtime.adapters.{name} needs a provider SDK: pip install 'relay-runtime[openai]' "
            f"or 'relay-runtime[anthropic]' ({MISSING})",
            name="httpx2",
        )
else:
    MISSING = None

__all__ = ["acomplete", "astream", "complete", "instrument", "stream", "uninstrument"]
