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


# -- a copy that differs only after the letter of an escape: JSON-escaped text ----------------------

INERT = detectors_decoding._INERT_CHARS
VALUES = {
    "email": "jane.doe@example.com",
    "phone": "+44 20 7946 0958",
    "credit_card": "4111 1111 1111 1111",
    "iban": "DE89 3704 0044 0532 0130 00",
    "ip_address": "10.0.4.17",
    "us_ssn": "123-45-6789",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc",
    "api_key": "sk-proj-Zx8Kq2LmN4pR7sT1vW3yB5cD9fG0hJ",
    "high_entropy": "-Zx8Kq2LmN4pR7sT1vW3yB5cD9fG0hJqq",
}


@pytest.mark.parametrize("name", list(VALUES))
@pytest.mark.parametrize("escape", ["\\n", "\\r", "\\t"])
def test_a_value_glued_to_the_letter_of_an_escape_is_found(name: str, escape: str) -> None:
    """In the text the letter glues to the value ("nsk-proj-...", "n4111 ..."), which is then none; decoded
    it is. The rest of the text is escaped throughout, so only the stretch after the letter is read again."""
    value = VALUES[name]
    filler = '    return \\"ok\\";\\n' * 300
    text = f'{filler}  note: \\"see{escape}{value}\\"\\n{filler}'
    found = _found(name, text)
    assert value in found or any(value in f for f in found), found
    copy = decoded_copy(text)
    assert copy is not None and copy.windows, "read only where the copy differs"


@pytest.mark.parametrize("name", list(VALUES))
def test_a_value_after_an_escape_that_glues_nothing_is_found_in_the_text(name: str) -> None:
    value = VALUES[name]
    for before in ("\\n ", "\\n\\n ", '\\"', "&amp;", "\\t\\t;", "\\r\\n\\t "):
        text = f"x: 1;{before}{value}; " * 3
        assert _found(name, text) == _found(name, text.replace("\\n", "\n").replace('\\"', '"')) != [], before
        copy = decoded_copy(text)
        assert copy is not None and copy.windows == []  # nothing to read in the copy


def test_an_escape_of_an_escape_among_json_escapes_reads_the_whole_copy() -> None:
    text = '{\\"note\\": \\"mail jane.doe&amp;#64;example.com\\"}\\n' * 50
    copy = decoded_copy(text)
    assert copy is not None and copy.windows is None
    assert _found("email", text) == ["jane.doe&amp;#64;example.com"] * 50


def _segments_found(name: str, text: str) -> list[tuple[int, int]]:
    """What ``name`` finds in each stretch of ``text`` between inert characters, read alone."""
    found: list[tuple[int, int]] = []
    start = 0
    for i, ch in enumerate(text + "\n"):
        if ch in INERT:
            found += [(start + s, start + e) for s, e in detectors.detector(name).find(text[start:i])]
            start = i + 1
    return found


def test_each_detector_finds_in_a_text_what_it_finds_between_its_inert_characters() -> None:
    """What reading only the windows rests on: a built-in detector treats every inert character as the end
    of the text (no value holds one, none is looked past). A detector that read one (a '#' in a pattern,
    a ``str.find(";")``) would fail here."""
    import random

    rnd = random.Random(7)
    pieces = [
        *VALUES.values(),
        *INERT,
        " ",
        "  ",
        ".",
        "-",
        "_",
        "+",
        "=",
        "/",
        ":",
        "@",
        "(",
        ")",
        "a",
        "Z",
        "1",
        "00",
    ]
    pieces += ["4111", "555-2671", "(415) 555-2671", "GB82WEST12345698765432", "::1", "fe80::1", "jane", "example.com"]
    pieces += ["'", "o'"]  # not inert: an e-mail address may hold one ("o'brien@")
    for _ in range(1500):
        text = "".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 12)))
        if "&" in text or "\\" in text:  # an escape: the decoded copy is read too
            continue
        for name in VALUES:
            assert detectors.detector(name).find(text) == _segments_found(name, text), (name, text)


def test_reading_only_the_windows_finds_what_reading_the_whole_copy_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    rnd = random.Random(11)
    pieces = [
        "\\n",
        "\\n",
        '\\"',
        "\\r",
        "\\t",
        "&amp;",
        " ",
        "\n",
        ";",
        '"',
        "&",
        "\\",
        "\\x",
        "n",
        "-",
        "_",
        "+",
        ":",
    ]
    pieces += [*VALUES.values(), "@", ".", "a", "Z", "1", "4111", "jane", "example.com", "&amp;#64;", "=", "/"]
    texts = ["".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 20))) for _ in range(1500)]
    windowed = [{name: _found(name, text) for name in VALUES} for text in texts]
    monkeypatch.setattr(detectors_decoding, "_windows", lambda text, lo, hi: None)
    detectors_decoding._last = ("", None)
    assert [{name: _found(name, text) for name in VALUES} for text in texts] == windowed
