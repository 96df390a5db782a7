"""Fixtures the adapter test modules share: one scripted OpenAI and one scripted Anthropic SDK pair."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from relay_runtime.adapters import testing as t


@pytest.fixture()
def oa() -> Iterator[t.Scripted]:
    scripted = t.scripted_openai()
    yield scripted
    scripted.client.close()


@pytest.fixture()
def an() -> Iterator[t.Scripted]:
    scripted = t.scripted_anthropic()
    yield scripted
    scripted.client.close()
