"""What the Gemini API answered: a whole ``GenerateContentResponse`` read, and a stream's chunks folded into one.

Answers are the SDK's own pydantic models, or dicts (a response rebuilt from a stream, a cassette's,
a caller's), or anything duck-typed: read through ``get``'s tolerant reads. The SDK's own classes
are read by plain attribute instead: a 3-chunk stream reads about 40 fields, and ``get``'s call
and checks cost more than the read (see ``load_sdk``).

Gemini's ``prompt_token_count`` already holds the cached tokens (``cached_content_token_count``),
as its audio and image counts hold their cached ones (``cache_tokens_details``), and its candidates'
count leaves the thoughts out: input tokens are the prompt plus the tool-use
prompt, output tokens the candidates plus the thoughts (as OpenAI's ``completion_tokens`` holds
its reasoning), so ``input_tokens`` and ``output_tokens`` mean what they mean for every other provider.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from enum import Enum
from functools import partial
from itertools import compress
from operator import is_not
from typing import Any

from relay_runtime.types import AnnotatedLLMResponse, ChunkDelta, TokenUsage

from ..common import as_int, as_list, as_str, get

# Gemini's finish reasons -> the vocabulary the GenAI conventions use (``stop``, ``length``,
# ``content_filter``, ``tool_call``, ``error``); any other is kept, lower-cased (``continuation``).
_FILTERED = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
                       "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", "LANGUAGE"})  # fmt: skip
_ERRORS = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS",
                     "MISSING_THOUGHT_SIGNATURE", "MALFORMED_RESPONSE"})  # fmt: skip
_MODALITY_FIELDS = {"AUDIO": "audio", "IMAGE": "image"}
_NO_COUNTS: dict[str, int] = {}  # read only


class _Never:
    """Stands for an SDK class not looked up (yet): no answer is of this type."""


# The SDK's classes whose fields are read directly, and the fields read of each. Read directly, a field
# is exactly what ``get`` reads (a pydantic field is a plain attribute, never raising); a class not
# loaded, or lacking one of the fields (another SDK version), stays ``_Never``: read through ``get``.
_USAGE_CLASS = "GenerateContentResponseUsageMetadata"
_DIRECT_FIELDS: dict[str, tuple[str, ...]] = {
    "GenerateContentResponse": ("usage_metadata", "model_version", "response_id", "candidates"),
    "Candidate": ("content", "finish_reason", "index"),
    "Content": ("parts",),
    "Part": ("text", "thought", "function_call"),
    _USAGE_CLASS: (
        "prompt_token_count", "tool_use_prompt_token_count", "candidates_token_count", "thoughts_token_count",
        "cached_content_token_count", "prompt_tokens_details", "candidates_tokens_details", "cache_tokens_details",
    ),
}  # fmt: skip
# Any, not type: mypy would narrow what ``type(x) is _USAGE`` checks to a bare object.
_RESPONSE: Any = _Never
_CANDIDATE: Any = _Never
_CONTENT: Any = _Never
_PART: Any = _Never
_USAGE: Any = _Never


def load_sdk() -> None:
    """Look the SDK's classes up (by each client's first call: ``google.genai.types`` is imported by then)."""
    global _RESPONSE, _CANDIDATE, _CONTENT, _PART, _USAGE
    types = sys.modules.get("google.genai.types")
    if types is None or _RESPONSE is not _Never:
        return
    found: dict[str, type] = {}
    for name, fields in _DIRECT_FIELDS.items():
        cls = getattr(types, name, None)
        model_fields = getattr(cls, "model_fields", None)
        if isinstance(cls, type) and isinstance(model_fields, Mapping) and all(f in model_fields for f in fields):
            found[name] = cls
    if "response_token_count" in getattr(found.get(_USAGE_CLASS), "model_fields", ()):
        del found[_USAGE_CLASS]  # usage_of reads it only where the class lacks it (as None)
    _CANDIDATE = found.get("Candidate", _Never)
    _CONTENT = found.get("Content", _Never)
    _PART = found.get("Part", _Never)
    _USAGE = found.get(_USAGE_CLASS, _Never)
    _RESPONSE = found.get("GenerateContentResponse", _Never)


def enum_value(value: Any) -> Any:
    """``value.value`` (an enum member's value), else ``value``. A member's ``_value_`` is what its ``value``
    property returns, read without the property's Python frame (every answer reads its finish reason)."""
    return value._value_ if isinstance(value, Enum) else getattr(value, "value", value)


def finish_reason(value: Any, tool_calls: bool = False) -> str | None:
    """Gemini's ``FinishReason`` (an enum member or its name) in the conventions' words."""
    name = enum_value(value)
    if not isinstance(name, str) or not name or name == "FINISH_REASON_UNSPECIFIED":
        return None
    if name == "STOP":
        return "tool_call" if tool_calls else "stop"
    if name == "MAX_TOKENS":
        return "length"
    if name in _FILTERED:
        return "content_filter"
    if name in _ERRORS:
        return "error"
    return name.lower()


def _modality_counts(details: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in as_list(details):
        modality = get(item, "modality")
        name = _MODALITY_FIELDS.get(getattr(modality, "value", modality))
        count = as_int(get(item, "token_count"))
        if name is not None and count is not None:
            counts[name] = counts.get(name, 0) + count
    return counts


# A pydantic model class -> its field names (``model_fields`` is a class property that costs a call per read).
_FIELDS: dict[type, tuple[str, ...]] = {}
_PLAIN = frozenset({int, str, float, bool, bytes})  # the values no model is of (most of a usage's)
_is_set = partial(is_not, None)


def dumped(value: Any) -> Any:
    """``value.model_dump(exclude_none=True)`` for the SDK's models (``extra='forbid'``: their fields are all
    there is), read field by field: the usage a stream ends with is a flat model of counts, for which
    pydantic's serializer costs more than the whole fold. Anything else comes back as it is."""
    cls = type(value)
    names = _FIELDS.get(cls)
    if names is None:
        fields = getattr(cls, "model_fields", None)
        if not isinstance(fields, Mapping) or not callable(getattr(value, "model_dump", None)):
            return value
        names = _FIELDS[cls] = tuple(fields)
    # A pydantic model's ``__dict__`` holds its fields, in their order (pydantic fills it so), and with
    # ``extra='forbid'`` nothing else: read there whole, not by ``getattr`` one field at a time.
    # Its set fields picked in C (``compress`` by ``is not None``, the values in the items' order): a comprehension
    # ran a dozen opcodes for each of a usage's dozen fields, most of them None.
    fields = value.__dict__
    out: dict[str, Any] = dict(compress(fields.items(), map(_is_set, fields.values())))
    if _PLAIN.issuperset(map(type, out.values())):  # a usage's counts: nothing in it to dump further
        return out
    for name, item in out.items():
        kind = type(item)
        if kind is list:
            out[name] = [dumped(i) for i in item]
        elif kind not in _PLAIN and hasattr(kind, "model_fields"):  # a miss costs an AttributeError: ~4x the rest
            out[name] = dumped(item)
    return out


def usage_of(usage: Any) -> TokenUsage:
    if usage is None:
        return TokenUsage()
    if type(usage) is _USAGE:
        prompt, tool_prompt = usage.prompt_token_count, usage.tool_use_prompt_token_count
        candidates, thoughts = usage.candidates_token_count, usage.thoughts_token_count
        cached, cached_details = usage.cached_content_token_count, usage.cache_tokens_details
        prompt_details, output_details = usage.prompt_tokens_details, usage.candidates_tokens_details
    else:
        prompt, tool_prompt = get(usage, "prompt_token_count"), get(usage, "tool_use_prompt_token_count")
        candidates, thoughts = get(usage, "candidates_token_count"), get(usage, "thoughts_token_count")
        if type(candidates) is not int:  # the SDK's class has no such field (load_sdk checks): pydantic would raise
            candidates = get(usage, "response_token_count")  # the embeddings' and Live's spelling
        cached, cached_details = get(usage, "cached_content_token_count"), get(usage, "cache_tokens_details")
        prompt_details, output_details = get(usage, "prompt_tokens_details"), get(usage, "candidates_tokens_details")
    # ``as_int`` of each, without its five calls: a count is an int, anything else none.
    if type(prompt) is not int:
        prompt = None
    if type(tool_prompt) is not int:
        tool_prompt = None
    if type(candidates) is not int:
        candidates = None
    if type(thoughts) is not int:
        thoughts = None
    if type(cached) is not int:
        cached = None
    inputs = None if prompt is None and tool_prompt is None else (prompt or 0) + (tool_prompt or 0)
    outputs = None if candidates is None and thoughts is None else (candidates or 0) + (thoughts or 0)
    if not prompt_details and not output_details and not cached_details:
        # No details (the common answer): no modality counts. Positionally (input, output, cache read, cache
        # creation, reasoning): a dataclass matches each keyword by name.
        return TokenUsage(inputs, outputs, cached, None, thoughts)
    prompt_modalities = _modality_counts(prompt_details) if prompt_details else _NO_COUNTS  # spared the calls
    output_modalities = _modality_counts(output_details) if output_details else _NO_COUNTS
    cached_modalities = _modality_counts(cached_details) if cached_details else _NO_COUNTS
    images = prompt_modalities.get("image")
    if images and cached_modalities.get("image"):
        # The prompt's images count their cached tokens too, which the cache read holds (images have no cache
        # rate of their own): counted in both, the prompt's parts came to more than the prompt, and the call
        # went unpriced. Cached audio has its own rate: it stays in both counts, and pricing takes it out once.
        images = max(images - cached_modalities["image"], 0)
    return TokenUsage(
        input_tokens=inputs,
        output_tokens=outputs,
        cache_read_tokens=cached,
        reasoning_tokens=thoughts,
        input_audio_tokens=prompt_modalities.get("audio"),
        input_image_tokens=images,
        output_audio_tokens=output_modalities.get("audio"),
        output_image_tokens=output_modalities.get("image"),
        cache_read_audio_tokens=cached_modalities.get("audio"),
    )


def tool_call(function_call: Any) -> dict[str, Any]:
    return {"id": as_str(get(function_call, "id")), "name": as_str(get(function_call, "name")),
            "arguments": get(function_call, "args")}  # fmt: skip


def read_parts(parts: Any) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """A candidate's parts as (texts, thoughts, tool calls)."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in parts if type(parts) is list else as_list(parts):  # the SDK's own list, spared as_list's frame
        direct = type(part) is _PART
        text = part.text if direct else get(part, "text")
        if isinstance(text, str) and text:
            thought = part.thought if direct else get(part, "thought")
            (thoughts if thought is True else texts).append(text)
        function_call = part.function_call if direct else get(part, "function_call")
        if function_call is not None:
            calls.append(tool_call(function_call))
    return texts, thoughts, calls


def parts_of(candidate: Any) -> tuple[Any, Any]:
    """A candidate's (parts, finish reason)."""
    if type(candidate) is _CANDIDATE:
        content, reason = candidate.content, candidate.finish_reason
    else:
        content, reason = get(candidate, "content"), get(candidate, "finish_reason")
    return (content.parts if type(content) is _CONTENT else get(content, "parts")), reason


def blocked_reason(response: Any) -> str | None:
    """A prompt the API refused to answer (``promptFeedback.blockReason``): a content filter."""
    reason = get(get(response, "prompt_feedback"), "block_reason")
    name = enum_value(reason)
    if isinstance(name, str) and name and name != "BLOCKED_REASON_UNSPECIFIED":
        return "content_filter"
    return None


class _Candidate:
    """What a stream said of one candidate so far."""

    __slots__ = ("calls", "reason", "texts", "thoughts")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.thoughts: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.reason: Any = None

    def folded(self) -> dict[str, Any]:
        parts: list[dict[str, Any]] = (
            [{"text": t, "thought": True} for t in self.thoughts if t] if self.thoughts else []
        )
        if self.texts:
            parts.append({"text": "".join(self.texts)})
        if self.calls:
            parts += [{"function_call": {"id": c["id"], "name": c["name"], "args": c["arguments"]}} for c in self.calls]
        return {
            "content": {"role": "model", "parts": parts},
            "finish_reason": enum_value(self.reason),
        }


class GenerateContentAccumulator:
    """Folds ``generate_content_stream`` chunks (each a ``GenerateContentResponse``) into one response.

    The last chunk carries each candidate's ``finish_reason`` (and the whole usage); a stream
    whose chunks never said why the model stopped was cut short (``terminated`` stays False).
    A prompt blocked outright ends the stream with its ``prompt_feedback`` instead. With several
    candidates (``candidate_count``), each chunk's pieces are folded by their ``index``: the
    response holds every candidate, its finish reasons are theirs in order, and its text and tool
    calls are the first candidate's, as a whole answer's are (``GenerateContentCodec.annotate_response``).
    """

    __slots__ = ("blocked", "candidates", "first", "model", "response_id", "usage")

    def __init__(self) -> None:
        self.candidates: dict[int, _Candidate] = {}
        self.first: _Candidate | None = None  # ``candidates[0]``, read directly by the common chunk
        self.usage: Any = None
        self.model: str | None = None
        self.response_id: str | None = None
        self.blocked: str | None = None

    @property
    def terminated(self) -> bool:
        """Whether the stream said it ended: every candidate gave a finish reason, or the prompt was blocked."""
        if self.blocked:
            return True
        for state in self.candidates.values():  # a loop, not ``all`` over a generator: read once per stream
            if state.reason is None:
                return False
        return bool(self.candidates)

    def add(self, chunk: Any) -> ChunkDelta | None:
        if type(chunk) is _RESPONSE:
            usage, model = chunk.usage_metadata, chunk.model_version
            response_id, candidates = chunk.response_id, chunk.candidates
        else:
            usage, model = get(chunk, "usage_metadata"), get(chunk, "model_version")
            response_id, candidates = get(chunk, "response_id"), get(chunk, "candidates")
        if usage is not None:
            self.usage = usage  # each chunk's usage is the running total: the last one is the whole
        if isinstance(model, str) and model:
            self.model = model
        if isinstance(response_id, str) and response_id:
            self.response_id = response_id
        # Nearly every chunk the SDK streams: its one candidate (the first) with one part of text, of the SDK's own
        # classes. Its text is folded with no loop and no per-part bookkeeping: what the loop below would do with it.
        # Checked before the general checks of the candidates, which its own checks make.
        if type(candidates) is list and len(candidates) == 1:
            candidate = candidates[0]
            if type(candidate) is _CANDIDATE and not candidate.index:  # None or 0: the first
                content = candidate.content
                if type(content) is _CONTENT:
                    parts = content.parts
                    if type(parts) is list and len(parts) == 1:
                        part = parts[0]
                        if type(part) is _PART and part.function_call is None and part.thought is not True:
                            value = part.text
                            if type(value) is str and value:
                                state = self.first
                                if state is None:
                                    state = self.first = self.candidates[0] = _Candidate()
                                state.texts.append(value)
                                reason = candidate.finish_reason
                                if reason is not None:
                                    state.reason = reason
                                return ChunkDelta(value, "", None, 0)
        if not isinstance(candidates, (list, tuple)) or not candidates:  # a tuple, not a union built per chunk
            blocked = blocked_reason(chunk)
            if blocked:
                self.blocked = blocked
            return None
        states = self.candidates
        text = thought = ""
        extra = 0
        # ``parts_of`` and ``read_parts``' reads in this one frame, folded straight into the candidate's lists:
        # every chunk of a stream comes through here, and their frames and lists cost more than the reads.
        for candidate in candidates:
            if type(candidate) is _CANDIDATE:
                index, content, reason = candidate.index, candidate.content, candidate.finish_reason
            else:
                index, content = get(candidate, "index"), get(candidate, "content")
                reason = get(candidate, "finish_reason")
            if type(index) is not int or index < 0:
                index = 0
            state = states.get(index)
            if state is None:
                state = states[index] = _Candidate()
                if index == 0:
                    self.first = state
            parts = content.parts if type(content) is _CONTENT else get(content, "parts")
            said = thinking = ""  # this chunk's text and thoughts of this candidate
            arguments = 0
            for part in parts if type(parts) is list else as_list(parts):
                direct = type(part) is _PART
                value = part.text if direct else get(part, "text")
                if isinstance(value, str) and value:
                    if (part.thought if direct else get(part, "thought")) is True:
                        state.thoughts.append(value)
                        thinking += value
                    else:
                        state.texts.append(value)
                        said += value
                function_call = part.function_call if direct else get(part, "function_call")
                if function_call is not None:
                    call = tool_call(function_call)
                    state.calls.append(call)
                    arguments += len(str(call["arguments"] or ""))
            if reason is not None:
                state.reason = reason
            if index == 0:  # the chunk marks carry the first candidate's text, as the record does
                text, thought = said, thinking
                extra += arguments
            else:
                extra += len(str(candidate))
        if not text and not thought and not extra:
            return None
        # Positionally (text, reasoning, model, extra_chars): a dataclass matches each keyword by name.
        return ChunkDelta(text, thought, None, extra)

    def finish(self) -> tuple[Any, AnnotatedLLMResponse | None]:
        """The folded response, and its annotation where the folded response cannot say it all.

        A stream that ended (every candidate, the first among them, said why) says in its folded response all
        its annotation would: the codec's ``annotate_response`` reads the same reasons, usage, text and tool calls
        back from it (``annotation`` is what it reads). Its annotation is then None, built by the core only when
        an observer or a budget reads it, as a whole answer's is. A blocked prompt (its feedback is no part of the
        folded response), candidates without the first (whose text and calls an annotation holds) and a stream
        cut short (read so far, its usage and reasons are blanked) get theirs now.
        """
        first = self.first
        if first is not None and len(self.candidates) == 1:
            # One candidate, the first (nearly every stream): no ordering, and it ended if it said why.
            folded = [first.folded()]
            ended = first.reason is not None
        else:
            ordered, first = self._ordered()
            folded = [c.folded() for c in ordered] or [first.folded()]
            ended = 0 in self.candidates and self.terminated
        response: dict[str, Any] = {"candidates": folded, "model_version": self.model, "response_id": self.response_id}
        if self.usage is not None:
            response["usage_metadata"] = dumped(self.usage)
        if not self.blocked and ended:
            return response, None
        return response, self.annotation()

    def _ordered(self) -> tuple[list[_Candidate], _Candidate]:
        """The candidates folded so far, by index, and the first (an empty one when none came)."""
        states = self.candidates
        ordered = [states[i] for i in sorted(states)] if len(states) > 1 else list(states.values())
        return ordered, states.get(0) or _Candidate()

    def annotation(self) -> AnnotatedLLMResponse:
        """The annotation of what was folded so far."""
        ordered, first = self._ordered()
        reasons: list[str] = []
        for state in ordered:
            if state.reason is not None:  # (``finish_reason`` of None is None)
                reason = finish_reason(state.reason, bool(state.calls))
                if reason:
                    reasons.append(reason)
        if not reasons and self.blocked:
            reasons = [self.blocked]
        # Positionally (model, id, finish_reasons, usage, output_text, tool_calls): see ``ChunkDelta``'s.
        return AnnotatedLLMResponse(
            self.model,
            self.response_id,
            reasons,
            usage_of(self.usage),
            "".join(first.texts) if first.texts else None,
            list(first.calls),
        )
