"""Copies of the messages an agent sent, for an exporter that writes each request after it was sent.

An agent's conversation is its own list of its own dicts, which it goes on changing: it appends to the
list after every call, and may rewrite a message it sent in place (its context compaction shortens an old
tool result before the next call). A writer that runs later must write each request as it was sent, so
each is copied on the agent's thread when it is delivered. Copying a long conversation on every call would
cost the agent a copy of its whole history per call; instead each message is copied once, when first sent,
and on later calls its copy is reused while it still equals the message (a comparison in C), copied again
only when the agent changed it.
"""

from __future__ import annotations

from typing import Any

_KEEP = 4096  # messages held at once; past this the older half is let go (met again, each is copied again)


def copied(value: Any) -> Any:
    """``value`` with its dicts and lists copied all the way down, and everything else shared (strings,
    numbers and objects the agent does not change in place), so that it equals ``value`` until that changes."""
    kind = type(value)
    if kind is dict:
        return {k: copied(v) for k, v in value.items()}
    if kind is list:
        return [copied(v) for v in value]
    if kind is tuple:
        return tuple(copied(v) for v in value)
    return value


class SentCopies:
    """Each message copied when first sent, its copy reused while the message still equals it."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        # id(message) -> (message, its copy): the message held too, so that its id names no other object.
        self._held: dict[int, tuple[Any, Any]] = {}

    def messages(self, messages: list[Any]) -> list[Any]:
        """``messages`` (a request's conversation) as sent: a new list of copies."""
        held = self._held
        out: list[Any] = []
        for message in messages:
            if type(message) is not dict and type(message) is not list:
                out.append(message)  # a string (a Responses API input), an SDK object: not changed in place
                continue
            entry = held.get(id(message))
            if entry is not None and entry[0] is message and entry[1] == message:
                out.append(entry[1])
                continue
            copy = copied(message)
            if len(held) >= _KEEP:
                # ``list(held)`` is taken in one C call, so another thread's insert cannot break the loop.
                for key in list(held)[: _KEEP // 2]:
                    held.pop(key, None)
            held[id(message)] = (message, copy)
            out.append(copy)
        return out
