"""An answer's text that a whole-field rule replaced, found in an SDK object that holds it only in pieces.

The view joins what a provider splits: an answer's text is one string there, while the SDK's answer
object holds it as several text blocks (an Anthropic answer citing its sources, an OpenAI Responses
message of several parts, Gemini parts, Bedrock content blocks, a LangChain message's content
blocks). A rule on ``/response/text`` replaces the joined string, and the walk through the SDK's
objects replaces that string wherever it appears whole: the pieces matched nothing and stayed in
the record as they were. So the pieces are found here, and what the rule made of the whole goes in
the first of them, the rest left empty, as a stored stream's pieces are (``spread``). Only a pass in which a
whole-field rule fired pays for this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .events import DeferredResponse
from .redaction_objects import fields
from .redaction_streams import spread

if TYPE_CHECKING:
    from .redaction_apply import Application

_MAX_DEPTH = 32
_SCALARS = (int, float, bool, type(None))


def answer_text(answer: Any) -> str | None:
    """The text of an end event's response annotation (built or deferred), as the view read it."""
    if isinstance(answer, DeferredResponse):
        said = answer.content()
        if said is not None:
            return said[0]
        answer = answer.get()
    text = getattr(answer, "output_text", None)
    return text if isinstance(text, str) else None


def split_whole(application: Application, value: Any, whole: str | None) -> None:
    """Have ``application``'s walk of ``value`` (an SDK answer object) change the pieces ``value`` holds of
    ``whole`` (the answer's text), when a whole-field rule of the application replaced it."""
    wholes = application.wholes
    if not whole or not wholes or whole not in wholes or value is None:
        return
    texts: list[str] = []
    _texts(value, texts, 0)
    found = pieces(whole, texts)
    if found is None:
        return
    leaves = application.leaves
    became = leaves.get(whole, wholes[whole])
    for piece, new in zip(found, spread(found, whole, [(0, len(whole), became)]), strict=True):
        # A piece the view met as a string of its own and changed keeps what the view made of it.
        if leaves.get(piece, piece) == piece:
            leaves[piece] = new


def pieces(whole: str, texts: list[str]) -> list[str] | None:
    """The texts, in order, that join into ``whole`` (two at least; others may come between them: the fields of
    the blocks that hold them, or ``whole`` itself, held whole beside its pieces). None when they do not."""
    taken: list[str] = []
    at, end = 0, len(whole)
    for text in texts:
        if text and text != whole and whole.startswith(text, at):
            taken.append(text)
            at += len(text)
            if at == end:
                return taken if len(taken) > 1 else None
    return None


def _texts(value: Any, found: list[str], depth: int) -> None:
    """The strings ``value`` holds under a ``text`` key, and those standing alone in a list (a LangChain
    message's content), in order."""
    if depth > _MAX_DEPTH or isinstance(value, (str, *_SCALARS)):
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, str):
                found.append(item)
            else:
                _texts(item, found, depth + 1)
        return
    data = value if isinstance(value, Mapping) else fields(value)
    if not isinstance(data, Mapping):
        return
    for key, item in data.items():
        if key == "text" and isinstance(item, str):
            found.append(item)
        elif not isinstance(item, (str, *_SCALARS)):
            _texts(item, found, depth + 1)
