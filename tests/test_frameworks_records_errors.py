"""A failure whose exception cannot be told as text (its ``__str__`` raises: an exception unpickled without
the attributes its message reads, a library's own) is still recorded as a failure, and the caller still
gets its own exception: the scope's end event holds the error's type with its message withheld.

Real LangChain (a tool run under ``RelayCallbackHandler``) and the relay's own managed tool call.
"""

from __future__ import annotations

import pytest

from tests.framework_support import need

tools_mod = need("langchain_core.tools")

from relay_runtime.integrations.langchain import RelayCallbackHandler  # noqa: E402


class Untellable(Exception):
    """An exception whose message cannot be read."""

    def __str__(self) -> str:
        raise AttributeError("'Untellable' object has no attribute 'detail'")


def test_a_langchain_tool_raising_an_untellable_error_ends_its_scope_failed(relay_turn, relay_events) -> None:
    @tools_mod.tool
    def lookup(city: str) -> str:
        """Look a city up."""
        raise Untellable()

    with pytest.raises(Untellable):
        lookup.invoke({"city": "Paris"}, config={"callbacks": [RelayCallbackHandler()]})
    (end,) = relay_events.ends(name="lookup")  # no tool scope left open in the record
    assert (end.outcome, end.error_type) == ("failed", "Untellable")
    assert "withheld" in end.error_message


def test_a_managed_tool_call_raising_an_untellable_error_raises_it_to_the_caller(relay_turn, relay_events) -> None:
    relay, _turn = relay_turn

    def tool(args: object) -> str:
        raise Untellable()

    with pytest.raises(Untellable):  # not the AttributeError of recording its message
        relay.tools.execute("lookup", {"city": "Paris"}, tool)
    (end,) = relay_events.ends(name="lookup")
    assert (end.outcome, end.error_type) == ("failed", "Untellable")
