"""Amazon Bedrock through boto3 (``bedrock-runtime``): ``converse`` and ``converse_stream`` as managed attempts.

Every botocore client method goes through ``BaseClient._make_api_call(operation, params)``:
``instrument(client)`` shadows it on that client, ``instrument()`` wraps it on the class (for
every client, made now or later, by anyone), and both hand a ``bedrock-runtime`` LLM operation
to ``runtime.managed_call``; other services and operations pass straight through.
"""

from __future__ import annotations

import sys
from typing import Any

import wrapt

from ..endpoints import Endpoint
from . import runtime
from .codec import PROVIDER
from .runtime import SERVICE, managed_call

_METHOD = "_make_api_call"
_class_patch: list[Any] = []  # the class wrapper, while instrument() is on


def is_client(client: Any) -> bool:
    """Whether ``client`` is a boto3 ``bedrock-runtime`` client (without importing botocore)."""
    botocore_client = sys.modules.get("botocore.client")
    if botocore_client is None or not isinstance(client, botocore_client.BaseClient):
        return False
    return bool(client.meta.service_model.service_name == SERVICE)


class _ClientCall:
    """The client's own ``_make_api_call`` routed through ``managed_call``; ``__wrapped__`` is the original."""

    __slots__ = ("__wrapped__", "client")

    def __init__(self, client: Any, original: Any) -> None:
        self.client = client
        self.__wrapped__ = original

    def __call__(self, operation: str, params: Any) -> Any:
        return managed_call(self.client, self.__wrapped__, operation, params)


NAME = "aws.bedrock"


def instrument_client(client: Any, *, include_usage: bool = False, provider: Endpoint | None = None) -> Any:
    """Trace this client's LLM calls; idempotent; returns the client (``include_usage`` is OpenAI's alone)."""
    if provider is not None and provider.provider != PROVIDER:
        raise ValueError(f"a bedrock-runtime client's calls reach {PROVIDER}, not {provider.provider!r}")
    if not isinstance(client.__dict__.get(_METHOD), _ClientCall):
        client.__dict__[_METHOD] = _ClientCall(client, getattr(client, _METHOD))
    return client


def uninstrument_client(client: Any) -> Any:
    if isinstance(client.__dict__.get(_METHOD), _ClientCall):
        del client.__dict__[_METHOD]
    return client


def is_client_instrumented(client: Any) -> bool:
    return isinstance(client.__dict__.get(_METHOD), _ClientCall)


def _class_wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if instance is None or len(args) != 2 or kwargs or not _class_patch:
        return wrapped(*args, **kwargs)
    if instance.meta.service_model.service_name != SERVICE:
        return wrapped(*args)
    return managed_call(instance, wrapped, args[0], args[1])


def instrument_classes(*, include_usage: bool = False) -> list[str]:
    """Wrap botocore's ``BaseClient._make_api_call`` (if botocore is installed); the names wrapped now."""
    try:
        from botocore.client import BaseClient  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        return []
    if _class_patch:
        return []
    wrapper = wrapt.FunctionWrapper(vars(BaseClient)[_METHOD], _class_wrapper)
    _class_patch.append(wrapper)
    runtime.guard_sdk_calls(True)
    setattr(BaseClient, _METHOD, wrapper)
    return [f"botocore.client.BaseClient.{_METHOD} ({SERVICE})"]


def uninstrument_classes() -> None:
    if not _class_patch:
        return
    from botocore.client import BaseClient  # type: ignore[import-untyped, unused-ignore]

    wrapper = _class_patch.pop()
    runtime.guard_sdk_calls(False)
    if vars(BaseClient).get(_METHOD) is wrapper:
        setattr(BaseClient, _METHOD, wrapper.__wrapped__)


def classes_instrumented() -> bool:
    return bool(_class_patch)
