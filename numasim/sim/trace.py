"""What a run records: pod records and the trace the analysis reads (below the runtime)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from ..model.machine import Machine
from ..model.workload import PodSpec, WorkloadProfile
from ..policies.api import Admission, MemPolicy

__all__ = ["PodInstance", "Trace", "ResponseTimes", "BIN_WIDTH"]

BIN_WIDTH = 0.01  # relative width of a response-time bin: percentiles are within half of it


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
    mempolicy: MemPolicy = field(default_factory=MemPolicy)

    @property
    def threads(self) -> int:
        return self.spec.threads

    @property
    def cpus(self) -> float:
        return self.spec.cpus

    @property
    def memory(self) -> int:
        return self.spec.memory


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


_LOG_STEP = math.log1p(BIN_WIDTH)


class ResponseTimes:
    """Response times of the requests completed from ``since_ns`` on, per pod, as histograms.

    Each pod keeps a count per logarithmic bin (bin ``k`` holds values in
    ``[(1 + BIN_WIDTH)^k, (1 + BIN_WIDTH)^(k + 1))`` ns), the number of requests and
    their exact sum: memory grows with the spread of the values, not with how many
    there are or how long the run is. Percentiles are read at the middle of their
    bin, so they are within ``BIN_WIDTH / 2`` of the exact order statistic.
    """

    def __init__(self, n_pods: int, since_ns: int):
        self.since_ns = since_ns
        self.bins: list[dict[int, int]] = [{} for _ in range(n_pods)]
        self.count = [0] * n_pods
        self.total_ns = [0] * n_pods

    def add(self, pod: int, now: int, value_ns: int) -> None:
        if now < self.since_ns:
            return
        k = int(math.log(max(value_ns, 1)) / _LOG_STEP)
        h = self.bins[pod]
        h[k] = h.get(k, 0) + 1
        self.count[pod] += 1
        self.total_ns[pod] += value_ns

    def summary(self, pods: list[int], percentiles: dict[str, float], window_s: float) -> dict[str, float] | None:
        """Requests, requests/s, mean and percentiles (ms) of the pods ``pods`` together; None if none completed."""
        n = sum(self.count[p] for p in pods)
        if n == 0:
            return None
        merged: dict[int, int] = {}
        for p in pods:
            for k, c in self.bins[p].items():
                merged[k] = merged.get(k, 0) + c
        keys = sorted(merged)
        cum = np.cumsum([merged[k] for k in keys])
        out = {"requests": float(n), "requests_per_s": n / window_s,
               "mean_ms": sum(self.total_ns[p] for p in pods) / n / 1e6}
        for name, q in percentiles.items():
            rank = q / 100.0 * (n - 1)  # as numpy's default (linear) percentile, to the bin
            k = keys[int(np.searchsorted(cum, rank, side="right"))]
            out[name] = math.exp((k + 0.5) * _LOG_STEP) / 1e6
        return out
