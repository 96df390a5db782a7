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

import dataclasses
import hashlib
import hmac
import json
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from . import conventions as cv
from . import pointers
from .events import MARK, Event, new_event
from .redaction_rules import ACTIONS, RedactionConfigError, Rule
from .types import AnnotatedLLMRequest, AnnotatedLLMResponse, ChunkDelta

RULES_KEY = "relay.redaction.rules"  # metadata: {rule name: how many values it changed in this event}
FAILED_KEY = "relay.redaction.failed"  # metadata: the policy failed on this event; its content was dropped

__all__ = ["ACTIONS", "FAILED_KEY", "RULES_KEY", "RedactionConfigError", "RedactionPolicy", "Rule"]

_REMOVED: Any = object()
_MAX_DEPTH = 64
# A whole string a rule changed is looked for inside the SDK's own objects only from this length on:
# shorter ones ("user", "gpt-4o") are everywhere and would be replaced where they mean something else.
_MIN_WHOLE = 8
_CACHE_ATTR = "_relay_redacted"
# What a policy remembers of the strings it has redacted, at most.
_MEMO_ENTRIES = 4096
_MEMO_CHARS = 8 * 1024 * 1024


def _pairs_in(pairs: Mapping[str, str], text: str) -> dict[str, str]:
    return {old: new for old, new in pairs.items() if old in text}


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
        # What the rules made of long strings seen before (text -> result, counts, replaced spans), bounded.
        self._memo: OrderedDict[str, tuple[str, dict[str, int], dict[str, str]]] = OrderedDict()
        self._memo_chars = 0
        self._memo_lock = threading.Lock()
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

    # -- strings and structures ----------------------------------------------------------------

    def redact_text(self, text: str, path: str = "") -> str:
        """``text`` as the policy would record it at ``path`` (a pointer; every pathless rule when empty)."""
        result = Pass(self).walk(text, pointers.parse(path))
        return "" if result is _REMOVED else result

    def redact_value(self, value: Any, path: str = "") -> Any:
        """``value`` (dicts, lists, strings, JSON text) as the policy would record it at ``path``."""
        result = Pass(self).walk(value, pointers.parse(path))
        return None if result is _REMOVED else result

    def redact_at(self, value: Any, path: pointers.Path) -> Any:
        """``value`` as recorded at the parsed ``path`` (None when a rule removes it)."""
        return _kept(Pass(self).walk(value, path))

    def redact_spans(self, value: Any) -> Any:
        """``value`` with what the detector and pattern rules find replaced in every string, whatever the
        rule's paths: for stored answers, whose layout is the provider's, not the view's."""
        rules = tuple(r for r in self.rules if not r.whole)
        if not rules:
            return value
        return _kept(Pass(self, rules, anywhere=True).walk(value, ()))

    # -- events --------------------------------------------------------------------------------

    def redact_event(self, event: Event) -> Event:
        """``event`` itself when no rule changes anything in it, else a redacted copy with ``RULES_KEY``."""
        p = Pass(self)
        inp, out, data = event.input, event.output, event.data
        req = resp = None
        if event.kind == MARK:
            data = p.chunk(data) if event.name == cv.CHUNK else p.walk(data, ("data",))
        else:
            req = event.annotated_request
            if req is not None:
                req = self._request_view(p, req)
            answer = resp = event.annotated_response
            if resp is not None:
                resp = p.response_view(resp)
            scope_type = event.scope_type
            if scope_type == "llm":
                # The SDK's own kwargs and response object, through what the views changed; the kwargs
                # (plain data, cheap to walk) are also read by the pathless rules, in case the view
                # missed something, and so is the response when there is no view of it.
                inp = p.raw(inp, scan=True)
                if resp is None or resp is not answer:  # an answer the view found nothing in is kept whole
                    out = p.raw(out, scan=resp is None)
            elif scope_type == "tool":
                inp = p.walk(inp, ("tool", "arguments"))
                out = p.walk(out, ("tool", "result"))
            else:
                inp = p.walk(inp, ("input",))
                out = p.walk(out, ("output",))
        metadata = event.metadata
        if metadata:
            metadata = p.walk(metadata, ("metadata",))
        error = event.error_message
        if error is not None:
            error = p.walk(error, ("error", "message"))
        if not p.counts:
            return event
        metadata = dict(metadata) if metadata else {}
        metadata[RULES_KEY] = dict(p.counts)
        return new_event(
            event.kind, event.uuid, event.parent_uuid, event.trace_id, event.name, event.scope_type,
            event.timestamp, start_timestamp=event.start_timestamp, input=_kept(inp), output=_kept(out),
            metadata=metadata, data=_kept(data), provider=event.provider, model_name=event.model_name,
            annotated_request=req, annotated_response=resp, error_type=event.error_type,
            error_message=_kept(error), outcome=event.outcome, cost=event.cost,
        )  # fmt: skip

    def _request_view(self, p: Pass, req: AnnotatedLLMRequest) -> AnnotatedLLMRequest:
        """The redacted request view, computed once per request and policy (a start and its end share it)."""
        cached = getattr(req, _CACHE_ATTR, None)
        if cached is not None and cached[0] is self:
            _, view, counts, leaves, pairs = cached
            p.adopt(counts, leaves, pairs)
            return view
        mine = Pass(self)
        view = mine.request_view(req)
        try:
            object.__setattr__(req, _CACHE_ATTR, (self, view, mine.counts, mine.leaves, mine.pairs))
        except (AttributeError, TypeError):
            pass
        p.adopt(mine.counts, mine.leaves, mine.pairs)
        return view

    def redact_request(self, content: Mapping[str, Any], annotated: AnnotatedLLMRequest | None) -> tuple[
        dict[str, Any], AnnotatedLLMRequest | None, dict[str, int]
    ]:
        """The SDK kwargs and view of a request, redacted before it is sent (``apply_to_request``)."""
        p = Pass(self)
        view = p.request_view(annotated) if annotated is not None else None
        if annotated is None:
            walked = p.walk(dict(content), ("request",))
            return dict(walked), None, dict(p.counts)
        return dict(p.raw(dict(content), scan=True)), view, dict(p.counts)


class RedactionPathWarning(UserWarning):
    """A redaction path that can match no field of the provider-neutral view."""


def _kept(value: Any) -> Any:
    return None if value is _REMOVED else value


class Pass:
    """One application of a policy: the counts per rule, and what changed (to redact raw objects through it)."""

    __slots__ = ("anywhere", "counts", "found", "key", "leaves", "pairs", "policy", "rules")

    def __init__(self, policy: RedactionPolicy, rules: tuple[Rule, ...] | None = None, anywhere: bool = False) -> None:
        self.policy = policy
        self.rules = policy.rules if rules is None else rules
        self.anywhere = anywhere  # every rule on every string, paths aside
        self.key = policy._key
        self.counts: dict[str, int] = {}
        # Whole strings seen in the view -> what they became (unchanged ones too: not scanned twice).
        self.leaves: dict[str, str] = {}
        # Spans a rule replaced -> their replacement, to find inside other strings.
        self.pairs: dict[str, str] = {}
        # Strings the rules changed -> how often each rule fired in them (counted again when met again).
        self.found: dict[str, dict[str, int]] = {}

    def adopt(self, counts: Mapping[str, int], leaves: Mapping[str, str], pairs: Mapping[str, str]) -> None:
        for name, n in counts.items():
            self.counts[name] = self.counts.get(name, 0) + n
        if leaves:
            self.leaves.update(leaves)
        if pairs:
            self.pairs.update(pairs)

    # -- the view ------------------------------------------------------------------------------

    def walk(self, value: Any, path: pointers.Path, depth: int = 0) -> Any:
        kind = type(value)
        if kind is str:
            return self.text(value, path, depth)
        if value is None or kind in (int, float, bool):
            return value
        if depth > _MAX_DEPTH:
            return value
        whole_remove = self._removes(path) if self.policy._removals else None
        if whole_remove is not None:
            self._count(whole_remove, 1)
            self._forget(value)
            return _REMOVED
        if kind is dict or isinstance(value, Mapping):
            out: dict[Any, Any] | None = None
            for k, v in value.items():
                key = k if type(k) is str else str(k)
                if path == ("metadata",) and key.startswith("relay.") and not self._named((*path, key)):
                    continue  # the relay's own keys (kinds, ids, counts) are not content
                new = self.walk(v, (*path, key), depth + 1)
                if new is not v:
                    if out is None:
                        out = dict(value)
                    if new is _REMOVED:
                        del out[k]
                    else:
                        out[k] = new
            return value if out is None else out
        if kind is list or kind is tuple:
            items: list[Any] | None = None
            removed = False
            for i, v in enumerate(value):
                new = self.walk(v, (*path, str(i)), depth + 1)
                if new is not v:
                    if items is None:
                        items = list(value)
                    items[i] = new
                    removed = removed or new is _REMOVED
            if items is None:
                return value
            if removed:
                items = [v for v in items if v is not _REMOVED]
            return items if kind is list else tuple(items)
        dump = getattr(value, "model_dump", None)  # an SDK object in the view: its fields, as data
        if callable(dump):
            try:
                dumped = dump()
            except Exception:
                return value
            new = self.walk(dumped, path, depth + 1)
            return value if new is dumped else new
        return value

    def _removes(self, path: pointers.Path) -> Rule | None:
        """A whole-field ``remove`` rule naming exactly this path (or a pattern of it)."""
        for rule in self.policy._removals:
            if rule in self.rules:
                for pattern in rule.parsed_paths:
                    if len(pattern) == len(path) and pointers.covers(pattern, path):
                        return rule
        return None

    def _named(self, path: pointers.Path) -> bool:
        return any(rule.parsed_paths and rule.applies(path) for rule in self.rules)

    def _forget(self, value: Any) -> None:
        """A removed field's strings become empty wherever else they appear (the SDK's own objects)."""
        if type(value) is str:
            self.leaves[value] = ""
            if len(value) >= _MIN_WHOLE:
                self.pairs[value] = ""
        elif isinstance(value, Mapping):
            for v in value.values():
                self._forget(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                self._forget(v)

    def _count(self, rule: Rule, n: int) -> None:
        self.counts[rule.name] = self.counts.get(rule.name, 0) + n

    def text(self, text: str, path: pointers.Path, depth: int) -> Any:
        if path and path[0] == "metadata" and len(path) == 2 and path[1].startswith("relay.") and not self._named(path):
            return text
        if not text:
            return text
        rule = self._removes(path) if self.policy._removals else None
        if rule is not None:
            self._count(rule, 1)
            self._forget(text)
            return _REMOVED
        first = text[0]
        if (first == "{" or first == "[") and depth < _MAX_DEPTH:
            # Tool-call arguments and similar JSON text: the strings inside are reached too.
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            if isinstance(parsed, (dict, list)):
                new = self.walk(parsed, path, depth + 1)
                if new is parsed:
                    return text
                dumped = json.dumps(_kept(new), ensure_ascii=False)
                self.leaves[text] = dumped
                return dumped
        policy = self.policy
        pathless = policy._all_pathless or self.anywhere
        if pathless:
            known = self.leaves.get(text)
            if known is not None:  # the same string met again (a system prompt is also the first message)
                self._recount(text)
                return known
            if not self.anywhere:
                return self._memoized(self.rules, text)
            rules: Any = self.rules
        else:
            rules = [r for r in self.rules if not r.parsed_paths or r.applies(path)]
        result = self._run(rules, text)
        self.leaves[text] = result
        return result

    def _memoized(self, rules: Any, text: str) -> str:
        """What every pathless rule makes of ``text``, remembered across calls (per policy): an agent sends
        the whole history each turn, and the same roles, model names and system prompt in every call."""
        memo = self.policy._memo.get(text)
        if memo is not None:
            return self._remembered(text, memo)
        before = dict(self.counts)
        result = self._run(rules, text)
        self.leaves[text] = result
        fired = {k: v - before.get(k, 0) for k, v in self.counts.items() if v != before.get(k, 0)}
        if result is not text:
            self.found[text] = fired
        self.policy._remember(text, (result, fired, _pairs_in(self.pairs, text) if fired else {}))
        return result

    def _remembered(self, text: str, memo: tuple[str, dict[str, int], dict[str, str]]) -> str:
        result, fired, pairs = memo
        self.leaves[text] = result
        if fired:
            self.found[text] = fired
            for name, k in fired.items():
                self.counts[name] = self.counts.get(name, 0) + k
            self.pairs.update(pairs)
        return result

    def _run(self, rules: Any, text: str) -> str:
        result = text
        i, n = 0, len(rules)
        while i < n:
            rule = rules[i]
            if rule.finder is None:
                result = self._apply(rule, result)
                i += 1
                continue
            # Detector rules in a row read the same text: each finds its spans there, and where two
            # overlap the earlier rule wins. One text, so the detectors share what they computed on it.
            j = i + 1
            while j < n and rules[j].finder is not None:
                j += 1
            result = self._apply_detectors(rules[i:j], result)
            i = j
        return result

    def _recount(self, text: str) -> None:
        for name, k in self.found.get(text, {}).items():
            self.counts[name] = self.counts.get(name, 0) + k

    def _apply_detectors(self, rules: Any, text: str) -> str:
        if len(text) < self.policy._shortest:
            return text
        hits: list[tuple[int, int, int]] = []
        for index, rule in enumerate(rules):
            for start, end in rule.finder.find(text):
                if end > start:
                    hits.append((start, index, end))
        if not hits:
            return text
        hits.sort()
        pieces: list[str] = []
        last = 0
        key = self.key
        for start, index, end in hits:
            if start < last:
                continue
            rule = rules[index]
            value = text[start:end]
            new = rule.replace(value, None, key)
            pieces.append(text[last:start])
            pieces.append(new)
            last = end
            self.pairs[value] = new
            self._count(rule, 1)
        pieces.append(text[last:])
        return "".join(pieces)

    def _apply(self, rule: Rule, text: str) -> str:
        found = rule.spans(text)
        if not found:
            return text
        pieces: list[str] = []
        last = 0
        key = self.key
        for item in found:
            if isinstance(item, tuple):
                start, end = item
                match = None
            else:
                start, end = item.span()
                match = item
            if start < last or end == start:
                continue
            value = text[start:end]
            new = rule.replace(value, match, key)
            pieces.append(text[last:start])
            pieces.append(new)
            last = end
            if not rule.whole or len(value) >= _MIN_WHOLE:
                self.pairs[value] = new
            self._count(rule, 1)
        if not pieces:
            return text
        pieces.append(text[last:])
        return "".join(pieces)

    def request_view(self, req: AnnotatedLLMRequest) -> AnnotatedLLMRequest:
        messages = self.walk(req.messages, ("request", "messages"))
        system = self.walk(req.system, ("request", "system"))
        tools = self.walk(req.tools, ("request", "tools"))
        params = self.walk(req.params, ("request", "params")) if req.params else req.params
        extra = self.walk(req.provider_params, ("request", "params")) if req.provider_params else req.provider_params
        if messages is req.messages and system is req.system and tools is req.tools and params is req.params and (
            extra is req.provider_params
        ):
            return req
        return dataclasses.replace(
            req,
            messages=[] if messages is _REMOVED else list(messages),
            system=_kept(system),
            tools=None if tools is _REMOVED or tools is None else list(tools),
            params={} if params is _REMOVED else dict(params),
            provider_params={} if extra is _REMOVED else dict(extra),
        )

    def response_view(self, resp: AnnotatedLLMResponse) -> AnnotatedLLMResponse:
        text = self.walk(resp.output_text, ("response", "text")) if resp.output_text else resp.output_text
        calls = self.walk(resp.tool_calls, ("response", "tool_calls")) if resp.tool_calls else resp.tool_calls
        if text is resp.output_text and calls is resp.tool_calls:
            return resp
        return dataclasses.replace(resp, output_text=_kept(text), tool_calls=[] if calls is _REMOVED else list(calls))

    def chunk(self, data: Any) -> Any:
        """A stream chunk mark: its delta as the response's text and reasoning, the SDK chunk through it.

        Each chunk is redacted on its own: a value the provider split across two chunks is not seen
        whole here (the attempt's end event, built from the whole response, is redacted whole).
        """
        if not isinstance(data, Mapping):
            return self.walk(data, ("data",))
        delta = data.get("delta")
        if not isinstance(delta, ChunkDelta):
            return self.walk(data, ("data",))
        text = self.walk(delta.text, ("response", "text")) if delta.text else delta.text
        reasoning = self.walk(delta.reasoning, ("response", "reasoning")) if delta.reasoning else delta.reasoning
        if text is delta.text and reasoning is delta.reasoning:
            return data
        new = dict(data)
        new["delta"] = ChunkDelta(text=_kept(text) or "", reasoning=_kept(reasoning) or "", model=delta.model)
        new["chunk"] = self.raw(data.get("chunk"))
        return new

    # -- the SDK's own objects, through the view ---------------------------------------------------

    def raw(self, value: Any, *, scan: bool = False) -> Any:
        """``value`` with every string the view's rules changed replaced wherever it appears; with
        ``scan``, the pathless rules also read the strings the view did not hold."""
        if value is None:
            return value
        if not scan and not self.pairs and not any(k != v for k, v in self.leaves.items()):
            return value
        return self._raw(value, 0, scan)

    def _scan(self, text: str) -> str:
        if self.policy._all_pathless:
            return self._memoized(self.rules, text)
        result = self._run(self.policy._pathless, text)
        self.leaves[text] = result
        return result

    def _raw(self, value: Any, depth: int, scan: bool) -> Any:
        kind = type(value)
        if kind is str:
            known = self.leaves.get(value)
            if known is not None:
                return known
            result = self._scan(value) if scan and value else value
            for old, new in self.pairs.items():
                if old in result:
                    result = result.replace(old, new)
                elif "\\" in result:  # JSON text held as a string: the value may be escaped in it
                    escaped = json.dumps(old, ensure_ascii=False)[1:-1]
                    if escaped != old and escaped in result:
                        result = result.replace(escaped, json.dumps(new, ensure_ascii=False)[1:-1])
            return result
        if value is None or kind in (int, float, bool) or depth > _MAX_DEPTH:
            return value
        if kind is dict or kind is MappingProxyType or isinstance(value, Mapping):
            out: dict[Any, Any] | None = None
            for k, v in value.items():
                new = self._raw(v, depth + 1, scan)
                if new is not v:
                    if out is None:
                        out = dict(value)
                    out[k] = new
            return value if out is None else out
        if kind is list or kind is tuple:
            items: list[Any] | None = None
            for i, v in enumerate(value):
                new = self._raw(v, depth + 1, scan)
                if new is not v:
                    if items is None:
                        items = list(value)
                    items[i] = new
            if items is None:
                return value
            return items if kind is list else tuple(items)
        if isinstance(value, (bytes, bytearray)):
            try:
                text = bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                return value
            new_text = self._raw(text, depth, scan)
            return value if new_text is text else new_text.encode("utf-8")
        dump = getattr(value, "model_dump", None)  # an SDK response or chunk: rebuilt as its own type
        if callable(dump):
            try:
                dumped = dump()
            except Exception:
                return value
            new = self._raw(dumped, depth + 1, scan)
            if new is dumped:
                return value
            try:
                return type(value).model_validate(new)
            except Exception:
                return new
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes = {}
            for f in dataclasses.fields(value):
                v = getattr(value, f.name)
                new = self._raw(v, depth + 1, scan)
                if new is not v:
                    changes[f.name] = new
            return dataclasses.replace(value, **changes) if changes else value
        return value

