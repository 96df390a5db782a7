"""Judges whether the provider's spoken "summary" of a background result actually delivers it.

Realtime models sometimes answer a forced-summary request with filler ("one moment while I
look that up") or by asking for an id; the relay then drops that response and speaks the
answer itself.
"""

from __future__ import annotations

import re
import unicodedata

EARLY_COMMIT_CHARS = 40
MIN_SHARED_EVIDENCE = 2

# Letters and digits of any script (\w without the underscore), so "déplacée" or "четверг" stay
# one word instead of splitting into ASCII fragments that could match unrelated words. A number
# with inner separators is one token, so a time, a decimal or a grouped figure ("1:26", "3.5",
# "10,000") is evidence as a whole, never as loose digits that any other number would share.
_TOKEN = re.compile(r"[^\W_]*\d+(?:[.,:]\d+)+[^\W_]*|[^\W_]+(?:'[^\W_]+)?", re.UNICODE)
# English clitics: "it's", "they're", "we'll", "don't" carry no content of their own; the word
# they attach to is judged alone. Other apostrophes ("l'équipe", "o'clock") stay part of the word.
_CLITIC = re.compile(r"^(?P<stem>[^\W_]+?)(?:n't|'(?:s|re|ve|ll|d|m))$", re.UNICODE)
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'"})
_STOPWORDS = frozenset(
    {
        "about", "above", "after", "again", "also", "been", "before", "being", "below", "between",
        "both", "could", "does", "doing", "down", "during", "each", "from", "further", "have",
        "having", "here", "hers", "herself", "himself", "into", "itself", "just", "more", "most",
        "myself", "once", "only", "other", "ours", "ourselves", "over", "same", "should", "some",
        "such", "than", "that", "their", "theirs", "them", "themselves", "then", "there", "these",
        "they", "this", "those", "through", "under", "until", "very", "were", "what", "when",
        "where", "which", "while", "whom", "will", "with", "would", "your", "yours", "yourself",
        "yourselves", "okay", "sure", "right", "well", "really", "thing", "things", "like", "want",
        "tell", "said", "says",
        # What any delivery says whatever the answer was: not evidence that it was delivered.
        "done", "finished", "complete", "completed", "successfully", "task", "result", "results",
        "request", "back", "know", "need", "much", "every", "cannot", "because", "along", "hermes",
    }
)
DEFERRAL_PHRASES = (
    "one moment",
    "just a moment",
    "give me a moment",
    "one second",
    "hold on",
    "i'll let you know",
    "i will let you know",
    "let you know when",
    "get back to you",
    "report back",
    "as soon as i have",
    "it's queued",
    "is queued",
    "queued and will",
    "in the queue",
    "still working",
    "working on it",
    "still running",
    "let me check",
    "i'll check",
    "i will check",
    "let me look",
    "i'll look",
    "i will look",
    "look into",
    "looking into",
    "look that up",
    "looking that up",
    "looking it up",
    "in the background",
    "i'm checking",
    "checking on",
    "let me see",
    "bear with me",
    "i'll find out",
    "i will find out",
    "i'm on it",
    "give me a sec",
    "one sec",
)
RUN_ID_PHRASES = ("run id", "hermes_run_task")


def _phrase_pattern(phrases: tuple[str, ...]) -> re.Pattern[str]:
    # Whole words only: "hold on" must not fire inside "threshold one".
    return re.compile(r"(?<!\w)(?:" + "|".join(re.escape(p) for p in phrases) + r")(?!\w)")


_DEFERRAL = _phrase_pattern(DEFERRAL_PHRASES)


def _fold(text: str) -> str:
    # NFC first: a decomposed accent (e + U+0301) is not a word character and would split the word;
    # typographic apostrophes become ' so "I\u2019ll" matches the phrase "i'll". Runs of whitespace
    # become one space so a phrase split over a line break still matches.
    return " ".join(unicodedata.normalize("NFC", text).translate(_APOSTROPHES).casefold().split())


def evidence_tokens(text: str) -> set[str]:
    """Words that show content: any token with a digit, or a non-stopword of four or more letters."""
    out = set()
    for token in _TOKEN.findall(_fold(text)):
        clitic = _CLITIC.match(token)
        if clitic is not None:
            token = clitic.group("stem")
        if any(ch.isdigit() for ch in token) or (len(token) >= 4 and token not in _STOPWORDS):
            out.add(token)
    return out


def _required_overlap(answer_tokens: set[str]) -> int:
    return min(MIN_SHARED_EVIDENCE, len(answer_tokens))


def _bad_phrase(text: str, answer: str) -> str | None:
    lowered = _fold(text)
    # Substrings on purpose: "run ids" and "hermes_run_task's" ask for an id just as well.
    if any(p in lowered for p in RUN_ID_PHRASES):
        return "asked_for_run_id"
    said = {m.group(0) for m in _DEFERRAL.finditer(lowered)}
    if said and not said <= {m.group(0) for m in _DEFERRAL.finditer(_fold(answer))}:
        return "acknowledgement_not_summary"
    return None


def can_commit_early(text: str, answer: str) -> bool:
    """Enough of a good summary has arrived that it may be released before the response ends."""
    if len(text.strip()) < EARLY_COMMIT_CHARS or _bad_phrase(text, answer):
        return False
    shared = evidence_tokens(text) & evidence_tokens(answer)
    return len(shared) >= MIN_SHARED_EVIDENCE


def judge_summary(text: str, answer: str) -> str | None:
    """None when `text` delivers `answer`; otherwise the reason it does not."""
    stripped = text.strip()
    if not stripped:
        return "empty_summary"
    bad = _bad_phrase(stripped, answer)
    if bad:
        return bad
    answer_tokens = evidence_tokens(answer)
    shared = evidence_tokens(stripped) & answer_tokens
    if len(shared) >= _required_overlap(answer_tokens):
        return None
    if len(stripped) < EARLY_COMMIT_CHARS:
        return "short_acknowledgement"
    return "no_answer_overlap"
