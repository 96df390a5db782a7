"""What a policy's rules changed at a scope's start, carried to its end's error message.

A rule may hold for one field only (``/tool/arguments``, ``/tool/arguments/ssn``): the start event's
input is redacted, and the end event carries no input, only the error the scope ended with. That
error's text often quotes the input (``no user jane@example.com``, pydantic's ``input_value={...}``),
and no rule of that path reads ``/error/message``: the value the start blanked reached every sink at
the end. So each value the start's rules replaced (a ``Pass``'s ``pairs``) is kept until the scope
ends, and replaced in its error message, as the SDK's own objects are redacted through the view.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from .redaction_rules import Rule

# Scopes whose start changed something and have not ended yet, at most: a scope that never ends (its
# task was dropped) must not hold its values forever.
_OPEN_MAX = 4096


class Carried:
    """The replaced values of open scopes, by scope id, each with the names of the rules that fired."""

    def __init__(self) -> None:
        self._open: OrderedDict[str, tuple[dict[str, str], tuple[str, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, uuid: str, pairs: Mapping[str, str], fired: Iterable[str]) -> None:
        with self._lock:
            self._open[uuid] = (dict(pairs), tuple(fired))
            while len(self._open) > _OPEN_MAX:
                self._open.popitem(last=False)

    def take(self, uuid: str) -> tuple[dict[str, str], tuple[str, ...]] | None:
        if not self._open:  # no scope's start changed anything: no lock taken on the common path
            return None
        with self._lock:
            return self._open.pop(uuid, None)


def through(
    text: str, pairs: Mapping[str, str], fired: tuple[str, ...], rules: tuple[Rule, ...], counts: dict[str, int]
) -> str:
    """``text`` with each value in ``pairs`` replaced by what the rules made of it (as written in JSON or a
    repr too, where an error quotes a dict); each value replaced is counted to the rule whose constant
    replacement it got, else to the first rule that fired."""
    result = text
    for old, new in sorted(pairs.items(), key=lambda pair: -len(pair[0])):  # a longer value before its part
        changed = False
        for written, replacement in _forms(old, new):
            if written in result:
                result = result.replace(written, replacement)
                changed = True
        if changed and fired:
            name = next((r.name for r in rules if r.constant is not None and r.constant == new), fired[0])
            counts[name] = counts.get(name, 0) + 1
    return result


def _forms(old: str, new: str) -> list[tuple[str, str]]:
    forms = [(old, new)]
    # Either way json.dumps writes it: by default (``ensure_ascii``) "ß" is "\\u00df" there.
    for ascii_only in (False, True):
        escaped = json.dumps(old, ensure_ascii=ascii_only)[1:-1]
        if all(escaped != written for written, _ in forms):
            forms.append((escaped, json.dumps(new, ensure_ascii=ascii_only)[1:-1]))
    quoted = repr(old)[1:-1]
    if all(quoted != written for written, _ in forms):
        forms.append((quoted, repr(new)[1:-1]))
    return forms
