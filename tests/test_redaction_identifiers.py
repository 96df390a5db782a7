"""Identifiers a rule changes stay apart: each becomes a keyed pseudonym, never a placeholder users share.

Two users whose session and turn ids are their e-mail addresses, under one ``email`` rule: before,
both conversations were recorded as session ``[REDACTED:email]`` (one conversation on the spans and in
the trajectories, two users' runs merged into one) and the journal, whose ids cannot hold ``[``, dropped
both runs. Now every sink keeps them apart under ``RedactionPolicy.identifier``'s pseudonyms, and no
sink holds an address.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from relay_runtime import adapters, session
from relay_runtime.adapters import testing
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.integrations.run_journal import JournalSubscriber
from relay_runtime.integrations.trajectory import AtifExporter
from relay_runtime.redaction import RedactionPolicy, Rule
from relay_runtime.redaction_policy import RULES_KEY
from tests.otel_support import Pipeline

USERS = ("jane.doe@example.com", "bob.roe@example.com")
KEY = "a key of at least 16 bytes"


def _conversation(client: object, user: str, turns: int = 1) -> None:
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=session.current_profile_key(), session_id=user, platform="cli")
    try:
        for n in range(turns):
            turn = coordinator.begin_turn(lease, turn_id=f"{user}-{n}", task_id=f"task-{user}")
            try:
                adapters.complete(client, {"model": "gpt-x", "messages": [{"role": "user", "content": f"hi {n}"}]})
            finally:
                coordinator.end_turn(turn, outcome="success")
    finally:
        coordinator.release_conversation(lease)


def test_two_users_redacted_ids_stay_two_runs_in_every_sink(relay_home: Path, tmp_path: Path) -> None:
    coordinator = session.SESSION_COORDINATOR
    policy = RedactionPolicy([Rule("redact", detector="email")], hash_key=KEY)
    coordinator.redaction.use(policy)
    pipeline = Pipeline()
    exporter = OTelExporter(pipeline.tracer_provider, pipeline.meter_provider).attach(coordinator)
    atif = AtifExporter(agent_name="agent").attach(coordinator)
    seen: list[object] = []
    coordinator.host(session.current_profile_key()).relay.subscribers.register(seen.append, name="seen")
    journal_dir = tmp_path / "sessions"
    journal = JournalSubscriber(session_dir=journal_dir).attach(coordinator)
    scripted = testing.scripted_openai(*(testing.json_reply(testing.chat_completion_body("ok")) for _ in range(3)))
    _conversation(scripted.client, USERS[0], turns=2)
    _conversation(scripted.client, USERS[1])
    journal.close()
    exporter.shutdown()

    sessions = {user: policy.identifier(user) for user in USERS}
    assert len(set(sessions.values())) == 2
    for pseudonym in sessions.values():
        assert pseudonym.startswith("redacted-") and len(pseudonym) == len("redacted-") + 24

    # The journal: every run kept, under its user's session, nothing counted as an invalid id.
    assert journal.counts["journal.invalid_ids"] == 0
    runs = {(user, f"{user}-{n}") for user, n in ((USERS[0], 0), (USERS[0], 1), (USERS[1], 0))}
    expected = {f"{policy.identifier(user)}/{policy.identifier(run)}.jsonl" for user, run in runs}
    assert {str(p.relative_to(journal_dir / "_run_journal")) for p in journal_dir.rglob("*.jsonl")} == expected
    journal_bytes = b"".join(p.read_bytes() for p in journal_dir.rglob("*") if p.is_file())

    # The spans: one conversation id per user.
    conversations = {
        s.attributes.get("gen_ai.conversation.id")
        for s in pipeline.finished()
        if s.attributes and s.attributes.get("gen_ai.conversation.id")
    }
    assert conversations == set(sessions.values())

    # Events: the same user's session id is the same pseudonym in every event; the rule is reported.
    by_kind: dict[str, set[str]] = {}
    for event in seen:
        metadata = event.metadata  # type: ignore[attr-defined]
        if "session_id" in metadata:
            by_kind.setdefault(metadata["relay.kind"], set()).add(metadata["session_id"])
            assert metadata[RULES_KEY]["redact:email"] >= 1
    assert by_kind["conversation"] == by_kind["turn"] == set(sessions.values())

    # The trajectories: one per user, with that user's turns only.
    for user, turns in ((USERS[0], 2), (USERS[1], 1)):
        trajectory = atif.export(sessions[user])
        assert trajectory["session_id"] == sessions[user]
        assert [step["source"] for step in trajectory["steps"]] == ["user", "agent"] * turns
    trajectories = "\n".join(atif.export_json(sid) for sid in sessions.values()).encode()
    atif.detach()

    spans = "\n".join(s.to_json() for s in pipeline.finished()).encode()
    events = repr([vars_of(e) for e in seen]).encode()
    for where, blob in (("journal", journal_bytes), ("spans", spans), ("events", events), ("ATIF", trajectories)):
        for user in USERS:
            assert user.split("@")[0].encode() not in blob, f"part of {user} is in the {where}"


def vars_of(event: object) -> dict[str, object]:
    return {name: getattr(event, name, None) for name in ("name", "input", "output", "metadata", "data")}


def test_a_pseudonym_is_keyed_by_the_hash_key() -> None:
    one = RedactionPolicy([Rule("redact", detector="email")], hash_key=KEY)
    same = RedactionPolicy([Rule("mask", detector="email")], hash_key=KEY)
    other = RedactionPolicy([Rule("redact", detector="email")], hash_key="another key, also long enough")
    keyless = RedactionPolicy([Rule("redact", detector="email")])
    keyless_too = RedactionPolicy([Rule("redact", detector="email")])
    user = USERS[0]
    # The same key names the same id alike in every process (so a resumed conversation stays one).
    assert one.identifier(user) == same.identifier(user)
    assert one.identifier(user) != other.identifier(user)
    # Without a key each policy makes its own: stable while it lives, unguessable from outside it.
    assert keyless.identifier(user) == keyless.identifier(user)
    assert keyless.identifier(user) != keyless_too.identifier(user)
    # Not the hash action's token of the same value: an id's pseudonym does not link to content.
    hashed = RedactionPolicy([Rule("hash", detector="email")], hash_key=KEY).redact_text(user)
    assert hashed[-17:-1] not in one.identifier(user)
    with pytest.raises(TypeError, match="identifier\\(\\) takes the id as a str, got int"):
        one.identifier(42)  # type: ignore[arg-type]


def test_ids_no_rule_changes_are_kept_and_a_removed_id_stays_removed(relay_home: Path) -> None:
    coordinator = session.SESSION_COORDINATOR
    seen: list[object] = []
    coordinator.host(session.current_profile_key()).relay.subscribers.register(seen.append, name="seen")
    scripted = testing.scripted_openai(*(testing.json_reply(testing.chat_completion_body("ok")) for _ in range(2)))

    coordinator.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
    _conversation(scripted.client, "plain-session")
    kept = {e.metadata.get("session_id") for e in seen if "session_id" in e.metadata}  # type: ignore[attr-defined]
    assert kept == {"plain-session"}

    seen.clear()
    coordinator.redaction.use(RedactionPolicy([Rule("remove", paths=["/metadata/session_id"])]))
    _conversation(scripted.client, USERS[0])
    conversation = [e for e in seen if e.metadata.get("relay.kind") == "conversation"]  # type: ignore[attr-defined]
    assert conversation and all("session_id" not in e.metadata for e in conversation)  # type: ignore[attr-defined]


def test_the_librarys_own_log_lines_name_ids_as_the_events_record_them(
    relay_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    coordinator = session.SESSION_COORDINATOR
    policy = RedactionPolicy([Rule("redact", detector="email")], hash_key=KEY)
    coordinator.redaction.use(policy)
    coordinator.host(session.current_profile_key()).retain_managed_execution("test")
    scripted = testing.scripted_openai(testing.json_reply(testing.chat_completion_body("ok")))
    user = USERS[0]
    lease = coordinator.acquire_conversation(profile_key=session.current_profile_key(), session_id=user, platform="cli")
    caplog.set_level(logging.INFO, logger="relay_runtime")
    first = coordinator.begin_turn(lease, turn_id=f"{user}-1", task_id="t")
    # A second turn while the first is open runs unmanaged, and says so, naming both ids.
    second = coordinator.begin_turn(lease, turn_id=f"{user}-2", task_id="t")
    adapters.complete(scripted.client, {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
    coordinator.end_turn(second, outcome="success")
    # A scope left open inside a turn: the turn still ends, and the log names it.
    lease.host.relay.scope.push("left open")
    coordinator.end_turn(first, outcome="success")
    coordinator.release_conversation(lease)

    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "runs unmanaged" in logged and "scopes still open" in logged
    assert policy.identifier(user) in logged
    assert policy.identifier(f"{user}-1") in logged and policy.identifier(f"{user}-2") in logged
    assert user.split("@")[0] not in logged


@pytest.mark.parametrize(
    "rule",
    [
        Rule("redact", paths=["/metadata/session_id"]),  # a whole-string rule aimed at the field
        Rule("mask", detector="email", paths=["/metadata/*"], unmasked_suffix=4),
        Rule("hash", detector="email"),
    ],
    ids=["whole-field", "masked-by-path", "hashed"],
)
def test_every_action_that_changes_an_id_records_its_pseudonym(relay_home: Path, rule: Rule) -> None:
    coordinator = session.SESSION_COORDINATOR
    policy = coordinator.redaction.use(RedactionPolicy([rule], hash_key=KEY))
    assert policy is not None
    seen: list[object] = []
    coordinator.host(session.current_profile_key()).relay.subscribers.register(seen.append, name="seen")
    scripted = testing.scripted_openai(testing.json_reply(testing.chat_completion_body("ok")))
    _conversation(scripted.client, USERS[0])
    recorded = {e.metadata["session_id"] for e in seen if "session_id" in e.metadata}  # type: ignore[attr-defined]
    assert recorded == {policy.identifier(USERS[0])}
    assert policy.recorded("session_id", USERS[0]) == policy.identifier(USERS[0])
    # An id with no e-mail in it is kept, unless the rule takes the whole field.
    expected = policy.identifier("plain-id") if rule.whole else "plain-id"
    assert policy.recorded("session_id", "plain-id") == expected


def test_an_atif_exporter_for_one_conversation_finds_it_by_the_id_its_caller_gave(relay_home: Path) -> None:
    # Its records are held under the pseudonym: an exporter made with the caller's id exported nothing (0 steps).
    coordinator = session.SESSION_COORDINATOR
    policy = RedactionPolicy([Rule("redact", detector="email")], hash_key=KEY)
    coordinator.redaction.use(policy)
    mine = AtifExporter(session_id=USERS[0], agent_name="agent").attach(coordinator)
    scripted = testing.scripted_openai(*(testing.json_reply(testing.chat_completion_body("ok")) for _ in range(2)))
    _conversation(scripted.client, USERS[0])
    _conversation(scripted.client, USERS[1])  # another user's: not this exporter's
    trajectory = mine.export()
    assert trajectory["session_id"] == policy.identifier(USERS[0])  # the sinks' id, never the address
    assert [s["message"] for s in trajectory["steps"]] == ["hi 0", "ok"]
    assert mine.export(USERS[0]) == trajectory
    assert mine.sessions() == [policy.identifier(USERS[0])]
    assert USERS[0] not in mine.export_json()
