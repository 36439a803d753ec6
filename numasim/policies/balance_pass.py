"""The load balancer's values for one pass, as plain Python (numbers, tuples, lists, sets).

A balancing pass (:mod:`numasim.policies.balance`) works on one domain's or one group's
CPUs at a time, a few dozen numbers, where numpy's cost per call outweighs the work:

* :class:`Domain`: a domain's CPUs and groups (``sched_group``), built once;
* :class:`Stats`: one group's statistics (``sg_lb_stats``: tasks, weight, idle and busy
  CPUs, cores, classification ``group_type``, ``avg_load``), shared through
  :class:`StatsMemo`, which keeps one object for each set of numbers they come from;
* :class:`Pass`: the runqueues as one pass sees them, tasks per CPU and each CPU's tasks
  by ascending id, updated as the pass moves tasks.
"""

from __future__ import annotations

from bisect import insort
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from .rules import SCALE

if TYPE_CHECKING:
    from .api import View
    from .domains import Level

__all__ = ["FULLY_BUSY", "HAS_SPARE", "OVERLOADED", "SCALE", "Domain", "Pass", "Stats", "StatsMemo", "domains"]

HAS_SPARE, FULLY_BUSY, OVERLOADED = 0, 1, 2


@dataclass(slots=True)
class Stats:
    """One group's statistics (``sg_lb_stats``); shared between passes, so never changed."""

    nr: int
    weight: int
    idle: int
    busy_cpus: int
    ncores: int
    kind: int
    avg_load: float

    @property
    def capacity(self) -> int:
        return self.weight * SCALE

    @property
    def load(self) -> int:
        return self.nr * SCALE

    @property
    def util(self) -> int:
        return self.busy_cpus * SCALE


@dataclass(frozen=True)
class Domain:
    """One domain as plain Python values for the balancing passes."""

    cpus: tuple[int, ...]  # its span, ascending
    groups: list[tuple[tuple[int, ...], int, int]]  # per group: its CPUs (ascending), weight, number of cores
    single: bool  # every group is one CPU (the lowest level)
    weight: int  # the groups' weights summed


def flat_groups(cpu_lists) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """CPU lists laid end to end and where each starts: ``np.add.reduceat(x[flat], starts)`` sums a
    per-CPU ``x`` over each list (every list non-empty)."""
    flat = np.array([c for cpus in cpu_lists for c in cpus], dtype=np.int64)
    starts = np.cumsum([0] + [len(cpus) for cpus in cpu_lists[:-1]]).astype(np.int64)
    return flat, starts


def domains(levels: list[Level], cpu_core: NDArray[np.int64]) -> list[list[Domain]]:
    """Each level's domains (by span index) as :class:`Domain`."""
    out = []
    for lvl in levels:
        out.append([])
        for span, groups in zip(lvl.spans, lvl.groups):
            gs = [(tuple(g.tolist()), len(g), len(set(cpu_core[g].tolist()))) for g in groups]
            out[-1].append(Domain(tuple(span.tolist()), gs, all(w == 1 for _, w, _ in gs), sum(w for _, w, _ in gs)))
    return out


class StatsMemo(dict):
    """One level's group statistics by (weight, cores, tasks, busy CPUs, idle CPUs), the numbers they
    come from: one object for each, shared and never changed; ``one_cpu``: a one-CPU group's by its tasks."""

    def __init__(self, pct: int):
        super().__init__()
        self.pct = pct
        self.one_cpu = OneCpuStats(self)

    def __missing__(self, key: tuple[int, int, int, int, int]) -> Stats:
        w, ncores, s, busy, idle = key
        pct = self.pct
        cap, util, run = w * SCALE, busy * SCALE, s * SCALE
        over = s > w and (cap * 100 < util * pct or cap * pct < run * 100)
        has_cap = s < w or (not (cap * pct < run * 100) and cap * 100 > util * pct)
        kind = OVERLOADED if over else (HAS_SPARE if has_cap else FULLY_BUSY)
        st = self[key] = Stats(s, w, idle, busy, ncores, kind, run * SCALE / cap)
        return st


class OneCpuStats(dict):
    """One level's statistics of a group of one CPU, by the CPU's task count."""

    def __init__(self, memo: StatsMemo):
        super().__init__()
        self.memo = memo

    def __missing__(self, s: int) -> Stats:
        st = self[s] = self.memo[(1, 1, s, int(s > 0), int(s == 0))]
        return st


class Pass:
    """One balancing pass's runqueues: tasks per CPU (``nr``) and each CPU's queue as the pass moves tasks."""

    def __init__(self, sim: View):
        self.sim = sim
        self.nr: list[int] = sim.nr_running.tolist()
        self.moves: dict[int, int] = {}
        self.queues: dict[int, list[int]] = {}  # the CPUs asked for so far (and those tasks moved from or to)

    def queue(self, cpu: int) -> list[int]:
        """The tasks queued on ``cpu`` by ascending id (the pass's own list: do not change it)."""
        q = self.queues.get(cpu)
        if q is None:
            q = self.queues[cpu] = sorted(self.sim.runqueue(cpu))
        return q

    def move(self, t: int, src: int, dst: int) -> None:
        self.queue(src).remove(t)
        insort(self.queue(dst), t)
        self.nr[src] -= 1
        self.nr[dst] += 1
        self.moves[t] = dst
