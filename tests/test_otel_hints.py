"""``apply_hints`` sets what the item-by-item rule sets, in the same order, at a span's start and at its end
(where the values the start set are skipped first)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import pytest

from relay_runtime.integrations.otel.hints import apply_changed, apply_hints

_PRIMITIVES = (str, bool, int, float)


def _walked(extra: Mapping[Any, Any], attributes: dict[str, Any], started: Mapping[str, Any] | None) -> None:
    """The item-by-item rule, as the exporter has always applied it."""
    for key, value in extra.items():
        if value is None or type(key) is not str:
            continue
        if started is not None and started.get(key) is value and key not in attributes:
            continue
        if isinstance(value, _PRIMITIVES):
            attributes[key] = value
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, _PRIMITIVES) for v in value):
            attributes[key] = list(value)


class Colour(enum.StrEnum):
    RED = "red"


START = {"mcp.method.name": "tools/call", "gen_ai.tool.name": "add", "mcp.protocol.version": "2025-11-25"}
EXTRAS: list[dict[Any, Any]] = [
    {},
    dict(START),
    {**START, "server.port": 443, "ratio": 0.5, "flag": True},
    {**START, "gen_ai.tool.name": None},  # a None is skipped
    {**START, 7: "not a str key"},
    {**START, "colour": Colour.RED},  # a subclass of str: set as it is, by the walk
    {**START, "stops": ("a", "b"), "empty": []},
    {**START, "odd": object()},
    {**START, "": "an empty key"},  # set as any str key is
]


@pytest.mark.parametrize("extra", EXTRAS)
@pytest.mark.parametrize("before", [{}, {"relay.outcome": "success"}, {"gen_ai.tool.name": "other"}])
def test_a_start_sets_what_the_walk_sets_in_its_order(extra: dict[Any, Any], before: dict[str, Any]) -> None:
    attributes, expected = dict(before), dict(before)
    _walked(extra, expected, None)
    assert apply_hints({"name": "n", "attributes": extra}, "x", attributes) == "n"
    assert list(attributes.items()) == list(expected.items())


@pytest.mark.parametrize("extra", EXTRAS)
@pytest.mark.parametrize("before", [{}, {"relay.outcome": "success"}, {"mcp.method.name": "tools/list"}])
def test_an_end_sets_only_what_changed_since_the_start(extra: dict[Any, Any], before: dict[str, Any]) -> None:
    started = dict(START)
    # The end's hints: the start's values (the same objects), one changed, one added, one equal but not the same.
    end = {**extra, "jsonrpc.request.id": "3", "mcp.protocol.version": "".join(["2025-", "11-25"])}
    if "server.port" in end:
        end["server.port"] = 443.0
    attributes, expected = dict(before), dict(before)
    _walked(end, expected, started)
    apply_hints({"attributes": end}, "", attributes, started=started)
    assert list(attributes.items()) == list(expected.items())
    assert [type(v) for v in attributes.values()] == [type(v) for v in expected.values()]


@pytest.mark.parametrize("extra", EXTRAS)
@pytest.mark.parametrize("before", [{}, {"relay.outcome": "success"}, {"mcp.method.name": "tools/list"}])
@pytest.mark.parametrize("started", [dict(START), {}, None])
def test_an_end_picked_in_c_sets_what_the_walk_sets(
    extra: dict[Any, Any], before: dict[str, Any], started: dict[str, Any] | None
) -> None:
    """``apply_changed`` (the exporter's usual end: its own attributes share no key with the hints) and the walk
    with anything else (a key both set; a start that hinted nothing)."""
    end = {**extra, "jsonrpc.request.id": "3", "mcp.protocol.version": "".join(["2025-", "11-25"])}
    attributes, expected = dict(before), dict(before)
    _walked(end, expected, started)
    apply_changed({"attributes": end}, attributes, started)
    assert list(attributes.items()) == list(expected.items())
    assert [type(v) for v in attributes.values()] == [type(v) for v in expected.values()]
