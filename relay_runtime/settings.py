"""Process-wide choices: ``relay_runtime.configure(...)``.

``outside_turns``: what happens to an LLM call made with no managed turn open (no turn in this
thread or task, or a second turn while another runs on the same conversation):

- ``"record"`` (the default): a process-wide default host records it (the host of the process's
  profile, or of the busy turn's conversation): its attempt and a logical call, closed when the
  attempt ends, reach whatever is attached to the session coordinator, as long as something is;
- ``"count"``: it runs straight through, counted in ``diagnostics()`` (``unmanaged_calls``).
"""

from __future__ import annotations

RECORD = "record"
COUNT = "count"
OUTSIDE_TURNS = (RECORD, COUNT)


class Settings:
    __slots__ = ("outside_turns",)

    def __init__(self) -> None:
        self.outside_turns = RECORD

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]


settings = Settings()


def configure(*, outside_turns: str | None = None) -> None:
    """Set process-wide choices; an argument left out keeps its current value."""
    if outside_turns is not None:
        if outside_turns not in OUTSIDE_TURNS:
            raise ValueError(f"outside_turns must be one of {list(OUTSIDE_TURNS)}, got {outside_turns!r}")
        # The interned constant: the call path compares by identity.
        settings.outside_turns = RECORD if outside_turns == RECORD else COUNT
