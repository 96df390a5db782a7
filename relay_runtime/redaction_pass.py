"""One application of a ``RedactionPolicy`` to an event: its view, its metadata and its stream chunks.

A ``Pass`` counts what each rule changed, and keeps what it changed (whole strings and the
spans inside them) so that the SDK's own request kwargs and response objects are redacted
through the view: each value changed there is changed wherever it appears in them (that walk is
``redaction_raw``'s; the walk over values is ``redaction_walk``'s). A stream's chunk marks are held
back here as ``redaction_streams`` says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from .conventions import IDENTIFIERS, SPAN_HINTS
from .pointers import SENT_BESIDE
from .redaction_apply import renamed
from .redaction_streams import Held, chunk_kind, settled
from .redaction_walk import _BIG, _SCALARS, _SMALL, REMOVED, Walk, kept
from .types import AnnotatedLLMRequest, AnnotatedLLMResponse, ChunkDelta

if TYPE_CHECKING:
    from .events import DeferredResponse

__all__ = ["REMOVED", "Pass", "kept"]

_CLEAN_NAMES = 4096  # names a policy remembers as holding nothing it redacts (most are the code's own)
_View = TypeVar("_View", AnnotatedLLMRequest, AnnotatedLLMResponse)
_PARAMS = ("request", "params")
_NAME = ("name",)
_MODEL = ("request", "model")
_FIELDS_OF = {
    kind: frozenset(f.name for f in dataclasses.fields(kind)) for kind in (AnnotatedLLMRequest, AnnotatedLLMResponse)
}


def _copy(view: _View, **changes: Any) -> _View:
    """``dataclasses.replace`` for the views (plain dataclasses, no ``__post_init__``), at a fraction of
    its cost; what the policy cached on the original (attributes outside the fields) is left behind."""
    new = object.__new__(type(view))
    state = new.__dict__
    state.update(view.__dict__)
    fields = _FIELDS_OF.get(type(view))
    if fields is None or len(state) > len(fields):
        names = {f.name for f in dataclasses.fields(view)}
        for name in [name for name in state if name not in names]:
            del state[name]
    state.update(changes)
    return new


class Pass(Walk):
    """One application of a policy: the counts per rule, and what changed (to redact raw objects through it)."""

    __slots__ = ()

    def adopt(self, other: Pass, *, now: bool = False) -> None:
        """Take in what ``other`` (a pass over part of the event, done before) counted and changed; ``now``:
        it was done for this very event, so the containers it walked are as it saw them."""
        counts = self.counts
        if counts:
            for name, n in other.counts.items():
                counts[name] = counts.get(name, 0) + n
        else:
            counts.update(other.counts)
        self.leaves.update(other.leaves)
        self.pairs.update(other.pairs)
        if other.wholes is not None:
            for value, new in other.wholes.items():
                self.whole(value, new)
        if now:
            self.done.update(other.done)

    def sent_beside(self, inp: Any) -> Any:
        """An attempt's input with what the SDK sends beside the view (``extra_body``, ``extra_query``)
        read as ``/request/params``, as a cassette stores it: a path rule on a param finds it there too."""
        content = inp.get("content") if type(inp) is dict else None
        # The kwargs are held read-only (a mappingproxy). Asked by type first: ``isinstance`` against the ABC
        # runs Python code of ``abc`` each time, and an end event has no input at all.
        if content is None or (type(content) is not MappingProxyType and not isinstance(content, Mapping)):
            return inp
        changed: dict[str, Any] | None = None
        for key in SENT_BESIDE:
            value = content.get(key)
            if value is not None and isinstance(value, Mapping):  # mostly absent: None is no ABC check
                new = kept(self.walk(value, _PARAMS))
                if new is not value:
                    if changed is None:
                        changed = dict(content)
                    changed[key] = new
        return inp if changed is None else {**inp, "content": changed}

    # -- the view ------------------------------------------------------------------------------

    def metadata(self, metadata: Mapping[str, Any]) -> Any:
        """``walk`` of an event's metadata; the relay's own keys (kinds, ids, counts) are not content, but
        the span an integration asks for is named for caller data (an MCP resource's URI): its name is
        redacted, and its attributes through what that changed."""
        if not self.simple:
            out: Any = self.walk(metadata, ("metadata",))
        else:
            out = None
            names: dict[Any, Any] | None = None
            for k, v in metadata.items():
                if (k if type(k) is str else str(k)).startswith("relay."):
                    continue
                new_key = self.key_of(k, ("metadata",))
                if new_key is not k:
                    names = names or {}
                    names[k] = new_key
                if type(v) in _SCALARS and (v is None or _SMALL < v < _BIG):
                    continue
                new = self._plain(v, 1)
                if new is not v:
                    if out is None:
                        out = dict(metadata)
                    out[k] = new
            if out is None:
                out = metadata
            if names:
                out = renamed(out, names)
        if out is not metadata:
            out = self._identifiers(metadata, out)
        hints = metadata.get(SPAN_HINTS)
        if hints is not None and isinstance(hints, Mapping) and hints:  # None first: no ABC check
            new_hints = self._span_hints(hints)
            if new_hints is not hints:
                out = dict(out)
                out[SPAN_HINTS] = new_hints
        return out

    def _identifiers(self, before: Mapping[str, Any], after: Any) -> Any:
        """``after`` with each identifier a rule changed (not removed) replaced by its pseudonym: two users'
        session ids redacted to one placeholder would merge their runs, spans and trajectories into one."""
        if not isinstance(after, Mapping):
            return after
        fixed: dict[str, Any] | None = None
        for key in IDENTIFIERS:
            was = before.get(key)
            if type(was) is str and key in after and after[key] != was:
                if fixed is None:
                    fixed = dict(after)
                fixed[key] = self.policy.identifier(was)
        return after if fixed is None else fixed

    def _span_hints(self, hints: Mapping[str, Any]) -> Mapping[str, Any]:
        """The span an integration asks for: its name, and its attributes' values (a peer's address, a
        resource's URI), read by the rules that find values, as every other string an event carries."""
        name = hints.get("name")
        new_name = self.name(name) if isinstance(name, str) else name
        attributes = hints.get("attributes")
        new_attributes = self.raw(attributes, scan=True) if isinstance(attributes, Mapping) else attributes
        if new_name == name and new_attributes is attributes:
            return hints
        out = dict(hints)
        out["name"] = new_name
        out["attributes"] = new_attributes
        return out

    def name(self, name: str) -> str:
        """An event's name (a scope an integration named for caller data: ``resources/read <uri>``)."""
        return self._known_clean(name, _NAME, self.policy._clean_names) or ""

    def model(self, model: str | None) -> str | None:
        """A request's model, as the event's ``model_name`` and its view carry it (spans are named for it, metrics
        labelled with it): read as the answer's model is, by the rules that read every string."""
        return self._known_clean(model, _MODEL, self.policy._clean_models) if model else model

    def _known_clean(self, text: str, path: tuple[str, ...], clean: set[str]) -> str | None:
        """``walk`` of a short string of the code's vocabulary (a scope's name, a model's), met on every event: one
        the rules left as it was at ``path`` is remembered (in ``clean``, for that path) and not read again."""
        if text in clean or not text:
            return text
        new = kept(self.walk(text, path))
        if new == text and len(clean) < _CLEAN_NAMES:
            clean.add(text)
        return new

    def request_view(self, req: AnnotatedLLMRequest) -> AnnotatedLLMRequest:
        messages = self.walk(req.messages, ("request", "messages"))
        system = self.walk(req.system, ("request", "system"))
        tools = self.walk(req.tools, ("request", "tools"))
        # The tool the model must call is named as in ``tools``, and read as they are.
        choice = self.walk(req.tool_choice, ("request", "tools")) if req.tool_choice else req.tool_choice
        params = self.walk(req.params, ("request", "params")) if req.params else req.params
        extra = self.walk(req.provider_params, ("request", "params")) if req.provider_params else req.provider_params
        # The model is the caller's words (a fine-tune's suffix, a deployment's name), read as the answer's is.
        model = self.model(req.model)
        if (
            messages is req.messages
            and system is req.system
            and tools is req.tools
            and params is req.params
            and (extra is req.provider_params and choice is req.tool_choice and model is req.model)
        ):
            return req
        return _copy(
            req,
            model=model,
            messages=[] if messages is REMOVED else list(messages),
            system=kept(system),
            tools=None if tools is REMOVED or tools is None else list(tools),
            tool_choice=kept(choice),
            params={} if params is REMOVED else dict(params),
            provider_params={} if extra is REMOVED else dict(extra),
        )

    def response_view(self, resp: AnnotatedLLMResponse) -> AnnotatedLLMResponse:
        text = self.walk(resp.output_text, ("response", "text")) if resp.output_text else resp.output_text
        calls = self.walk(resp.tool_calls, ("response", "tool_calls")) if resp.tool_calls else resp.tool_calls
        # The answer's id and model are the provider's words too (one built from a header a proxy echoed).
        rid = self.walk(resp.id, ("response", "id")) if resp.id else resp.id
        model = self.walk(resp.model, ("response", "model")) if resp.model else resp.model
        if text is resp.output_text and calls is resp.tool_calls and rid is resp.id and model is resp.model:
            return resp
        return _copy(
            resp, output_text=kept(text), tool_calls=[] if calls is REMOVED else list(calls), id=kept(rid),
            model=kept(model),
        )  # fmt: skip

    def deferred_response_view(
        self, deferred: DeferredResponse, content: tuple[str | None, list[dict[str, Any]]]
    ) -> DeferredResponse | AnnotatedLLMResponse | None:
        """``response_view`` read off the response's text and tool calls (``content``) alone: ``deferred``
        itself, still unbuilt, when no rule changes them; else the built annotation, redacted."""
        text, calls = content
        new_text = self.walk(text, ("response", "text")) if text else text
        new_calls = self.walk(calls, ("response", "tool_calls")) if calls else calls
        if new_text is text and new_calls is calls:
            return deferred
        built = deferred.get()
        if built is None:
            return None
        return _copy(built, output_text=kept(new_text), tool_calls=[] if new_calls is REMOVED else list(new_calls))

    def chunk(self, data: Any, held: Held | None = None) -> Any:
        """A stream chunk mark: its delta as the response's text and reasoning, the SDK chunk through it.

        With ``held`` (the stream's text not sent yet: the policy finds values inside response text),
        the delta carries what of the held text and this chunk no value can still straddle, redacted,
        and holds back the rest (``redaction_streams``); the SDK chunk is reduced to its kind. Without
        it, each chunk's delta is redacted on its own.
        """
        if not isinstance(data, Mapping):
            return self.walk(data, ("data",))
        if held is None and self.policy._pieces and data.get("chunk") is not None:
            # A rule acts on what the SDK chunk holds beside the text (a piece of a tool call's arguments, which no
            # rule can judge alone; the end event carries them whole): only what kind of chunk it was stays.
            data = {**data, "chunk": chunk_kind(data.get("chunk"))}
        delta = data.get("delta")
        if held is not None:
            index = data.get("index")
            if type(index) is int:
                held.index = index + 1
            out = dict(data)
            if isinstance(delta, ChunkDelta):
                out["delta"] = ChunkDelta(
                    text=self.settle(held, "text", delta.text),
                    reasoning=self.settle(held, "reasoning", delta.reasoning),
                    model=delta.model,
                    extra_chars=delta.extra_chars,
                )
            # Every string of the SDK's chunk is a piece of something (its text, a tool call's arguments as
            # JSON fragments), and a piece of a value is not found: only what kind of chunk it was stays.
            out["chunk"] = chunk_kind(data.get("chunk"))
            return out
        if not isinstance(delta, ChunkDelta):
            return self.walk(data, ("data",))
        text = self.walk(delta.text, ("response", "text")) if delta.text else delta.text
        reasoning = self.walk(delta.reasoning, ("response", "reasoning")) if delta.reasoning else delta.reasoning
        if text is delta.text and reasoning is delta.reasoning:
            return data
        new = dict(data)
        new["delta"] = ChunkDelta(
            text=kept(text) or "", reasoning=kept(reasoning) or "", model=delta.model, extra_chars=delta.extra_chars
        )
        new["chunk"] = self.raw(data.get("chunk"))
        return new

    def settle(self, held: Held, field: str, piece: str) -> str:
        """The part of ``held``'s ``field`` and ``piece`` that can go out now, redacted; the rest stays held."""
        pending = getattr(held, field) + (piece or "")
        at = settled(self.policy._streamed, pending)
        setattr(held, field, pending[at:])
        return self.flush(pending[:at], field)

    def flush(self, text: str, field: str) -> str:
        """``text`` released from a stream's hold, redacted as the response's ``field`` is."""
        if not text:
            return ""
        return kept(self.walk(text, ("response", field))) or ""
