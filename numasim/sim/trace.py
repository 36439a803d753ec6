"""What a run records: pod records and the trace the analysis reads (below the runtime)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from ..model.machine import Machine
from ..model.workload import PodSpec, WorkloadProfile
from ..policies.api import Admission, MemPolicy

__all__ = ["PodInstance", "Trace", "number_threads", "ResponseTimes", "BIN_WIDTH", "LOG_STEP", "N_BINS"]

BIN_WIDTH = 0.01  # relative width of a response-time bin: percentiles are within half of it
LOG_STEP = math.log1p(BIN_WIDTH)
N_BINS = 4096  # bins per pod: up to (1 + BIN_WIDTH)^4096 ns, about 15 years


@dataclass
class PodInstance:
    """One running (or refused) pod: a replica of a :class:`PodSpec`."""

    index: int
    name: str
    group: str
    replica: int
    spec: PodSpec
    profile: WorkloadProfile
    arrival_ns: int
    tids: tuple[int, ...] = ()
    status: str = "pending"  # pending | running | rejected | failed
    reason: str = ""
    admission: Admission | None = None
    procs: tuple[tuple[int, ...], ...] = ()  # the threads of each of its processes
    helpers: tuple[tuple[int, ...], ...] = ()  # each process's collector threads (numbered after every pod's workers)
    mempolicy: MemPolicy = field(default_factory=MemPolicy)

    @property
    def threads(self) -> int:
        return self.spec.threads

    @property
    def all_tids(self) -> tuple[int, ...]:
        """Its workers, then its processes' collector threads."""
        return self.tids + tuple(t for h in self.helpers for t in h)

    @property
    def cpus(self) -> float:
        return self.spec.cpus

    @property
    def memory(self) -> int:
        return self.spec.memory



def number_threads(pods: list[PodInstance]) -> tuple[int, list[int], list[tuple[int, ...]], list[tuple[int, ...]], list[int]]:
    """Number every thread and process of ``pods`` (setting each pod's ``tids``, ``procs`` and ``helpers``):
    the workers first, pod after pod, each pod's split into its processes as evenly as they go; then each
    process's collector threads (``gc_threads``), so that a pod's workers stay one run of numbers
    (``layout.P_FIRST``), the only threads the compiled code walks by pod. Returns the number of
    workers, each process's pod, workers and collector threads, and each thread's process."""
    proc_pod: list[int] = []
    proc_tids: list[tuple[int, ...]] = []
    tid = 0
    for p in pods:
        p.tids = tuple(range(tid, tid + p.spec.threads))
        tid += p.spec.threads
        k, extra = divmod(p.spec.threads, p.spec.processes)
        procs, start = [], 0
        for j in range(p.spec.processes):
            n_j = k + (1 if j < extra else 0)
            procs.append(p.tids[start:start + n_j])
            start += n_j
        p.procs = tuple(procs)
        proc_pod += [p.index] * len(procs)
        proc_tids += procs
    n_workers = tid
    proc_helpers: list[tuple[int, ...]] = []
    for p in pods:
        k = p.profile.gc_threads or 0
        p.helpers = tuple(tuple(range(tid + j * k, tid + (j + 1) * k)) for j in range(len(p.procs)))
        tid += k * len(p.procs)
        proc_helpers += p.helpers
    t_proc = [0] * tid
    for proc, members in enumerate(proc_tids):
        for t in members + proc_helpers[proc]:
            t_proc[t] = proc
    return n_workers, proc_pod, proc_tids, proc_helpers, t_proc

@dataclass
class Trace:
    """What a run recorded; :func:`numasim.analysis.metrics.summarize` derives metrics from it."""

    machine: Machine
    policy: str
    duration_ns: int
    warmup_ns: int
    pods: list[PodInstance]
    thread_pod: NDArray[np.int64]
    sample_times: NDArray[np.int64]
    samples: dict[str, NDArray]
    placements: NDArray[np.int64]  # rows (time, tid, cpu) in time order; cpu -1 when the thread dies
    affinity_log: list[tuple[int, int, frozenset[int] | None]]  # (time, tid, cpus)
    quota_log: list[tuple[int, int, float]]  # (period start, pod, CPU ns used in the period)
    latencies: "ResponseTimes"  # requests completed in the measurement window, per pod
    events: list[tuple[int, str, str]]  # (time, kind, text)
    n_events: int
    n_solves: int
    placements_until_ns: int | None = None  # when the move log filled (sample_memory); None: it did not


class ResponseTimes:
    """Response times of the requests completed from ``since_ns`` on, per pod, as histograms.

    Each pod keeps a count per logarithmic bin (bin ``k`` holds values in
    ``[(1 + BIN_WIDTH)^k, (1 + BIN_WIDTH)^(k + 1))`` ns), the number of requests and
    their exact sum: memory grows with the number of pods, not with how many requests
    there are or how long the run is. Percentiles are read at the middle of their
    bin, so they are within ``BIN_WIDTH / 2`` of the exact order statistic. The compiled
    request completion (:func:`numasim.sim.events._complete`) adds to the arrays
    (:meth:`arrays`); the last bin also takes anything longer (about 15 years).
    """

    def __init__(self, n_pods: int, since_ns: int):
        self.since_ns = since_ns
        self.hist = np.zeros((n_pods, N_BINS), dtype=np.int32)
        self.count = np.zeros(n_pods, dtype=np.int64)
        self.total_ns = np.zeros(n_pods, dtype=np.int64)
        self._since = np.array([since_ns], dtype=np.int64)

    def arrays(self) -> tuple:
        """What the compiled code adds to: counts per pod and bin, requests and their sum per pod, ``since_ns``."""
        return self.hist, self.count, self.total_ns, self._since

    @property
    def bins(self) -> list[dict[int, int]]:
        """Each pod's histogram as {bin: count} of the bins used."""
        return [{int(k): int(h[k]) for k in np.flatnonzero(h)} for h in self.hist]

    def summary(self, pods: list[int], percentiles: dict[str, float], window_s: float) -> dict[str, float] | None:
        """Requests, requests/s, mean and percentiles (ms) of the pods ``pods`` together; None if none completed."""
        n = int(self.count[pods].sum())
        if n == 0:
            return None
        merged = self.hist[pods].sum(axis=0, dtype=np.int64)
        keys = np.flatnonzero(merged).tolist()
        cum = np.cumsum(merged[keys])
        out = {"requests": float(n), "requests_per_s": n / window_s,
               "mean_ms": int(self.total_ns[pods].sum()) / n / 1e6}
        for name, q in percentiles.items():
            rank = q / 100.0 * (n - 1)  # as numpy's default (linear) percentile, to the bin
            k = keys[int(np.searchsorted(cum, rank, side="right"))]
            out[name] = math.exp((k + 0.5) * LOG_STEP) / 1e6
        return out
