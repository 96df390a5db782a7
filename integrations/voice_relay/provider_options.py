"""Per-provider defaults (model, voice, endpoint, key) resolved once from the environment."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ProviderOptions:
    provider_id: str
    model: str
    voice: str
    url: str | None
    api_key_env: str | None

    @property
    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


_DEFAULTS: dict[str, tuple[str, str, str | None, str | None, str | None]] = {
    # provider id: (model, voice, default url, url env override, key env)
    "stub": ("local-tone", "sine", None, None, None),
    "openai_realtime": (
        "gpt-realtime",
        "alloy",
        "wss://api.openai.com/v1/realtime",
        "RELAY_VOICE_OPENAI_URL",
        "OPENAI_API_KEY",
    ),
    "xai_realtime": (
        "grok-voice-latest",
        "leo",
        "wss://api.x.ai/v1/realtime",
        "RELAY_VOICE_XAI_URL",
        "XAI_API_KEY",
    ),
}

KNOWN_PROVIDERS = tuple(_DEFAULTS)


@functools.lru_cache(maxsize=16)
def provider_options(provider_id: str) -> ProviderOptions:
    """Defaults for `provider_id`; a provider registered by the embedding app gets empty ones."""
    model, voice, url, url_env, key_env = _DEFAULTS.get(provider_id, ("", "", None, None, None))
    if url_env:
        url = os.environ.get(url_env) or url
    return ProviderOptions(provider_id, model, voice, url, key_env)


def clear_provider_option_cache() -> None:
    """Forget resolved options, e.g. after changing the environment."""
    provider_options.cache_clear()
