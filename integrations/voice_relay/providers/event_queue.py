"""The queue a provider connection fills with its events, and the iterator that drains it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from ..models import ProviderEvent

# Put on the queue when the connection ends; the iterator stops there.
END = None

EventQueue = asyncio.Queue[ProviderEvent | None]


async def drain(queue: EventQueue) -> AsyncIterator[ProviderEvent]:
    while True:
        event = await queue.get()
        if event is END:
            return
        yield event
