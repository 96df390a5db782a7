"""``relay.redaction.use(policy)``: where a ``RedactionPolicy`` is installed.

On a relay, the policy is applied by its subscriber list, once per event and before
the first subscriber: every consumer sees the same redacted event. Without a policy the
list's plain ``deliver`` runs, untouched: the hot path pays nothing for the feature.
A host's ``redaction`` is its relay's; the coordinator's installs on every host it has
and will have.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from . import conventions as cv
from . import redaction_logs
from .events import MARK, SCOPE_END, Event, new_event
from .redaction_policy import FAILED_KEY, RedactionPolicy
from .redaction_streams import Held, carried_by, released_as_held
from .types import AnnotatedLLMRequest, LLMRequest, LLMRequestInterceptOutcome

if TYPE_CHECKING:
    from .relay import Relay
    from .session import Host, SessionCoordinator
    from .subscribers import Subscribers

# The request intercept of ``apply_to_request``: it runs after every other request intercept
# (highest priority number), so nothing they add reaches the provider unredacted.
INTERCEPT_NAME = "relay.redaction"
INTERCEPT_PRIORITY = 2**62


def logged_id(relay: Relay, key: str, value: Any) -> Any:
    """``value`` of metadata ``key`` (a session or turn id) as the relay's events record it, for the library's
    own log lines: the log is a sink like any other."""
    policy = relay.redaction.policy
    return value if policy is None else policy.recorded(key, value)


def _check(policy: Any) -> RedactionPolicy | None:
    if policy is not None and not isinstance(policy, RedactionPolicy):
        raise TypeError(f"redaction.use() takes a RedactionPolicy or None, got {type(policy).__name__}")
    return policy


class RelayRedaction:
    """``relay.redaction``: the policy installed on one relay."""

    def __init__(self, relay: Relay) -> None:
        self._relay = relay
        self._lock = threading.Lock()
        self._policy: RedactionPolicy | None = None

    @property
    def policy(self) -> RedactionPolicy | None:
        return self._policy

    def use(self, policy: RedactionPolicy | None) -> RedactionPolicy | None:
        """Install ``policy`` (None removes it); applies from the next event. Returns it."""
        policy = _check(policy)
        relay = self._relay
        with self._lock:
            old, self._policy = self._policy, policy
            if old is not None and old.apply_to_request:
                relay.intercepts.deregister_llm_request(INTERCEPT_NAME)
            if policy is not None and policy.apply_to_request:
                relay.intercepts.register_llm_request(INTERCEPT_NAME, INTERCEPT_PRIORITY, False, _intercept(policy))
            install(relay.subscribers, policy)
        return policy

    def clear(self) -> None:
        self.use(None)


class CoordinatorRedaction:
    """``SESSION_COORDINATOR.redaction``: one policy on every host, now and later."""

    def __init__(self, coordinator: SessionCoordinator) -> None:
        self._coordinator = coordinator
        self._lock = threading.Lock()
        self._policy: RedactionPolicy | None = None
        self._watching = False

    @property
    def policy(self) -> RedactionPolicy | None:
        return self._policy

    def use(self, policy: RedactionPolicy | None) -> RedactionPolicy | None:
        policy = _check(policy)
        with self._lock:
            self._policy = policy
            if not self._watching:
                self._watching = True
                self._coordinator.watch_hosts(self._on_host)  # installs on the hosts there are, too
                return policy
        for host in self._coordinator.hosts():
            host.relay.redaction.use(policy)
        return policy

    def clear(self) -> None:
        self.use(None)

    def _on_host(self, host: Host) -> None:
        host.relay.redaction.use(self._policy)


def install(subscribers: Subscribers, policy: RedactionPolicy | None) -> None:
    """Route ``subscribers``' deliveries through ``policy`` (None: back to the plain delivery).

    The text each stream's chunk marks hold back (``redaction_streams``) is kept per subscriber list,
    so a policy swapped mid-stream releases what the one before it held; at an LLM attempt's end the
    rest goes out in one more chunk mark, delivered to the chunk subscribers just before the end. A
    policy removed mid-stream leaves the plain delivery only once the text it held has gone out, as
    it was (there is no policy left to redact it): each stream's before its next chunk mark or its end.
    """
    with _SWAP:
        _install(subscribers, policy)


def _install(subscribers: Subscribers, policy: RedactionPolicy | None) -> None:
    subscribers.policy = policy
    redaction_logs.installed(subscribers, policy)  # the library's log lines get what the events get
    holds: dict[str, Held] = subscribers.__dict__.setdefault(_HOLDS, {})
    if policy is None:
        if not holds:
            _plain_again(subscribers)
        return  # the delivery below stays until what was held has gone out
    plain = type(subscribers).deliver

    def deliver(targets: Any, event: Event) -> None:
        current = subscribers.policy  # read once: an event is redacted by one policy, whole
        if holds:
            kind = event.kind
            if kind == SCOPE_END:
                held = holds.pop(event.uuid, None)
                if held is not None:
                    _release(current, event, held)
            elif current is None and kind == MARK and event.name == cv.CHUNK:
                stream = event.parent_uuid or ""
                held = holds.pop(stream, None)
                if held is not None:  # before this chunk's text: the marks carry the text in order
                    try:
                        event = carried_by(event, held)
                    except Exception as exc:
                        subscribers._diagnostics.failure("redaction_errors", exc, "releasing a stream's held text")
                    if held.text or held.reasoning:  # a mark that could not carry it: the stream's end will
                        holds[stream] = held
        if current is not None:
            try:
                event = current.redact_event(event, holds)
            except Exception as exc:
                subscribers._diagnostics.failure("redaction_errors", exc, "applying the redaction policy")
                event = _without_content(event)
        elif not holds:
            _plain_again(subscribers)
        plain(subscribers, targets, event)

    def _release(current: RedactionPolicy | None, at: Event, held: Held) -> None:
        """Deliver what ``held`` holds just before the stream's end ``at`` (redacted by the policy in use, or as it
        came with no policy left)."""
        try:
            mark = current.released(at, held) if current is not None else released_as_held(at.uuid, at, held)
        except Exception as exc:
            subscribers._diagnostics.failure("redaction_errors", exc, "releasing a stream's held text")
            return  # the end event still carries the whole answer, redacted; the held text is dropped
        if mark is not None and subscribers.chunk:
            plain(subscribers, subscribers.chunk, mark)

    subscribers.__dict__["deliver"] = deliver


def _plain_again(subscribers: Subscribers) -> None:
    """Back to the plain delivery, unless a policy came since the caller read that there was none (another
    thread's ``use``): its delivery, installed meanwhile, would be undone and every event after go out unredacted."""
    with _SWAP:
        if subscribers.policy is None:
            subscribers.__dict__.pop("deliver", None)
            subscribers.__dict__.pop(_HOLDS, None)


# Installing a policy and putting the plain delivery back, one at a time (reentrant: ``_install`` calls
# ``_plain_again``). Taken on a delivery only when a removed policy's holds have all gone out.
_SWAP = threading.RLock()


_HOLDS = "_redaction_holds"


# Metadata the relay itself writes (ids, kinds, counts): kept on an event whose content was dropped.
_IDENTITY = frozenset(
    {cv.SESSION_ID, cv.PROFILE_ID, cv.AGENT_NAME, cv.PLATFORM, cv.PARENT_SESSION_ID, cv.TURN_ID, cv.TASK_ID,
     cv.API_REQUEST_ID, cv.CALL_ROLE, cv.RETRY_COUNT, cv.SDK_RETRIES, cv.API_MODE}
)  # fmt: skip


def _without_content(event: Event) -> Event:
    """What subscribers get when the policy failed on an event: its lifecycle, none of its content."""
    metadata = {k: v for k, v in (event.metadata or {}).items() if k.startswith("relay.") or k in _IDENTITY}
    metadata[FAILED_KEY] = True
    return new_event(
        event.kind, event.uuid, event.parent_uuid, event.trace_id, event.name, event.scope_type, event.timestamp,
        start_timestamp=event.start_timestamp, metadata=metadata, provider=event.provider,
        model_name=event.model_name, error_type=event.error_type, outcome=event.outcome, cost=event.cost,
    )  # fmt: skip


def _intercept(policy: RedactionPolicy) -> Any:
    def redact_request(
        name: str, request: LLMRequest, annotated: AnnotatedLLMRequest | None
    ) -> LLMRequestInterceptOutcome:
        content, view, counts = policy.redact_request(request.raw_content(), annotated)
        if not counts:
            return LLMRequestInterceptOutcome(request, annotated)
        return LLMRequestInterceptOutcome(LLMRequest(request.raw_headers(), content), view)

    return redact_request
