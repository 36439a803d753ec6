"""Sampling: the counters and the memory system's state at each sample time, into arrays.

A part of :class:`numasim.sim.kernel.Simulation`, which holds the state these
methods share (see docs/architecture.md). The arrays are allocated at the first
sample, one row per sample time, so memory is the machine and pods times the
samples, not the events. The samples are also bounded in bytes (the scenario's
``sample_memory``): where every ``sample_interval`` would need more rows than that
holds, a run samples every ``k`` intervals (:func:`sample_every`; the warm-up's end and
the run's end are sampled whatever ``k``), so memory stays flat in simulated time.
"""

from __future__ import annotations

import numpy as np

from . import core

__all__ = ["Sampling", "MIN_SAMPLES", "sample_times", "n_samples", "sample_every"]

MIN_SAMPLES = 64  # rows kept whatever the budget (a machine so large that they exceed it is the budget check's)


def sample_times(duration_ns: int, warmup_ns: int, every_ns: int) -> list[int]:
    """The sample times: every ``every_ns`` from 0, the warm-up's end and the run's end."""
    return sorted(set(range(0, duration_ns + 1, every_ns)) | {warmup_ns, duration_ns})


def n_samples(duration_ns: int, warmup_ns: int, every_ns: int) -> int:
    """``len(sample_times(...))``, without building them."""
    return duration_ns // every_ns + 1 + len({x for x in (warmup_ns, duration_ns) if x % every_ns or x > duration_ns})


def sample_every(duration_ns: int, warmup_ns: int, sample_ns: int, row_bytes: int, budget_bytes: int) -> int:
    """The interval between samples: ``sample_ns``, or where its samples of ``row_bytes`` each would
    exceed ``budget_bytes`` (and :data:`MIN_SAMPLES`), ``k`` times it with ``k`` =
    ceil(intervals / (rows - 3)): at most the rows the budget holds, the two extra samples included."""
    cap = max(MIN_SAMPLES, budget_bytes // max(row_bytes, 1))
    if n_samples(duration_ns, warmup_ns, sample_ns) <= cap:
        return sample_ns
    return -(-(duration_ns // sample_ns) // (cap - 3)) * sample_ns


class Sampling:
    def _sampler(self):
        self._sample_times = np.zeros(1, dtype=np.int64)  # the first sample, at 0, sets the others (_rows)
        k = 0
        while k < len(self._sample_times):
            t = int(self._sample_times[k])
            if t > self.env.now:
                yield self.env.timeout(t - self.env.now)
            if t == self.duration_ns:
                return  # the run's end: run() samples it after every event of its instant (Simulation.run)
            self._snapshot()
            if self.progress is not None:
                self.progress(t / self.duration_ns)
            k += 1

    def _rows(self, row_bytes: int) -> int:
        """The sample times, set at the first sample from the size of a row (:func:`sample_every`; a
        coarser interval is noted in the run's events); how many there are."""
        every = sample_every(self.duration_ns, self.warmup_ns, self.sample_ns, row_bytes, self.sample_bytes)
        self._sample_times = np.array(sample_times(self.duration_ns, self.warmup_ns, every), dtype=np.int64)
        if every != self.sample_ns:
            self.events.append((0, "sampling", f"every {every / 1e6:g} ms instead of {self.sample_ns / 1e6:g} ms: "
                                f"samples of {row_bytes / 2**10:,.0f} KiB every {self.sample_ns / 1e6:g} ms would "
                                f"exceed sample_memory ({self.sample_bytes / 2**20:g} MiB)"))
        return len(self._sample_times)

    def _log_place(self, now: int, tid: int, cpu: int) -> None:
        """Log that thread ``tid`` went to ``cpu`` (-1: it ended) at ``now``, while the log holds less than its
        share of ``sample_memory``; when it fills, moves are no longer logged (noted in the events) and the
        report's timeline takes each thread's CPU from the samples after that (``Trace.placements_until_ns``),
        so memory stays flat in simulated time."""
        if self.placements_until is not None:
            return
        self.placements.extend((now, tid, cpu))
        if len(self.placements) >= self._place_cap:
            self.placements_until = self.now
            self._event("placements", f"thread moves no longer logged after {len(self.placements) // 3:,} of them "
                        f"(their share of sample_memory, {self.sample_bytes / 2**20:g} MiB); the timeline takes "
                        "each thread's CPU from the samples after this")

    def _snapshot(self) -> None:
        """Record the counters and state at now into the sample arrays, read-only: the counters are
        projected to now (:func:`numasim.sim.core.project`), not integrated, so a run's trajectory
        is the same whatever its sample times (tests/test_sampling.py). Memory a thread first-touched
        since its last integration is placed then (at most one touch step or refresh interval later),
        so a sample's memory is what was placed by its instant. The run's end is sampled after every
        event of its instant, and integrates: every byte touched is then placed; what may follow (the SLA
        search's :meth:`~numasim.sim.kernel.Simulation.advance`) starts from that state, the same whatever
        the sample times."""
        nt = len(self.t_cpu)
        if self.env.now == self.duration_ns:
            self._integrate(range(nt))
        if self._proj is None:
            self._proj = np.empty((len(core.PROJECTED), nt)), np.empty(len(self.c_cpu_busy))
        proj, busy = self._proj
        core.project(self._F, self._I, self._CF, nt, self.env.now, proj, busy)
        ops, cpu, wait, miss, miss_local, pending = proj
        cpu_nodes = np.asarray(self.machine.cpu_nodes)
        rows = self._lmat[cpu_nodes]
        mine = np.zeros(rows.shape, dtype=bool)
        mine[np.arange(cpu_nodes.size), cpu_nodes] = True
        own = rows[mine]
        snap = {
            "ops": ops,
            "cpu": cpu,
            "wait": wait,
            "miss": miss,
            "miss_local": miss_local,
            "miss_node": self.c_miss_node + pending[:, None] * self.r_access,
            "moves": self.c_moves,
            "xmoves": self.c_xmoves,
            "wakeups": self.c_wakeups,
            "faults": self.c_faults,
            "numa_moves": self.c_numa_moves,
            "kernel": self.c_kernel_ns,
            "cpu_busy": busy,
            "pages_moved": self.c_pages_moved,
            "promoted": self.c_promoted,
            "demoted": self.c_demoted,
            "throttled": self.c_throttled,
            "pod_memory": self.memory.pod_bytes(len(self.pods)),
            "thread_cpu": self.v_thread_cpu,
            "thread_active": self.v_thread_active,
            "thread_local": self.r_local,
            "node_load": self.r_node_load,
            "node_util": self.r_node_util,
            "link_load": self.r_link_load,
            "link_util": self.r_link_util,
            "link_traffic": self.r_link_traffic,
            "chiplet_util": self.r_chiplet_util,
            "lines_demand": self.r_lines_demand,
            "lock_util": self.r_lock_util,
            # Mean loaded latency, from the nodes with CPUs, of their own memory and of every other node's
            # (CPU-less ones included: no one reads from a CPU-less node's row), at the last solve (ns).
            "lat_local": float(np.mean(own)),
            "lat_remote": float(rows[~mine].mean()) if (~mine).any() else np.nan,
        }
        i = self._n_samples
        if i == 0:
            n = self._rows(sum(np.asarray(v).nbytes for v in snap.values()))
            for k, v in snap.items():
                v = np.asarray(v)
                self._samples[k] = np.zeros((n,) + v.shape, dtype=v.dtype)
        for k, v in snap.items():
            self._samples[k][i] = v
        self._n_samples = i + 1
