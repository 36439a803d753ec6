"""The runtime's implementation of the policies' read-only :class:`~numasim.policies.api.View`."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from ..model.machine import Machine
from . import idle_pull
from .core import miss_rates
from .layout import F_CPU, F_SHARE, F_WAIT, I_LAST, I_PHASE
from .state import TOUCH, WORK
from .trace import PodInstance

if TYPE_CHECKING:
    from .kernel import Simulation

__all__ = ["SimView"]


class SimView:
    """Read-only view of the simulation state that policies see."""

    def __init__(self, sim: "Simulation"):
        self._sim = sim
        self._ro_of: NDArray[np.int64] | None = None  # the chunk array the cached region views are of
        self._ro_nodes: dict[int, tuple[int, int, NDArray[np.int64]]] = {}

    @property
    def now(self) -> int:
        return int(self._sim.env.now)

    @property
    def machine(self) -> Machine:
        return self._sim.machine

    @property
    def pods(self) -> tuple[PodInstance, ...]:
        return tuple(self._sim.pods)

    @cached_property  # a read-only view of an array the runtime updates in place
    def thread_pod(self) -> NDArray[np.int64]:
        return _ro(np.array(self._sim.t_pod, dtype=np.int64))

    @cached_property  # a read-only view of an array the runtime updates in place
    def thread_cpu(self) -> NDArray[np.int64]:
        """CPU of each thread (the last one it ran on, if asleep; -1 before it starts)."""
        return _ro(self._sim.v_thread_cpu)

    @cached_property  # a read-only view of an array the runtime updates in place
    def thread_active(self) -> NDArray[np.bool_]:
        """Threads on a runqueue (running or waiting for their CPU)."""
        return _ro(self._sim.v_thread_active)

    @property
    def thread_alive(self) -> NDArray[np.bool_]:
        """Threads that have started and not died (running, waiting or asleep)."""
        phase = self._sim._I[I_PHASE]
        return (phase == TOUCH) | (phase == WORK)

    def affinity(self, tid: int) -> frozenset[int] | None:
        return self._sim.t_affinity[tid]

    def allowed(self, tid: int, cpu: int) -> bool:
        aff = self._sim.t_affinity[tid]
        return aff is None or cpu in aff

    @cached_property  # a read-only view of an array the runtime updates in place
    def nr_running(self) -> NDArray[np.int64]:
        """Threads queued on each CPU (running or waiting)."""
        return _ro(self._sim.v_nr_running)

    def runqueue(self, cpu: int) -> list[int]:
        """Threads queued on ``cpu``, in the order they arrived there."""
        return self._sim._runqueue(cpu)

    def pullable(self, cpu: int) -> list[int]:
        """The CPUs with two threads or more queued, one of which may run on ``cpu``, ascending."""
        s = self._sim
        out = np.empty(len(s.nr), dtype=np.int64)
        return out[:idle_pull.pullable(s._I, s._CI, s._A, cpu, out)].tolist()

    def pod_memory(self) -> NDArray[np.int64]:
        """Bytes per pod (rows, by pod index) and node (columns)."""
        return self._sim.memory.pod_bytes(len(self._sim.pods))

    def node_free(self) -> NDArray[np.int64]:
        return self._sim.memory.free()

    @cached_property  # a read-only view of an array the runtime updates in place
    def thread_local_share(self) -> NDArray[np.float64]:
        """Share of each thread's DRAM misses served by its own node (current rates)."""
        return _ro(self._sim.r_local)

    @property
    def thread_miss_rate(self) -> NDArray[np.float64]:
        """DRAM misses per ns each thread makes at its current rate (0 when not running)."""
        s = self._sim
        out = np.empty(s._F.shape[1])
        miss_rates(s._F, s._I, out)
        return out

    @cached_property
    def thread_process(self) -> NDArray[np.int64]:
        return _ro(np.array(self._sim.t_proc, dtype=np.int64))

    @property
    def processes(self) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """Every process: (its pod's index, its threads: its workers, then its collector threads), numbered across pods."""
        sim = self._sim
        return tuple((p, w + h) for p, w, h in zip(sim.proc_pod, sim.proc_tids, sim.proc_helpers))

    def process_regions(self, proc: int) -> list[tuple[int, int, NDArray[np.int64]]]:
        """A process's memory in address order: (region id, owner thread or -1, node of each chunk; -1 untouched).
        Chunks are first-touched in address order: a region's touched chunks are its first ones."""
        return self._regions(self._sim.memory.by_proc.get(proc, ()))

    def process_chunks(self, proc: int, start: int, count: int) -> tuple[NDArray[np.int64], int]:
        """A process's touched chunks (those with a node: a region's first ones) laid end to end in address
        order, from the ``start``-th, at most ``count``: rows region id, chunk index, node; and how many
        touched chunks the process has in all."""
        chunks, total = self._sim.memory.process_chunks(proc, int(start), int(count))
        return _ro(chunks), total

    def process_memory(self, proc: int) -> int:
        """Bytes of a process's memory placed so far."""
        return self._sim.memory.process_bytes(proc)

    def pod_regions(self, pod: int) -> list[tuple[int, int, NDArray[np.int64]]]:
        """A pod's memory in address order: (region id, owner thread or -1, node of each chunk; -1 untouched)."""
        return self._regions(self._sim.memory.by_pod.get(pod, ()))

    def _regions(self, rids: list[int]) -> list[tuple[int, int, NDArray[np.int64]]]:
        """(region id, owner, read-only view of its chunk nodes) of each of ``rids``; the views are made once
        per region (and again if the memory's chunk array was reallocated)."""
        mem = self._sim.memory
        if self._ro_of is not mem.ch:
            self._ro_of, self._ro_nodes = mem.ch, {}
        views = self._ro_nodes
        out = []
        for rid in rids:
            view = views.get(rid)
            if view is None:
                view = views[rid] = (rid, mem.regions[rid].owner, _ro(mem.regions[rid].node))
            out.append(view)
        return out

    def region_weights(self, rid: int) -> NDArray[np.float64] | None:
        """Accesses per byte of each chunk of region ``rid`` relative to the region's mean (hot > 1 > cold);
        None when every chunk is alike."""
        w = self._sim.memory.regions[rid].weight
        return None if w is None else _ro(w)

    def thread_cpu_time(self) -> NDArray[np.float64]:
        """CPU time consumed by each thread so far, ns: its counter plus its share of the time since it was
        last brought up to date (what :func:`numasim.sim.core.integrate` would add; nothing is integrated)."""
        s = self._sim
        since = np.maximum(s.env.now - s._I[I_LAST], 0)
        return _ro(s._F[F_CPU] + s._F[F_SHARE] * since)

    def thread_runnable_time(self) -> NDArray[np.float64]:
        """Time each thread has spent runnable (running or waiting for a CPU) so far, ns (as
        :meth:`thread_cpu_time`: a thread with no share is asleep, not runnable)."""
        s = self._sim
        since = np.where(s._F[F_SHARE] != 0.0, np.maximum(s.env.now - s._I[I_LAST], 0), 0)
        return _ro(s._F[F_CPU] + s._F[F_WAIT] + since)


def _ro(a: NDArray) -> NDArray:
    v = a.view()
    v.setflags(write=False)
    return v
