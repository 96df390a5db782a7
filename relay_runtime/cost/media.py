"""What images, audio and PDF files in a request cost in tokens, by the providers' documented rules.

Each function gives an upper bound a budget can check: the exact count when
the bytes say enough (an image's size from its header, a WAV file's length),
else the most the rule allows (an image behind a URL is as large as the
provider lets an image be). None means there is no bound to give (a file known
only by its id, audio in a format whose length cannot be read): the caller
counts such parts in diagnostics.

- OpenAI images: tiles of 512 px after fitting in 2048 x 2048 and bringing the
  short side to 768 px, ``base + per_tile * tiles`` (85 + 170 for the GPT-4o
  family, other models their own figures; ``detail: "low"`` is ``base``), or
  32 px patches capped at 1536 times a per-model multiplier (GPT-4.1 mini and
  nano, o4-mini, GPT-5 mini and nano).
- Anthropic images: ``width * height / 750`` after fitting the long edge in
  1568 px and the area in 1.15 megapixels (at most about 1600 tokens).
- Audio (OpenAI): 10 tokens a second of input.
- PDF pages: up to 3000 tokens of text each, plus the page as an image.
- Gemini: an image no larger than 384 px either way is 258 tokens, a larger one
  258 per 768 px tile after fitting in 3072 x 3072 (so at most 16 tiles); from
  Gemini 3 on, an image may cost up to 1120 (``media_resolution``), which the
  bound takes when it is more. Audio is 32 tokens a second, a PDF page 258.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct

# OpenAI: (base, per tile) of tile-priced models; patch multipliers of patch-priced ones. Longest prefix wins.
_TILES = {
    "gpt-4o-mini": (2833, 5667),
    "o1": (75, 150),
    "o3": (75, 150),
    "computer-use": (65, 129),
}
_DEFAULT_TILES = (85, 170)
_PATCHES = {"gpt-4.1-mini": 1.62, "gpt-4.1-nano": 2.46, "o4-mini": 1.72, "gpt-5-mini": 1.62, "gpt-5-nano": 2.46}
_PATCH_CAP = 1536
_ANTHROPIC_IMAGE_MAX = 1600  # tokens: 1.15 megapixels / 750
_ANTHROPIC_LONG_EDGE = 1568
_ANTHROPIC_AREA = 1_150_000
AUDIO_TOKENS_PER_SECOND = 10
PDF_TEXT_TOKENS_PER_PAGE = 3000
_GEMINI_TILE_TOKENS = 258
_GEMINI_SMALL = 384
_GEMINI_TILE = 768
_GEMINI_FIT = 3072
_GEMINI_HIGH_RESOLUTION = 1120
_GEMINI_VERSION = re.compile(r"gemini-(\d+)")
GEMINI_AUDIO_TOKENS_PER_SECOND = 32
GEMINI_PAGE_TOKENS = 258
# Enough of a base64 payload to hold an image's or an audio file's header (and an EXIF block before it).
_HEAD_CHARS = 96 * 1024


def _prefixed(table: dict[str, object], model: str) -> object | None:
    best = None
    for prefix in table:
        if model.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return table[best] if best is not None else None


def image_tokens(provider: str, model: str, size: tuple[int, int] | None, detail: str | None) -> int:
    """The tokens one image costs; ``size`` None: as large as the provider lets an image be.

    The model's family decides the rule, wherever it is served: Claude on Bedrock or Vertex is priced as
    Anthropic prices it, Gemini behind its OpenAI-compatible endpoint as Gemini does."""
    model = model.lower()
    if "gemini" in model:
        return gemini_image_tokens(model, size)
    if provider == "anthropic" or "claude" in model:
        if size is None:
            return _ANTHROPIC_IMAGE_MAX
        w, h = size
        scale = min(1.0, _ANTHROPIC_LONG_EDGE / max(w, h), math.sqrt(_ANTHROPIC_AREA / (w * h)))
        return max(1, min(_ANTHROPIC_IMAGE_MAX, math.ceil(w * scale * h * scale / 750)))
    multiplier = _prefixed(_PATCHES, model)  # type: ignore[arg-type]
    if isinstance(multiplier, float):
        patches = _PATCH_CAP if size is None else min(_PATCH_CAP, math.ceil(size[0] / 32) * math.ceil(size[1] / 32))
        return math.ceil(patches * multiplier)
    tiles_of = _prefixed(_TILES, model)  # type: ignore[arg-type]
    base, per_tile = tiles_of if isinstance(tiles_of, tuple) else _DEFAULT_TILES
    if detail == "low":
        return base
    if size is None:
        return base + per_tile * 8  # 768 x 2048 after scaling: 2 x 4 tiles, the most an image can have
    fit = min(1.0, 2048 / max(size))
    width, height = size[0] * fit, size[1] * fit
    short = min(width, height)
    if short > 768:
        width, height = width * 768 / short, height * 768 / short
    return base + per_tile * math.ceil(width / 512) * math.ceil(height / 512)


def gemini_image_tokens(model: str, size: tuple[int, int] | None) -> int:
    """The tokens one image costs a Gemini model; ``size`` None: as large as an image is read."""
    if size is None:
        tokens = _GEMINI_TILE_TOKENS * (_GEMINI_FIT // _GEMINI_TILE) ** 2
    elif max(size) <= _GEMINI_SMALL:
        tokens = _GEMINI_TILE_TOKENS
    else:
        fit = min(1.0, _GEMINI_FIT / max(size))
        tiles = math.ceil(size[0] * fit / _GEMINI_TILE) * math.ceil(size[1] * fit / _GEMINI_TILE)
        tokens = _GEMINI_TILE_TOKENS * tiles
    version = _GEMINI_VERSION.search(model.lower())
    if version is not None and int(version.group(1)) >= 3:
        tokens = max(tokens, _GEMINI_HIGH_RESOLUTION)
    return tokens


def audio_seconds(head: bytes, size: int) -> float | None:
    """How long an audio file of ``size`` bytes lasts, from its first bytes: a WAV header, an MP3 frame."""
    return _wav_seconds(head, size) if head[:4] == b"RIFF" else _mp3_seconds(head, size)


def decode_head(data: str) -> bytes:
    """The first bytes of a base64 payload (a ``data:`` URL's or a bare one); b"" when it is not base64."""
    if data.startswith("data:"):
        comma = data.find(",")
        data = data[comma + 1 :] if comma >= 0 else ""
    head = data[:_HEAD_CHARS]
    head = head[: len(head) - len(head) % 4]
    try:
        return base64.b64decode(head, validate=False)
    except (binascii.Error, ValueError):
        return b""


def decode_all(data: str) -> bytes:
    if data.startswith("data:"):
        comma = data.find(",")
        data = data[comma + 1 :] if comma >= 0 else ""
    try:
        return base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        return b""


def decoded_length(data: str) -> int:
    """How many bytes a base64 payload holds, without decoding it."""
    if data.startswith("data:"):
        comma = data.find(",")
        data = data[comma + 1 :] if comma >= 0 else ""
    data = data.strip()
    return len(data) * 3 // 4 - data[-2:].count("=")


def image_size(head: bytes) -> tuple[int, int] | None:
    """Width and height from a PNG, GIF, WebP or JPEG header; None for anything else."""
    if head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) >= 24:
        w, h = struct.unpack(">II", head[16:24])
        return (w, h) if w and h else None
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        w, h = struct.unpack("<HH", head[6:10])
        return (w, h) if w and h else None
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP" and len(head) >= 30:
        return _webp_size(head)
    if head[:2] == b"\xff\xd8":
        return _jpeg_size(head)
    return None


def _webp_size(head: bytes) -> tuple[int, int] | None:
    chunk = head[12:16]
    if chunk == b"VP8X":
        w = int.from_bytes(head[24:27], "little") + 1
        h = int.from_bytes(head[27:30], "little") + 1
        return w, h
    if chunk == b"VP8L" and len(head) >= 25:
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and len(head) >= 30:
        w, h = struct.unpack("<HH", head[26:30])
        return w & 0x3FFF, h & 0x3FFF
    return None


def _jpeg_size(head: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(head):
        if head[i] != 0xFF:
            return None
        marker = head[i + 1]
        if marker == 0xFF:  # padding
            i += 1
            continue
        length = int.from_bytes(head[i + 2 : i + 4], "big")
        # Start-of-frame markers (not DHT 0xC4, JPG 0xC8, DAC 0xCC) carry the size.
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", head[i + 5 : i + 9])
            return (w, h) if w and h else None
        i += 2 + length
    return None


def audio_tokens(data: str, audio_format: str | None) -> int | None:
    """Tokens of a base64 audio payload: its length from a WAV header, or an MP3's first frame's bitrate."""
    seconds = audio_seconds(decode_head(data), decoded_length(data))
    if seconds is None:
        return None
    return math.ceil(seconds * AUDIO_TOKENS_PER_SECOND)


def _wav_seconds(head: bytes, size: int) -> float | None:
    if head[8:12] != b"WAVE" or len(head) < 32:
        return None
    byte_rate = int.from_bytes(head[28:32], "little")
    return size / byte_rate if byte_rate > 0 else None


# MPEG-1 layer III bitrates (kbit/s) by the header's 4-bit index; MPEG-2/2.5 layer III below.
_MP3_RATES_V1 = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 0)
_MP3_RATES_V2 = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, 0)


def _mp3_seconds(head: bytes, size: int) -> float | None:
    start = 0
    if head[:3] == b"ID3" and len(head) >= 10:  # a tag first: its size is four 7-bit bytes
        start = 10 + ((head[6] & 0x7F) << 21 | (head[7] & 0x7F) << 14 | (head[8] & 0x7F) << 7 | (head[9] & 0x7F))
    for i in range(start, min(len(head) - 3, start + 4096)):
        if head[i] == 0xFF and head[i + 1] & 0xE0 == 0xE0:
            version = (head[i + 1] >> 3) & 0x3
            layer = (head[i + 1] >> 1) & 0x3
            if layer != 0x1 or version == 0x1:  # layer III only; 01 is a reserved version
                continue
            table = _MP3_RATES_V1 if version == 0x3 else _MP3_RATES_V2
            kbps = table[head[i + 2] >> 4]
            if kbps:
                return (size - start) * 8 / (kbps * 1000)
    return None


_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")


def pdf_pages(data: bytes) -> int | None:
    """Pages of a PDF by its page objects; None when it is no PDF or hides them (compressed object streams)."""
    if not data.startswith(b"%PDF"):
        return None
    pages = len(_PAGE.findall(data))
    return pages or None
