"""Scopes on a ``contextvars`` stack.

Each asyncio task runs in its own copy of the context, so it sees its own
stack; a thread sees the stack only when handed a context explicitly (see
``relay_runtime.threads``).

A scope is *attached* (pushed onto the caller's stack, so that what runs
inside nests under it) or *detached* (given an explicit parent, and never on
any stack): long-lived scopes that are closed out of order, such as a logical
LLM call kept open across attempts, are detached.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from .clipping import ERROR_MESSAGE_LIMIT, bounded
from .conversation_urls import recorded as recorded_conversation
from .events import (
    MARK,
    SCOPE_END,
    SCOPE_START,
    AnnotatedRequestField,
    AnnotatedResponseField,
    Recorded,
    lazily,
    new_event,
)
from .ids import new_id

# How a scope ended lives in its own module; its names are reachable here, where callers have long found them.
from .outcomes import error_type_of as error_type_of
from .outcomes import outcome_of as outcome_of
from .redaction import redact_metadata, redact_value, told

# A scope's handle has its own module; reachable here, where callers have long found it.
from .scope_handle import ScopeHandle as ScopeHandle
from .tool_results import data_blanked, result_blanked
from .trace_context import REMOTE_PARENT, REMOTE_TRACESTATE, clean_tracestate, require_traceparent
from .types import ScopeType

if TYPE_CHECKING:
    from .relay import Relay

_now = time.time_ns
_new = object.__new__
_init_handle = ScopeHandle.__init__


class RelayOutput(dict[str, Any]):
    """An output the relay builds itself from what it holds (an outcome, a model name): recorded as it is.

    Every other output passes the credential walk on ``pop``; the logical call's and the turn's run on
    every call, and hold nothing a caller handed in as data.
    """

    __slots__ = ()


class ScopeOrderError(RuntimeError):
    """A scope was popped while a scope pushed after it, in the same context, was still open."""


def _start_time(start_ns: Any) -> int:
    if type(start_ns) is not int or start_ns <= 0:
        raise ValueError(f"start_ns must be a positive int of nanoseconds (time.time_ns()), got {start_ns!r}")
    return start_ns


def _scope_type(scope_type: ScopeType | str) -> str:
    if type(scope_type) is str and scope_type:
        return scope_type  # a known type's value, or a custom type
    if isinstance(scope_type, ScopeType):
        return scope_type.value
    if isinstance(scope_type, str) and scope_type:
        return ScopeType(scope_type).value if scope_type in ScopeType._value2member_map_ else scope_type
    raise TypeError(f"scope_type must be a ScopeType or a non-empty string, got {scope_type!r}")


_TOOL = ScopeType.TOOL.value


def _blanked(value: Any, tool: bool, result: bool = False) -> Any:
    """A scope's input or output as its record holds it (``Recorded``): credentials blanked (``redact_value``);
    a tool's arguments and result, held as text, as data holding text, or as content blocks, with the values of
    credential keys the text quotes blanked too (``tool_results``); a conversation it holds (a
    framework's chain or agent run: ``{"messages": [...]}``) as a model call's records hold it
    (``conversation_urls``: its tools' results, its addresses' credentials)."""
    value = redact_value(value)
    if type(value) is dict:
        value = recorded_conversation(value)
    if not tool:
        return value
    if result:
        return result_blanked(value)
    return data_blanked(value)


def _error_text(error: BaseException) -> str:
    return bounded(str(error), ERROR_MESSAGE_LIMIT)


class Scopes:
    """``relay.scope``: push, pop, scope, mark, current."""

    def __init__(self, relay: Relay) -> None:
        self._relay = relay
        self._subs = relay.subscribers
        self._stack: ContextVar[ScopeHandle | None] = ContextVar(f"relay_scope_{id(relay):x}", default=None)

    def current(self) -> ScopeHandle | None:
        """The innermost open scope of this context, or None at the root."""
        top = self._stack.get()
        # A scope pushed here but ended from another context is skipped, not trusted.
        while top is not None and top.ended:
            top = top.below
        return top

    def push(
        self,
        name: str,
        scope_type: ScopeType | str = ScopeType.FUNCTION,
        *,
        parent: ScopeHandle | None = None,
        input: Any = None,
        metadata: dict[str, Any] | None = None,
        data: Any = None,
        attach: bool = True,
        root: bool = False,
        remote_parent: str | None = None,
        remote_tracestate: str | None = None,
        start_ns: int | None = None,
    ) -> ScopeHandle:
        """Open a scope under ``parent`` (default: the current scope; with ``root=True``, under none).

        ``start_ns``: when the scope began (``time.time_ns()``), for a scope recorded after the fact
        (a framework's model call known for an attempt only once it ended); default now.

        ``remote_parent``: a W3C ``traceparent`` from another process (an incoming request's
        headers or ``_meta``). The scope is then a root here that continues that trace: its
        ``trace_id`` is the remote one, and its metadata carries ``relay.remote_parent`` (and
        ``relay.remote_tracestate``) for consumers to link it. It cannot be combined with
        ``parent``; an attached one still nests what runs inside it. A malformed value is a
        ``ValueError`` naming it: callers holding untrusted input check it with
        ``trace_context.parse_traceparent`` first (and may pass the ``TraceParent`` it returns).
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"scope name must be a non-empty string, got {name!r}")
        if metadata:
            metadata = redact_metadata(metadata)
        # Plain strings skip the frame that normalises enums.
        st = scope_type if type(scope_type) is str and scope_type else _scope_type(scope_type)
        # Positional: keywords would cost the call a name match each.
        return self.opened(
            name, st, parent, input, metadata, data, attach, root, remote_parent, remote_tracestate, start_ns
        )

    def opened(
        self,
        name: str,
        scope_type: str,
        parent: ScopeHandle | None,
        input: Any,
        metadata: dict[str, Any] | None,
        data: Any = None,
        attach: bool = True,
        root: bool = False,
        remote_parent: str | None = None,
        remote_tracestate: str | None = None,
        start_ns: int | None = None,
    ) -> ScopeHandle:
        """``push`` for the relay's own scopes (a logical call, a conversation, a turn, a tool), whose metadata it
        built from what it was given, already read for credentials (``redact_metadata``): not read again on every
        call. ``name`` is a non-empty string, ``scope_type`` a non-empty string too (a ``ScopeType``'s value, or a
        custom type's name): ``push`` normalises what its caller gave, the relay's own callers pass constants."""
        if parent is not None and parent.ended:
            raise ValueError(f"cannot push {name!r} under {parent!r}: that scope has ended")
        if remote_parent is None:
            # ``below`` is only ever read on a stack: a detached scope with its parent given needs no lookup.
            top = self.current() if attach or (parent is None and not root) else None
            owner = parent if parent is not None or root else top
            # The class's own ``__init__`` called on a bare instance: the class call (``type.__call__``, then
            # ``__init__`` run in an evaluation loop of its own) costs every scope the relay opens itself more.
            handle = _new(ScopeHandle)
            _init_handle(handle, name, scope_type, owner, metadata, data, attach, top)
        else:
            handle = self._remote_child(
                name, scope_type, parent, metadata, data, attach, remote_parent, remote_tracestate
            )
            metadata = handle.metadata
        if start_ns is not None:
            handle.start_ns = _start_time(start_ns)
        token = self._stack.set(handle) if attach else None
        if self._subs.start:
            if input is not None and type(input) is not Recorded:
                # A framework's chain or tool input may carry a credential (a client's key, an
                # ``api_key`` argument): the record never holds it. What runs gets ``input`` as it was.
                # One already ``Recorded`` (a model call's request: ``attempt_views.recorded_request``)
                # is blanked its own way.
                input = lazily(Recorded, _blanked, (input, scope_type == _TOOL))
            # Positional (start_timestamp, input, output, metadata): keywords cost the call a name match each.
            event = new_event(
                SCOPE_START, handle.uuid, handle.parent_uuid, handle.trace_id, name, scope_type, handle.start_ns,
                None, input, None, metadata,
            )  # fmt: skip
            try:
                self._subs.deliver(self._subs.start, event)
            except BaseException as exc:
                # A subscriber's KeyboardInterrupt: the caller never gets the handle, so the scope
                # must not stay open (or on the stack) behind its back.
                if token is not None:
                    self._stack.reset(token)
                self._end(handle, None, None, exc, None)
                raise
        return handle

    def _remote_child(
        self,
        name: str,
        st: str,
        parent: ScopeHandle | None,
        metadata: dict[str, Any] | None,
        data: Any,
        attach: bool,
        remote_parent: str,
        remote_tracestate: str | None,
    ) -> ScopeHandle:
        if parent is not None:
            raise ValueError(f"cannot push {name!r} with both parent= and remote_parent=: give one")
        remote = require_traceparent(remote_parent)
        # The parsed value itself (a str, the normalised header): consumers read it without parsing again.
        md = {**(metadata or {}), REMOTE_PARENT: remote}
        state = clean_tracestate(remote_tracestate)
        if state is not None:
            md[REMOTE_TRACESTATE] = state
        handle = ScopeHandle(name, st, None, md, data, attach, self.current() if attach else None)
        handle.trace_id = remote.trace_id
        return handle

    def pop(
        self,
        handle: ScopeHandle,
        *,
        output: Any = None,
        metadata: dict[str, Any] | None = None,
        error: BaseException | None = None,
        outcome: str | None = None,
    ) -> None:
        """End ``handle``. A second pop of the same handle is a no-op."""
        if type(handle) is not ScopeHandle and not isinstance(handle, ScopeHandle):
            raise TypeError(f"pop() takes a ScopeHandle, got {type(handle).__name__}")
        if handle.ended:
            return
        if metadata:
            metadata = redact_metadata(metadata)
        if handle.attached:
            top = self._stack.get()
            if top is not handle:  # the usual pop is of the stack's top (not ended: checked above), found with no call
                top = self.current()
            if top is handle:
                self._stack.set(handle.below)
            else:
                self._check_not_buried(handle, top)
        if output is not None and type(output) is not RelayOutput and self._subs.end:
            output = lazily(Recorded, _blanked, (output, handle.scope_type == _TOOL, True))  # see ``_end``
        self._end(handle, output, metadata, error, outcome)

    def _check_not_buried(self, handle: ScopeHandle, top: ScopeHandle | None) -> None:
        node = top
        while node is not None:
            if node is handle:
                raise ScopeOrderError(
                    f"cannot pop {handle!r}: {top!r} was pushed after it and is still open; pop that first"
                )
            node = node.below
        # Not on this context's stack at all: it belongs to another task or thread,
        # whose stack skips it once it has ended.

    def end(
        self,
        handle: ScopeHandle,
        output: Any = None,
        metadata: dict[str, Any] | None = None,
        error: BaseException | None = None,
        outcome: str | None = None,
        provider: str | None = None,
        model_name: str | None = None,
        annotated_request: AnnotatedRequestField = None,
        annotated_response: AnnotatedResponseField = None,
    ) -> None:
        """Mark ``handle`` ended and emit its end event, without touching any stack.

        ``output`` is recorded with credentials blanked, as ``pop``'s is (an LLM attempt's response
        is ended through ``_end``: the response's own redaction applies to it). The arguments may be
        given in order (a framework's model call ends so: keywords are matched by name on every call).
        """
        if output is not None and type(output) is not RelayOutput and self._subs.end:
            output = lazily(Recorded, _blanked, (output, handle.scope_type == _TOOL, True))  # see ``_end``
        if metadata:
            metadata = redact_metadata(metadata)
        self._end(
            handle, output, metadata, error, outcome, provider, model_name, annotated_request, annotated_response
        )  # fmt: skip

    def _end(
        self,
        handle: ScopeHandle,
        output: Any,
        metadata: dict[str, Any] | None,
        error: BaseException | None,
        outcome: str | None,
        provider: str | None = None,
        model_name: str | None = None,
        annotated_request: AnnotatedRequestField = None,
        annotated_response: AnnotatedResponseField = None,
    ) -> None:
        """``end`` with its arguments in order: the calls made for every LLM call pass them so.

        ``output``, from ``pop`` and ``end``, is recorded with credentials blanked (``redact_value``; in a tool's
        result held as text, the values of credential keys, as in its arguments: ``tool_results``), read only by
        the subscribers that read it; the relay's own outputs (``RelayOutput``) stand as they are, and nothing is
        wrapped when no subscriber takes end events.
        """
        if handle.ended:
            return
        handle.ended = True
        if handle.local_intercepts is not None:
            self._relay.intercepts.scope_ended(handle)
        if not self._subs.end:
            return
        if outcome is None:
            said = output.raw if type(output) is Recorded else output
            if isinstance(said, dict) and isinstance(said.get("outcome"), str):
                outcome = said["outcome"]
            else:
                outcome = outcome_of(error)
        merged = handle.metadata if not metadata else {**(handle.metadata or {}), **metadata}
        cost = handle.cost
        if cost is not None:  # as it stands now: a roll-up goes on changing after its scope ends
            cost = self._relay.cost.frozen(cost)
        self._subs.deliver(
            self._subs.end,
            # Every field positionally, in ``new_event``'s order: two scope ends per managed call, and
            # matching eleven keywords by name cost each about 1,200 instructions.
            new_event(
                SCOPE_END,
                handle.uuid,
                handle.parent_uuid,
                handle.trace_id,
                handle.name,
                handle.scope_type,
                _now(),
                handle.start_ns,  # start_timestamp
                None,  # input
                output,
                merged,  # metadata
                None,  # data
                provider,
                model_name,
                annotated_request,
                annotated_response,
                error_type_of(error) if error is not None else None,
                # A provider may echo the caller's key back (a 401 body): the record never holds it. An error
                # whose text cannot be read (its ``__str__`` raises) still ends the scope, message withheld.
                told(error, None, _error_text) if error is not None else None,  # error_message
                outcome,
                cost,
            ),
        )

    @contextlib.contextmanager
    def scope(
        self,
        name: str,
        scope_type: ScopeType | str = ScopeType.FUNCTION,
        *,
        parent: ScopeHandle | None = None,
        input: Any = None,
        metadata: dict[str, Any] | None = None,
        data: Any = None,
        remote_parent: str | None = None,
        remote_tracestate: str | None = None,
    ) -> Iterator[ScopeHandle]:
        handle = self.push(
            name,
            scope_type,
            parent=parent,
            input=input,
            metadata=metadata,
            data=data,
            remote_parent=remote_parent,
            remote_tracestate=remote_tracestate,
        )
        try:
            yield handle
        except BaseException as exc:
            self.pop(handle, error=exc)
            raise
        self.pop(handle)

    def mark(
        self,
        name: str,
        data: Any = None,
        *,
        metadata: dict[str, Any] | None = None,
        parent: ScopeHandle | None = None,
    ) -> None:
        if not self._subs.mark:
            return
        if metadata:
            metadata = redact_metadata(metadata)
        self._emit_mark(self._subs.mark, name, redact_value(data) if data is not None else None, metadata, parent)

    def _emit_mark(
        self,
        targets: tuple[Any, ...],
        name: str,
        data: Any,
        metadata: dict[str, Any] | None,
        parent: ScopeHandle | None,
    ) -> None:
        owner = parent if parent is not None else self.current()
        self._subs.deliver(
            targets,
            new_event(
                MARK,
                new_id(),
                owner.uuid if owner is not None else None,
                owner.trace_id if owner is not None else new_id(),
                name,
                None,
                _now(),
                data=data,
                metadata=metadata,
            ),
        )
