"""Provider adapters: codecs for the OpenAI and Anthropic SDKs, dispatch, and ``instrument()``.

from relay_runtime import adapters
response = adapters.complete(client, {"model": "gpt-4o", "messages": [...]})
for chunk in adapters.stream(client, {...}): ...
adapters.instrument(client)   # or: every traced method of this client becomes a managed call
adapters.instrument()         # or: of every client, through the SDK classes (uninstrument() undoes it)
"""

from .dispatch import acomplete, astream, complete, stream
from .instrument import instrument, uninstrument

__all__ = ["acomplete", "astream", "complete", "instrument", "stream", "uninstrument"]
