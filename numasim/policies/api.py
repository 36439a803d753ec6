"""The policy protocol, the decisions a policy returns, and the registry.

A policy decides; the engine carries the decision out, checks it and charges
for it (house rule 2). A policy sees the simulation through a read-only
:class:`View` (implemented by :class:`numasim.sim.view.SimView`) and answers
four questions:

* :meth:`Policy.admit`: may this pod run, and with which CPU affinity, memory
  policy and execution overhead?
* :meth:`Policy.place`: on which CPU does this new (or displaced) thread go?
* :meth:`Policy.next_tick` / :meth:`Policy.tick`: when should it be called
  again, and what does it want to change then (thread moves, page migration,
  affinity or memory-policy changes)?
* :meth:`Policy.slice_ns`: how long is a time slice on a CPU shared by
  ``n`` threads (sets the context-switch overhead)?

This module is the whole contract: a policy imports it and nothing of the
runtime. Policies register by name in :mod:`numasim.policies.registry`; other
packages add policies through the entry-point group ``numasim.policies``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import numpy as np
from numpy.typing import NDArray
from pydantic import ConfigDict
from ..model.spec import Spec

from ..errors import Problem

if TYPE_CHECKING:
    from ..model.machine import Machine
    from ..model.workload import PodSpec

PAGE = 4096  # bytes per base page
CHUNK = 2 * 2**20  # memory is placed and migrated in chunks of one transparent huge page
PULL_MAX_QUEUE = 3  # PullOne acts while no CPU of its domain holds more threads than this

__all__ = [
    "Policy",
    "PolicyOptions",
    "Admission",
    "MemPolicy",
    "Overhead",
    "Move",
    "PullOne",
    "WakeAffine",
    "LeastLoaded",
    "SetAffinity",
    "MigratePages",
    "SetMemPolicy",
    "MoveChunks",
    "Charge",
    "Decision",
    "View",
    "PodView",
    "PAGE",
    "CHUNK",
    "MAX_TICKS_PER_S",
]


# The most ticks a policy may ask for a simulated second (numasim's own: at most 1,000 of CFS's
# balancer, 100 of NUMA balancing, ESXi's rebalance every 1 ms or more); the estimate counts them.
MAX_TICKS_PER_S = 10_000


class PolicyOptions(Spec):
    """Base class of a policy's options (validated from the scenario)."""

    model_config = ConfigDict(validate_default=True)  # with Spec's: frozen, no unknown keys, finite


@dataclass(frozen=True)
class MemPolicy:
    """A memory allocation policy, as set_mempolicy(2) / numactl(8) know it.

    ``local`` allocates on the node of the CPU that first touches a page and
    falls back to the nearest node with free memory; ``preferred`` tries
    ``nodes[0]`` first, then falls back by distance; ``bind`` allocates only
    from ``nodes`` (nearest first) and fails when they are full;
    ``interleave`` spreads pages round-robin over ``nodes``; with ``weights`` (one
    per node, as in /sys/kernel/mm/mempolicy/weighted_interleave/nodeN since Linux
    6.9) node ``nodes[k]`` takes ``weights[k]`` pages in each round.

    ``numa_balancing``: whether NUMA balancing may move the memory toward the CPUs
    that use it (``mpol_misplaced`` acts only with ``MPOL_F_MOF``/``MPOL_F_MORON``), and,
    from Linux 3.13, whether it scans the memory at all: memory it may not move takes no
    hinting faults, so it gives its task no fault statistics and no task placement.
    None, the kernel's rule: yes for the default local policy, no for a policy set
    explicitly with set_mempolicy(2) or mbind(2) (numactl). True for ``bind`` is
    ``MPOL_F_NUMA_BALANCING`` (numactl --balancing, Linux 5.12+), or a cgroup's
    ``cpuset.mems`` under the default policy: pages then move only to a node of
    ``nodes``.
    """

    kind: Literal["local", "preferred", "bind", "interleave"] = "local"
    nodes: tuple[int, ...] = ()
    weights: tuple[int, ...] = ()
    numa_balancing: bool | None = None

    @property
    def migrates(self) -> bool:
        """Whether NUMA balancing may migrate this memory at all."""
        return self.kind == "local" if self.numa_balancing is None else self.numa_balancing


@dataclass(frozen=True)
class Overhead:
    """Execution overhead of a pod's threads (e.g. virtualization).

    ``cpu`` stretches compute cycles and ``memory`` stretches DRAM-miss time
    (for instance two-dimensional page walks under nested paging), each as a
    fraction: 0.02 means 2% longer.
    """

    cpu: float = 0.0
    memory: float = 0.0


@dataclass(frozen=True)
class Admission:
    """A policy's answer to a pod's arrival.

    ``affinity`` holds one CPU set per thread (``None``: any CPU). ``cpu_quota``
    enforces a CPU limit with CFS bandwidth control: the pod's threads together
    may use ``cpu_quota`` x 100 ms of CPU time per 100 ms period, then wait for
    the next period (Documentation/scheduler/sched-bwc.rst). A rejected pod
    never runs; ``reason`` is reported in the results. ``info`` is a note reported
    with the pod's placement: plain JSON data (str keys; strings, finite numbers,
    bools, None, lists, dicts), at most 65,536 characters as JSON.
    """

    accepted: bool = True
    reason: str = ""
    affinity: tuple[frozenset[int] | None, ...] | None = None
    mempolicy: MemPolicy = field(default_factory=MemPolicy)
    overhead: Overhead = field(default_factory=Overhead)
    cpu_quota: float | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Move:
    """Move thread ``tid`` to OS CPU ``cpu``; ``numa`` marks a move made for NUMA locality."""

    tid: int
    cpu: int
    numa: bool = False


@dataclass(frozen=True)
class PullOne:
    """An idle pull the runtime runs itself, compiled, when a CPU falls idle (:meth:`Policy.idle_rule`):
    from the busiest CPU of the idle CPU's domain, if it has two threads or more, one queued
    thread other than the running one (both at random) that may run on the idle CPU moves
    there; if none may, from the next busiest (Linux's newidle balancing at a lowest domain of
    one-CPU groups). It acts only while no CPU of the domain holds more than
    ``PULL_MAX_QUEUE`` threads (one move is then the kernel's imbalance). When it moves
    nothing, the policy's :meth:`Policy.idle` is asked.
    """

    span: NDArray[np.int64]  # per CPU, the domain it pulls within (CPUs with the same number)


@dataclass(frozen=True)
class WakeAffine:
    """CFS's wake-up placement, which the runtime runs itself, compiled, for every wake-up
    (:meth:`Policy.wake_rule`): ``wake_affine`` then ``select_idle_sibling`` over the
    policy's tables (:meth:`numasim.policies.rules.WakeTables.packed`). Where it finds no CPU
    the thread may use, the policy's :meth:`Policy.wake` is asked."""

    tables: NDArray[np.int64]


@dataclass(frozen=True)
class LeastLoaded:
    """A wake-up placement the runtime runs itself, compiled (:meth:`Policy.wake_rule`): the CPU
    the thread may use with the fewest threads queued, then, on a machine with SMT, the fewest
    queued on the other hardware threads of its core, then the lowest number
    (:func:`numasim.policies.rules.least_loaded`). It always finds a CPU."""


@dataclass(frozen=True)
class SetAffinity:
    """Restrict threads to ``cpus`` (as sched_setaffinity / taskset do)."""

    tids: tuple[int, ...]
    cpus: frozenset[int]


@dataclass(frozen=True)
class MigratePages:
    """Copy up to ``nbytes`` of pod ``pod``'s memory to node ``dst``.

    Pages come from every other node in proportion to what the pod has there;
    the copy runs at ``rate_gbps`` (GB/s) and loads the memory controllers and
    the interconnect it crosses. A later request for the same pod replaces it.
    """

    pod: int
    dst: int
    nbytes: int
    rate_gbps: float


@dataclass(frozen=True)
class SetMemPolicy:
    """Change the memory policy of pod ``pod`` for its future allocations."""

    pod: int
    mempolicy: MemPolicy


@dataclass(frozen=True)
class MoveChunks:
    """Migrate chunks ``chunks`` of memory region ``region`` to node ``dst`` now.

    The copy is done by thread ``tid`` (as NUMA balancing migrates pages in the
    faulting task's context): it costs that thread ``bytes / copy_gbps`` ns of CPU
    time; ``tid`` -1 is the reclaim thread of the node the chunks leave (demotion), which
    takes that time from the node's least loaded CPU when none of its CPUs is idle.
    Chunks that do not fit on ``dst`` stay where they are.
    """

    region: int
    chunks: tuple[int, ...]
    dst: int
    tid: int
    copy_gbps: float


@dataclass(frozen=True)
class Charge:
    """Charge thread ``tid`` ``ns`` of CPU time for kernel work (e.g. ``faults`` hinting faults)."""

    tid: int
    ns: float
    faults: int = 0


Decision = Move | SetAffinity | MigratePages | SetMemPolicy | MoveChunks | Charge


class PodView(Protocol):
    """What a policy may read of a pod (the runtime's pod records satisfy it)."""

    @property
    def index(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def tids(self) -> tuple[int, ...]: ...
    @property
    def threads(self) -> int: ...
    @property
    def cpus(self) -> float: ...
    @property
    def memory(self) -> int: ...
    @property
    def spec(self) -> "PodSpec": ...


class View(Protocol):
    """The read-only state a policy sees; arrays are read-only views, indexed by thread or CPU."""

    @property
    def now(self) -> int: ...
    @property
    def machine(self) -> "Machine": ...
    @property
    def pods(self) -> tuple[PodView, ...]: ...
    @property
    def thread_pod(self) -> NDArray[np.int64]: ...
    @property
    def thread_cpu(self) -> NDArray[np.int64]: ...
    @property
    def thread_active(self) -> NDArray[np.bool_]: ...
    @property
    def thread_alive(self) -> NDArray[np.bool_]: ...
    @property
    def nr_running(self) -> NDArray[np.int64]: ...
    @property
    def thread_local_share(self) -> NDArray[np.float64]: ...
    @property
    def thread_miss_rate(self) -> NDArray[np.float64]: ...
    def affinity(self, tid: int) -> frozenset[int] | None: ...
    def allowed(self, tid: int, cpu: int) -> bool: ...
    def runqueue(self, cpu: int) -> list[int]: ...
    def pullable(self, cpu: int) -> list[int]: ...
    def pod_memory(self) -> NDArray[np.int64]: ...
    def node_free(self) -> NDArray[np.int64]: ...
    def pod_regions(self, pod: int) -> list[tuple[int, int, NDArray[np.int64]]]: ...
    @property
    def thread_process(self) -> NDArray[np.int64]: ...
    @property
    def processes(self) -> tuple[tuple[int, tuple[int, ...]], ...]: ...
    def process_regions(self, proc: int) -> list[tuple[int, int, NDArray[np.int64]]]: ...
    def process_chunks(self, proc: int, start: int, count: int) -> tuple[NDArray[np.int64], int]: ...
    def process_memory(self, proc: int) -> int: ...
    def region_weights(self, rid: int) -> NDArray[np.float64] | None: ...
    def thread_cpu_time(self) -> NDArray[np.float64]: ...
    def thread_runnable_time(self) -> NDArray[np.float64]: ...


class Policy(ABC):
    """Base class of scheduling policies.

    Subclasses set ``name`` (the registry key), optionally ``Options`` (a
    :class:`PolicyOptions` subclass) and implement :meth:`place`. The
    defaults admit every pod with no affinity and local allocation, never
    tick, and use a 4 ms slice.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Options: ClassVar[type[PolicyOptions]] = PolicyOptions
    #: When :meth:`idle` may have something to do: ``"always"``, or ``"overloaded"``: only while
    #: some CPU has two or more threads queued (an idle balancer that only pulls queued threads,
    #: as Linux's newidle balancing does not run while no runqueue is overloaded). The runtime
    #: does not call :meth:`idle` when it cannot act, nor at all if the policy does not define it.
    idle_when: ClassVar[Literal["always", "overloaded"]] = "always"

    def __init__(self, options: PolicyOptions, machine: "Machine", rng: np.random.Generator):
        self.options = options
        self.machine = machine
        self.rng = rng

    @classmethod
    def check(cls, options: PolicyOptions, machine: "Machine", pods: list["PodSpec"]) -> list[Problem]:
        """Check options against the machine and pods; return problems (paths relative to options)."""
        return []

    def admit(self, pod: "PodView", sim: "View") -> Admission:
        """Decide whether and how ``pod`` runs. Called once, when it arrives."""
        return Admission()

    @abstractmethod
    def place(self, tid: int, sim: "View") -> int:
        """Choose the CPU for thread ``tid`` (new, or displaced by an affinity change)."""

    def restarted(self, tid: int, sim: "View") -> None:
        """Thread ``tid`` ended and a new thread takes its place (the workload's ``restart_interval_ms``):
        forget what the policy keeps about the old one. :meth:`place` is asked for the new one's CPU next."""

    def wake(self, tid: int, waker_cpu: int | None, sim: "View") -> int:
        """Choose the CPU for thread ``tid`` waking up (it last ran on ``sim.thread_cpu[tid]``).

        ``waker_cpu`` is the CPU of the thread that woke it, or ``None`` for a
        timer or I/O wakeup. The default places it as a new thread.
        """
        return self.place(tid, sim)

    def idle(self, cpu: int, sim: "View") -> list["Decision"]:
        """``cpu`` has just become idle: return decisions (e.g. pull a thread), if any."""
        return []

    def wake_rule(self) -> WakeAffine | LeastLoaded | None:
        """A wake-up placement the runtime runs itself, without a call into Python, instead of
        :meth:`wake` (which it then asks only when the rule finds no CPU); ``None`` for none.
        It must choose what :meth:`wake` would. Asked once, at start."""
        return None

    def idle_rule(self) -> PullOne | None:
        """An idle pull the runtime runs itself, without a call into Python, before :meth:`idle`
        (which it then asks only if the pull found nothing); ``None`` for none. Asked once, at start."""
        return None

    def next_tick(self, now: int) -> int | None:
        """Absolute time (ns) at which :meth:`tick` should run next, or ``None``.

        At most ``MAX_TICKS_PER_S`` ticks a simulated second on average (with a first second's
        allowance); a policy that asks for more is stopped with a :class:`~numasim.PolicyError`."""
        return None

    def tick(self, sim: "View") -> list[Decision]:
        """Periodic work: return the decisions to carry out now."""
        return []

    def slice_ns(self, nr_running: int) -> int:
        """Length of a time slice when ``nr_running`` threads share one CPU."""
        return 4_000_000
