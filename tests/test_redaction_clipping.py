"""A bound cuts no value in two: an integration's cut is made before the policy reads the text, and a
value's first half (``jane.doe@example.c``, ``sk-proj-Zx8Kq2L``) is found by no detector."""

from __future__ import annotations

from typing import Any

import pytest

from relay_runtime import Recorder, Relay
from relay_runtime.clipping import ERROR_MESSAGE_LIMIT, head
from relay_runtime.conventions import SPAN_HINTS
from relay_runtime.integrations.langchain.codec import plain
from relay_runtime.integrations.mcp.conventions import target_of, tool_error_text
from relay_runtime.integrations.voice_relay.event_log import clip
from relay_runtime.redaction import RedactionPolicy, Rule

EMAIL = "jane.doe@example.com"
KEY = "sk-proj-Zx8Kq2LmN4pR7sT1vW3yB5cD9fG0hJ"
CARD = "4111 1111 1111 1111"


@pytest.mark.parametrize(
    ("text", "limit", "kept"),
    [
        ("hello world", 100, "hello world"),  # it fits: itself
        ("hello world", 5, "hello"),  # the cut falls between tokens
        ("hello wonderful world", 9, "hello"),  # the token the cut went through is left out whole
        (f"mail {EMAIL} now", 14, "mail"),
        (f"card {CARD} ok", 14, "card"),  # and the groups of digits before it
        (f"paid 2024 with {CARD}", 26, "paid 2024 with"),
        (KEY * 3, 50, ""),  # one token longer than the bound: nothing of it
    ],
)
def test_head_keeps_whole_tokens_only(text: str, limit: int, kept: str) -> None:
    assert head(text, limit) == kept
    assert len(head(text, limit)) <= limit


def _straddling(value: str, bound: int) -> str:
    """Text in which ``value`` begins a few characters before ``bound`` and ends after it."""
    return "x " * ((bound - 6) // 2) + value + " and more text after it"


@pytest.mark.parametrize("value", [EMAIL, KEY, CARD])
def test_no_integration_bound_keeps_half_a_value(value: str) -> None:
    cuts: list[tuple[str, Any]] = [
        ("an MCP tool's name", target_of("tools/call", {"name": _straddling(value, 256)})),
        ("an MCP resource's URI", target_of("resources/read", {"uri": _straddling(value, 256)})),
        (
            "an MCP tool's error text",
            tool_error_text({"content": [{"type": "text", "text": _straddling(value, 2000)}]}),
        ),
        ("a LangChain payload string", plain(_straddling(value, 4096))),
        ("the voice relay's echo of a peer's text", clip(_straddling(value, 64))),
    ]
    for where, cut in cuts:
        assert isinstance(cut, str) and cut, where
        assert value[:6] not in cut, f"{where} kept the start of {value!r}: ...{cut[-40:]!r}"


def test_span_hint_attributes_are_read_by_the_rules_whatever_the_span_name() -> None:
    # A server span's peer address: its name ("tools/call add") holds nothing the policy changes.
    relay = Relay()
    relay.redaction.use(RedactionPolicy([Rule("redact", detector="ip_address")]))
    seen: list[Any] = []
    relay.subscribers.register(seen.append, name="seen")
    hints = {"name": "tools/call add", "kind": "server", "attributes": {"client.address": "10.1.2.3", "port": 80}}
    relay.scope.pop(relay.scope.push("tools/call add", "tool", metadata={SPAN_HINTS: hints}))
    for event in seen:
        recorded = event.metadata[SPAN_HINTS]
        assert recorded["name"] == "tools/call add"
        assert recorded["attributes"] == {"client.address": "[REDACTED:ip_address]", "port": 80}
    assert hints["attributes"]["client.address"] == "10.1.2.3"  # the integration's own object is left as it was


def test_an_errors_text_is_bounded_in_events_and_cuts_no_value_in_two() -> None:
    """A provider or an MCP server may answer with megabytes of error text: every sink would hold it all."""
    relay = Relay()
    seen = Recorder()
    relay.subscribers.register(seen)
    relay.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
    filler = "word " * (ERROR_MESSAGE_LIMIT // 5 - 3)
    text = f"refused: {filler}{EMAIL} " + "x" * 2_000_000

    def tool(args: Any) -> Any:
        raise RuntimeError(text)

    with pytest.raises(RuntimeError) as caught:
        relay.tools.execute("big", {}, tool)
    assert str(caught.value) == text  # the caller's own error, whole
    message = seen.events[-1].error_message
    assert message.startswith("refused: word word")
    assert len(message) <= ERROR_MESSAGE_LIMIT + 40
    assert message.endswith(f"[cut: {len(text) - len(head(text, ERROR_MESSAGE_LIMIT)):,} more characters]")
    assert "jane.doe" not in message and "@example" not in message  # the address straddled the cut: all of it left
