"""The model a provider's response says answered (which may differ from the one asked for).

Read from every attempt's response, so the common case (a ``model`` string attribute) costs one
``getattr``, and classes that can never carry one are remembered after the first look.
"""

from __future__ import annotations

from typing import Any


def response_model(response: Any) -> str | None:
    if type(response) is dict:  # a stream's folded answer: a dict has no attribute to look up first
        model = response.get("model")
        return model if isinstance(model, str) and model else None
    if type(response) in _modelless:
        return None
    model = getattr(response, "model", None)
    if type(model) is str:  # the common case, without the checks below
        return model or None
    if model is None:
        if isinstance(response, dict):
            model = response.get("model")
        elif _never_has_model(type(response)):
            _modelless.add(type(response))
    return model if isinstance(model, str) and model else None


# Pydantic classes whose instances cannot have a ``model`` attribute (a framework's result, such as
# LangChain's ``ChatResult``): reading one raises and catches an AttributeError inside pydantic's
# ``__getattr__``, which costs more than the rest of an attempt's bookkeeping of its response.
_modelless: set[type] = set()


def _never_has_model(cls: type) -> bool:
    """A pydantic model class (seen without importing pydantic) with no ``model`` field, class attribute
    or extra attributes."""
    fields = getattr(cls, "__pydantic_fields__", None)
    config = getattr(cls, "model_config", None)
    if not isinstance(fields, dict) or not isinstance(config, dict):
        return False
    return "model" not in fields and config.get("extra") != "allow" and not hasattr(cls, "model")
