"""Task brokers: how the relay hands work to the agent and streams its progress back."""

from __future__ import annotations

from .http import HttpTaskBroker
from .inprocess import InProcessTaskBroker, RunContext, echo_agent

__all__ = ["HttpTaskBroker", "InProcessTaskBroker", "RunContext", "echo_agent"]
