"""The relay's own voice: a tone synthesizer used by the stub provider and as fallback speech.

There is no offline speech model here; the tone stands in for audio so clients exercise the
same playback path, and the text travels alongside it.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator


def tone_frames(
    duration_ms: int, *, sample_rate: int = 24000, frame_ms: int = 100, frequency: float = 440.0
) -> Iterator[bytes]:
    """PCM16 mono frames of a quiet sine tone."""
    if sample_rate <= 0 or frame_ms <= 0:
        raise ValueError("sample_rate and frame_ms must be positive")
    total = max(0, sample_rate * duration_ms // 1000)
    per_frame = max(1, sample_rate * frame_ms // 1000)
    step = 2 * math.pi * frequency / sample_rate
    amplitude = 3000
    index = 0
    while index < total:
        count = min(per_frame, total - index)
        samples = [int(amplitude * math.sin(step * (index + i))) for i in range(count)]
        yield struct.pack(f"<{count}h", *samples)
        index += count


def speech_duration_ms(text: str, *, per_char_ms: int = 12, max_ms: int = 3000) -> int:
    return min(max_ms, max(100, len(text) * per_char_ms))


def pcm16_peak(pcm: bytes) -> int:
    """Largest absolute sample of little-endian PCM16 (0 for empty or odd-length input)."""
    if len(pcm) < 2:
        return 0
    view = memoryview(pcm)[: len(pcm) - (len(pcm) % 2)].cast("h")
    return max(max(view), -min(view))
