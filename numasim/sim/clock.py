"""The simulation's clock: a ``simpy.Environment`` whose clock the compiled thread events may move on.

Thread events (burst ends, wake-ups, open-mode arrivals) wait in the compiled code's own
heap (:mod:`numasim.sim.core`). simpy needs to know only the earliest of them, through one
timeout; when that timeout fires, :func:`numasim.sim.events.fire` runs the events due, and
then the following ones too, as long as each comes strictly before every event simpy
holds (``ctl[HORIZON]``): no simpy event can come between them, so running them at once
is the order the timeouts would have given. When one of them needs Python (a wake-up to
place, an idle CPU, ...), the clock is moved to its instant first, so Python sees the
time it happens at: :meth:`Clock.skip_to`, which refuses to pass an event simpy holds.
"""

from __future__ import annotations

import math

import simpy

__all__ = ["Clock"]


class Clock(simpy.Environment):
    def skip_to(self, t: int) -> None:
        """Move the clock on to ``t``: no later than simpy's next event, never back."""
        if not self._now <= t <= self.peek():
            raise RuntimeError(f"the clock cannot move from {self._now} to {t} (next event at {self.peek()})")
        self._now = t

    def horizon(self, until: int) -> int:
        """The latest whole nanosecond before simpy's next event, and not after ``until``."""
        nxt = self.peek()
        return until if nxt == math.inf else min(until, math.ceil(nxt) - 1)
