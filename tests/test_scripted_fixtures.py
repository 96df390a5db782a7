"""The scripted-client fixtures: the SDK's own retries are the test's to choose."""

from __future__ import annotations

import openai
import pytest

from relay_runtime.adapters import testing as t


def test_default_is_the_sdks_own_retry_count(scripted_openai) -> None:
    scripted_openai.add(t.error(500), t.json_reply(t.chat_completion_body("second try")))
    reply = scripted_openai.client.chat.completions.create(model="m", messages=[])
    assert reply.choices[0].message.content == "second try"
    assert len(scripted_openai.script.requests) == 2


@pytest.mark.relay_scripted(max_retries=0)
def test_a_test_chooses_max_retries(scripted_openai, scripted_anthropic) -> None:
    assert scripted_openai.client.max_retries == scripted_anthropic.aclient.max_retries == 0
    scripted_openai.add(t.error(500), t.json_reply(t.chat_completion_body("never reached")))
    with pytest.raises(openai.InternalServerError):
        scripted_openai.client.chat.completions.create(model="m", messages=[])
    assert len(scripted_openai.script.requests) == 1

