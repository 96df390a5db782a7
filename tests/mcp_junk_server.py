"""A stdio MCP "server" that speaks the handshake protocol but answers ``tools/call`` with junk."""

from __future__ import annotations

import json
import sys


def answer(message: dict) -> dict | None:
    method = message.get("method")
    if "id" not in message:
        return None  # a notification
    if method == "initialize":
        result = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "junk", "version": "0"},
        }
    elif method == "tools/list":
        result = {"tools": []}
    elif method == "tools/call":
        result = {"content": "this should be a list", "isError": "maybe"}
    else:
        result = {}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


for line in sys.stdin:
    reply = answer(json.loads(line))
    if reply is not None:
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
