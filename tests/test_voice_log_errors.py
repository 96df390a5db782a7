"""The voice session's event log quotes an exception's text the way the library's own diagnostics do
(``redaction.told``): a URL's password or a credential a failing task or a failed summary send quotes
never reaches the log file, nor the process log."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from relay_runtime.integrations.voice_relay.config import PromotionSettings
from relay_runtime.integrations.voice_relay.delivery import DeliveryManager
from relay_runtime.integrations.voice_relay.models import BackgroundResult
from relay_runtime.integrations.voice_relay.session import VoiceSession

PASSWORD = "hunter2-Vx9q"
QUOTED = f"cannot reach https://relay:{PASSWORD}@db.internal/voice?api_key=sk-live-{PASSWORD}"


def _session(run_dir: Path) -> VoiceSession:
    return VoiceSession(
        device_id="phone", chat_session_id="chat", provider_id="stub", model="m", voice="v",
        sample_rate=24000, profile="p", promotion=PromotionSettings(), run_dir=run_dir,
    )  # fmt: skip


def _logged(session: VoiceSession, caplog: pytest.LogCaptureFixture) -> str:
    session.event_log.close()
    return session.event_log_path.read_text() + caplog.text


@pytest.mark.asyncio
async def test_a_failed_task_is_logged_without_the_secret_its_exception_quotes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    session = _session(tmp_path)

    async def failing() -> None:
        raise ConnectionError(QUOTED)

    task = session.spawn(failing(), name="voice-probe")
    await asyncio.wait([task])
    await asyncio.sleep(0)  # the done callback runs on the next turn of the loop
    logged = _logged(session, caplog)
    assert "voice.realtime_agent.task_failed" in logged and "db.internal" in logged
    assert PASSWORD not in logged


class _RefusingConnection:
    async def request_response(self, **_kwargs: Any) -> None:
        raise ConnectionError(QUOTED)


@pytest.mark.asyncio
async def test_a_failed_summary_send_is_logged_without_the_secret_its_exception_quotes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    session = _session(tmp_path)
    session.connection = _RefusingConnection()  # type: ignore[assignment]
    manager = DeliveryManager(session, forward=lambda _event: None)
    await manager._inject(BackgroundResult(ok=True, answer="The answer is 42.", call_id="c1"))
    logged = _logged(session, caplog)
    assert "voice.realtime_agent.summary_send_failed" in logged and "db.internal" in logged
    assert PASSWORD not in logged
