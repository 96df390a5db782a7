"""What a policy's rules make of one string, within one application of the policy (a ``Pass``).

``Application`` holds a pass's state (the counts per rule, the strings it has met and what they
became, the values it replaced) and runs the rules over a string: detector rules in a row read the
same text together, and what the pathless rules make of a string is remembered by the policy across
calls (an agent resends its whole history every turn).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .detectors import find_all, unclaimed
from .redaction_objects import key_text
from .redaction_rules import Rule

if TYPE_CHECKING:
    from .redaction_policy import RedactionPolicy

# A whole string a rule changed is looked for inside the SDK's own objects only from this length on:
# shorter ones ("user", "gpt-4o") are everywhere and would be replaced where they mean something else.
MIN_WHOLE = 8
_CLEAN_KEYS = 4096  # keys a policy remembers as holding nothing it redacts (most are the SDK's field names)


def _pairs_in(pairs: Mapping[str, str], text: str) -> dict[str, str]:
    return {old: new for old, new in pairs.items() if old in text}


def fired_in_text(rules: Any) -> bool:
    """Whether every rule is a detector rule: then they read ``text`` together, and each value they
    replace is a slice of it (a pattern or whole-string rule may act on what an earlier rule made)."""
    for rule in rules:  # noqa: SIM110 (a plain loop: cheaper than any() over a generator)
        if rule.finder is None:
            return False
    return True


class Application:
    """A pass's state, and the rules run over one string (see the module docstring)."""

    __slots__ = (
        "anywhere", "counts", "done", "floor", "found", "key", "leaves", "pairs", "policy", "rules", "simple", "wholes",
    )  # fmt: skip

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
        # The usual policy (every rule reads every string): paths need not be followed, and strings
        # shorter than ``floor`` (roles, model names, ids) hold nothing any rule can find.
        self.simple = rules is None and not anywhere and policy._all_pathless
        self.floor = policy._floor if self.simple else 0
        # Flat dicts the simple walk read (by id, with the dict itself, kept alive) -> what they became.
        self.done: dict[int, tuple[Any, Any]] = {}
        # Whole strings a whole-field rule replaced or removed -> what it made of them; None until one did
        # (``redaction_pieces``: an SDK object may hold such a string only in pieces).
        self.wholes: dict[str, str] | None = None

    def key_of(self, key: Any, path: tuple[str, ...]) -> Any:
        """A mapping's key at ``path``, as the rules that find values make it: keys are text every sink
        writes too (an e-mail keying a dict of users). A whole-string rule does not read keys."""
        policy = self.policy
        if type(key) is not str:
            # A big int key (a card number keying a dict of accounts), a tuple key (an address in a pair): read as
            # the text a sink writes for it.
            text = key_text(key)
            if text is None:
                return key
            new_text = self.key_of(text, path)
            return key if new_text == text else new_text
        if len(key) < policy._key_floor or key in policy._clean_keys:
            return key
        if self.simple and policy._detectors_only:  # the usual policy: what it makes of a string is remembered
            result = self._memoized(self.rules, key)
            every = True
        else:
            child = (*path, key)
            rules = [r for r in self.rules if not r.whole and (self.anywhere or not r.parsed_paths or r.applies(child))]
            result = self._run(rules, key) if rules else key
            every = len(rules) == len(policy._key_rules)
        if result == key:
            if every and len(policy._clean_keys) < _CLEAN_KEYS:
                policy._clean_keys.add(key)
            return key
        return result

    def whole(self, value: str, new: str) -> None:
        """Note that a whole-field rule made ``new`` of ``value`` (see ``wholes``)."""
        if self.wholes is None:
            self.wholes = {}
        self.wholes[value] = new

    def _count(self, rule: Rule, n: int) -> None:
        self.counts[rule.name] = self.counts.get(rule.name, 0) + n

    def _memoized(self, rules: Any, text: str) -> str:
        """What every pathless rule makes of ``text``, remembered across calls (per policy): an agent sends
        the whole history each turn, and the same roles, model names and system prompt in every call."""
        memo = self.policy._memo.get(text)
        if memo is not None:
            result, fired, pairs = memo
            self.leaves[text] = result
            if fired:
                self.found[text] = fired
                counts = self.counts
                for name, k in fired.items():
                    counts[name] = counts.get(name, 0) + k
                self.pairs.update(pairs)
            return result
        counts, pairs = self.counts, self.pairs
        before = dict(counts)
        sliced = (rules is self.policy.rules and self.policy._detectors_only) or fired_in_text(rules)
        had = set(pairs) if pairs and sliced else None
        result = self._run(rules, text)
        self.leaves[text] = result
        if before:
            fired = {k: v - before.get(k, 0) for k, v in counts.items() if v != before.get(k, 0)}
        else:  # the first string the rules fired in, this pass: all they counted is its own
            fired = dict(counts)
        if result is not text:
            self.found[text] = fired
        if not fired:
            held: dict[str, str] = {}
        elif sliced and had is None:
            # Every value the detectors replaced is a slice of ``text`` and no pair came before: all
            # of them are in it, no search needed.
            held = dict(pairs)
        elif sliced:
            assert had is not None
            held = {old: new for old, new in pairs.items() if old not in had or old in text}
        else:
            held = _pairs_in(pairs, text)
        self.policy._remember(text, (result, fired, held))
        return result

    def _run(self, rules: Any, text: str) -> str:
        if rules is self.policy.rules and self.policy._detectors_only:  # the usual policy: one row of detectors
            return self._apply_detectors(rules, text)
        result = text
        i, n = 0, len(rules)
        while i < n:
            rule = rules[i]
            if rule.finder is None:
                result = self._apply(rule, result)
                i += 1
                continue
            # Detector rules in a row read the same text: each finds its spans there, and where two
            # overlap the one that begins first wins the overlap (``detectors.unclaimed``). One text, so
            # the detectors share what they computed on it.
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
        policy = self.policy
        if len(text) < policy._shortest:
            return text
        hits = find_all(policy._finders if rules is policy.rules else [rule.finder for rule in rules], text)
        if not hits:
            return text
        hits.sort()
        pieces: list[str] = []
        last = 0
        key = self.key
        pairs, counts = self.pairs, self.counts
        for start, (_, index, end) in unclaimed(hits):
            rule = rules[index]
            value = text[start:end]
            new = rule.constant
            if new is None:
                new = rule.replace(value, None, key)
            pieces.append(text[last:start])
            pieces.append(new)
            last = end
            pairs[value] = new
            name = rule.name
            counts[name] = counts.get(name, 0) + 1
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
            if not rule.whole or len(value) >= MIN_WHOLE:
                self.pairs[value] = new
            if rule.whole:
                self.whole(value, new)
            self._count(rule, 1)
        if not pieces:
            return text
        pieces.append(text[last:])
        return "".join(pieces)


def renamed(mapping: Mapping[Any, Any], names: Mapping[Any, Any]) -> dict[Any, Any]:
    """``mapping`` with the keys in ``names`` renamed, in order; keys that became one (two addresses, both
    ``[REDACTED:email]``) are told apart by a count (``#2``), so no entry is lost."""
    out: dict[Any, Any] = {}
    for k, v in mapping.items():
        new = names.get(k, k)
        if new in out:
            n = 2
            while f"{new}#{n}" in out:
                n += 1
            new = f"{new}#{n}"
        out[new] = v
    return out
