"""``RedactionPolicy``: one set of rules every sink sees the result of.

The policy is applied to each event once, before any subscriber gets it (see
``relay_runtime.redaction_install``): spans, metrics, journal rows, the run page,
cassettes and the library's own records all read the same redacted event.

Rules act on a provider-neutral view of the event (README, "Redaction targets"):
``/request/messages/*/content``, ``/request/system``, ``/request/tools``,
``/request/params/...``, ``/response/text``, ``/response/reasoning``,
``/response/tool_calls/*/arguments`` on LLM attempts; ``/tool/arguments/...`` and
``/tool/result`` on tools; ``/input`` and ``/output`` on other scopes; ``/metadata/...``
everywhere; ``/data/...`` on marks; ``/error/message``. What an event carries beyond
the view (the SDK's own request kwargs and response objects) is redacted through it:
every value a rule changed in the view is changed wherever it appears there.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sys
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import conventions as cv
from . import pointers
from .events import MARK, SCOPE_END, SCOPE_START, AnnotatedResponseField, DeferredResponse, Event, new_event
from .redaction_carried import Carried, through
from .redaction_pass import REMOVED, Pass, kept
from .redaction_pieces import answer_text, split_whole
from .redaction_reasoning import reasoning_texts
from .redaction_rules import ACTIONS, RedactionConfigError, Rule
from .redaction_streams import Held, hold_of, pieces_ruled, released_mark, streamed_rules
from .types import AnnotatedLLMRequest, ChunkDelta

_REASONING = ("response", "reasoning")
_RESPONSE = ("response",)
# What the rules made of an attempt's answer, for a cassette (``RedactionPolicy._answer_changes``): each string
# they changed -> what it became, and each tool call's arguments held as an object -> what it became.
AnswerChanges = tuple[dict[str, str], list[tuple[Any, Any]]]
RULES_KEY = "relay.redaction.rules"  # metadata: {rule name: how many values it changed in this event}
FAILED_KEY = "relay.redaction.failed"  # metadata: the policy failed on this event; its content was dropped

__all__ = ["ACTIONS", "FAILED_KEY", "RULES_KEY", "RedactionConfigError", "RedactionPolicy", "Rule"]

_CACHE_ATTR = "_relay_redacted"
# What a policy remembers of the strings it has redacted, at most.
_MEMO_ENTRIES = 4096
_MEMO_CHARS = 8 * 1024 * 1024


class RedactionPolicy:
    """Rules applied in order to every event; see the module docstring and README.

    ``hash_key`` (str or bytes) keys the ``hash`` action's HMAC-SHA256: one value maps to one
    token wherever it appears, and cannot be reversed without the key. ``apply_to_request=True``
    also redacts the request before it is sent (a request intercept): the provider never sees
    the value. Configuration errors are raised here (so at ``use()``): an unknown action or
    detector, a bad pattern, ``hash`` without a key; a path that can match no field of the view
    is a warning naming the fields it may have meant.
    """

    def __init__(
        self, rules: Iterable[Rule], *, hash_key: str | bytes | None = None, apply_to_request: bool = False
    ) -> None:
        if isinstance(rules, Rule):
            rules = (rules,)
        self.rules: tuple[Rule, ...] = tuple(rules)
        for i, rule in enumerate(self.rules):
            if not isinstance(rule, Rule):
                raise RedactionConfigError(f"rule {i} is a {type(rule).__name__}, not a redaction Rule")
        if hash_key is not None and not isinstance(hash_key, (str, bytes)):
            raise RedactionConfigError(f"hash_key must be str or bytes, got {type(hash_key).__name__}")
        self._key = hash_key.encode() if isinstance(hash_key, str) else hash_key
        # Pseudonyms of identifiers (``identifier``): keyed by hash_key when given (the same across processes),
        # else by a key of this policy's own (the same for its life).
        self._id_key = hmac.new(self._key or os.urandom(32), b"relay-runtime identifiers", hashlib.sha256).digest()
        if self._key is not None and len(self._key) < 16:
            raise RedactionConfigError("hash_key must be at least 16 bytes: a short key makes the tokens guessable")
        needs_key = [r.name for r in self.rules if r.action == "hash"]
        if needs_key and self._key is None:
            raise RedactionConfigError(f"hash rules {needs_key} need the policy's hash_key (HMAC-SHA256)")
        names = [r.name for r in self.rules]
        doubled = sorted({n for n in names if names.count(n) > 1})
        if doubled:
            raise RedactionConfigError(
                f"rule names must differ (they are what relay.redaction.rules reports): {doubled}"
            )
        self.apply_to_request = bool(apply_to_request)
        for rule in self.rules:
            for path in rule.paths:
                meant = pointers.unknown_field(path)
                if meant is not None:
                    known = ", ".join(pointers.VIEW_FIELDS)
                    hint = f"; did you mean {' or '.join(meant)}?" if meant else f"; the fields are {known}"
                    warnings.warn(f"redaction rule {rule.name!r}: path {path!r} can match no field of the view{hint}",
                                  RedactionPathWarning, stacklevel=2)  # fmt: skip
        self._pathless = tuple(r for r in self.rules if not r.parsed_paths)
        self._all_pathless = len(self._pathless) == len(self.rules)
        self._removals = tuple(r for r in self.rules if r.action == "remove" and r.whole and r.parsed_paths)
        # The shortest value any detector rule can find: shorter strings (roles, small ids) are not scanned.
        self._shortest = min((r.finder.shortest for r in self.rules if r.finder is not None), default=0)
        # Shorter strings are not read at all: every rule is a detector that needs more.
        self._detectors_only = all(r.finder is not None for r in self.rules)
        # The detectors of the rules, in order, when every rule is one (they read each text together).
        self._finders = tuple(r.finder for r in self.rules if r.finder is not None) if self._detectors_only else ()
        self._floor = self._shortest if self._detectors_only else 0
        # Mapping keys are read by the rules that find values (never a whole-string rule: every key would
        # become one); shorter keys than any of those rules can find are not read.
        self._key_rules = tuple(r for r in self.rules if not r.whole)
        detectors = [r.finder for r in self._key_rules if r.finder is not None]
        self._key_floor = (
            sys.maxsize if not self._key_rules
            else min(d.shortest for d in detectors) if len(detectors) == len(self._key_rules)
            else 1
        )  # fmt: skip
        # Keys every such rule has read and left as they were ("role", "content"): not read again.
        self._clean_keys: set[str] = set()
        # Strings the walk of the SDK's objects met again with nothing found in them (the SDK's vocabulary: roles,
        # finish reasons, object kinds, model names), never a data URL: asked of a set, not of ``_memo``, whose
        # entries it would otherwise look up and copy into each pass (``redaction_raw``). Added whole: no lock.
        self._clean_texts: set[str] = set()
        # The rules that find values inside response text: while there are any, streams are held back.
        self._streamed = streamed_rules(self.rules)
        # Whether a rule acts on the pieces of tool calls an SDK chunk holds: then chunks keep only their kind.
        self._pieces = pieces_ruled(self.rules)
        # Whether a rule names the answer's reasoning, which the view does not carry: then the answer object's
        # reasoning is found by name and read at that path (``redaction_reasoning``).
        self._reasoning = any(pointers.may_reach(pattern, _REASONING) for r in self.rules for pattern in r.parsed_paths)
        # Whether a whole-field rule can change the answer (a path under /response, or every field): a cassette's
        # stored HTTP bodies hold the answer as the provider wrote it, so one recording a call under this policy
        # waits for what the rules made of the answer, read at its attempt's end (attempt uuid -> who waits).
        self.rewrites_answers = any(
            r.whole and (not r.parsed_paths or any(pointers.may_reach(p, _RESPONSE) for p in r.parsed_paths))
            for r in self.rules
        )
        self.answer_waiters: dict[str, Callable[[AnswerChanges | None], None]] = {}
        # What the rules made of long strings seen before (text -> result, counts, replaced spans), bounded.
        self._memo: OrderedDict[str, tuple[str, dict[str, int], dict[str, str]]] = OrderedDict()
        self._memo_chars = 0
        self._memo_lock = threading.Lock()
        # Event names the rules left as they were (set members are added whole: no lock needed).
        self._clean_names: set[str] = set()
        self._clean_models: set[str] = set()  # request models the rules left as they were
        # What each open scope's start had replaced, for its end's error message (``redaction_carried``).
        self._carried = Carried()
        self.fingerprint = self._fingerprint()

    def _remember(self, text: str, memo: tuple[str, dict[str, int], dict[str, str]]) -> None:
        if len(text) > _MEMO_CHARS // 16:
            return  # one huge document would push out everything else
        with self._memo_lock:
            if text in self._memo:
                return
            self._memo[text] = memo
            self._memo_chars += len(text)
            while self._memo_chars > _MEMO_CHARS or len(self._memo) > _MEMO_ENTRIES:
                oldest, _ = self._memo.popitem(last=False)  # O(1), unlike deleting a dict's first key
                self._memo_chars -= len(oldest)

    def _fingerprint(self) -> str:
        """A stable id of what this policy does (cassettes store it): the rules, and which key, never the key."""
        described: dict[str, Any] = {
            "rules": [r.describe() for r in self.rules],
            "apply_to_request": self.apply_to_request,
        }
        if self._key is not None:
            described["key"] = hmac.new(self._key, b"relay-runtime redaction key id", hashlib.sha256).hexdigest()[:16]
        text = json.dumps(described, sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:32]

    def __repr__(self) -> str:
        return f"RedactionPolicy({[r.name for r in self.rules]}, fingerprint={self.fingerprint!r})"

    def identifier(self, value: str) -> str:
        """What sinks record for an identifier (a session, turn, task, request or tool-call id) that a rule
        changes: ``redacted-`` and 24 hex digits of an HMAC-SHA256 of the original, so one id keeps one
        pseudonym in every event and two ids never share one, and the result is a valid run id. Keyed by
        ``hash_key`` when the policy has one (the same pseudonym in every process), else by a key this
        policy made (the same while it lives). A caller that knows the original id (a web UI looking up
        its session's runs in the journal) computes the recorded one with this."""
        if not isinstance(value, str):
            raise TypeError(f"identifier() takes the id as a str, got {type(value).__name__}")
        digest = hmac.new(self._id_key, value.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
        return "redacted-" + digest[:24]

    def recorded(self, key: str, value: Any) -> Any:
        """What events record for metadata ``key`` holding ``value`` (an identifier's pseudonym when a rule
        changes it; None when a rule removes it): for the library's own log lines that name an id."""
        return Pass(self).metadata({key: value}).get(key)

    # -- strings and structures ----------------------------------------------------------------

    def redact_text(self, text: str, path: str = "") -> str:
        """``text`` as the policy would record it at ``path`` (a pointer; every pathless rule when empty)."""
        result = Pass(self).walk(text, pointers.parse(path))
        return "" if result is REMOVED else result

    def redact_value(self, value: Any, path: str = "") -> Any:
        """``value`` (dicts, lists, strings, JSON text) as the policy would record it at ``path``."""
        result = Pass(self).walk(value, pointers.parse(path))
        return None if result is REMOVED else result

    def redact_at(self, value: Any, path: pointers.Path) -> Any:
        """``value`` as recorded at the parsed ``path`` (None when a rule removes it)."""
        return kept(Pass(self).walk(value, path))

    def redact_spans(self, value: Any) -> Any:
        """``value`` with what the detector and pattern rules find replaced in every string, whatever the
        rule's paths: for stored answers, whose layout is the provider's, not the view's."""
        rules = tuple(r for r in self.rules if not r.whole)
        if not rules:
            return value
        return kept(Pass(self, rules, anywhere=True).walk(value, ()))

    # -- events --------------------------------------------------------------------------------

    def redact_event(self, event: Event, holds: dict[str, Held] | None = None) -> Event:
        """``event`` itself when no rule changes anything in it, else a redacted copy with ``RULES_KEY``.

        ``holds``: the text each stream's chunk marks have not carried yet, by attempt (see
        ``redaction_streams``); without it each chunk is redacted on its own.
        """
        p = Pass(self)
        inp, out, data = event.input, event.output, event.data
        req = None
        resp: AnnotatedResponseField = None
        if event.kind == MARK:
            if event.name != cv.CHUNK:
                data = p.walk(data, ("data",))
                fallback = event.annotated_response  # a fallback's answer (``cv.FALLBACK_ANSWER``)
                if fallback is not None:
                    resp = p.response_view(fallback)
            else:
                held = None
                if holds is not None and self._streamed and event.parent_uuid:
                    held = hold_of(holds, event.parent_uuid)
                data = p.chunk(data, held)
                if data is not event.data and not p.counts:  # text held back or the SDK chunk reduced, nothing redacted
                    return _with_data(event, data)
        else:
            req = event.annotated_request
            if req is not None:
                req = self._request_view(p, req)
            answer = resp = event._annotated_response
            if type(resp) is DeferredResponse and (said := resp.content()) is not None:
                resp = p.deferred_response_view(resp, said)
            else:
                answer = resp = event.annotated_response
                if resp is not None:
                    resp = p.response_view(resp)
            scope_type = event.scope_type
            if scope_type == "llm":
                if self.answer_waiters and event.kind == SCOPE_END:  # empty unless a cassette records under it
                    waiter = self.answer_waiters.pop(event.uuid, None)
                    if waiter is not None:
                        waiter(self._answer_changes(event))
                # The SDK's own kwargs and response object, through what the views changed; the kwargs
                # (plain data, cheap to walk) are also read by the pathless rules, in case the view
                # missed something, and so is the response when there is no view of it.
                if req is None and isinstance(inp, Mapping) and isinstance(inp.get("content"), Mapping):
                    # No codec, so no view: the kwargs are read as the request itself (their
                    # ``messages`` and ``system`` sit where the view's would), paths and all.
                    content = kept(p.walk(inp["content"], ("request",))) or {}
                    inp = {**inp, "content": content, "headers": p.raw(inp.get("headers"), scan=True)}
                else:
                    inp = p.raw(p.sent_beside(inp), scan=True)
                if self._reasoning and out is not None:
                    for thought in reasoning_texts(out):  # what the rules make of it is changed in ``out`` below
                        p.walk(thought, _REASONING)
                # Every string of the answer object is read: fields beyond the view (a refusal, citations,
                # grounding queries, the SDK's response headers) are the provider's words too.
                if p.wholes is not None:  # a whole-field rule fired: the answer object may hold its text in blocks
                    split_whole(p, out, answer_text(answer))
                out = p.raw(out, scan=True)
                if out is not event.output and resp is answer and type(resp) is DeferredResponse:
                    # The object held what its text and tool calls did not (an id from an echoed header):
                    # the annotation is built and read whole, as it would be without the shortcut.
                    built = resp.get()
                    resp = p.response_view(built) if built is not None else None
            elif scope_type == "tool":
                inp = p.walk(inp, ("tool", "arguments"))
                out = p.walk(out, ("tool", "result"))
            else:
                inp = p.walk(inp, ("input",))
                out = p.walk(out, ("output",))
        name = p.name(event.name)
        model = p.model(event.model_name)
        metadata = event.metadata
        if metadata:
            metadata = p.metadata(metadata)
        error = event.error_message
        if error is not None:
            error = p.walk(error, ("error", "message"))
        if event.kind == SCOPE_START:
            if p.pairs and event.scope_type != "llm":  # an attempt's end carries its request view itself
                self._carried.keep(event.uuid, p.pairs, p.counts)
        elif event.kind == SCOPE_END:
            carried = self._carried.take(event.uuid)
            if type(error) is str and error and (p.pairs or carried is not None):
                pairs, fired = (p.pairs, ()) if carried is None else ({**carried[0], **p.pairs}, carried[1])
                error = through(error, pairs, (*fired, *p.counts), self.rules, p.counts)
        if not p.counts:
            return event
        metadata = dict(metadata) if metadata else {}
        metadata[RULES_KEY] = dict(p.counts)
        return new_event(
            event.kind, event.uuid, event.parent_uuid, event.trace_id, name, event.scope_type,
            event.timestamp, start_timestamp=event.start_timestamp, input=kept(inp), output=kept(out),
            metadata=metadata, data=kept(data), provider=event.provider, model_name=model,
            annotated_request=req, annotated_response=resp, error_type=event.error_type,
            error_message=kept(error), outcome=event.outcome, cost=event.cost,
        )  # fmt: skip

    def _answer_changes(self, end: Event) -> AnswerChanges | None:
        """Each string of the answer an attempt's ``end`` carries that the rules change, and what it becomes (a
        removed field: ""), read as the end's view is: its text, tool calls, id and model, and its reasoning; and
        each tool call's arguments held as an object (not JSON text), as the rules make it.

        For a cassette recording the attempt (``cassettes.answers``): its stored bodies hold the answer as the
        provider wrote it. A fresh pass, not the event's: that one also holds the request's strings, and keeps a
        replaced whole string only from 8 characters on (``MIN_WHOLE``), where a cassette needs every one. None when
        the pass fails: the cassette then refuses to write the answer rather than write it unredacted.
        """
        try:
            p = Pass(self)
            objects: list[tuple[Any, Any]] = []
            view = end.annotated_response
            if view is not None:
                redacted = p.response_view(view)
                calls, new_calls = view.tool_calls or [], redacted.tool_calls or []
                if len(calls) == len(new_calls):  # (a rule that drops whole calls leaves their strings to ``leaves``)
                    for was, now in zip(calls, new_calls, strict=True):
                        args = was.get("arguments") if isinstance(was, dict) else None
                        if isinstance(args, dict | list) and args:
                            after = now.get("arguments") if isinstance(now, dict) else None
                            after = type(args)() if after is None else after
                            if after != args:
                                objects.append((args, after))
            if self._reasoning and end.output is not None:
                for thought in reasoning_texts(end.output):
                    p.walk(thought, _REASONING)
            return {old: new for old, new in p.leaves.items() if new != old}, objects
        except Exception:
            return None

    def released(self, end: Event, held: Held) -> Event | None:
        """The chunk mark that carries what ``held`` still holds of the stream ``end`` ends, redacted: delivered
        just before ``end``, so the chunk marks carry the whole text. None when nothing is held."""
        if not held.text and not held.reasoning:
            return None
        p = Pass(self)
        delta = ChunkDelta(text=p.flush(held.text, "text"), reasoning=p.flush(held.reasoning, "reasoning"))
        held.text = held.reasoning = ""
        metadata = {RULES_KEY: dict(p.counts)} if p.counts else None
        return released_mark(end.uuid, end, held, delta, metadata)

    def _request_view(self, p: Pass, req: AnnotatedLLMRequest) -> AnnotatedLLMRequest:
        """The redacted request view, computed once per request and policy (a start and its end share it)."""
        cached = getattr(req, _CACHE_ATTR, None)
        if cached is not None and cached[0] is self:
            _, view, mine = cached
            p.adopt(mine)
            return view
        mine = Pass(self)
        view = mine.request_view(req)
        try:
            object.__setattr__(req, _CACHE_ATTR, (self, view, mine))
        except (AttributeError, TypeError):
            pass
        p.adopt(mine, now=True)
        return view

    def redact_request(
        self, content: Mapping[str, Any], annotated: AnnotatedLLMRequest | None
    ) -> tuple[dict[str, Any], AnnotatedLLMRequest | None, dict[str, int]]:
        """The SDK kwargs and view of a request, redacted before it is sent (``apply_to_request``)."""
        p = Pass(self)
        view = p.request_view(annotated) if annotated is not None else None
        if annotated is None:
            walked = p.walk(dict(content), ("request",))
            return dict(walked), None, dict(p.counts)
        return dict(p.raw(dict(content), scan=True)), view, dict(p.counts)


def _with_data(event: Event, data: Any) -> Event:
    return new_event(
        event.kind, event.uuid, event.parent_uuid, event.trace_id, event.name, event.scope_type, event.timestamp,
        start_timestamp=event.start_timestamp, metadata=event.metadata, data=data,
    )  # fmt: skip


class RedactionPathWarning(UserWarning):
    """A redaction path that can match no field of the provider-neutral view."""
