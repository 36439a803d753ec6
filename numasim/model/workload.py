"""Workload profiles and pod specs (frozen, validated at the edge).

A :class:`WorkloadProfile` carries what the performance model needs to know
about one thread of a workload: its compute work per operation, its last-level
cache misses per operation and how many of them overlap, how its memory is
shared, and who touches that memory first. A :class:`PodSpec` says how many
instances of a workload run, with how many threads, CPUs and how much memory.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from .spec import Cpu, Duration, Size, Spec, Text

__all__ = ["WorkloadProfile", "RequestSpec", "PodSpec", "Resources"]


class RequestSpec(Spec):
    """Requests: units of work whose response time is measured.

    ``closed``: every thread is a client that issues a request of ``ops``
    operations, works it off, then thinks (blocks) for an exponentially
    distributed ``think_ms`` before the next one. ``open``: requests of ``ops``
    operations arrive at each pod as a Poisson stream of ``rate_per_s``; the
    pod's threads are workers that take them first come, first served, and
    block while the queue is empty. A request's response time runs from its
    arrival (the end of the think time) to its completion, so run-queue waits,
    memory locality and bandwidth contention all show up in it.
    """


    mode: Literal["closed", "open"] = Field(default="closed", description="closed: threads are clients; open: Poisson arrivals")
    ops: float = Field(gt=0, le=1e15, description="work per request, in operations")
    think_ms: float = Field(default=1.0, ge=0, le=1e7, description="closed: mean think time between a response and the next request")
    rate_per_s: float | None = Field(default=None, gt=0, le=1e9, description="open: requests per second arriving at each pod")

    @model_validator(mode="after")
    def _check(self) -> "RequestSpec":
        if self.mode == "open" and self.rate_per_s is None:
            raise ValueError("open requests need rate_per_s")
        return self


class WorkloadProfile(Spec):
    """What one thread of a workload does, per operation.

    Time per operation on a core at frequency ``f`` (GHz) is
    ``cycles_per_op / f + llc_misses_per_op * latency * (d + (1 - d) / mlp)
    + coherence_misses_per_op * c2c`` nanoseconds, where ``latency`` is the
    loaded latency of the memory that serves the misses, ``d`` the dependent
    fraction and ``c2c`` the cache-to-cache latency to where the line's last
    writer runs; with a lock (``lock_cycles_per_op``, ``lock_lines_per_op``)
    each operation also takes the lines over from the lock's last holder and
    waits while others hold it (see docs/model.md).
    """


    name: Text = Field(default="custom", max_length=200, description="a name for tables")
    description: Text = Field(default="", max_length=4000, description="free text")
    cycles_per_op: float = Field(ge=1e-3, le=1e12, description="core cycles per operation, DRAM stalls excluded")
    llc_misses_per_op: float = Field(ge=0, le=1e9, description="last-level cache misses served by DRAM per operation")
    mlp: Annotated[float, Field(ge=1.0, le=64.0)] | Literal["hardware"] = Field(
        default=1.0,
        description="memory-level parallelism: independent misses in flight at once, capped by what a hardware "
                    "thread keeps (the machine's thread_mlp and core_mlp); hardware: a prefetchable stream, as many "
                    "as the thread keeps (thread_mlp, or 16 where the machine does not give it)")
    dependent_fraction: float = Field(
        default=0.0, ge=0.0, le=1.0,
        description="share of the misses whose address depends on the previous miss (pointer chasing): they never overlap")
    pipeline_share: float | None = Field(
        default=None, gt=0.0, le=1.0,
        description="share of its core's busiest execution resource (load ports, FMA units, decoders) one thread uses "
                    "while it computes; SMT siblings whose shares add up to at most 1 both run at full speed, so a "
                    "thread that fills its core's load ports alone (1.0) gains nothing from a sibling; none: 1 / the "
                    "machine's smt_yield (two typical compute-bound threads share smt_yield)")
    write_fraction: float = Field(
        default=0.0, ge=0.0, le=4.0,
        description="dirty lines written back to memory per miss (STREAM copy 0.5, triad 0.33 with write-allocate); they load memory and links, not the core")
    coherence_misses_per_op: float = Field(
        default=0.0, ge=0.0, le=1e9,
        description="loads per operation that hit a line another thread of the pod has modified (perf c2c HITM): locks, counters, shared written data")
    lock_cycles_per_op: float = Field(
        default=0.0, ge=0.0, le=1e12,
        description="cycles of each operation (counted in cycles_per_op) spent holding one lock that all threads of the "
                    "process take, once per operation: only one thread at a time runs them, so the others wait")
    lock_lines_per_op: float = Field(
        default=0.0, ge=0.0, le=1e6,
        description="cache lines (the lock word, the data it protects) each operation takes over from the lock's "
                    "previous holder while it holds the lock: cache-to-cache transfers that serialise with the "
                    "critical section (0 with lock_cycles_per_op 0: no lock)")
    shared_fraction: float = Field(
        default=1.0, ge=0.0, le=1.0,
        description="share of the pod's memory (and of its misses) that all its threads use; the rest is private per thread",
    )
    private_access_share: float | None = Field(
        default=None, ge=0.0, le=1.0,
        description="share of the misses that go to the threads' private memory, when it differs from its share of "
                    "the bytes (a small, hot per-thread data set in a large heap); none: 1 - shared_fraction")
    private_touch: Literal["owner", "pod", "main"] = Field(
        default="owner",
        description="who first touches a thread's private memory: the thread itself; the pod's threads at large "
                    "(a copying garbage collector's threads promote each thread's long-lived objects wherever they "
                    "run), so it lands on the nodes where the pod runs, round robin over its threads; or main: its "
                    "process's first thread (a program that clears one buffer before its workers each take a slice "
                    "of it), so it lands on the node that thread runs on")
    hot_fraction: float | None = Field(
        default=None, gt=0.0, lt=1.0,
        description="share of the pod's memory that is hot: it receives hot_access_share of the accesses (spread evenly "
                    "over the address space, so first touch places hot and cold memory alike); none: every byte alike")
    hot_access_share: float = Field(
        default=0.9, gt=0.0, lt=1.0, description="share of the accesses that go to the hot memory (with hot_fraction)")
    touch: Literal["threads", "main", "work"] = Field(
        default="threads",
        description="who first touches the memory, and when: threads: every thread its share at start-up, before it "
                    "works; main: the first thread all of the shared memory at start-up, the others start once it is "
                    "done; work: every thread its share while it works, at touch_gbps of its CPU time, so the memory "
                    "grows where the thread runs at that moment (a heap that grows as the program allocates)",
    )
    touch_nodes: list[Annotated[int, Field(ge=0, le=4095)]] | None = Field(
        default=None, min_length=1, max_length=4096,
        description="the nodes the first touch is bound to (a program that calls set_mempolicy(MPOL_BIND) around "
                    "its initial clearing and MPOL_DEFAULT after it, as autonumabench's numa01 does): the pages land "
                    "there wherever the toucher runs, nearest first, and NUMA balancing may move them later; none: "
                    "the pod's memory policy")
    touch_gbps: float = Field(
        default=2.0, ge=0.001, le=10_000,
        description="GB/s one thread writes when it first touches its memory (with touch: work, GB of new memory "
                    "per second of the thread's CPU time, its allocation rate while its memory grows)")
    transient_fraction: float = Field(
        default=0.0, ge=0.0, le=1.0,
        description="share of the misses that go to short-lived buffers allocated and freed within a request "
                    "(malloc'd per request, larger than the allocator keeps): their pages are allocated fresh, by "
                    "the pod's memory policy, on the node where the thread runs, so they are local under the default "
                    "policy wherever the thread has moved; they are not counted in the pod's memory")
    requests: RequestSpec | None = Field(
        default=None,
        description="how the threads' work arrives in requests (see Requests); none: the threads never block",
    )
    waker: Literal["pod", "timer"] = Field(
        default="pod", description="who wakes a blocked thread: another thread of its pod, or a timer on its own CPU"
    )
    pause_interval_ms: float | None = Field(
        default=None, gt=0, le=1e7,
        description="mean time between stop-the-world pauses in which all of a pod's threads block at once (a JVM's GC safepoints); none: no pauses",
    )
    pause_ms: float = Field(default=20.0, gt=0, le=1e6, description="mean length of a stop-the-world pause")
    restart_interval_ms: (Annotated[float, Field(gt=0, le=1e9)]
                          | Annotated[list[Annotated[float, Field(gt=0, le=1e9)]], Field(min_length=1, max_length=10_000)]
                          | None) = Field(
        default=None,
        description="every this long, each process's worker threads end and new threads take their places (a "
                    "benchmark that starts its threads anew at each measurement point, as SPECjbb2005 does; a list: "
                    "the successive intervals, the last one repeating, for points of different lengths): each "
                    "new thread is placed as a new thread by the policy, reloads its cache unless it starts on its "
                    "predecessor's core, has no NUMA-balancing statistics yet, and takes over its predecessor's "
                    "memory and work; none: threads live for the whole run (docs/model.md, Threads started anew)",
    )
    gc_threads: int | None = Field(
        default=None, ge=0, le=1024,
        description="threads of each process's parallel collector (a JVM's ParallelGCThreads): they sleep, and run "
                    "during each stop-the-world pause while the workers wait, reading and writing the process's "
                    "shared memory as the workers do; their work counts in no throughput or latency, their CPU "
                    "time in utilisation and the pod's CPU quota; none or 0: a pause only stops the workers "
                    "(docs/model.md, Collector threads)",
    )
    cache_footprint_mib: float = Field(
        default=1.0, ge=0, le=2**20, description="cache contents a thread must reload after it moves to another core"
    )
    sources: dict[Text, Text] = Field(default_factory=dict, description="where each parameter comes from")

    @field_validator("touch_nodes")
    @classmethod
    def _distinct_nodes(cls, nodes: list[int] | None) -> list[int] | None:
        return None if nodes is None else sorted(set(nodes))  # a node named twice is one node

    @model_validator(mode="after")
    def _check_private(self) -> "WorkloadProfile":
        if self.private_access_share and self.shared_fraction >= 1.0:
            raise ValueError("private_access_share needs private memory: a shared_fraction below 1")
        if self.gc_threads and self.pause_interval_ms is None:
            raise ValueError("gc_threads needs pause_interval_ms: the collector's threads run only during pauses")
        if self.lock_cycles_per_op > self.cycles_per_op:
            raise ValueError(f"lock_cycles_per_op ({self.lock_cycles_per_op:g}) is part of cycles_per_op "
                             f"({self.cycles_per_op:g}): it can be at most that")
        return self


class Resources(Spec):
    """CPU and memory amounts, Kubernetes-style (used by requests)."""


    cpu: Cpu | None = Field(default=None, ge=0.001, le=65_536, description="CPUs: 2, 0.5 or '500m'")
    memory: Size | None = Field(default=None, gt=0, description="memory, e.g. 4Gi")


class PodSpec(Spec):
    """A group of identical pods (containers or VMs) running one workload."""


    name: str = Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                      description="pod name (at most 253 characters, as a Kubernetes object's); replicas are NAME-0, NAME-1, ...")
    replicas: int = Field(default=1, ge=1, le=10_000, description="identical pods")
    threads: int = Field(ge=1, le=4096, description="busy threads (JVM workers, vCPUs in use)")
    processes: int = Field(
        default=1, ge=1, le=4096,
        description="processes (containers) the pod's threads are split into, as evenly as they go: each has its "
                    "own address space, with its share of the memory, and its own NUMA-balancing group; they share "
                    "the pod's CPU limit, placement and memory policy")
    cpu_limit: Cpu | None = Field(default=None, ge=0.001, le=65_536, description="CPUs (2, 0.5 or '500m'); defaults to threads")
    memory: Size = Field(gt=0, le=2**50, description="memory the pod touches, e.g. '42GB'")
    profile: str = Field(min_length=1, description="a workload preset name or a key of the scenario's workloads")
    start: Duration = Field(default=0, ge=0, description="arrival time of the first replica (every replica must "
                                                         "arrive before the run ends)")
    stagger: Duration = Field(default=0, ge=0, description="delay between successive replicas' arrivals")
    requests: Resources | None = Field(default=None, description="Kubernetes requests; default: equal to limits")

    @model_validator(mode="after")
    def _check_processes(self) -> "PodSpec":
        if self.processes > self.threads:
            raise ValueError(f"processes ({self.processes}) must not exceed threads ({self.threads}): each process runs at least one")
        return self

    @property
    def cpus(self) -> float:
        """The pod's CPU limit, defaulting to its thread count."""
        return self.cpu_limit if self.cpu_limit is not None else float(self.threads)
