"""A model named by its resource path is priced, and checked against budgets, as the model it names.

Google's own examples write ``model="models/gemini-2.5-flash"``, Vertex AI takes
``publishers/google/models/...`` and whole ``projects/.../models/...`` paths; price lists name the model
alone. Looked up as written, such a call found no price: its budget check was skipped before it was sent
(``cost.budget_unchecked_unpriced_model``), and an embedding (whose answer names no model) cost nothing.
A real google-genai client over the mock transport.
"""

from __future__ import annotations

from typing import Any

import pytest
from genai_support import embed_body, gemini_client, response_body, usage

from relay_runtime import Recorder, adapters, cost, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.cost import Budget, BudgetExceeded, MemorySpendStore, PriceCatalog
from relay_runtime.cost.catalog import bare_model

PRICES = {"google": {"gemini-test-flash": {"input": 1.0, "output": 2.0}, "gemini-test-embed": {"input": 0.5}}}


@pytest.mark.parametrize(
    ("model", "bare"),
    [
        ("models/gemini-2.5-flash", "gemini-2.5-flash"),
        ("publishers/google/models/gemini-2.5-flash", "gemini-2.5-flash"),
        ("projects/p-1/locations/us-central1/publishers/google/models/gemini-2.5-flash", "gemini-2.5-flash"),
        ("gemini-2.5-flash", None),
        ("models/", None),
        ("tunedModels/my-model-123", None),  # a tuned model is priced by no list under this name
        ("anthropic.claude-3-5-haiku-20241022-v1:0", None),
    ],
)
def test_a_resource_path_names_its_model(model: str, bare: str | None) -> None:
    assert bare_model(model) == bare
    if bare is not None:
        assert PriceCatalog.default().entry("google", model) == PriceCatalog.default().entry("google", bare)
        assert PriceCatalog.from_mapping(PRICES).entry("google", model.replace("gemini-2.5-flash", "gemini-test-flash"))


def test_a_call_naming_its_model_by_path_is_checked_against_the_budget_before_it_is_sent(
    relay_host: session.Host, relay_turn: Any, relay_events: Recorder
) -> None:
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), Budget(1e-9, per="turn", name="tiny"))
    script = t.Script([t.json_reply(response_body("hi", usage_metadata=usage()))])
    client = adapters.instrument(gemini_client(script))
    with pytest.raises(BudgetExceeded):
        client.models.generate_content(model="models/gemini-test-flash", contents="hello")
    assert script.requests == []  # refused before sending
    assert "cost.budget_unchecked_unpriced_model" not in relay_host.relay.diagnostics()


def test_an_embedding_naming_its_model_by_path_is_priced(
    relay_host: session.Host, relay_turn: Any, relay_events: Recorder
) -> None:
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES))
    body = {**embed_body(), "usageMetadata": {"promptTokenCount": 4}}
    script = t.Script([t.json_reply(body)])
    client: Any = adapters.instrument(gemini_client(script))
    client.models.embed_content(model="models/gemini-test-embed", contents="hello")
    (end,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert end.model_name == "models/gemini-test-embed"  # recorded as the caller named it
    assert end.cost.amount == pytest.approx(4 * 0.5e-6)


def test_a_call_priced_by_the_model_its_answer_names_keeps_its_spend(relay_host: session.Host, relay_turn: Any) -> None:
    """An alias the catalog does not list (``gpt-snap``) answered by a dated model it does: no budget could check
    the call before it was sent, but what it cost is spend all the same. Counted only in the scopes above, it
    never reached the profile's roll-up nor the spend store: after a restart the conversation had spent nothing."""
    store = MemorySpendStore()
    prices = {"openai": {"gpt-snap-2026-01-01": {"input": 1.0, "output": 2.0}}}
    budgets = (Budget(1.0, per="conversation"), Budget(1.0, per="profile"))
    cost.attach(relay_host, PriceCatalog.from_mapping(prices), *budgets, store=store)
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body(model="gpt-snap-2026-01-01")), max_retries=0)
    adapters.complete(scripted.client, {"model": "gpt-snap", "messages": [{"role": "user", "content": "hi"}]})
    assert relay_host.relay.diagnostics()["cost.budget_unchecked_unpriced_model"] == 1
    amount = (12 * 1.0 + 5 * 2.0) * 1e-6  # the scripted answer's usage
    profile = relay_host.profile_key
    assert store.load(f"conversation:{profile}:session-1") == pytest.approx(amount)  # relay_turn's conversation
    assert store.load(f"profile:{profile}") == pytest.approx(amount)
    assert relay_host.relay.cost.profile_rollup(profile).spent == pytest.approx(amount)
