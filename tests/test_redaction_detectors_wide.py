"""Full-width forms (as Japanese and Chinese input methods write digits, '@' and '+') and invisible
characters inside a value (a zero-width space pasted from a web page, a soft hyphen) once passed every
sink whole: no detector read them as the digits and punctuation they stand for. The decoded copy reads
full-width forms one character for one and drops invisible ones; spans map back to the original."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest

from relay_runtime import Recorder, Relay, detectors
from relay_runtime.detectors_decoding import decoded, original
from relay_runtime.jsonl import event_json
from relay_runtime.redaction import RedactionPolicy, Rule


def wide(text: str) -> str:
    """``text`` with its printable ASCII written full-width (U+FF01..U+FF5E), spaces kept."""
    return "".join(chr(ord(ch) + 0xFEE0) if "!" <= ch <= "~" else ch for ch in text)


WIDE_CARD = wide("4111 1111 1111 1111")
WIDE_PHONE = wide("+44 20 7946 0958")
WIDE_EMAIL = wide("jane@example.com")
WIDE_IBAN = wide("GB82 WEST 1234 5698 7654 32")
ZW_CARD = "4111\u200b1111\u200b1111\u200b1111"
ZW_EMAIL = "jane\u200b.doe@exam\u2060ple.com"
ZW_SSN = "123\u200c-45\u200d-67\xad89"

# (detector, text, the value in it): full-width prose around full-width values, ASCII around invisible ones.
FOUND = [
    ("credit_card", wide(f"カード番号:{WIDE_CARD}。お願いします"), WIDE_CARD),
    ("credit_card", wide(f"卡号 {WIDE_CARD},谢谢"), WIDE_CARD),
    ("phone", wide(f"電話:{WIDE_PHONE}までどうぞ"), WIDE_PHONE),
    ("email", wide(f"メール:{WIDE_EMAIL} です"), WIDE_EMAIL),
    ("email", f"mail jane{wide('@')}example{wide('.')}com today", f"jane{wide('@')}example{wide('.')}com"),
    ("iban", f"口座 {WIDE_IBAN} まで", WIDE_IBAN),
    ("credit_card", f"card {ZW_CARD} on file", ZW_CARD),
    ("credit_card", f"\ufeffcard {ZW_CARD}", ZW_CARD),
    ("email", f"write to {ZW_EMAIL} today", ZW_EMAIL),
    ("us_ssn", f"ssn {ZW_SSN} ok", ZW_SSN),
]


def _found(name: str, text: str) -> list[str]:
    return [text[s:e] for s, e in detectors.detector(name).find(text)]


@pytest.mark.parametrize(("name", "text", "value"), FOUND)
def test_a_wide_or_invisibly_split_value_is_found_as_written(name: str, text: str, value: str) -> None:
    assert _found(name, text) == [value]


@pytest.mark.parametrize(("name", "text", "value"), FOUND)
def test_a_rule_replaces_exactly_the_value(name: str, text: str, value: str) -> None:
    policy = RedactionPolicy([Rule("redact", detector=name)])
    assert policy.redact_text(text) == text.replace(value, f"[REDACTED:{name}]")


@pytest.mark.parametrize(
    "text",
    [
        wide("注文番号:1234 5678 9012 3456 です"),  # sixteen digits failing Luhn
        wide("日付:2024年3月5日、10:30から"),
        wide("order #12345,qty:3"),
        "Hello\u200bworld\u200band\u200dagain\xad here",
        wide("(注)価格:1,200円(税込)"),
    ],
)
def test_wide_prose_and_invisible_characters_between_words_are_no_value(text: str) -> None:
    names = [n for n in detectors.DETECTOR_NAMES if n != "presidio"]
    assert {n: _found(n, text) for n in names} == {n: [] for n in names}


def test_a_wide_card_in_a_tool_result_reaches_no_sink() -> None:
    relay = Relay()
    seen = Recorder()
    relay.subscribers.register(seen)
    relay.redaction.use(RedactionPolicy([Rule("redact", detector="credit_card")]))
    relay.tools.execute("lookup", {"q": 1}, lambda args: {"note": wide(f"カード番号:{WIDE_CARD}。")})
    written = "".join(event_json(e) for e in seen.events)
    assert "[REDACTED:credit_card]" in written
    assert wide("4111") not in written and wide("1111") not in written


def test_what_is_found_in_a_copy_of_mixed_forms_maps_back_inside_the_text() -> None:
    rnd = random.Random(5)
    pieces = [
        "4111 1111 1111 1111",
        "jane@example.com",
        WIDE_CARD,
        WIDE_PHONE,
        WIDE_EMAIL,
        WIDE_IBAN,
        ZW_CARD,
        ZW_EMAIL,
        ZW_SSN,
        "\u200b",
        "\xad",
        "\ufeff",
        "\u3000",
        wide(","),
        "。",
        "😀",
        "\\ud83d\\ude00",
        "%40",
        "&#64;",
        " ",
        wide("4"),
        wide("a"),
        wide("@"),
        "x",
        "7",
    ]
    for _ in range(800):
        text = "".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 10)))
        result = decoded(text)
        if result is not None:
            copy, maps = result
            back = [original(at, maps) for at in range(len(copy) + 1)]
            assert back == sorted(back) and back[0] >= 0 and back[-1] == len(text), text
            # No character of the copy maps back into the middle of an escaped surrogate pair.
            pairs = _escaped_pairs(text)
            assert not [at for at in back for a, b in pairs if a < at < b], text
        for name in ("email", "phone", "credit_card", "iban", "us_ssn"):
            spans = detectors.detector(name).find(text)
            assert all(0 <= s < e <= len(text) for s, e in spans), (name, text, spans)
            assert all(e1 <= s2 for (_, e1), (s2, _) in pairwise(spans)), (name, text, spans)


def _escaped_pairs(text: str) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    at = text.find("\\ud83d\\ude00")
    while at >= 0:
        out.append((at, at + 12))
        at = text.find("\\ud83d\\ude00", at + 1)
    return out


def test_the_expressions_for_texts_that_are_not_ascii_are_compiled_when_one_is_first_read() -> None:
    """Compiling them (an alternative per opener, each with a set beyond Latin-1) took half a second of every
    import, seconds on a loaded machine; an import now compiles the two for ASCII texts only, and a text that
    needs another has it compiled then, and finds what the eager one found."""
    import subprocess
    import sys

    script = (
        "import relay_runtime\n"
        "from relay_runtime import detectors, detectors_forms as forms\n"
        "print(sorted(forms.TOKENS))\n"
        f"print(detectors.detector('phone').find({wide('電話:' + '+44 20 7946 0958')!r}))\n"
        "print(sorted(forms.TOKENS))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    at_import, found, after = out.splitlines()
    assert at_import == "[(False, True, 0), (True, True, 0)]"
    assert found == "[(3, 19)]"
    assert after == "[(False, False, 0), (False, True, 0), (True, True, 0)]"
