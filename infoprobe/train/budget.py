"""Time budgets of resumable training: how a run keeps its state (:class:`Resume`), the
stop at a budget (:class:`BudgetStop`) and its exit status. Plain Python, so the command
line can name them without loading torch (:mod:`infoprobe.train.state` writes the states).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infoprobe.base.errors import UserError

STATE_EVERY = 2000
"""Default steps between states: about two minutes of the paper-size runs here (T = 64,
about 60 ms a step on one core), seconds for the small ones; a state costs milliseconds."""
BUDGET_EXIT = 75
"""Exit status of a command stopped by its time budget with its state written (sysexits'
EX_TEMPFAIL: run it again to continue)."""


class BudgetStop(Exception):
    """A run reached its time budget and wrote its state; the same command continues it."""

    def __init__(
        self,
        step: int,
        steps: int,
        minutes: float,
        path: Path | None = None,
        runs: int | None = None,
    ):
        self.step, self.steps, self.minutes, self.path, self.runs = step, steps, minutes, path, runs
        where = "" if runs is None else f" (steps summed over {runs} unfinished run(s))"
        super().__init__(
            f"stopped at step {step} of {steps}{where} after {minutes:g} minutes; run the "
            "same command to continue" + (f" (state: {path})" if path else "")
        )

    def __reduce__(self):  # rebuilt from its fields when it crosses a process boundary
        return (type(self), (self.step, self.steps, self.minutes, self.path, self.runs))


@dataclass(frozen=True)
class Resume:
    """How a run keeps its state (plain data, so it reaches worker processes).

    Args:
        every: steps between states.
        deadline: ``time.time()`` after which the run stops at its next state (None: no
            budget).
        minutes: the budget in minutes (for the stop message).
        restart: ignore and replace an existing state (start over on purpose).
    """

    every: int = STATE_EVERY
    deadline: float | None = None
    minutes: float | None = None
    restart: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise UserError(f"--state-every: expected an integer >= 1, got {self.every!r}")
        if self.minutes is not None and not (self.minutes >= 0):
            raise UserError(f"--budget-minutes: expected a number >= 0, got {self.minutes!r}")

    @classmethod
    def budget(cls, minutes: float | None, **kwargs: Any) -> Resume:
        """A Resume whose deadline is ``minutes`` from now (None: no budget)."""
        deadline = None if minutes is None else time.time() + 60.0 * minutes
        return cls(deadline=deadline, minutes=minutes, **kwargs)

    def expired(self) -> bool:
        return self.deadline is not None and time.time() >= self.deadline
