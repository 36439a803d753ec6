"""What a run records: pod records and the trace the analysis reads (below the runtime)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from ..model.machine import Machine
from ..model.workload import PodSpec, WorkloadProfile
from ..policies.api import Admission, MemPolicy

__all__ = ["PodInstance", "Trace"]


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
    shared_rid: int = -1
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
    placements: list[tuple[int, int, int]]  # (time, tid, cpu); cpu -1 when the thread dies
    affinity_log: list[tuple[int, int, frozenset[int] | None]]  # (time, tid, cpus)
    migrations: list[tuple[int, int, int, int]]  # (time, tid, from cpu, to cpu)
    page_moves: list[tuple[int, int, int, int, int]]  # (time, pod, src, dst, bytes)
    quota_log: list[tuple[int, int, float]]  # (period start, pod, CPU ns used in the period)
    latencies: NDArray[np.int64]  # rows (completion time, pod, response time ns)
    events: list[tuple[int, str, str]]  # (time, kind, text)
    n_events: int
    n_solves: int
