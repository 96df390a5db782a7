"""JSON from clients and providers, decoded so that no input can crash the handler reading it."""

from __future__ import annotations

import json
from typing import Any


def decode_json(data: str | bytes) -> Any:
    """`json.loads`, with nesting too deep to decode reported as the ValueError any bad JSON is.

    The decoder recurses per nesting level, so 100,000 opening brackets raise RecursionError, which
    no caller expects from a parse and which would escape as a 500 or a dead socket.
    """
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
