"""pytest fixtures: real OpenAI and Anthropic clients answering from a script.

def test_x(scripted_openai):
    scripted_openai.add(json_reply(chat_completion_body("hi")))
    scripted_openai.client.chat.completions.create(model="m", messages=[])
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from . import testing


@pytest.fixture()
def scripted_openai() -> Iterator[testing.Scripted]:
    scripted = testing.scripted_openai()
    try:
        yield scripted
    finally:
        scripted.client.close()


@pytest.fixture()
def scripted_anthropic() -> Iterator[testing.Scripted]:
    scripted = testing.scripted_anthropic()
    try:
        yield scripted
    finally:
        scripted.client.close()
