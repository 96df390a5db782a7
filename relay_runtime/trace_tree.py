"""Drawing the scope tree of a recorded run (events as dicts, e.g. from a JSONL file)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

RED = "\x1b[31m"
YELLOW = "\x1b[33m"
DIM = "\x1b[2m"
RESET = "\x1b[0m"


@dataclass
class Node:
    uuid: str
    name: str
    scope_type: str
    start: int | None = None
    end: int | None = None
    outcome: str | None = None
    error: str | None = None
    model: str | None = None
    tokens: tuple[int | None, int | None] | None = None
    children: list[Node] = field(default_factory=list)
    marks: int = 0
    cost: dict[str, Any] | None = None  # an attempt's cost, or a scope's roll-up (relay_runtime.cost)
    ended: bool = False  # its end event was read (its timestamp may still be unreadable)


def build(events: Iterable[dict[str, Any]]) -> list[Node]:
    nodes: dict[str, Node] = {}
    parents: dict[str, str | None] = {}
    order: list[str] = []
    for ev in events:
        kind = ev.get("kind")
        uuid = ev.get("uuid")
        if not isinstance(uuid, str):
            continue
        if kind == "scope_start":
            nodes[uuid] = Node(uuid, str(ev.get("name")), str(ev.get("scope_type")), start=_time(ev.get("timestamp")))
            parents[uuid] = ev.get("parent_uuid")
            order.append(uuid)
        elif kind == "scope_end":
            node = nodes.get(uuid)
            if node is None:  # an end without its start (the file began mid-run)
                node = nodes[uuid] = Node(uuid, str(ev.get("name")), str(ev.get("scope_type")))
                parents[uuid] = ev.get("parent_uuid")
                order.append(uuid)
            node.ended = True
            node.end = _time(ev.get("timestamp"))
            node.start = node.start or _time(ev.get("start_timestamp"))
            node.outcome = _text(ev.get("outcome"))
            if ev.get("error_type"):
                node.error = f"{ev['error_type']}: {ev.get('error_message') or ''}".rstrip(": ")
            node.model = _text(ev.get("model_name")) or node.model
            response = ev.get("annotated_response")
            response = response if isinstance(response, dict) else {}
            usage = response.get("usage")
            if isinstance(usage, dict):
                tokens = (_count(usage.get("input_tokens")), _count(usage.get("output_tokens")))
                node.tokens = tokens if tokens != (None, None) else node.tokens
            node.model = _text(response.get("model")) or node.model
            cost = ev.get("cost")
            if isinstance(cost, dict):
                node.cost = cost
        elif kind == "mark":
            parent = nodes.get(str(ev.get("parent_uuid")))
            if parent is not None:
                parent.marks += 1
    roots: list[Node] = []
    for uuid in order:
        if _in_a_loop(uuid, parents):  # a hand-edited file: the scope is drawn as a root, not lost
            parents[uuid] = None
        parent_uuid = parents.get(uuid)
        parent = nodes.get(parent_uuid) if isinstance(parent_uuid, str) else None
        (parent.children if parent is not None else roots).append(nodes[uuid])
    return roots


def _in_a_loop(uuid: str, parents: dict[str, Any]) -> bool:
    seen = {uuid}
    current = parents.get(uuid)
    while isinstance(current, str) and current in parents:
        if current in seen:
            return current == uuid
        seen.add(current)
        current = parents[current]
    return False


# A file may be hand-edited or from another writer: a field of the wrong type is unknown.
def _time(value: Any) -> int | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None  # type: ignore[return-value]


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _describe(node: Node, color: bool) -> str:
    bits = [f"{node.name} [{node.scope_type}]"]
    if node.model:
        bits.append(node.model)
    if node.start is not None and node.end is not None:
        bits.append(f"{(node.end - node.start) / 1e6:.1f} ms")
    elif not node.ended:
        bits.append("(open)")
    if node.tokens:
        bits.append(f"tokens in={node.tokens[0] or 0} out={node.tokens[1] or 0}")
    if node.cost:
        bits.append(_describe_cost(node.cost))
    if node.marks:
        bits.append(f"{node.marks} marks")
    outcome = node.outcome or ""
    line = "  ".join(bits) + (f"  {outcome}" if outcome else "")
    if node.error:
        line += f"  {node.error}"
    if color and (node.outcome == "failed" or node.error):
        return f"{RED}{line}{RESET}"
    if color and node.outcome == "cancelled":
        return f"{YELLOW}{line}{RESET}"
    return line


def _money(value: Any, currency: Any) -> str:
    return f"{value:.6f} {currency}" if isinstance(currency, str) and currency else f"{value:.6f}"


def _describe_cost(cost: dict[str, Any]) -> str:
    """``cost 0.001840 USD`` for an attempt (``wasted`` when it failed), or a roll-up with its wasted share."""
    currency = cost.get("currency")
    if "total" in cost:
        total, wasted = cost.get("total"), cost.get("wasted")
        if not isinstance(total, int | float):
            return "cost ?"
        unpriced = cost.get("unpriced")
        if not cost.get("attempts") and isinstance(unpriced, int) and unpriced:
            return f"cost unknown ({unpriced} attempts without one)"
        text = f"cost {_money(total, currency)}"
        if isinstance(wasted, int | float) and wasted:
            share = f" ({wasted / total:.0%})" if total else ""
            text += f", wasted {_money(wasted, currency)}{share}"
        if isinstance(unpriced, int) and unpriced:
            text += f", {unpriced} unpriced (a lower bound)"
        return text
    amount = cost.get("amount")
    if not isinstance(amount, int | float):
        missing = cost.get("missing")
        if missing == ["usage"]:
            return "cost unknown (no usage reported)"
        why = ", ".join(map(str, missing)) if isinstance(missing, list) else "?"
        return f"cost unpriced (no price: {why})"
    text = f"cost {_money(amount, currency)}"
    if cost.get("estimated"):
        text += " (estimated)"
    return text + (" wasted" if cost.get("wasted") else "")


def render(roots: list[Node], *, color: bool = False) -> str:
    lines: list[str] = []

    def walk(node: Node, prefix: str, last: bool, top: bool) -> None:
        branch = "" if top else ("└─ " if last else "├─ ")
        lines.append(prefix + branch + _describe(node, color))
        child_prefix = prefix if top else prefix + ("   " if last else "│  ")
        for i, child in enumerate(node.children):
            walk(child, child_prefix, i == len(node.children) - 1, False)

    for root in roots:
        walk(root, "", True, True)
    return "\n".join(lines)
