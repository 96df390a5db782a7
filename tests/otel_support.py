"""The ``span_path`` fixture every OTel test module uses, so each test runs on both span paths.

``deferred``: the default setup, spans built whole at their end. ``sdk_span``: a
processor with a real ``on_start`` is added to every provider the exporter meets,
which must send it down the SDK's own ``Span`` path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Span, SpanProcessor, SynchronousMultiSpanProcessor

import relay_runtime.integrations.otel.exporter as exporter_module
from relay_runtime.integrations.otel import deferred as deferred_module


class StartWatcher(SpanProcessor):
    """A processor that looks at span starts: its presence must keep the SDK's own ``Span``."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.started.append(span.name)


@pytest.fixture(params=["deferred", "sdk_span"])
def span_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "sdk_span":
        real = deferred_module.fast_path_for
        watcher = StartWatcher()

        def with_a_start_watcher(tracer: Any) -> Any:
            multi = getattr(tracer, "span_processor", None)
            if isinstance(multi, SynchronousMultiSpanProcessor) and watcher not in multi._span_processors:
                multi.add_span_processor(watcher)
            path = real(tracer)
            assert path is None, "a processor with on_start must keep the SDK's Span"
            return path

        monkeypatch.setattr(exporter_module, "fast_path_for", with_a_start_watcher)
    yield request.param
