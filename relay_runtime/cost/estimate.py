"""How many input tokens a request can cost before it is sent: its text, and its images, audio and files.

Text is read pessimistically: 3 characters a token, and each character beyond ASCII weighing more by its
UTF-8 length (``text_weight``: a CJK character is about 1.7 tokens, where 3 to a token read a 30,000
character Chinese prompt as a third of what it costs). Media parts (OpenAI chat's
``image_url`` / ``input_audio`` / ``file``, the Responses API's ``input_image``
/ ``input_audio`` / ``input_file``, Anthropic's ``image`` / ``document``, Gemini's
``inline_data`` / ``file_data`` parts, Bedrock Converse's ``image`` / ``document``
/ ``video`` / ``audio`` blocks) are estimated by the providers' rules
(``media.py``), never read as text: a base64 payload is not its length in tokens,
and a URL is not the image behind it. A part with no bound to give (a file known
by its URI, a video) is counted in ``unknown``, which the budget reports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..types import AnnotatedLLMRequest
from . import media

# A deliberately pessimistic reading of text size: most tokenizers average near 4 characters.
CHARS_PER_TOKEN = 3
# The SDK kwargs (across chat, responses and messages) whose text the model reads: an output schema
# (chat's response_format and functions, responses' text, messages' output_config) is read as input too.
INPUT_KEYS = (
    "messages", "input", "system", "instructions", "tools", "prompt",
    "response_format", "functions", "text", "output_config",
)  # fmt: skip
# Enough for any real request; a structure that refers to itself stops here instead of looping.
_MAX_VALUES = 100_000
_MEDIA = frozenset({"image_url", "input_image", "image", "input_audio", "file", "input_file", "document"})
# Media with no ``type`` to say so: Gemini's parts (the SDK's snake_case, REST's camelCase) and Converse's blocks.
_GEMINI_INLINE = ("inline_data", "inlineData")
_GEMINI_FILE = ("file_data", "fileData")
_CONVERSE_BLOCKS = ("image", "document", "video", "audio")
_UNTYPED = frozenset((*_GEMINI_INLINE, *_GEMINI_FILE, *_CONVERSE_BLOCKS))
# Converse documents of text, read as their characters.
_TEXT_FORMATS = frozenset({"txt", "md", "csv", "html"})


def text_weight(text: str) -> int:
    """Characters of ``text`` as the estimate counts them, ``CHARS_PER_TOKEN`` to a token: an ASCII character
    is one, and each further UTF-8 byte of another adds two, since tokenizers cut other scripts finer (a CJK
    character is five: about 1.7 tokens; an accented or Cyrillic letter three: a token)."""
    n = len(text)
    if text.isascii():
        return n
    return n + 2 * (len(text.encode("utf-8", "surrogatepass")) - n)


class InputEstimate:
    """Input tokens by what they are priced as; ``unknown``: media parts with no bound (a file known by id)."""

    __slots__ = ("audio_tokens", "chars", "image_tokens", "text_tokens", "unknown")

    def __init__(self) -> None:
        self.chars = 0
        self.text_tokens = 0  # beyond ``chars``: a PDF's pages
        self.image_tokens = 0
        self.audio_tokens = 0
        self.unknown = 0

    @property
    def text(self) -> int:
        return self.chars // CHARS_PER_TOKEN + 1 + self.text_tokens

    @property
    def total(self) -> int:
        return self.text + self.image_tokens + self.audio_tokens


def text_chars(value: Any) -> int:
    """Characters of text anywhere in a request value (message contents, tool schemas, ...)."""
    return _walk(value, InputEstimate(), "", "").chars


def input_tokens_estimate(content: Mapping[str, Any]) -> int:
    return estimate_input(content, "", "").total


def input_of(content: Mapping[str, Any], view: AnnotatedLLMRequest | None) -> Mapping[str, Any]:
    """What the estimate reads of a request: its SDK kwargs, or (a prompt under none of ``INPUT_KEYS``, as
    Gemini's ``contents`` and ``config`` or Bedrock's ``body``) its neutral view's fields under those keys;
    the provider params too, as the model reads what it is given there (a response schema)."""
    if view is None or any(key in content for key in INPUT_KEYS):
        return content
    return {"messages": view.messages, "system": view.system, "tools": view.tools,
            "response_format": view.provider_params}  # fmt: skip


def web_searches(content: Mapping[str, Any]) -> tuple[int, int]:
    """The most searches a request's server-side web search tools may bill (Anthropic's versioned
    ``web_search_*`` tool, bounded by its ``max_uses``), and how many such tools set no bound."""
    tools = content.get("tools")
    most = unbounded = 0
    for tool in tools if isinstance(tools, list | tuple) else ():
        kind = _get(tool, "type")
        if isinstance(kind, str) and kind.startswith("web_search_"):
            uses = _get(tool, "max_uses")
            if type(uses) is int and uses >= 0:
                most += uses
            else:
                unbounded += 1
    return most, unbounded


def estimate_input(content: Mapping[str, Any], provider: str, model: str) -> InputEstimate:
    found = InputEstimate()
    for key in INPUT_KEYS:
        value = content.get(key)
        if value is not None:
            _walk(value, found, provider, model)
    return found


def _walk(value: Any, found: InputEstimate, provider: str, model: str) -> InputEstimate:
    if type(value) is str:
        found.chars += len(value) if value.isascii() else text_weight(value)
        return found
    pending = [value]
    seen = 0
    while pending and seen < _MAX_VALUES:
        item = pending.pop()
        seen += 1
        kind = type(item)
        if kind is str:
            # ``text_weight`` inline for ASCII, most strings of a request: one frame less for each.
            found.chars += len(item) if item.isascii() else text_weight(item)
        elif kind is dict or (kind is not list and kind is not tuple and isinstance(item, Mapping)):
            part = item.get("type")
            if type(part) is str:
                if part in _MEDIA and _media(item, part, found, provider, model, pending):
                    continue
            elif not _UNTYPED.isdisjoint(item) and _untyped_media(item, found, provider, model):
                continue
            pending.extend(item.values())
        elif kind is list or kind is tuple:
            pending.extend(item)
        elif kind is not int and kind is not float and kind is not bool and item is not None:
            # An SDK's own request model (google-genai's Content and Part): its fields hold the text, and are
            # read as a mapping of them would be (a Part's ``inline_data`` is media).
            fields = getattr(kind, "model_fields", None)
            if isinstance(fields, Mapping):
                pending.append({name: getattr(item, name, None) for name in fields})
    return found


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, Mapping) else None


def _media(item: Mapping[str, Any], part: str, found: InputEstimate, provider: str, model: str,
           pending: list[Any]) -> bool:  # fmt: skip
    """Count one media part; False when it is not one after all (a ``type`` key of something else)."""
    if part in ("image_url", "input_image", "image"):
        if part == "image_url":
            inner = item.get("image_url")
            url, detail = (_str(inner), None) if isinstance(inner, str) else (_str(_get(inner, "url")),
                                                                              _str(_get(inner, "detail")))  # fmt: skip
        elif part == "input_image":
            url, detail = _str(item.get("image_url")), _str(item.get("detail"))
        else:
            source = item.get("source")
            if not isinstance(source, Mapping):
                return False
            url, detail = _str(source.get("data")) or _str(source.get("url")), None
        size = media.image_size(media.decode_head(url)) if url is not None and not url.startswith("http") else None
        found.image_tokens += media.image_tokens(provider, model, size, detail)
        return True
    if part == "input_audio":
        inner = item.get("input_audio")
        audio = inner if isinstance(inner, Mapping) else item
        data = _str(audio.get("data"))
        tokens = media.audio_tokens(data, _str(audio.get("format"))) if data is not None else None
        if tokens is None:
            found.unknown += 1
        else:
            found.audio_tokens += tokens
        return True
    if part == "document":
        source = item.get("source")
        if not isinstance(source, Mapping):
            return False
        stype = source.get("type")
        for key in ("title", "context"):
            text = _str(item.get(key))
            if text:
                found.chars += text_weight(text)
        if stype == "text":
            found.chars += text_weight(_str(source.get("data")) or "")
        elif stype == "content":
            pending.append(source.get("content"))
        elif stype == "base64":
            _file(_whole(_str(source.get("data"))), found, provider, model)
        else:
            found.unknown += 1  # a URL or a file id: its pages are not known here
        return True
    # OpenAI's files: chat's {"type": "file", "file": {...}}, the Responses API's flat input_file.
    inner = item.get("file") if part == "file" else item
    if not isinstance(inner, Mapping):
        return False
    _file(_whole(_str(inner.get("file_data"))), found, provider, model)
    return True


def _file(raw: bytes, found: InputEstimate, provider: str, model: str) -> None:
    """A file sent inline (its bytes, ``_whole``): a PDF by its pages (text and the page as an image), plain text
    by its characters."""
    pages = media.pdf_pages(raw) if raw else None
    if pages is not None:
        found.text_tokens += pages * media.PDF_TEXT_TOKENS_PER_PAGE
        found.image_tokens += pages * media.image_tokens(provider, model, None, None)
        return
    if raw:
        try:
            found.chars += text_weight(raw.decode("utf-8"))
            return
        except UnicodeDecodeError:
            pass
    found.unknown += 1  # by id or URL, or bytes no rule reads


def _field(value: Any, *names: str) -> Any:
    """The first of ``names`` a mapping or an SDK object holds (None: none)."""
    for name in names:
        found = value.get(name) if isinstance(value, Mapping) else getattr(value, name, None)
        if found is not None:
            return found
    return None


def _head(data: Any) -> tuple[bytes, int]:
    """The first bytes of inline data (raw bytes, or base64 as REST sends it) and its decoded length."""
    if isinstance(data, bytes | bytearray):
        return bytes(data[: 64 * 1024]), len(data)
    if isinstance(data, str):
        return media.decode_head(data), media.decoded_length(data)
    return b"", 0


def _whole(data: Any) -> bytes:
    """All of inline data, decoded: only for the rules that read a whole file (a PDF's pages, a text's length)."""
    if isinstance(data, bytes | bytearray):
        return bytes(data)
    return media.decode_all(data) if isinstance(data, str) else b""


def _untyped_media(item: Mapping[str, Any], found: InputEstimate, provider: str, model: str) -> bool:
    """Count a Gemini part's inline or file data, or a Converse media block; False when it is none after all."""
    blob = _field(item, *_GEMINI_INLINE)
    if blob is not None:
        _gemini_inline(blob, found, model)
        return True
    if _field(item, *_GEMINI_FILE) is not None:
        found.unknown += 1  # a file known by its URI: its size is not known here
        return True
    for key in _CONVERSE_BLOCKS:
        block = item.get(key)
        if isinstance(block, Mapping) and isinstance(block.get("source"), Mapping):
            _converse_block(key, block, found, provider, model)
            return True
    return False


def _gemini_inline(blob: Any, found: InputEstimate, model: str) -> None:
    data = _field(blob, "data")
    mime = _field(blob, "mime_type", "mimeType")
    kind = mime.split("/")[0] if isinstance(mime, str) else ""
    head, size = _head(data)
    if not size:
        found.unknown += 1
    elif kind == "image":
        found.image_tokens += media.gemini_image_tokens(model, media.image_size(head))
    elif kind == "audio":
        seconds = media.audio_seconds(head, size)
        if seconds is None:
            found.unknown += 1
        else:
            found.audio_tokens += math.ceil(seconds * media.GEMINI_AUDIO_TOKENS_PER_SECOND)
    elif mime == "application/pdf":
        pages = media.pdf_pages(_whole(data))
        if pages is None:
            found.unknown += 1
        else:
            found.text_tokens += pages * media.GEMINI_PAGE_TOKENS
    elif kind == "text":
        found.chars += text_weight(_whole(data).decode("utf-8", "replace"))
    else:
        found.unknown += 1  # a video's length is not read here


def _converse_block(key: str, block: Mapping[str, Any], found: InputEstimate, provider: str, model: str) -> None:
    data = block["source"].get("bytes")
    if not isinstance(data, bytes | bytearray | str) or not data:
        found.unknown += 1  # in S3: not read here
        return
    if key == "image":
        if "claude" in model.lower():  # Anthropic's rule; other models' image sizes are not known here
            found.image_tokens += media.image_tokens(provider, model, media.image_size(_head(data)[0]), None)
        else:
            found.unknown += 1
    elif key == "document" and block.get("format") == "pdf":
        _file(_whole(data), found, provider, model)
    elif key == "document" and block.get("format") in _TEXT_FORMATS:
        found.chars += text_weight(_whole(data).decode("utf-8", "replace"))
    else:
        found.unknown += 1  # video, audio, office documents: no bound to give
