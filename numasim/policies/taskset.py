"""taskset (policy ``taskset``): CPU affinity by OS CPU id, then CFS.

Each pod's threads get a cpulist (``"0-7"``, ``"0-42:2"``), the lists cycled
over the pods in arrival order, resolved through the machine's OS CPU
numbering: on a machine that numbers CPUs alternately across sockets,
``0-7`` spans both nodes. Memory stays first-touch. The affinity takes effect
at start (``at: 0s``) or at a later time, as when taskset is applied to a
JVM that has already touched its heap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field, StrictInt

from ..errors import Problem
from ..model.cpulist import distinct_cpulists, parse_cpulist
from ..model.spec import Duration
from .api import Admission, Decision, SetAffinity
from .cfs import CFS, CFSOptions

if TYPE_CHECKING:
    from .api import PodView, View

__all__ = ["Taskset", "TasksetOptions", "check_cpulists", "cpusets"]

MAX_CPUSET_IDS = 4_000_000  # CPU ids of the distinct cpulists, each a set kept in every simulation


def cpusets(cpus, n_cpus: int) -> list[frozenset[int]]:
    """Each cpulist's CPU ids; a cpulist written twice is one set, shared."""
    sets = distinct_cpulists(cpus, n_cpus)
    return [sets[repr(c)] for c in cpus]


def check_cpulists(cpus, n_cpus: int, key: str) -> list[Problem]:
    """Problems with an option's cpulists (``key[i]``): ids outside the machine, bad syntax, too many ids in all."""
    out = []
    sets: dict[str, frozenset[int]] = {}
    held = 0
    for i, c in enumerate(cpus):
        if repr(c) in sets:
            continue
        try:
            sets[repr(c)] = parse_cpulist(c, n_cpus)
        except ValueError as exc:
            sets[repr(c)] = frozenset()
            out.append(Problem(f"{key}[{i}]", str(exc)))
        held += len(sets[repr(c)])
        if held > MAX_CPUSET_IDS:
            out.append(Problem(f"{key}[{i}]", f"the distinct cpulists up to here hold more than {MAX_CPUSET_IDS:,} "
                                              "CPU ids in all, each kept in every simulation; use fewer or shorter ones"))
            break
    return out


class TasksetOptions(CFSOptions):
    """The cpulists and when they take effect."""

    cpus: list[str | StrictInt | list[StrictInt]] = Field(
        min_length=1, description="cpulists of OS CPU ids ('0-7', '0-42:2'), cycled over the pods in arrival order")
    at: Duration = Field(
        default=0, ge=0, description="when the affinity takes effect (0s: at start)")


class Taskset(CFS):
    """taskset -c CPULIST on each pod, at start or at a given time; then CFS."""

    name = "taskset"
    description = "taskset CPU affinity by OS CPU id (memory stays first-touch), then CFS"
    Options = TasksetOptions

    def __init__(self, options: TasksetOptions, machine, rng):
        super().__init__(options, machine, rng)
        self.cpusets = cpusets(options.cpus, machine.n_cpus)
        self._count = 0
        self._pending: list[tuple[tuple[int, ...], frozenset[int]]] = []
        self._applied = options.at == 0

    @classmethod
    def check(cls, options, machine, pods) -> list[Problem]:
        return check_cpulists(options.cpus, machine.n_cpus, "cpus")

    def admit(self, pod: "PodView", sim: "View") -> Admission:
        cpus = self.cpusets[self._count % len(self.cpusets)]
        self._count += 1
        info = {"cpus": sorted(cpus), "nodes": sorted({int(self.machine.cpu_node[c]) for c in cpus})}
        if self._applied:
            return Admission(affinity=tuple(cpus for _ in pod.tids), info=info)
        self._pending.append((pod.tids, cpus))
        return Admission(info=info)

    def next_tick(self, now: int) -> int | None:
        nxt = super().next_tick(now)
        if not self._applied:
            nxt = self.options.at if nxt is None else min(nxt, self.options.at)
        return nxt

    def tick(self, sim: "View") -> list[Decision]:
        out: list[Decision] = []
        if not self._applied and sim.now >= self.options.at:
            self._applied = True
            out = [SetAffinity(tids, cpus) for tids, cpus in self._pending]
            self._pending = []
            return out
        return super().tick(sim)
