"""The forced-summary validator, case by case: deferrals in their common forms, and evidence tokens
that keep numbers whole and do not count contractions as content."""

from __future__ import annotations

import pytest

from relay_runtime.integrations.voice_relay.summary_validator import can_commit_early, evidence_tokens, judge_summary

TOKYO = "It's 1:26 AM in Tokyo."
BUILD = "The build finished: 42 tests passed and the release notes are ready for Berlin."

DEFERRALS = [
    "I'll report back when it's done.",
    "I will report back shortly with the Berlin release notes.",
    "Looking into it now.",
    "I'm looking that up for you.",
    "I'll look into that right away.",
    "It's queued and will start automatically once the other check finishes.",
    "One moment while I look that up. I'll report back as soon as I have the info.",
    "Sure, I'll check the 42 tests and the Berlin release notes.",
    "I'm looking it up: 42 tests, Berlin release notes.",
    "Okay, I\u2019ll\nreport back once the 42 tests and the Berlin release notes land.",
    "I'm checking the 42 tests and the Berlin release notes now.",
    "Bear with me, the Berlin release notes and 42 tests are coming.",
    "I'm on it: 42 tests, Berlin release notes.",
    "Let me see what the 42 tests and the Berlin release notes say.",
]


@pytest.mark.parametrize("text", DEFERRALS)
def test_deferral_forms_are_not_a_summary(text: str) -> None:
    assert judge_summary(text, BUILD) == "acknowledgement_not_summary"
    assert not can_commit_early(text, BUILD)


@pytest.mark.parametrize(
    ("text", "answer", "verdict"),
    [
        # The answer itself says it: reading it back is delivery, not deferral.
        ("Your order is in the queue for Friday, slot 3.", "Your order is in the queue for Friday, slot 3.", None),
        ("Maria will report back to the board on 12 March.", "Maria will report back to the board on 12 March.",
         None),
        # The answer has one phrase; the summary adds another of its own.
        ("Your order is in the queue for Friday, slot 3; I'll report back.",
         "Your order is in the queue for Friday, slot 3.", "acknowledgement_not_summary"),
        # Whole words: "threshold one" does not contain the phrase "hold on".
        ("The threshold one sensor reads 3.5 volts in Berlin.", "Sensor threshold one reads 3.5 volts in Berlin.",
         None),
    ],
)
def test_phrase_in_the_answer_is_not_a_deferral(text: str, answer: str, verdict: str | None) -> None:
    assert judge_summary(text, answer) == verdict


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (TOKYO, {"1:26", "tokyo"}),
        ("Ratio 3.5, population 10,000, at 14:05.", {"ratio", "3.5", "population", "10,000", "14:05"}),
        ("It's done, it's all set at 1:26.", {"1:26"}),
        ("They're sure we'll win, don't worry; Minnesota's team isn't late.",
         {"worry", "minnesota", "team", "late"}),
        ("The meeting is at 9am, July 9, 2026.", {"meeting", "9am", "july", "9", "2026"}),
        ("l'équipe est prête", {"l'équipe", "prête"}),
    ],
)
def test_evidence_tokens(text: str, expected: set[str]) -> None:
    assert evidence_tokens(text) == expected


@pytest.mark.parametrize(
    ("text", "answer", "verdict"),
    [
        # Shares only "it's" and loose digits with the answer: not a summary of it.
        ("It's done, it's all set at 1:26.", TOKYO, "short_acknowledgement"),
        ("It's done, it's all set and everything is fine at 1:26 today.", TOKYO, "no_answer_overlap"),
        # A different time is a different answer, even though its digits overlap.
        ("It is 1:62 in Tokyo, give or take a few minutes, right now.", TOKYO, "no_answer_overlap"),
        ("It is currently 1:26 AM in Tokyo.", TOKYO, None),
        ("Population is 10,000 in the Berlin district.", "Berlin district population: 10,000.", None),
    ],
)
def test_numbers_and_contractions_in_judgement(text: str, answer: str, verdict: str | None) -> None:
    assert judge_summary(text, answer) == verdict


def test_early_commit_needs_whole_number_evidence() -> None:
    # 40+ characters, no deferral, and before the fix "it's", "1" and "26" counted as shared evidence.
    text = "It's all set now, it's been taken care of at 1:26"
    assert not can_commit_early(text, TOKYO)
    assert can_commit_early("It is currently 1:26 in the morning in Tokyo, Japan.", TOKYO)
