"""A stream's running cost, checked chunk by chunk against the tightest ``stop_stream`` budget."""

from __future__ import annotations

from ..types import ChunkDelta
from .budget import CHARS_PER_TOKEN, Budget, BudgetExceeded
from .estimate import text_weight
from .plan import Node


class StreamMeter:
    """A stream's running cost, from the text its chunks carried, against the tightest ``stop_stream`` headroom."""

    __slots__ = ("budget", "chars", "headroom", "input_cost", "model", "output_rate", "spent")

    def __init__(self, budget: Budget, headroom: float, spent: float, input_cost: float, output_rate: float,
                 model: str | None) -> None:  # fmt: skip
        self.budget = budget
        self.headroom = headroom
        self.spent = spent
        self.input_cost = input_cost
        self.output_rate = output_rate
        self.model = model
        self.chars = 0

    def running(self) -> float:
        return self.input_cost + (self.chars // CHARS_PER_TOKEN + 1) * self.output_rate

    def add(self, delta: ChunkDelta | None) -> BudgetExceeded | None:
        if delta is None:
            return None
        self.chars += text_weight(delta.text) + text_weight(delta.reasoning) + delta.extra_chars
        running = self.running()
        if running <= self.headroom:
            return None
        budget = self.budget
        return BudgetExceeded(budget, spent=self.spent, limit=budget.limit, estimate=running, model=self.model)


def meter_for(nodes: list[Node], input_cost: float, output_rate: float, estimate: float, model: str | None,
              shared: dict[Node, float] | None = None) -> StreamMeter | None:  # fmt: skip
    """The meter of the tightest ``stop_stream`` budget; ``shared``: what a shared store held against a node
    before this call (every process's spend and reservations), in place of this process's roll-up."""
    best: StreamMeter | None = None
    for node in nodes:
        budget = node.budget
        if budget.on_exceed != "stop_stream":
            continue
        if shared is not None and node in shared:
            spent = shared[node]
        else:
            rollup = node.rollup
            # Our own reservation is part of ``reserved`` now; the headroom is what others left.
            spent = rollup.spent + rollup.reserved - estimate
        headroom = budget.limit - spent
        if best is None or headroom < best.headroom:
            best = StreamMeter(budget, headroom, spent, input_cost, output_rate, model)
    return best
