"""Importing a framework for its integration: ``require`` imports it, or raises an ImportError naming the
extra that installs it (``pip install 'relay-runtime[langchain]'``)."""

from __future__ import annotations

import importlib
from typing import Any


def require(module: str, extra: str, integration: str) -> Any:
    """Import ``module`` for ``integration``, or say which extra brings it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"relay_runtime.integrations.{integration} needs {module.split('.')[0]}: "
            f"pip install 'relay-runtime[{extra}]' ({exc})"
        ) from exc
