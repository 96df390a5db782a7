"""The one event type every subscriber receives."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .types import AnnotatedLLMRequest, AnnotatedLLMResponse

T = TypeVar("T")
D = TypeVar("D", bound="Deferred[Any]")

SCOPE_START = "scope_start"
SCOPE_END = "scope_end"
MARK = "mark"
KINDS = (SCOPE_START, SCOPE_END, MARK)

# Stream chunk marks carry this name and only reach subscribers that asked for chunks.
CHUNK_MARK = "llm.chunk"


# One lock for every deferred value: computing one is rare and short, and a lock per
# value would cost every call an allocation. Re-entrant, so a computation may read another.
_deferred_lock = threading.RLock()


class Deferred(Generic[T]):
    """A value computed on first read, then kept; never computed if nobody reads it.

    The annotations of an LLM attempt are built this way: decoding a request and
    reading a response cost more than the rest of the attempt's bookkeeping, and
    most subscribers never look at them. ``compute(*args)`` runs at most once,
    on whichever thread reads first, so ``args`` must be a snapshot of what it
    needs (taken when the event was built) and ``compute`` must not raise.
    """

    __slots__ = ("_args", "_compute", "_value")

    def __init__(self, compute: Callable[..., T], *args: Any) -> None:
        self._compute: Callable[..., T] | None = compute
        self._args = args
        self._value: T | None = None

    def get(self) -> T:
        if self._compute is not None:
            with _deferred_lock:
                compute = self._compute
                if compute is not None:
                    self._value = compute(*self._args)
                    # Dropped once used: an event kept for long must not keep the response alive twice.
                    self._compute, self._args = None, ()
        return self._value  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"Deferred({'pending' if self._compute is not None else repr(self._value)})"


class DeferredResponse(Deferred[AnnotatedLLMResponse | None]):
    """A response's annotation, deferred, whose text and tool calls can be read alone before it is built.

    A redaction policy reads only those, and most answers hold nothing it changes: then the
    annotation stays unbuilt, for the subscribers that may never read it. ``content()`` is what
    the annotation's ``output_text`` and ``tool_calls`` would be (None: not known without it).
    """

    __slots__ = ("_content",)

    def __init__(
        self,
        content: Callable[[], tuple[str | None, list[dict[str, Any]]] | None],
        compute: Callable[..., AnnotatedLLMResponse | None],
        *args: Any,
    ) -> None:
        super().__init__(compute, *args)
        self._content: Callable[[], tuple[str | None, list[dict[str, Any]]] | None] | None = content

    @property
    def pending(self) -> bool:
        return self._compute is not None

    def content(self) -> tuple[str | None, list[dict[str, Any]]] | None:
        read = self._content
        if read is None or self._compute is None:  # built already (or being dropped): read the annotation
            return None
        return read()

    def get(self) -> AnnotatedLLMResponse | None:
        value = super().get()
        self._content = None  # it holds the response too
        return value


class Recorded(Deferred[Any]):
    """A scope's input or output as its record holds it (credentials blanked: ``scopes``), made on first read.

    Most subscribers never read a scope's input or output (a span exporter without content capture), and
    blanking walks the whole value: a tool's arguments and result, an LLM attempt's request and conversation
    (``attempt_views.recorded_request``) are walked only for those that read them. ``raw`` is the first
    argument as the caller gave it (an output, for the scope's own bookkeeping: its outcome).
    """

    __slots__ = ()

    @property
    def raw(self) -> Any:
        args = self._args  # emptied only after the value is set: read once, either is whole
        return args[0] if args else self._value


AnnotatedRequestField = AnnotatedLLMRequest | Deferred[AnnotatedLLMRequest | None] | None
AnnotatedResponseField = AnnotatedLLMResponse | Deferred[AnnotatedLLMResponse | None] | None


class Event:
    """A scope start, a scope end, or a mark.

    Plain slots rather than a dataclass: the hot path builds two of these per
    call, and positional construction of a slotted class is the cheapest shape.
    ``annotated_request`` and ``annotated_response`` may be handed in as
    ``Deferred`` values, and ``input`` and ``output`` as ``Recorded`` ones: reading
    the attribute computes them the first time.
    """

    __slots__ = (
        "_annotated_request",
        "_annotated_response",
        "_input",
        "_output",
        "cost",
        "data",
        "error_message",
        "error_type",
        "kind",
        "metadata",
        "model_name",
        "name",
        "outcome",
        "parent_uuid",
        "provider",
        "scope_type",
        "start_timestamp",
        "timestamp",
        "trace_id",
        "uuid",
    )
    kind: str
    uuid: str
    parent_uuid: str | None
    trace_id: str
    name: str
    scope_type: str | None
    timestamp: int
    start_timestamp: int | None
    _input: Any
    _output: Any
    metadata: dict[str, Any]
    data: Any
    provider: str | None
    model_name: str | None
    _annotated_request: AnnotatedRequestField
    _annotated_response: AnnotatedResponseField
    # What it cost: an attempt's own cost, or the roll-up of a scope's attempts (relay_runtime.cost).
    cost: Any
    error_type: str | None
    error_message: str | None
    outcome: str | None

    def __init__(
        self,
        kind: str,
        uuid: str,
        parent_uuid: str | None,
        trace_id: str,
        name: str,
        scope_type: str | None,
        timestamp: int,
        *,
        start_timestamp: int | None = None,
        input: Any = None,
        output: Any = None,
        metadata: dict[str, Any] | None = None,
        data: Any = None,
        provider: str | None = None,
        model_name: str | None = None,
        annotated_request: AnnotatedRequestField = None,
        annotated_response: AnnotatedResponseField = None,
        error_type: str | None = None,
        error_message: str | None = None,
        outcome: str | None = None,
        cost: Any = None,
    ) -> None:
        # One definition of how the slots are filled: ``new_event``'s (the hot path's).
        built = new_event(
            kind, uuid, parent_uuid, trace_id, name, scope_type, timestamp, start_timestamp=start_timestamp,
            input=input, output=output, metadata=metadata, data=data, provider=provider, model_name=model_name,
            annotated_request=annotated_request, annotated_response=annotated_response, error_type=error_type,
            error_message=error_message, outcome=outcome, cost=cost,
        )  # fmt: skip
        for slot in Event.__slots__:
            setattr(self, slot, getattr(built, slot))

    @property
    def input(self) -> Any:
        value = self._input
        if type(value) is Recorded:
            value = self._input = value.get()
        return value

    @input.setter
    def input(self, value: Any) -> None:
        self._input = value

    @property
    def output(self) -> Any:
        value = self._output
        if type(value) is Recorded:
            value = self._output = value.get()
        return value

    @output.setter
    def output(self, value: Any) -> None:
        self._output = value

    @property
    def annotated_request(self) -> AnnotatedLLMRequest | None:
        value = self._annotated_request
        if isinstance(value, Deferred):
            value = self._annotated_request = value.get()
        return value

    @annotated_request.setter
    def annotated_request(self, value: AnnotatedRequestField) -> None:
        self._annotated_request = value

    @property
    def annotated_response(self) -> AnnotatedLLMResponse | None:
        value = self._annotated_response
        if isinstance(value, Deferred):
            value = self._annotated_response = value.get()
        return value

    @annotated_response.setter
    def annotated_response(self, value: AnnotatedResponseField) -> None:
        self._annotated_response = value

    @property
    def duration_ns(self) -> int | None:
        if self.start_timestamp is None:
            return None
        return self.timestamp - self.start_timestamp

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (values that are not JSON are left to the encoder's ``default``)."""
        out: dict[str, Any] = {}
        for name in FIELDS:
            value = getattr(self, name)
            if value is None or (type(value) is dict and not value):
                continue
            if name in ("annotated_request", "annotated_response"):
                value = _dataclass_dict(value)
            elif name == "cost":
                value = value.as_dict()
            out[name] = value
        return out

    def __repr__(self) -> str:
        return f"Event({self.kind} {self.scope_type} {self.name!r} uuid={self.uuid[:8]} outcome={self.outcome})"


# Every attribute, in the order ``to_dict`` writes them: the annotations, then by name (those behind a
# property read through it).
_ANNOTATIONS = ("annotated_request", "annotated_response")
FIELDS = (*_ANNOTATIONS, *sorted(name.lstrip("_") for name in Event.__slots__ if name.lstrip("_") not in _ANNOTATIONS))

_new = object.__new__


def new_event(
    kind: str,
    uuid: str,
    parent_uuid: str | None,
    trace_id: str,
    name: str,
    scope_type: str | None,
    timestamp: int,
    start_timestamp: int | None = None,
    input: Any = None,
    output: Any = None,
    metadata: dict[str, Any] | None = None,
    data: Any = None,
    provider: str | None = None,
    model_name: str | None = None,
    annotated_request: AnnotatedRequestField = None,
    annotated_response: AnnotatedResponseField = None,
    error_type: str | None = None,
    error_message: str | None = None,
    outcome: str | None = None,
    cost: Any = None,
) -> Event:
    """``Event(...)`` for the hot path, about a third cheaper.

    Calling the class goes through ``type.__call__``, which packs keyword
    arguments into a dict before ``__init__`` sees them; a plain function
    call does not. The optional fields are not keyword-only because defaults of
    keyword-only parameters are looked up in a dict on every call, and positional
    ones are not; the managed call's own events pass them positionally too, since
    each keyword is matched by name (eleven of them cost a scope end ~1,200
    instructions). Keep this order: those callers rely on it.
    """
    event = _new(Event)
    event.kind = kind
    event.uuid = uuid
    event.parent_uuid = parent_uuid
    event.trace_id = trace_id
    event.name = name
    event.scope_type = scope_type
    event.timestamp = timestamp
    event.start_timestamp = start_timestamp
    event._input = input
    event._output = output
    event.metadata = metadata if metadata is not None else {}
    event.data = data
    event.provider = provider
    event.model_name = model_name
    event._annotated_request = annotated_request
    event._annotated_response = annotated_response
    event.error_type = error_type
    event.error_message = error_message
    event.outcome = outcome
    event.cost = cost
    return event


def lazily(cls: type[D], compute: Callable[..., Any], args: tuple[Any, ...]) -> D:
    """``cls(compute, *args)`` (a ``Deferred`` or ``Recorded``) with ``args`` already a tuple, and no class call:
    ``type.__call__`` runs ``__init__`` in an evaluation loop of its own, where this runs inline. Four lazy
    values per framework model call are made so."""
    value = _new(cls)
    value._compute, value._args, value._value = compute, args, None
    return value


def _dataclass_dict(value: Any) -> Any:
    from dataclasses import asdict, is_dataclass

    if is_dataclass(value) and not isinstance(value, type):
        return {k: v for k, v in asdict(value).items() if v not in (None, [], {})}
    return value
