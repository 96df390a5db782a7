"""Values written with marks on their characters reach no sink.

A combining mark draws on the character before it, a variation selector or a keycap changes how it is
drawn, and the combining grapheme joiner and the Mongolian vowel separator draw nothing: a card number
with an accent on a digit (``4\\u0301111 ...``), written as emoji keycaps (``4\\ufe0f\\u20e3 1\\ufe0f\\u20e3 ...``,
as a chat app or a model dodging a filter writes it), or an address typed with a decomposed accent
(``jose\\u0301.doe@...``) reads as the value, and so does one in mathematical digits (``\\U0001d7d2\\U0001d7cf...``,
as "fancy text" generators write them) or in tag characters (invisible, mirroring ASCII: "ASCII smuggling");
each went out whole (or with its local part) past every detector.

Through the real path: ``relay.tools.execute`` under a detector policy, watched by the events, a JSONL file,
OTel, the journal and ATIF.
"""

from __future__ import annotations

from typing import Any

import pytest

from relay_runtime import session
from relay_runtime.redaction import RedactionPolicy, Rule
from tests.test_frameworks_records_secrets import Sinks


def _math_bold(number: str) -> str:
    return "".join(chr(0x1D7CE + int(c)) if c.isdigit() else c for c in number)


def _tags(text: str) -> str:
    return "".join(chr(0xE0000 + ord(c)) for c in text)


def _keycaps(number: str) -> str:
    return "".join(f"{c}\ufe0f\u20e3" if c.isdigit() else c for c in number)


@pytest.mark.parametrize(
    ("value", "pieces"),
    [
        ("4\u0301111 1111 1111 1111", ["1111 1111 1111"]),
        (_keycaps("4111 1111 1111 1111"), [_keycaps("1111 1111 1111")[:-3], "4\ufe0f\u20e31"]),
        ("4\u034f111 1111 1111 1111", ["1111 1111 1111"]),
        ("jane.d\u0301oe@example.com", ["jane", "example.com"]),
        (_math_bold("4111 1111 1111 1111"), [_math_bold("4111"), _math_bold("1111 1111 1111")]),
        (_tags("jane.doe@example.com"), [_tags("jane"), _tags("example.com")]),  # invisible: "ASCII smuggling"
    ],
    ids=[
        "accent-on-a-digit",
        "keycaps",
        "grapheme-joiner",
        "decomposed-accent-in-an-address",
        "mathematical-digits",
        "tag-characters",
    ],
)
def test_a_value_with_marks_on_its_characters_reaches_no_sink(
    relay_turn: Any, relay_events: Any, tmp_path: Any, value: str, pieces: list[str]
) -> None:
    relay, _turn = relay_turn
    session.SESSION_COORDINATOR.redaction.use(
        RedactionPolicy([Rule("redact", detector="email"), Rule("mask", detector="credit_card", unmasked_suffix=4)])
    )
    sinks = Sinks(relay, relay_events, tmp_path)
    result = relay.tools.execute("profile", {"user": "ref-7"}, lambda args: f"on file: {value} \u2764\ufe0f")
    assert value in result  # the caller gets it as it was
    texts = sinks.texts()
    for where, text in texts.items():
        for piece in pieces:
            assert piece not in text, f"{piece!r} is in {where}"
    # The rest is still there: the argument, the words around the value, the emoji's own selector.
    (end,) = relay_events.ends(scope_type="tool")
    assert end.output.startswith("on file: ") and end.output.endswith(" \u2764\ufe0f")
    assert "ref-7" in texts["jsonl"] and "on file: " in texts["jsonl"]
