"""Keeping credentials out of everything the relay emits.

Two lists, kept apart because they match differently:

- ``CREDENTIAL_HEADER_NAMES`` / ``CREDENTIAL_HEADER_PATTERNS``: header names, any
  case; a name matching a pattern (``*token*``) is a credential too.
- ``CREDENTIAL_BODY_KEYS``: keys of the request body and query, matched exactly
  (any case) at any depth of the kwargs (``extra_body``, ``extra_query`` and every
  nested dict), never by substring, so ``max_tokens`` and usage counts stay.
- ``CREDENTIAL_DATA_KEYS`` / ``CREDENTIAL_DATA_KEY_SUFFIXES``: keys of recorded data (a tool's
  arguments and result, a chain's input, a mark's data: ``redact_value``; the OTel content capture's
  messages): the body keys, a few more names, and any name ending in a credential's word
  (``github_token``, ``OPENAI_API_KEY``), so every sink blanks the same entries of the same data.

The conversation itself (``CONVERSATION_KWARGS``: messages, tools, ...) is what
the model reads, not where credentials travel, and is not walked: a tool schema
may well declare a ``password`` property. Values of the clients' own keys
(``remember_secret``) are blanked in recorded error messages and wherever they
appear as a whole string in the walked kwargs.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import redaction_logs, redaction_objects
from .conventions import SPAN_HINTS

# Which names say a credential lives in its own module; its names are reachable here, where the lists are used.
from .credential_names import CREDENTIAL_BODY_KEYS as CREDENTIAL_BODY_KEYS
from .credential_names import CREDENTIAL_DATA_KEY_SUFFIXES as CREDENTIAL_DATA_KEY_SUFFIXES
from .credential_names import CREDENTIAL_DATA_KEYS as CREDENTIAL_DATA_KEYS
from .credential_names import CREDENTIAL_HEADER_NAMES as CREDENTIAL_HEADER_NAMES
from .credential_names import CREDENTIAL_HEADER_PATTERNS as CREDENTIAL_HEADER_PATTERNS
from .credential_names import CREDENTIAL_NAMES as CREDENTIAL_NAMES
from .credential_names import VERDICTS_MAX, _Judged, _judged_once, is_credential_key
from .credential_names import is_credential_data_key as is_credential_data_key
from .credential_names import is_credential_header as is_credential_header
from .credential_names import is_credential_name as is_credential_name
from .secret_runs import SecretRuns

REDACTED = "[redacted]"

# SDK kwargs whose value is a header mapping (judged by header name, not body key).
HEADER_KWARGS = frozenset({"extra_headers", "headers", "default_headers"})
# SDK kwargs whose value is a query string's parameters: judged by the name rule the cassette's query
# strings are (``?key=``, ``?sig=``, ``?subscription-key=``), which the body keys do not cover.
QUERY_KWARGS = frozenset({"extra_query", "default_query"})
# The SDK kwarg whose value is the request's body as JSON text (boto3's ``invoke_model``): its keys are the model
# API's own kwargs (Anthropic's messages and mcp_servers, ...), read as those are (``body_kwargs``).
BODY_TEXT_KWARG = "body"
# The conversation: not walked (see the module docstring). Every codec's name for it (``toolConfig``: Bedrock
# Converse's tools, whose API lets them hold schemas and names only, no remote server's credentials).
CONVERSATION_KWARGS = frozenset(
    {"messages", "input", "contents", "system", "instructions", "tools", "tool_choice", "prediction", "toolConfig"}
)

# -- the clients' own keys ------------------------------------------------------------

# Keys shorter than this are not searched for in text: blanking "abc" everywhere would
# corrupt messages and protect nothing.
_MIN_SECRET = 8
_SECRETS_MAX = 256
_secrets: frozenset[str] = frozenset()
_secrets_order: list[str] = []  # oldest first; only touched under the lock
_secrets_lock = threading.Lock()


def remember_secret(value: Any) -> None:
    """Blank ``value`` (a client's API key) wherever the relay records it from now on.

    The newest ``_SECRETS_MAX`` keys are kept: every call remembers its client's key before it
    runs, so a server with a client per user always knows the key in use, however many came before.
    """
    global _secrets
    if type(value) is not str or len(value) < _MIN_SECRET or value in _secrets:
        return
    with _secrets_lock:
        if value in _secrets:
            return
        _secrets_order.append(value)
        del _secrets_order[:-_SECRETS_MAX]
        # A new frozenset, swapped in whole: readers never take the lock.
        _secrets = frozenset(_secrets_order)
        _known_clean.clear()


_runs = SecretRuns((), REDACTED)


def remembered() -> SecretRuns:
    """The remembered keys, ready to search for (made again only when a key was added)."""
    global _runs
    runs = _runs
    if runs.secrets is not _secrets and runs.secrets != _secrets:
        runs = _runs = SecretRuns(_secrets, REDACTED)
    return runs


def secret_runs(more: Iterable[str] = ()) -> SecretRuns:
    """The remembered keys and ``more`` (a cassette's own), ready to search for."""
    more = frozenset(more)
    return remembered() if more <= _secrets else SecretRuns(_secrets | more, REDACTED)


def scrub_text(text: str) -> str:
    """``text`` with every remembered key blanked, whole or any run of 8 or more of its characters
    (a provider may echo the key in a 401 body, or a masked form of it such as ``sk-abcdefgh****wxyz``)."""
    if not _secrets:
        return text
    return remembered().text(text)


def told(exc: BaseException, policy: Any = None, as_text: Callable[[BaseException], str] = str) -> str:
    """``exc``'s message (``as_text`` of it) as a record or log line may quote it: remembered keys,
    pydantic's quoted input and credential-keyed values blanked (``error_text``), ``policy`` (a
    ``RedactionPolicy``) applied; withheld whole when it cannot be read or redacted."""
    from .error_text import scrubbed  # here: it reads this module's key rules

    try:
        message = scrubbed(scrub_text(as_text(exc)))
        return policy.redact_text(message) if policy is not None else message
    except Exception:
        return "(message withheld: it could not be redacted)"


def scrub_bytes(data: bytes) -> bytes:
    """``scrub_text`` for bytes in any encoding (UTF-8, UTF-16 or anything ASCII-compatible)."""
    if not _secrets:
        return data
    return remembered().bytes(data)


# Strings of the kwargs seen to hold no run of a remembered key: the same few (a model name, a
# service tier) come on every call, and a set lookup is cheaper than a search. Emptied when a key
# is added; bounded, since they are caller data.
_known_clean: set[str] = set()
_KNOWN_CLEAN_MAX = 4096


def scrub_repeated(text: str) -> str:
    """``scrub_text`` for a value that comes back on every call (a model's name): a set lookup once it is known
    to hold no run of a remembered key."""
    if not _secrets or text in _known_clean:
        return text
    return _scrubbed_leaf(text)


def _scrubbed_leaf(value: str) -> str:
    """``value`` itself if it holds no run of a remembered key, else the scrubbed copy."""
    clean = scrub_text(value)
    if clean == value:
        if len(_known_clean) < _KNOWN_CLEAN_MAX:
            _known_clean.add(value)
        return value
    return clean


# -- the library's own log lines ------------------------------------------------------

_LIBRARY_LOGGERS = "relay_runtime"


def _scrubbed_record(record: logging.LogRecord) -> None:
    """Blank remembered keys in a library log line, its message and the traceback it carries, and redact them as
    the redaction policies in force do (``redaction_logs``)."""
    try:
        message = record.getMessage()
    except Exception:  # a format that does not fit its args: logging reports that itself
        return
    clean = _log_text(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and record.exc_info[1] is not None:
        trace = logging.Formatter().formatException(record.exc_info)  # what a handler would print
        clean = _log_text(trace)
        if clean != trace:
            record.exc_text = clean  # a formatter prints this in place of formatting exc_info again


def _log_text(text: str) -> str:
    text = scrub_text(text)
    return redaction_logs.redacted(text) if redaction_logs.any_in_force() else text


def _scrub_library_logs() -> None:
    """Every record a ``relay_runtime*`` logger makes is scrubbed as it is made.

    A record factory, not a filter: filters sit on single loggers, and the library's
    loggers are many and made as their modules load. Records of other loggers pass
    untouched, at the cost of one name check.
    """
    previous = logging.getLogRecordFactory()
    if getattr(previous, "relay_scrubs", False):
        return

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if (_secrets or redaction_logs.any_in_force()) and record.name.startswith(_LIBRARY_LOGGERS):
            _scrubbed_record(record)
        return record

    make.relay_scrubs = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(make)


_scrub_library_logs()


def forget_secrets() -> None:
    """For tests."""
    global _secrets
    with _secrets_lock:
        _secrets = frozenset()
        _secrets_order.clear()
        _known_clean.clear()


# -- headers and kwargs ---------------------------------------------------------------


def redact_headers(headers: Mapping[Any, Any]) -> dict[str, Any]:
    """A copy with credential values replaced; bytes names become text so every encoder can take them.

    A client's own key is blanked inside any other header's value too: a header is where a key
    travels, under whatever name and scheme (``X-Backup-Auth: Bearer <key>``).
    """
    out: dict[str, Any] = {}
    verdicts = is_credential_header.verdicts
    for k, v in headers.items():
        verdict = verdicts.get(k)
        if verdict is None:
            verdict = is_credential_header(k)
        if type(k) is not str and isinstance(k, (bytes, bytearray)):
            k = k.decode("latin-1")
        if verdict:
            v = REDACTED
        elif _secrets and isinstance(v, (str, bytes, bytearray)):
            text = v if isinstance(v, str) else v.decode("latin-1")
            scrubbed = scrub_text(text)
            if scrubbed != text:
                v = scrubbed
        out[k] = v
    return out


# Values that hold nothing nested: only their key (or, for text, a remembered key's value) can make them a credential.
_LEAVES = frozenset({str, int, float, bool, type(None)})
_NOTHING_SKIPPED: frozenset[str] = frozenset()


@_judged_once
def is_query_credential(name: Any) -> bool:
    """A query parameter that holds a credential: by the name rule (``?key=``, ``?sig=``,
    ``?subscription-key=``) or as a body key would (``?api_key=``)."""
    return isinstance(name, (str, bytes)) and (is_credential_name(name) or is_credential_key(name))


def body_kwargs(content: Mapping[str, Any]) -> dict[str, Any] | None:
    """The kwargs a request's JSON text body holds (``BODY_TEXT_KWARG``), or None when it has no such body.

    Read only, never edited: the last text's are kept, since one record reads the same body more than once
    (its tool results, then its credentials), and a body holding images is megabytes of JSON.
    """
    global _last_body
    body = content.get(BODY_TEXT_KWARG)
    if type(body) is not str and type(body) is not bytes and type(body) is not bytearray:
        return None
    last, kwargs = _last_body
    if body is last:
        return kwargs
    try:
        parsed = json.loads(body)
    except ValueError:  # UnicodeDecodeError too: binary data holds no kwargs
        parsed = None
    kwargs = parsed if type(parsed) is dict else None
    if type(body) is not bytearray:  # the one text that can change under the same object
        _last_body = (body, kwargs)
    return kwargs


_last_body: tuple[Any, dict[str, Any] | None] = (None, None)


def _clean_mapping(
    value: Mapping[Any, Any],
    depth: int,
    skip: frozenset[str],
    judge: _Judged = is_credential_key,
) -> Mapping[Any, Any]:
    """``value`` itself when no entry needs cleaning, else a cleaned copy; keys in ``skip`` are kept as they are.

    ``judge`` tells a credential key: a body's keys by default, a query's names
    for ``extra_query``, recorded data's (``is_credential_data_key``) for ``redact_value``, whose rule then
    holds at every depth below.
    """
    out: dict[Any, Any] | None = None
    verdicts = judge.verdicts
    for k, v in value.items():
        if k in skip:
            continue
        verdict = verdicts.get(k)
        if verdict is None:
            verdict = judge(k)
        kind = type(v)
        if verdict:
            new: Any = REDACTED
        elif kind in _LEAVES:
            if kind is not str or not _secrets or len(v) < _MIN_SECRET or v in _known_clean:
                continue
            new = _scrubbed_leaf(v)
            if new is v:
                continue
        else:
            if k in HEADER_KWARGS and isinstance(v, Mapping):
                new = redact_headers(v)
            elif k in QUERY_KWARGS and isinstance(v, Mapping):
                new = _clean_mapping(v, depth + 1, _NOTHING_SKIPPED, is_query_credential)
            else:
                new = _clean(v, depth + 1, judge is is_credential_data_key)
            if new is v:
                continue
        if out is None:
            out = dict(value)
        out[k] = new
    return value if out is None else out


def _clean(value: Any, depth: int, data: bool = False) -> Any:
    """``value`` itself when nothing in it is a credential, else a cleaned copy (containers only)."""
    kind = type(value)
    if kind in _LEAVES:
        if kind is str and _secrets and len(value) >= _MIN_SECRET and value not in _known_clean:
            return _scrubbed_leaf(value)
        return value
    if depth > 64:
        # Deeper than any request needs (or a structure that holds itself): what is below is not
        # looked at, so it is not recorded either.
        return REDACTED
    if kind is list or kind is tuple:
        items: list[Any] | None = None
        for i, v in enumerate(value):
            new = _clean(v, depth + 1, data)
            if new is not v:
                if items is None:
                    items = list(value)
                items[i] = new
        if items is None:
            return value
        return items if kind is list else tuple(items)
    if kind is dict or (kind not in _opaque and kind not in _kwargs_objects and isinstance(value, Mapping)):
        if data:
            return _clean_mapping(value, depth, _NOTHING_SKIPPED, is_credential_data_key)
        return _clean_mapping(value, depth, _NOTHING_SKIPPED)
    if kind in _opaque:
        return value
    if not data:
        # Request kwargs: an SDK's own object there (a config model) is its adapter's to read, and holds
        # the conversation (tool schemas, whose ``password`` property is no credential): passed as it is.
        if len(_kwargs_objects) < VERDICTS_MAX:
            _kwargs_objects.add(kind)
        return value
    # Recorded data: a pydantic model, a dataclass (an SDK's result, a tool's return value) is written by
    # the sinks by its fields (the JSONL file dumps it, the others print it), so its fields are cleaned.
    content = redaction_objects.fields(value)
    if content is None:
        if len(_opaque) < VERDICTS_MAX:
            # Every scope's input and output passes here: an object of no known shape is asked once.
            _opaque.add(kind)
        return value
    new = _clean(content, depth + 1, data)
    return value if new is content else redaction_objects.rebuilt(value, content, new)


_opaque: set[type] = set()
_kwargs_objects: set[type] = set()  # objects met in request kwargs: not mappings, left as they are there


def redact_value(value: Any) -> Any:
    """``value`` itself when nothing in it is a credential, else a cleaned copy: credential keys at any
    depth, and remembered client keys standing as whole strings, become ``REDACTED``. An object the sinks
    write by its fields (a pydantic model, a dataclass) is cleaned by its fields: a copy of its own type
    where it can be made (``redaction_objects.rebuilt``), else its cleaned fields. Keys are judged as recorded
    data's (``is_credential_data_key``)."""
    return _clean(value, 0, True)


# The span hints an integration builds from what it already recorded without credentials (an MCP request's
# method, its target's recorded address, the attributes of its span): walked on every request and never a
# caller's data, they are not read again (a redaction policy reads their attributes: ``redaction_pass``).
_OWN_METADATA = frozenset({SPAN_HINTS})


def redact_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """A caller's metadata (a scope's, a mark's, a call's) as every event holds it: ``metadata`` itself when nothing
    in it is a credential, else a cleaned copy, by ``redact_value``'s rule. The sinks write it as given (the OTel
    exporter makes a mark's entries its span event's attributes, content capture on or off; the JSONL and ATOF
    files write it whole), so a key a scope's input would have blanked went there as written."""
    if len(metadata) == 1 and SPAN_HINTS in metadata:  # an integration's span hints alone (every MCP request)
        return metadata
    return _clean_mapping(metadata, 0, _OWN_METADATA, is_credential_data_key)  # type: ignore[return-value]


# A model call's request as records hold it lives in its own module; its names are reachable here.
# The policy every sink shares (issue 25) lives in its own modules; its names are reachable here.
from .redaction_policy import RedactionPolicy, Rule  # noqa: E402, F401
from .redaction_requests import redact_kwargs, redact_tools, redacted_annotation, redacted_request  # noqa: E402, F401
