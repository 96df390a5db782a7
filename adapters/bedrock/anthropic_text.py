"""Anthropic's legacy Text Completions body on Bedrock: ``{"prompt": "\\n\\nHuman: ...\\n\\nAssistant:", ...}``.

Claude 2, 2.1 and Instant (``anthropic.claude-v2``, ``anthropic.claude-v2:1``, ``anthropic.claude-instant-v1``)
take it beside the Messages body; the body says which it is (a ``prompt`` and no ``messages``). The prompt is the
conversation, so it is decoded as one: the text before the first ``\\n\\nHuman:`` is the system prompt, each
``\\n\\nHuman:`` / ``\\n\\nAssistant:`` turn a user / assistant message (one space after the colon dropped, as the
format writes it), and a last ``Assistant:`` turn with text is the answer's start the caller wrote (a prefill),
while an empty one is only the cue for the answer. Anthropic's API takes these markers as the turns' bounds
wherever they stand, so the split is the API's own. A prompt whose first marker is no ``\\n\\nHuman:`` (none at
all, or an ``Assistant:`` first) cannot be split that way: it is one user message, whole.

The answer is ``completion`` with a ``stop_reason`` (``stop_sequence``, ``max_tokens``), kept as the finish reason in
the words the Messages API also uses; a stream's chunks each carry a piece of ``completion``, and the last one its
``stop_reason`` (and on Bedrock the invocation metrics).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..common import get

TEXT_COMPLETION = "anthropic-text"
# Neutral name -> body key.
PARAMS = {"max_tokens": "max_tokens_to_sample", "temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
          "stop": "stop_sequences"}  # fmt: skip
STRUCTURAL = frozenset({"prompt"})
ANSWER = "completion"  # the key of an answer's text, whole or a stream chunk's piece

# The only models that take this body (``anthropic.claude-v2:1:200k`` is a context-length variant); newer Claude
# models take the Messages body alone. A region prefix or an ARN's path may come before it.
_MODELS = re.compile(r"(?:^|[./])anthropic\.claude-(?:v2|instant-v1)(?::|$)")
_TURN = re.compile(r"\n\n(Human|Assistant):")
_ROLES = {"Human": "user", "Assistant": "assistant"}
_MARKERS = {"user": "Human", "assistant": "Assistant"}


def takes_text(model: Any) -> bool:
    """Whether ``model`` is one that takes a Text Completions body."""
    return isinstance(model, str) and _MODELS.search(model) is not None


def is_text_body(body: Mapping[str, Any] | None) -> bool:
    return body is not None and isinstance(body.get("prompt"), str) and "messages" not in body


def _in_turns(prompt: str) -> bool:
    first = _TURN.search(prompt)
    return first is not None and first.group(1) == "Human"


def conversation(prompt: Any) -> tuple[str | None, list[dict[str, Any]]]:
    """A prompt's system text and its messages (see the module's docstring)."""
    if not isinstance(prompt, str):
        return None, []
    if not _in_turns(prompt):
        return None, [{"role": "user", "content": prompt}]
    head, *rest = _TURN.split(prompt)
    messages = [{"role": _ROLES[marker], "content": text[1:] if text.startswith(" ") else text}
                for marker, text in zip(rest[::2], rest[1::2], strict=True)]  # fmt: skip
    if messages[-1]["role"] == "assistant" and not messages[-1]["content"]:
        messages.pop()  # the cue for the answer, no message
    return head or None, messages


def prompt_of(system: Any, messages: Any, original: Any) -> str:
    """The prompt that says ``system`` and ``messages``: the inverse of ``conversation`` (an intercept's edit).

    ``original`` not in turns: it was one user message, and is written back as that message's text alone.
    """
    messages = list(messages or [])
    if isinstance(original, str) and not _in_turns(original) and system is None:
        if len(messages) != 1 or not isinstance(get(messages[0], "content"), str):
            raise ValueError("a prompt not in Human/Assistant turns is one user message: messages must be one string")
        return str(get(messages[0], "content"))
    if system is not None and not isinstance(system, str):
        raise ValueError("a Text Completions prompt's system text must be a string")
    parts = [system or ""]
    for message in messages:
        role, content = get(message, "role"), get(message, "content")
        if role not in _MARKERS or not isinstance(content, str):
            raise ValueError("a Text Completions prompt takes user and assistant messages of string content")
        parts.append(f"\n\n{_MARKERS[role]}: {content}")
    if not messages or get(messages[-1], "role") != "assistant":
        parts.append("\n\nAssistant:")
    return "".join(parts)


def edited(prompt: Any, changes: Mapping[str, Any]) -> str:
    """``prompt`` with the system text and messages an intercept changed (``changes``), the rest as it was."""
    system, messages = conversation(prompt)
    return prompt_of(changes.get("system", system), changes.get("messages", messages), prompt)
