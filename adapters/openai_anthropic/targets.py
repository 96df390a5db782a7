"""What ``instrument()`` wraps in the OpenAI and Anthropic SDKs: methods, where clients keep them, the classes.

Traced methods, per API (the SDKs' other helpers go through these):

- chat completions: ``create`` (``stream=True`` too, and so ``chat.completions.stream()``), ``parse``
- responses: ``create`` (and so ``responses.stream()``), ``parse``
- anthropic messages: ``create``, ``stream``, ``parse``
- openai embeddings: ``create`` (operation ``embeddings``)

each on the API's resource and on its beta twin (``beta.chat.completions``, ``beta.responses``,
``beta.messages``).
"""

from __future__ import annotations

from ..dispatch import ANTHROPIC_MESSAGES, CHAT_COMPLETIONS, EMBEDDINGS, RESPONSES

METHODS: dict[str, tuple[str, ...]] = {
    CHAT_COMPLETIONS: ("create", "parse"),
    RESPONSES: ("create", "parse"),
    ANTHROPIC_MESSAGES: ("create", "stream", "parse"),
    EMBEDDINGS: ("create",),
}

# Where a client keeps the resources of each API: the main one and its beta twin (the same API
# answering beta types). ``instrument(client)`` wraps each one the client has.
RESOURCE_PATHS: dict[str, tuple[tuple[str, ...], ...]] = {
    CHAT_COMPLETIONS: (("chat", "completions"), ("beta", "chat", "completions")),
    RESPONSES: (("responses",), ("beta", "responses")),
    ANTHROPIC_MESSAGES: (("messages",), ("beta", "messages")),
    EMBEDDINGS: (("embeddings",),),
}

# The SDK resource classes ``instrument()`` wraps: (module, class, api).
SDK_CLASSES: tuple[tuple[str, str, str], ...] = (
    ("openai.resources.chat.completions.completions", "Completions", CHAT_COMPLETIONS),
    ("openai.resources.chat.completions.completions", "AsyncCompletions", CHAT_COMPLETIONS),
    ("openai.resources.responses.responses", "Responses", RESPONSES),
    ("openai.resources.responses.responses", "AsyncResponses", RESPONSES),
    ("anthropic.resources.messages.messages", "Messages", ANTHROPIC_MESSAGES),
    ("anthropic.resources.messages.messages", "AsyncMessages", ANTHROPIC_MESSAGES),
    # client.beta.messages: the same API with beta features, answering BetaMessage.
    ("anthropic.resources.beta.messages.messages", "Messages", ANTHROPIC_MESSAGES),
    ("anthropic.resources.beta.messages.messages", "AsyncMessages", ANTHROPIC_MESSAGES),
    # client.beta.responses: the Responses API answering BetaResponse (client.beta.chat is the plain Chat).
    ("openai.resources.beta.responses.responses", "Responses", RESPONSES),
    ("openai.resources.beta.responses.responses", "AsyncResponses", RESPONSES),
    ("openai.resources.embeddings", "Embeddings", EMBEDDINGS),
    ("openai.resources.embeddings", "AsyncEmbeddings", EMBEDDINGS),
)

# Methods of METHODS that a class above has never had (so their absence is not a version we do not
# know): (module, method). The beta Responses API has no ``parse``.
NEVER_THERE: frozenset[tuple[str, str]] = frozenset({("openai.resources.beta.responses.responses", "parse")})

# Public SDK calls that make LLM output but cannot be recorded as one attempt, so they are counted
# instead (in ``relay.diagnostics()`` as ``adapters.untraced_calls`` and ``.<label>``), never silent:
# a compaction answers a compacted item list, not a response the codecs read; a websocket connection
# carries many responses over one socket; a batch creates its messages later, out of band.
# (label, path from the client, method); the classes ``instrument()`` wraps the same way follow.
UNTRACED_PATHS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("responses.compact", ("responses",), "compact"),
    ("responses.compact", ("beta", "responses"), "compact"),
    ("responses.connect", ("responses",), "connect"),
    ("responses.connect", ("beta", "responses"), "connect"),
    ("messages.batches.create", ("messages", "batches"), "create"),
    ("messages.batches.create", ("beta", "messages", "batches"), "create"),
)
UNTRACED_CLASSES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("openai.resources.responses.responses", "Responses", "responses", ("compact", "connect")),
    ("openai.resources.responses.responses", "AsyncResponses", "responses", ("compact", "connect")),
    ("openai.resources.beta.responses.responses", "Responses", "responses", ("compact", "connect")),
    ("openai.resources.beta.responses.responses", "AsyncResponses", "responses", ("compact", "connect")),
    ("anthropic.resources.messages.batches", "Batches", "messages.batches", ("create",)),
    ("anthropic.resources.messages.batches", "AsyncBatches", "messages.batches", ("create",)),
    ("anthropic.resources.beta.messages.batches", "Batches", "messages.batches", ("create",)),
    ("anthropic.resources.beta.messages.batches", "AsyncBatches", "messages.batches", ("create",)),
)

# Clients derived from an instrumented one (``with_options()`` / ``copy()``) are instrumented too.
DERIVERS = ("copy", "with_options")

# The SDKs cache these raw-response helpers per resource, holding the ``create`` they first saw.
RAW_HELPERS = ("with_raw_response", "with_streaming_response")
