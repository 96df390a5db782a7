"""Texts full of escapes (JSON-escaped source, HTML, lists of URLs) are read decoded at the cost of a few
passes in C: each escape's decoding is looked up, the map back to the text is built only when the copy
holds a value, and the numeric runs of the text and of its copy are scanned once each. None of it may
let through a value found before: these texts put values among thousands of escapes."""

from __future__ import annotations

import pytest

from relay_runtime import detectors, detectors_decoding, detectors_numbers
from relay_runtime.detectors_decoding import decoded, decoded_copy, original

NAMES = [n for n in detectors.DETECTOR_NAMES if n != "presidio"]


def _found(name: str, text: str) -> list[str]:
    return [text[s:e] for s, e in detectors.detector(name).find(text)]


def _all(text: str) -> dict[str, list[str]]:
    return {n: _found(n, text) for n in NAMES}


ESCAPES = ["%40", "%2B", "%20", "%C3%A9", "\\u0040", "\\ud83d\\ude00", "\\n", '\\"', "&amp;", "&#64;", "&nbsp;", "\xa0"]


def test_each_character_of_a_long_copy_maps_back_to_what_encodes_it() -> None:
    """Escapes repeated many times over (their decoding looked up, not worked out again) map back each to
    itself, wherever it stands."""
    parts = [f"{ESCAPES[i % len(ESCAPES)]}x{i}" for i in range(600)]
    text = "q=1 " + "".join(parts)
    copy, maps = decoded(text) or ("", [])
    pieces = [text[original(i, maps) : original(i + 1, maps)] for i in range(len(copy))]
    assert "".join(pieces) == text
    for ch, piece in zip(copy, pieces, strict=True):
        once = decoded(piece)
        assert (once[0] if once else piece) == ch, (ch, piece)


def test_what_is_no_escape_stays_in_the_copy() -> None:
    text = "a &#0; b %FF c \\ud800 d &#64;"
    copy, _ = decoded(text) or ("", [])
    assert copy.startswith("a &#0; b %FF") and "\\ud800" in copy and copy.endswith(" d @")


def test_the_map_is_built_only_when_the_copy_holds_a_value() -> None:
    page = "<p>Tools &amp; parts&nbsp;here</p>\n" * 200
    for name in NAMES:
        detectors.detector(name).find(page)
    copy = decoded_copy(page)
    assert copy is not None and copy._maps is None
    with_value = page + "<p>jane.doe&#64;example.com</p>"
    assert _found("email", with_value) == ["jane.doe&#64;example.com"]
    found = decoded_copy(with_value)
    assert found is not None and found._maps is not None


def test_the_numeric_runs_of_a_text_and_of_its_copy_are_scanned_once_each(monkeypatch: pytest.MonkeyPatch) -> None:
    scanned: list[str] = []
    scan = detectors_numbers._scan

    def counted(text: str) -> tuple[detectors_numbers.Window, list[detectors_numbers.Run]]:
        scanned.append(text)
        return scan(text)

    monkeypatch.setattr(detectors_numbers, "_scan", counted)
    text = "card 4111&nbsp;1111&nbsp;1111&nbsp;1111, call +44 20 7946 0958, id 123-45-6789 at 10.0.4.17 &amp; more"
    found = {n: _found(n, text) for n in ("phone", "credit_card", "iban", "ip_address", "us_ssn")}
    assert found == {
        "phone": ["+44 20 7946 0958"],
        "credit_card": ["4111&nbsp;1111&nbsp;1111&nbsp;1111"],
        "iban": [],
        "ip_address": ["10.0.4.17"],
        "us_ssn": ["123-45-6789"],
    }
    assert len(scanned) == 2  # the text, and its copy


def test_an_address_whose_at_is_an_entity_beside_ten_kilobytes_of_entities_is_found() -> None:
    amps = "&amp;" * 2000
    for text in (
        amps + "jane.doe&#64;example.com",
        "jane.doe&#64;example.com" + amps,
        amps + "x jane.doe&#64;example.com",
    ):
        assert _found("email", text) == ["jane.doe&#64;example.com"]


@pytest.mark.parametrize("at", [0, 4, 8, 9, 12])
def test_a_card_split_by_an_escape_anywhere_among_many_is_found(at: int) -> None:
    """A card's groups parted by a space written as an escape, at each place in it, amid 10 KB of escapes."""
    card = "4111111111111111"
    for space in ("%20", "&nbsp;", "\\u0020", "&#32;", "\xa0", "%2520"):
        value = card[:at] + space + card[at:] if at else card
        text = "q=1&x=%2F" * 1000 + f" card {value} " + "&amp;\\n" * 1000
        assert _found("credit_card", text) == [value], space


def test_escapes_beyond_those_whose_decoding_is_remembered_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(detectors_decoding, "_PIECES", {})
    monkeypatch.setattr(detectors_decoding, "_DECODINGS", detectors_decoding._Decoded())
    monkeypatch.setattr(detectors_decoding, "_KEEP", 0)  # the tables full: every escape worked out again
    text = "?phone=%2B44+20+7946+0958&mail=jane%2540example.com&card=4111&#32;1111\\u00201111%201111"
    assert _found("phone", text) == ["%2B44+20+7946+0958"]
    assert _found("email", text) == ["jane%2540example.com"]
    assert _found("credit_card", text) == ["4111&#32;1111\\u00201111%201111"]
    assert detectors_decoding._PIECES == {} and detectors_decoding._DECODINGS == {}


def test_values_in_json_escaped_source_are_found_as_in_the_source() -> None:
    import json

    source = "\n".join(
        [
            'def send(to="jane.doe@example.com", card="4111 1111 1111 1111"):',
            '    key = "sk-proj-Zx8Kq2LmN4pR7sT1vW3yB5cD9fG0hJ"',
            '    return post("http://10.0.4.17/x", phone="+44 20 7946 0958", ssn="123-45-6789")',
        ]
        * 50
    )
    escaped = json.dumps(source)[1:-1]
    assert {n: len(v) for n, v in _all(escaped).items()} == {n: len(v) for n, v in _all(source).items()}


@pytest.mark.parametrize(
    ("text", "name", "value"),
    [
        # One escape in a long text: only the stretch around it is searched; its longest forms at the edges.
        ("x " * 3000 + "jane.doe&#0000064;example.com" + " y" * 3000, "email", "jane.doe&#0000064;example.com"),
        ("jane.doe&#x00040;example.com" + " y" * 3000, "email", "jane.doe&#x00040;example.com"),
        ("x " * 3000 + "jane.doe\\u0040example.com", "email", "jane.doe\\u0040example.com"),
        ("x " * 3000 + "mail jane.doe%40example.com", "email", "jane.doe%40example.com"),
        # The first '+' for a space: what it needs before it lies just outside the stretch of escapes.
        ("a=1 " + "y " * 3000 + "4111+1111+1111+1111" + " z" * 3000, "credit_card", "4111+1111+1111+1111"),
        ("q=" + "y " * 3000 + "call+%2B44+20+7946+0958", "phone", "%2B44+20+7946+0958"),
        # Two escapes far apart: everything between them is read.
        (
            "&amp; " + "y " * 3000 + "4111&nbsp;1111&nbsp;1111&nbsp;1111",
            "credit_card",
            "4111&nbsp;1111&nbsp;1111&nbsp;1111",
        ),
        ("call +44\xa020\xa07946\xa00958 " + "y " * 3000 + "\u2009", "phone", "+44\xa020\xa07946\xa00958"),
    ],
)
def test_an_escape_at_either_end_of_what_is_searched_is_read(text: str, name: str, value: str) -> None:
    assert _found(name, text) == [value]
