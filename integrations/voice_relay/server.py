"""`create_app`: the aiohttp application of the voice relay."""

from __future__ import annotations

import math
import tempfile
import warnings
from pathlib import Path
from typing import Any

from aiohttp import web

from .agent import RealtimeAgent
from .brokers import HttpTaskBroker, InProcessTaskBroker, echo_agent
from .config import PromotionSettings, RelayConfig, RuntimeSettings
from .models import RealtimeProvider, TaskBroker
from .provider_options import provider_options
from .providers import default_providers
from .routes import Routes
from .voice_auth import DeviceSessions


class RelayServer:
    def __init__(
        self,
        config: RelayConfig,
        *,
        task_broker: TaskBroker | None = None,
        providers: dict[str, RealtimeProvider] | None = None,
        agent_url: str | None = None,
    ) -> None:
        self.config = config
        self.sessions = DeviceSessions()
        run_dir = Path(config.realtime_voice_run_dir or tempfile.mkdtemp(prefix="relay-voice-"))
        if task_broker is None:
            task_broker = HttpTaskBroker(agent_url) if agent_url else InProcessTaskBroker(echo_agent)
        native: dict[str, Any] = dict(providers) if providers is not None else default_providers()
        provider_id = config.realtime_voice_provider
        if provider_id not in native:
            raise ValueError(f"unknown realtime provider {provider_id!r}; have {', '.join(sorted(native))}")
        options = provider_options(provider_id)
        self.settings = RuntimeSettings(
            provider=provider_id,
            model=config.realtime_voice_model or options.model,
            voice=config.realtime_voice_voice or options.voice,
            promotion=PromotionSettings.from_config(config),
        )
        self.realtime_agent = RealtimeAgent(config, task_broker=task_broker, native_providers=native, run_dir=run_dir)

    async def shutdown(self, app: web.Application) -> None:
        await self.realtime_agent.shutdown()
        broker_close = getattr(self.realtime_agent.task_broker, "close", None)
        if broker_close is not None:
            await broker_close()


def create_app(
    config: RelayConfig,
    *,
    task_broker: TaskBroker | None = None,
    providers: dict[str, RealtimeProvider] | None = None,
    agent_url: str | None = None,
) -> web.Application:
    timeout = config.header_timeout
    if isinstance(timeout, bool) or not (isinstance(timeout, int | float) and 0 < timeout < math.inf):
        raise ValueError(f"header_timeout must be a positive number of seconds, got {timeout!r}")
    server = RelayServer(config, task_broker=task_broker, providers=providers, agent_url=agent_url)
    # The keep-alive timer closes a connection still waiting for its request's head, never one whose
    # handler runs: it is the header-read timeout.
    app = web.Application(client_max_size=config.max_message_bytes, handler_args={"keepalive_timeout": timeout})
    with warnings.catch_warnings():
        # "server" is the documented key clients and tests use; aiohttp prefers AppKey objects.
        warnings.simplefilter("ignore")
        app["server"] = server
    Routes(server).install(app)
    app.on_shutdown.append(server.shutdown)
    return app
