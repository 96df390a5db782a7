"""Values written in an encoding are found: percent and form encoding (a URL's query), JSON escapes in
text not parsed as JSON, HTML entities, Unicode spaces between groups of digits, an encoding applied
twice. Each once passed every sink as it was, though anyone can decode it. The span found is the
encoded one, so what a rule replaces leaves the text around it encoded as it was (a URL stays a URL)."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import Recorder, Relay, adapters, cassettes, detectors, session
from relay_runtime.adapters import testing
from relay_runtime.detectors_decoding import decoded, original
from relay_runtime.jsonl import event_json
from relay_runtime.redaction import RedactionPolicy, Rule

# (detector, text, what it finds: a slice of the text as written)
FOUND = [
    # A URL's query, as urllib.parse.urlencode and the SDKs write it: '+' for a space, %2B for a plus.
    ("phone", "https://crm.example.com/find?phone=%2B44+20+7946+0958", "%2B44+20+7946+0958"),
    ("phone", "tel:%2B1-415-555-2671", "%2B1-415-555-2671"),
    ("phone", "?q=call+me+at+%2B44+20+7946+0958&x=1", "%2B44+20+7946+0958"),
    ("phone", "?phone=%28415%29%20555-2671", "%28415%29%20555-2671"),
    ("credit_card", "https://shop.example.com/pay?card=4111+1111+1111+1111", "4111+1111+1111+1111"),
    ("credit_card", "pay?card=4111%201111%201111%201111&cvc=123", "4111%201111%201111%201111"),
    ("iban", "https://bank.example.com/?iban=DE89+3704+0044+0532+0130+00", "DE89+3704+0044+0532+0130+00"),
    ("iban", "?iban=GB82+WEST+1234+5698+7654+32", "GB82+WEST+1234+5698+7654+32"),
    ("email", "?email=jos%C3%A9%40b%C3%BCcher.de", "jos%C3%A9%40b%C3%BCcher.de"),
    ("email", "?email=jane+tag%40b%C3%BCcher.de", "jane+tag%40b%C3%BCcher.de"),  # its own "+" kept
    # Non-breaking, figure, narrow and other Unicode spaces between the groups.
    ("credit_card", "card 4111\xa01111\xa01111\xa01111", "4111\xa01111\xa01111\xa01111"),
    ("credit_card", "card 4111\u202f1111\u202f1111\u202f1111", "4111\u202f1111\u202f1111\u202f1111"),
    ("credit_card", "card 4111\u20071111\u20071111\u20071111", "4111\u20071111\u20071111\u20071111"),
    ("phone", "call +44\xa020\xa07946\xa00958", "+44\xa020\xa07946\xa00958"),
    ("phone", "call (415)\xa0555-2671 now", "(415)\xa0555-2671"),
    ("phone", "call +1\u2009415\u2009555\u20092671", "+1\u2009415\u2009555\u20092671"),
    ("iban", "IBAN DE89\xa03704\xa00044\xa00532\xa00130\xa000", "DE89\xa03704\xa00044\xa00532\xa00130\xa000"),
    # Unicode dashes between the groups: the figure dash Unicode made for phone numbers, the non-breaking
    # hyphen typesetters keep a number on one line with, the hyphen, the en dash, the minus sign.
    ("phone", "call 415\u2012555\u20122671", "415\u2012555\u20122671"),
    ("phone", "call +44\u201120\u20117946\u20110958", "+44\u201120\u20117946\u20110958"),
    ("phone", "call (415) 555\u20102671", "(415) 555\u20102671"),
    ("us_ssn", "SSN 123\u201345\u20136789", "123\u201345\u20136789"),
    ("us_ssn", "SSN 123\u221245\u22126789", "123\u221245\u22126789"),
    ("credit_card", "card 4111\u20121111\u20121111\u20121111", "4111\u20121111\u20121111\u20121111"),
    # JSON that is not parsed as JSON (prose around it, NDJSON, cut short): json.dumps escapes non-ASCII.
    ("email", 'User record: {"email": "jane@b\\u00fccher.de"}', "jane@b\\u00fccher.de"),
    ("email", '{"to": "jane.doe\\u0040example.com"}\n{"to": "x"', "jane.doe\\u0040example.com"),
    ("email", '{"to": "jane\\u0040\\ud835\\udc9cexample.com"}', "jane\\u0040\\ud835\\udc9cexample.com"),
    ("credit_card", '{"note": "Card:\\n4111 1111 1111 1111"}', "4111 1111 1111 1111"),
    # HTML.
    ("email", '<a href="mailto:jane.doe&#64;example.com">mail</a>', "jane.doe&#64;example.com"),
    ("email", "jane.doe&#x40;example.com", "jane.doe&#x40;example.com"),
    ("email", "jane.doe&commat;example&period;com", "jane.doe&commat;example&period;com"),
    ("credit_card", "<td>4111&nbsp;1111&nbsp;1111&nbsp;1111</td>", "4111&nbsp;1111&nbsp;1111&nbsp;1111"),
    # Digits of other scripts, as Arabic, Persian and Hindi keyboards write them.
    (
        "credit_card",
        "رقم البطاقة \u0664\u0661\u0661\u0661 \u0661\u0661\u0661\u0661 "
        "\u0661\u0661\u0661\u0661 \u0661\u0661\u0661\u0661 شكرا",
        "\u0664\u0661\u0661\u0661 \u0661\u0661\u0661\u0661 \u0661\u0661\u0661\u0661 \u0661\u0661\u0661\u0661",
    ),
    (
        "phone",
        "تلفن من +\u06f9\u06f8 \u06f2\u06f1 \u06f1\u06f2\u06f3\u06f4 \u06f5\u06f6\u06f7\u06f8 است",
        "+\u06f9\u06f8 \u06f2\u06f1 \u06f1\u06f2\u06f3\u06f4 \u06f5\u06f6\u06f7\u06f8",
    ),
    (
        "us_ssn",
        "SSN \u0966\u096d\u096e-\u0966\u096b-\u0967\u0967\u0968\u0966 है",
        "\u0966\u096d\u096e-\u0966\u096b-\u0967\u0967\u0968\u0966",
    ),
    ("ip_address", "الخادم \u0661\u0660.\u0660.\u0664.\u0661\u0667", "\u0661\u0660.\u0660.\u0664.\u0661\u0667"),
    # Bidirectional marks inside a number, and isolates around it, as editors of Arabic and Hebrew write them:
    # the marks inside are part of the span, those around it are not.
    ("phone", "טלפון +44\u200e 20\u200e 7946\u200e 0958", "+44\u200e 20\u200e 7946\u200e 0958"),
    ("credit_card", "כרטיס 4111\u200f1111\u200f1111\u200f1111", "4111\u200f1111\u200f1111\u200f1111"),
    ("credit_card", "card 4111\u061c1111\u061c1111\u061c1111", "4111\u061c1111\u061c1111\u061c1111"),
    ("phone", "هاتف \u2066+44 20 7946 0958\u2069 شكرا", "+44 20 7946 0958"),
    ("email", "بريد \u2068jane@example.com\u2069", "jane@example.com"),
    # An encoding of an encoding.
    ("email", "jane.doe%2540example.com", "jane.doe%2540example.com"),
    ("email", "jane.doe&amp;#64;example.com", "jane.doe&amp;#64;example.com"),
    ("phone", "tel:%252B1-415-555-2671", "%252B1-415-555-2671"),
]

# Text that holds an encoding's marks but no value: nothing is found in it.
NOT_FOUND = [
    "we were right 100%20 of the time",
    "R&D and a&b; AT&T",
    "https://example.com/files/a%2Fb%2Fc?page=2&sort=asc",
    "C++ and g++ -O2; x=1+2+3",
    'print("a\\nb\\tc"); path = "C:\\\\Users\\\\me"',
    "price 1\xa0000 EUR, total 1\xa0234\xa0567,89 EUR",
    "1\u202f000\u202f000 inhabitants",
    "&#xD800; &#0; &#99999999; &bogus; %ZZ %E2%28%A1 \\ud800",
    "version=1.2.3+build.4567",
    "ticket=12345678+order=87654321",
    "pages 10\u201320, the years 1990\u20132020, \u22125\u202f\u00b0C at 06\u201130",
    "\u0662\u0660\u0662\u0664-\u0661\u0662-\u0660\u0665 \u0661\u0662\u0663\u0664\u0665\u0666 ريال",  # a date, an amount
]


def _found(name: str, text: str) -> list[str]:
    return [text[s:e] for s, e in detectors.detector(name).find(text)]


@pytest.mark.parametrize(("name", "text", "value"), FOUND)
def test_an_encoded_value_is_found_as_written(name: str, text: str, value: str) -> None:
    assert _found(name, text) == [value]


@pytest.mark.parametrize("text", NOT_FOUND)
def test_marks_of_an_encoding_are_no_value(text: str) -> None:
    """Beside an encoded address (found), the rest of the text is read decoded too and holds nothing."""
    text = f"{text}; reach me at jane.doe&#64;example.com"
    names = [n for n in detectors.DETECTOR_NAMES if n != "presidio"]
    expected = {n: ["jane.doe&#64;example.com"] if n == "email" else [] for n in names}
    assert {n: _found(n, text) for n in names} == expected


def test_the_decoded_copy_maps_each_character_back_to_what_encodes_it() -> None:
    text = "a%C3%A9\\ud83d\\ude00&#64;b+1\xa0%2540"
    copy, maps = decoded(text) or ("", [])
    assert copy == "aé\U0001f600@b+1 @"  # '+' is a space only in a query or form (a text with '=')
    pieces = [text[original(i, maps) : original(i + 1, maps)] for i in range(len(copy))]
    assert pieces == ["a", "%C3%A9", "\\ud83d\\ude00", "&#64;", "b", "+", "1", "\xa0", "%2540"]
    assert decoded("plain ascii text, +44 and C++") is None


def test_a_value_found_both_ways_is_one_span() -> None:
    text = "mail jane@example.com or jane%40example.com, then jane&#64;example.com"
    assert _found("email", text) == ["jane@example.com", "jane%40example.com", "jane&#64;example.com"]


def test_the_redacted_url_keeps_its_encoding() -> None:
    relay = Relay()
    seen = Recorder()
    relay.subscribers.register(seen)
    relay.redaction.use(RedactionPolicy([Rule("redact", detector="phone"), Rule("redact", detector="email")]))
    url = "https://crm.example.com/find?" + urllib.parse.urlencode(
        {"phone": "+44 20 7946 0958", "email": "jane.doe@example.com", "q": "a b/c"}
    )
    relay.tools.execute("fetch", {"url": url}, lambda args: "ok")
    assert seen.events[0].input["url"] == (
        "https://crm.example.com/find?phone=[REDACTED:phone]&email=[REDACTED:email]&q=a+b%2Fc"
    )


PHONE = "+44 20 7946 0958"


def _spellings(text: str) -> list[str]:
    """``text`` and what decoding it as a query (once, twice) makes of it."""
    once = urllib.parse.unquote_plus(text)
    return [text, once, urllib.parse.unquote_plus(once)]


def test_a_phone_in_extra_query_reaches_neither_the_cassettes_http_path_nor_the_events(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path
) -> None:
    """The SDK encodes ``extra_query`` into the URL itself (``?ph=%2B44+20+7946+0958``): the cassette's
    stored HTTP path held the phone the stored request had redacted."""
    session.SESSION_COORDINATOR.redaction.use(RedactionPolicy([Rule("redact", detector="phone")]))
    scripted = testing.scripted_openai(testing.json_reply(testing.chat_completion_body("ok")))
    cassette = tmp_path / "cassette.json"
    kwargs = {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], "extra_query": {"ph": PHONE}}
    with cassettes.use(cassette, mode="record"):
        adapters.complete(scripted.client, kwargs)

    assert "ph=%2B44+20+7946+0958" in str(scripted.script.requests[0].url)  # the provider got it as it was
    (call,) = json.loads(cassette.read_text())["calls"]
    path = call["http"][0]["path"]
    assert path.endswith("?ph=[REDACTED:phone]"), path
    stored = cassette.read_text()
    events = "\n".join(event_json(e) + repr(e.annotated_request) for e in relay_events.events)
    for where, text in (("the cassette", stored), ("the events", events)):
        assert not any(PHONE in spelled for spelled in _spellings(text)), where


def test_a_card_in_arabic_indic_digits_is_replaced_and_the_words_kept() -> None:
    card = "\u0664\u0661\u0661\u0661 \u0661\u0661\u0661\u0661 \u0661\u0661\u0661\u0661 \u0661\u0661\u0661\u0661"
    policy = RedactionPolicy([Rule("redact", detector="credit_card")])
    assert policy.redact_text(f"رقم البطاقة {card} شكرا") == "رقم البطاقة [REDACTED:credit_card] شكرا"


def test_a_number_in_a_bidirectional_isolate_is_replaced_and_the_isolate_kept() -> None:
    policy = RedactionPolicy([Rule("redact", detector="phone")])
    text = "هاتف \u2066+44 20 7946 0958\u2069 شكرا"
    assert policy.redact_text(text) == "هاتف \u2066[REDACTED:phone]\u2069 شكرا"
