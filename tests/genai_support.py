"""Real ``google-genai`` clients over ``httpx2.MockTransport`` (sync and async), answering Gemini REST and SSE.

The Gemini API answers ``POST /v1beta/models/{model}:generateContent`` with a JSON
``GenerateContentResponse`` and ``:streamGenerateContent?alt=sse`` with one SSE event per
chunk; Vertex AI answers the same bodies under ``/v1beta1/projects/{p}/locations/{l}/publishers/google/models/``.
"""

from __future__ import annotations

from typing import Any

from relay_runtime.adapters import testing as t

MODEL = "gemini-test-flash"
GEMINI_KEY = "AIzaSy-gemini-test-key-0123456789abcdef"
BASE = "https://gemini.test"
PROJECT, LOCATION = "proj-test", "europe-west4"
VERTEX_TOKEN = "ya29.vertex-test-token-0123456789abcdef"


def retry_options(attempts: int) -> Any:
    from google.genai import types

    # No waiting between tries: the count is what is tested.
    return types.HttpRetryOptions(attempts=attempts, initial_delay=0.0, max_delay=0.0, jitter=0.0)


def _options(script: t.Script, retries: int, base_url: str) -> Any:
    from google.genai import types

    transport = script.transport()
    return types.HttpOptions(
        base_url=base_url,
        client_args={"transport": transport},
        async_client_args={"transport": transport},
        retry_options=retry_options(retries + 1) if retries else None,
    )


def gemini_client(script: t.Script, *, retries: int = 0, base_url: str = BASE, key: str = GEMINI_KEY) -> Any:
    from google import genai

    return genai.Client(api_key=key, http_options=_options(script, retries, base_url))


def vertex_client(script: t.Script, *, retries: int = 0) -> Any:
    from google import genai
    from google.oauth2.credentials import Credentials

    # A token that needs no refresh: the SDK sends it as "Authorization: Bearer ...".
    return genai.Client(
        vertexai=True, project=PROJECT, location=LOCATION, credentials=Credentials(token=VERTEX_TOKEN),
        http_options=_options(script, retries, f"https://{LOCATION}-aiplatform.test/"),
    )  # fmt: skip


def usage(prompt: int = 12, candidates: int = 5, **more: Any) -> dict[str, Any]:
    return {"promptTokenCount": prompt, "candidatesTokenCount": candidates, "totalTokenCount": prompt + candidates,
            **more}  # fmt: skip


def response_body(
    text: str | None = "hello",
    *,
    finish: str | None = "STOP",
    calls: list[dict[str, Any]] | None = None,
    thought: str | None = None,
    usage_metadata: dict[str, Any] | None = None,
    model: str = "gemini-test-flash-001",
    response_id: str = "resp-1",
) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if thought:
        parts.append({"text": thought, "thought": True})
    if text is not None:
        parts.append({"text": text})
    for call in calls or ():
        parts.append({"functionCall": call})
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    body: dict[str, Any] = {"candidates": [candidate], "modelVersion": model, "responseId": response_id}
    if usage_metadata is not None:
        body["usageMetadata"] = usage_metadata
    return body


def stream_frames(parts: list[str], *, finish: str | None = "STOP", usage_metadata: dict[str, Any] | None = None,
                  calls: list[dict[str, Any]] | None = None) -> list[bytes]:  # fmt: skip
    """One SSE event per text part; the last carries the finish reason (unless None), usage and any calls."""
    frames = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        body = response_body(
            part, finish=finish if last else None, calls=calls if last else None,
            usage_metadata=(usage_metadata or usage()) if last else None,
        )  # fmt: skip
        frames.append(t.sse_frame(body))
    return frames


def api_error(status: int, code: str, message: str = "scripted failure") -> t.Reply:
    return t.json_reply({"error": {"code": status, "message": message, "status": code}}, status=status)


def embed_body(vectors: int = 1, dims: int = 8) -> dict[str, Any]:
    return {"embeddings": [{"values": [0.5] * dims} for _ in range(vectors)]}
