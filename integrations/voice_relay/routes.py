"""HTTP routes: config, session creation and the session websocket, all behind bearer auth."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from ..run_journal.paths import valid_id
from .event_log import validate_session_id
from .json_input import decode_json
from .session import EndedSession, VoiceSession

if TYPE_CHECKING:
    from .agent import RealtimeAgent
    from .config import RelayConfig, RuntimeSettings
    from .voice_auth import DeviceSessions

CONFIG_PATH = "/voice/realtime-agent/config"
SESSION_PATH = "/voice/realtime-agent/session"
SOCKET_PATH = "/voice/realtime-agent/{session_id}"
_MAX_FIELD_CHARS = 200


def _unauthorized() -> web.Response:
    return web.json_response(
        {"error": "unauthorized"}, status=401, headers={"WWW-Authenticate": 'Bearer realm="voice-relay"'}
    )


def _bad_request(message: str) -> web.Response:
    return web.json_response({"success": False, "error": message}, status=400)


async def _json_body(request: web.Request) -> dict[str, Any] | web.Response:
    if not request.can_read_body:
        return {}
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = decode_json(raw)
    except ValueError:
        return _bad_request("request body is not valid JSON")
    if not isinstance(body, dict):
        return _bad_request("request body must be a JSON object")
    return body


def _string_fields(body: dict[str, Any], keys: tuple[str, ...]) -> dict[str, str] | web.Response:
    """The given keys that `body` has, as strings (null reads as ""); a 400 naming the first bad one."""
    out: dict[str, str] = {}
    for key in keys:
        if key not in body:
            continue
        value = "" if body[key] is None else body[key]
        if not isinstance(value, str) or len(value) > _MAX_FIELD_CHARS:
            return _bad_request(f"{key} must be a string of at most {_MAX_FIELD_CHARS} characters")
        out[key] = value
    return out


class RelayParts(Protocol):
    """What the routes serve from; the server provides it (the routes know no server)."""

    config: RelayConfig
    sessions: DeviceSessions
    settings: RuntimeSettings
    realtime_agent: RealtimeAgent


class Routes:
    def __init__(self, server: RelayParts) -> None:
        self.server = server

    def install(self, app: web.Application) -> None:
        # The config route is registered before the {session_id} pattern so it wins.
        app.router.add_get(CONFIG_PATH, self.get_config)
        app.router.add_patch(CONFIG_PATH, self.patch_config)
        app.router.add_post(SESSION_PATH, self.create_session)
        app.router.add_get(SOCKET_PATH, self.websocket)

    def _config_payload(self) -> dict[str, Any]:
        settings = self.server.settings
        return {
            "enabled": self.server.config.realtime_voice_enabled,
            **settings.to_dict(),
            "providers": sorted(self.server.realtime_agent.native_providers),
        }

    async def get_config(self, request: web.Request) -> web.Response:
        if self.server.sessions.authenticate(request) is None:
            return _unauthorized()
        return web.json_response(self._config_payload())

    async def patch_config(self, request: web.Request) -> web.Response:
        if self.server.sessions.authenticate(request) is None:
            return _unauthorized()
        body = await _json_body(request)
        if isinstance(body, web.Response):
            return body
        settings = self.server.settings
        unknown = set(body) - {"provider", "model", "voice", "promotion"}
        if unknown:
            return _bad_request(f"unknown config field(s): {', '.join(sorted(unknown))}")
        strings = _string_fields(body, ("provider", "model", "voice"))
        if isinstance(strings, web.Response):
            return strings
        provider = strings.get("provider")
        if provider is not None and provider not in self.server.realtime_agent.native_providers:
            return _bad_request(f"unknown provider {provider!r}")
        if "promotion" in body:
            try:
                settings.promotion.apply_patch(body["promotion"])
            except ValueError as exc:
                return _bad_request(str(exc))
        for key, value in strings.items():
            setattr(settings, key, value)
        settings.save(self.server.config.realtime_voice_config_path)
        return web.json_response(self._config_payload())

    async def create_session(self, request: web.Request) -> web.Response:
        device = self.server.sessions.authenticate(request)
        if device is None:
            return _unauthorized()
        if not self.server.config.realtime_voice_enabled:
            return web.json_response({"success": False, "error": "realtime voice is disabled"}, status=403)
        body = await _json_body(request)
        if isinstance(body, web.Response):
            return body
        fields = _string_fields(body, ("provider", "model", "voice", "chat_session_id"))
        if isinstance(fields, web.Response):
            return fields
        chat_session_id = fields.get("chat_session_id", "")
        if chat_session_id and not valid_id(chat_session_id):
            # It names the conversation the agent's runs are journaled under: an id the journal
            # refuses would leave every run of this session unrecorded.
            return _bad_request("chat_session_id must be 1-200 of [A-Za-z0-9_.-], not '.' or '..'")
        settings = self.server.settings
        provider_id = fields.get("provider") or settings.provider
        agent = self.server.realtime_agent
        limit = self.server.config.max_sessions_per_device
        if sum(1 for live in agent.sessions.values() if live.device_id == device.device_id) >= limit:
            return web.json_response(
                {"success": False, "error": f"this device already holds {limit} voice sessions: close one first"},
                status=429,
                headers={"Retry-After": "5"},
            )
        if provider_id not in agent.native_providers:
            return _bad_request(f"unknown provider {provider_id!r}")
        same_provider = provider_id == settings.provider
        session = agent.create_session(
            device_id=device.device_id,
            provider_id=provider_id,
            model=fields.get("model") or (settings.model if same_provider else ""),
            voice=fields.get("voice") or (settings.voice if same_provider else ""),
            chat_session_id=chat_session_id,
            promotion=settings.promotion,
        )
        token = session.issued_resume_token or ""
        session.issued_resume_token = None
        return web.json_response(agent.describe(session, token))

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        device = self.server.sessions.authenticate(request)
        if device is None:
            return _unauthorized()
        session_id = request.match_info["session_id"]
        try:
            validate_session_id(session_id)
        except ValueError:
            return web.json_response({"error": "unknown voice session"}, status=404)
        agent = self.server.realtime_agent
        session: VoiceSession | EndedSession | None = agent.sessions.get(session_id)
        if session is None and web.WebSocketResponse().can_prepare(request).ok:
            # Only a socket can be told why the session cannot be resumed any more.
            session = agent.ended_sessions.get(session_id)
        if session is None or session.device_id != device.device_id:
            return web.json_response({"error": "unknown voice session"}, status=404)
        return await agent.websocket(request, session)
