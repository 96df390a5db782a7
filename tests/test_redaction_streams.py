"""A value split across a stream's pieces is redacted whole: in chunk marks (held back until no value
can straddle what goes out) and in a cassette's stored stream events (read across the events)."""

from __future__ import annotations

import random

import pytest

from relay_runtime.events import SCOPE_END, new_event
from relay_runtime.redaction import RedactionPolicy, Rule
from relay_runtime.redaction_pass import Pass
from relay_runtime.redaction_streams import HOLD_CHARS, MAX_HELD_CHARS, Held, redact_across, settled
from relay_runtime.types import ChunkDelta

KEY = "k" * 32
VALUES = (
    "jane.doe@example.com",
    "4111 1111 1111 1111",
    "+44 20 7946 0958",
    "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "DE89 3704 0044 0532 0130 00",
    "192.168.10.24",
)


PLAIN = ("and", "then", "mail", "ok,", "\n")


def _policy() -> RedactionPolicy:
    return RedactionPolicy(
        [
            Rule("redact", detector="email"),
            Rule("mask", detector="credit_card", unmasked_suffix=4),
            Rule("hash", detector="phone"),
            Rule("redact", detector="api_key"),
            Rule("redact", detector="jwt"),
            Rule("redact", detector="iban"),
            Rule("redact", detector="ip_address"),
            Rule("regex_replace", pattern=r"order #\d+", replacement="order #?"),
        ],
        hash_key=KEY,
    )


def _text(rng: random.Random) -> str:
    words = ["the", "answer", "is", "order #12345", "\n", "call", "mail", "key:", "ok,", "x" * 40]
    parts = []
    for _ in range(rng.randint(5, 40)):
        # A value stands among words: digits next to a phone or card number would make it part of a
        # longer number, which the detectors rightly leave alone.
        if rng.random() < 0.3:
            parts.append(f"{rng.choice(PLAIN)} {rng.choice(VALUES)} {rng.choice(PLAIN)}")
        else:
            parts.append(rng.choice(words))
    return " ".join(parts)


def _split(rng: random.Random, text: str) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(1, len(text) // 2))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def _fragments(value: str, size: int = 6) -> list[str]:
    return [value[i : i + size] for i in range(len(value) - size + 1)]


def _held_stream(policy: RedactionPolicy, pieces: list[str]) -> list[str]:
    """What the chunk marks of a stream of ``pieces`` carry, the released tail last."""
    held = Held()
    sent = []
    for i, piece in enumerate(pieces):
        data = {"index": i, "delta": ChunkDelta(text=piece), "chunk": None}
        out = Pass(policy).chunk(data, held)
        sent.append(out["delta"].text)
    end = new_event(SCOPE_END, "attempt", None, "trace", "llm", "llm", 0)
    mark = policy.released(end, held)
    if mark is not None:
        assert mark.parent_uuid == "attempt" and mark.data["released"] is True
        assert mark.data["index"] == len(pieces)
        sent.append(mark.data["delta"].text)
    return sent


@pytest.mark.parametrize("seed", range(200))
def test_chunk_marks_never_carry_a_piece_of_a_value_and_lose_nothing(seed: int) -> None:
    rng = random.Random(seed)
    policy = _policy()
    text = _text(rng)
    sent = _held_stream(policy, _split(rng, text))
    assert "".join(sent) == policy.redact_text(text, "/response/text")
    for piece in sent:
        for value in VALUES:
            for fragment in _fragments(value):
                assert fragment not in piece, (value, fragment, piece)


@pytest.mark.parametrize("seed", range(200))
def test_a_stored_stream_is_redacted_across_its_pieces(seed: int) -> None:
    rng = random.Random(seed)
    policy = _policy()
    text = _text(rng)
    rules = tuple(r for r in policy.rules if not r.whole)
    out = redact_across(rules, policy._key, _split(rng, text))
    assert "".join(out) == policy.redact_text(text)
    for piece in out:
        for value in VALUES:
            for fragment in _fragments(value):
                assert fragment not in piece, (value, fragment, piece)


def test_a_stored_stream_replaces_a_value_beyond_an_earlier_one_that_overlaps_it() -> None:
    policy = RedactionPolicy([Rule("redact", detector="api_key"), Rule("redact", detector="email")])
    key = "sk-proj-" + "Zx8Kq2LmN4pR7sT1vW3yB5cD9fG0hJ" * 3
    text = f"token {key}.jane@example.com, thanks"
    pieces = [text[i : i + 7] for i in range(0, len(text), 7)]
    out = redact_across(policy.rules, policy._key, pieces)
    assert "".join(out) == policy.redact_text(text) == "token [REDACTED:api_key][REDACTED:email], thanks"


def test_text_goes_out_as_it_comes_less_what_a_value_could_still_straddle() -> None:
    rules = _policy()._streamed
    words = " ".join(["word"] * 100)
    at = settled(rules, words + " tail")
    assert len(words) + 5 - at <= HOLD_CHARS  # at most the hold, here ending at a word boundary
    assert settled(rules, "x" * 500) == 0  # one word (a key, a JWT) is held whole until it ends
    assert settled(rules, "y" * (MAX_HELD_CHARS + 10)) == MAX_HELD_CHARS + 10 - HOLD_CHARS  # bounded
    card = "4111 1111 1111 1111"
    text = "a " * 100 + card + " b" * 40
    at = settled(rules, text)
    assert not (text.index(card) < at < text.index(card) + len(card))  # never inside a value


def test_a_policy_without_value_finding_rules_holds_nothing() -> None:
    policy = RedactionPolicy(
        [Rule("redact", paths=["/response/text"]), Rule("hash", detector="email", paths=["/request/system"])],
        hash_key=KEY,
    )
    assert policy._streamed == ()
