"""Values Python wrote with its own escapes reach no sink.

``repr()`` of a ``str`` writes a non-printable Latin-1 character as ``\\xNN`` (a non-breaking space between a
card's groups, a soft hyphen pasted inside an address), ``ascii()`` every non-ASCII Latin-1 one, and a
``bytes`` repr each byte of UTF-8 text. A ``KeyError`` is the everyday case: its message is the repr of the
key it missed (a card number looked up in a dict of accounts), so the error text every sink records holds
the value in that form. Through the real path: ``relay.tools.execute`` under a detector policy, watched by
the events, a JSONL file, OTel, the journal and ATIF.
"""

from __future__ import annotations

from typing import Any

import pytest

from relay_runtime import session
from relay_runtime.redaction import RedactionPolicy, Rule
from tests.test_frameworks_records_secrets import Sinks

CARD_NBSP = "4111\xa01111\xa01111\xa01111"  # as a locale or word processor groups a card number
EMAIL_SHY = "jane\xad.doe@example.com"  # a soft hyphen pasted inside the address
EMAIL_ACCENT = "jos\xe9@example.com"


def _policy() -> RedactionPolicy:
    return RedactionPolicy([Rule("redact", detector="email"), Rule("mask", detector="credit_card", unmasked_suffix=4)])


@pytest.mark.parametrize(
    ("error", "written"),
    [
        (KeyError(CARD_NBSP), ["4111", "xa01111"]),
        (KeyError(EMAIL_SHY), ["jane", "doe@example"]),
        (ValueError(f"no account {EMAIL_ACCENT!a}"), ["jos", "@example"]),  # as ascii() writes it
        (KeyError(EMAIL_ACCENT.encode()), ["jos", "@example"]),  # a bytes key: its UTF-8 bytes escaped
    ],
    ids=["card-nbsp", "email-soft-hyphen", "email-ascii", "email-bytes"],
)
def test_an_error_quoting_a_value_in_python_escapes_records_it_redacted(
    relay_turn: Any, relay_events: Any, tmp_path: Any, error: Exception, written: list[str]
) -> None:
    relay, _turn = relay_turn
    session.SESSION_COORDINATOR.redaction.use(_policy())
    sinks = Sinks(relay, relay_events, tmp_path)

    def look_up(args: dict[str, Any]) -> str:
        raise error  # as ``accounts[key]`` raises it

    with pytest.raises(type(error)):
        relay.tools.execute("look_up", {"account": "ref-7"}, look_up)
    (end,) = [e for e in relay_events.ends() if e.scope_type == "tool"]
    assert end.error_type == type(error).__name__
    texts = sinks.texts()
    for where, text in texts.items():
        for piece in written:
            assert piece not in text, f"{piece!r} is in {where}"
    # The rest of the record is still there: the tool, its argument and what failed.
    assert "ref-7" in texts["jsonl"] and type(error).__name__ in texts["jsonl"]
    assert "1111'" in end.error_message or "[REDACTED:email]'" in end.error_message
