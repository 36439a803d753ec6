"""Linux CFS (policy ``cfs``): fork/exec placement and periodic load balancing.

Follows kernel/sched/fair.c (v6.x); docs/model.md lists what is kept and
what is simplified. In short: per-CPU runqueues shared fairly; scheduling
domains from the machine's topology (:mod:`numasim.policies.domains`);
fork and exec placement by ``sched_balance_find_dst_cpu`` (idlest group,
top-down, with the NUMA "stay local while the imbalance is small" rule);
periodic balancing per domain and group at ``sd_weight`` ms (x ``busy_factor``
when busy) with the group classification, ``imbalance_pct`` tests,
``calculate_imbalance`` cases, ``nr_balance_failed`` escalation and active
balancing. Memory is the default local (first-touch) policy; CFS knows
nothing of where a thread's pages are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
from pydantic import BeforeValidator, Field, field_validator, model_validator

from ..model.presets import policy_defaults
from .api import Decision, Move, Policy, PolicyOptions, WakeAffine
from .balance import LoadBalancer, _Entity
from .fork import ForkPlacement
from .balance_pass import StatsMemo, domains
from .rules import WakeTables, wake_cpu
from .domains import Level, build_levels
from .kernels import settings as kernel_settings, version_text
from .numab import NumaBalancing

if TYPE_CHECKING:
    from .api import View
    from ..model.machine import Machine

__all__ = ["CFS", "CFSOptions"]

_D = policy_defaults("cfs")
# Upper bounds keep every period a finite number of nanoseconds: the kernel's sched_latency_ns and
# min_granularity_ns sysctls took 0.1 ms to 1 s (kernel/sysctl.c before 5.13: min/max_sched_granularity_ns);
# NUMA balancing's periods have no kernel bound, a day is far beyond any run.
_DAY_MS = 86_400_000.0



# v3.8 kernel/sched/fair.c: sysctl_numa_balancing_scan_period_min = 100, sysctl_numa_balancing_scan_period_max = 100*50 (ms)
SCAN_PERIODS_38_MS = (100.0, 5000.0)


def _version_text(value: object) -> object:
    """A kernel version written as a number (``--set ...=4.4`` reads 4.4 as a float) is read as its text;
    a number loses the trailing zero of 5.10 and 3.10, and 5.1 and 3.1 are no eras, so they read as 5.10 and 3.10."""
    if isinstance(value, float) and not isinstance(value, bool):
        text = repr(value)
        return {"5.1": "5.10", "3.1": "3.10"}.get(text, text)
    return value


class CFSOptions(PolicyOptions):
    """Tunables of the CFS model; defaults and sources in presets/policies/cfs.yaml."""

    kernel: str | None = Field(
        default=None,
        description="a mainline kernel version (\"4.18\", \"5.10\", \"5.15.33\"; a number only with two decimals, "
                    "as 4.18: 5.10 reads as 5.1): sets numa_imbalance_kernel, "
                    "numa_balancing_kernel, imbalance_pct_numa, busy_factor, migrate_rate_limit_mbps, fully_busy_last and eevdf as that "
                    "release had them; any of them set here wins (numasim/policies/kernels.py, docs/model.md)")

    @model_validator(mode="before")
    @classmethod
    def _kernel_defaults(cls, data: object) -> object:
        """``kernel`` fills the era options the scenario does not set itself; then the NUMA balancing era
        in effect fills the scan periods (3.8-3.12's were absolute: 100 ms to 5 s; from 3.13 the time
        to scan all of a process's memory: 1 s to 60 s, 598f0ec0bc99)."""
        if not isinstance(data, dict):
            return data
        if data.get("kernel") is not None:
            try:
                data = {**kernel_settings(data["kernel"]), **data}
            except ValueError:
                return data  # the field's own check reports it, at its path
        era = _version_text(data.get("numa_balancing_kernel", _D["numa_balancing_kernel"]))
        if era == "3.8":
            data = {"scan_period_min_ms": SCAN_PERIODS_38_MS[0], "scan_period_max_ms": SCAN_PERIODS_38_MS[1], **data}
        return data

    @model_validator(mode="after")
    def _scan_period_order(self) -> "CFSOptions":
        if self.scan_period_min_ms > self.scan_period_max_ms:
            raise ValueError(f"scan_period_min_ms ({self.scan_period_min_ms:g}) must be at most scan_period_max_ms "
                             f"({self.scan_period_max_ms:g})")
        return self

    @field_validator("kernel", mode="before")
    @classmethod
    def _kernel_text(cls, value: object) -> object:
        return None if value is None else version_text(value)  # raises with what is allowed

    hz: int = Field(default=_D["hz"], description="timer frequency (balance intervals are counted in jiffies)", ge=100, le=1000)
    sched_latency_ms: float = Field(default=_D["sched_latency_ms"], description="CFS target latency before scaling by 1 + ilog2(min(ncpus, 8))", ge=0.1, le=1000)
    min_granularity_ms: float = Field(default=_D["min_granularity_ms"], description="CFS minimum slice before scaling", ge=0.1, le=1000)
    eevdf: bool = Field(default=_D["eevdf"], description="use EEVDF's base slice (kernel 6.6+) instead of CFS's slices")
    fully_busy_last: bool = Field(
        default=_D["fully_busy_last"],
        description="of equal fully busy groups the balancer robs the last, unless the first is one core's SMT siblings "
                    "(kernel 6.5+); false: the first (v5.5-v6.4)")
    base_slice_ms: float = Field(default=_D["base_slice_ms"], description="EEVDF base slice before scaling", ge=0.1, le=1000)
    busy_factor: int = Field(default=_D["busy_factor"], description="balance interval multiplier when the CPU is busy", ge=1, le=64)
    imbalance_pct_smt: int = Field(default=_D["imbalance_pct_smt"], description="imbalance_pct of the SMT level", ge=100, le=200)
    imbalance_pct_mc: int = Field(default=_D["imbalance_pct_mc"], description="imbalance_pct of the LLC level", ge=100, le=200)
    imbalance_pct_numa: int = Field(default=_D["imbalance_pct_numa"], description="imbalance_pct of NUMA levels", ge=100, le=200)
    cache_nice_tries_mc: int = Field(default=_D["cache_nice_tries_mc"], description="failed balances tolerated before cache-hot tasks move (LLC level)", ge=0, le=10)
    cache_nice_tries_numa: int = Field(default=_D["cache_nice_tries_numa"], description="the same at NUMA levels", ge=0, le=10)
    numa_imbalance_min: int = Field(default=_D["numa_imbalance_min"], description="NUMA imbalance (tasks) always tolerated while the destination is lightly loaded", ge=0, le=64)
    node_reclaim_distance: int | None = Field(
        default=_D["node_reclaim_distance"], ge=10, le=255,
        description="NUMA levels farther than this lose fork balancing and wake_affine (default: the machine's "
                    "node_reclaim_distance, 32 on AMD Zen and 30 elsewhere, as the kernel sets it)")
    numa_imbalance_kernel: Annotated[Literal["3.10", "5.4", "5.10", "5.11", "5.15", "5.18", "6.1"], BeforeValidator(_version_text)] = Field(
        default=_D["numa_imbalance_kernel"],
        description="the NUMA imbalance the load balancer tolerates, by kernel era: 3.10 (mainline 3.x-4.10, the "
                    "load balancer before its 5.5 rework: nodes balanced on "
                    "their average load per CPU within imbalance_pct, no NUMA allowance; a fork goes to the least "
                    "loaded node unless its own node's load per CPU is under 100 + (imbalance_pct - 100) / 2 per cent "
                    "of that node's); 5.4 (mainline 4.17-5.4, the same balancer; a fork stays on its node unless the "
                    "other's load per CPU is lower by more than imbalance_pct - 100 per cent of one task) (both eras "
                    "had imbalance_pct_numa 125 and busy_factor 32: kernel sets them with the era); 5.10 (mainline 5.6-5.10: a fork "
                    "stays on its node while that node has an idle CPU; the periodic balancer leaves any imbalance "
                    "while the busiest node runs at most 2 tasks); 5.11 (mainline 5.11-5.17: a fork "
                    "stays on its node while that node runs fewer tasks than a quarter of the domain's CPUs; the "
                    "periodic balancer leaves up to 2 tasks while the busiest node runs fewer than a quarter of its "
                    "CPUs); 5.15 (5.15.33 and later LTS releases: the same against a quarter of the local node's "
                    "CPUs, counting the task that would move); 5.18 (mainline 5.18-5.19: imb_numa_nr, one task per "
                    "LLC of a node or a quarter of a one-LLC node; a fork stays on its node while it would run at "
                    "most that many tasks, whatever CPUs the task may use); 6.1 (6.0 on: imb_numa_nr, one task per "
                    "LLC of a node or 1/8 of a one-LLC node; a fork also needs the nodes' idle CPUs within 2 and "
                    "counts at most the CPUs the task may use there) (docs/model.md)")
    numa_balancing: bool = Field(default=_D["numa_balancing"], description="automatic NUMA balancing (kernel.numa_balancing=1)")
    scan_delay_ms: float = Field(default=_D["scan_delay_ms"], ge=1.0, le=_DAY_MS, description="NUMA balancing: delay before a process's first scan")
    scan_period_min_ms: float = Field(default=_D["scan_period_min_ms"], ge=1.0, le=_DAY_MS, description="NUMA balancing: shortest scan period (from 3.13 the time to scan all of a process's memory, divided among its 256 MB windows; in the 3.8 era, between two windows, and 100 ms unless set)")
    scan_period_max_ms: float = Field(default=_D["scan_period_max_ms"], ge=1.0, le=_DAY_MS, description="NUMA balancing: longest scan period (as scan_period_min_ms; 5000 ms in the 3.8 era unless set)")
    scan_size_mb: float = Field(default=_D["scan_size_mb"], ge=0.004, le=1e6, description="NUMA balancing: memory marked per scan")
    thp: bool = Field(default=_D["thp"], description="transparent huge pages: one hinting fault per 2 MiB instead of per 4 KiB")
    fault_us: float = Field(default=_D["fault_us"], ge=0, le=1e6, description="NUMA balancing: CPU cost of one hinting fault")
    migrate_copy_gbps: float = Field(default=_D["migrate_copy_gbps"], ge=1e-3, le=1e4, description="NUMA balancing: copy rate of page migration by the faulting thread")
    migrate_rate_limit_mbps: float | None = Field(
        default=_D["migrate_rate_limit_mbps"], gt=0, le=1e9,
        description="NUMA balancing: MB/s that may migrate into a node (kernels 3.8-4.18: 1280, i.e. 128 MB per 100 ms); null: no limit (4.19+)")
    numa_balancing_tiering: bool = Field(
        default=_D["numa_balancing_tiering"],
        description="NUMA balancing's memory tiering mode (kernel.numa_balancing bit 2, v5.18+): promote hot pages from "
                    "CPU-less memory nodes to the faulting CPU's node; with numa_balancing also on, mode 3")
    hot_threshold_ms: float = Field(default=_D["hot_threshold_ms"], gt=0, le=1e6,
                                    description="tiering: a slow-tier page touched within this time of its scan is hot")
    hot_threshold_adjust: bool = Field(default=_D["hot_threshold_adjust"],
                                       description="tiering: adjust the hot threshold every scan_period_max so that "
                                                   "promotion candidates match the rate limit (v6.0+)")
    promote_rate_limit_mbps: float = Field(default=_D["promote_rate_limit_mbps"], gt=0, le=1e9,
                                           description="tiering: MB of promotion candidates per second per node")
    demotion_enabled: bool = Field(default=_D["demotion_enabled"],
                                   description="tiering: reclaim demotes the coldest pages of a full node to its slower tier")
    watermark_scale_factor: int = Field(default=_D["watermark_scale_factor"], ge=1, le=3000,
                                        description="vm.watermark_scale_factor: gap between a node's watermarks, per 10,000 of its memory")
    numa_balancing_kernel: Annotated[Literal["3.8", "3.13", "4.4", "5.6", "6.1"], BeforeValidator(_version_text)] = Field(
        default=_D["numa_balancing_kernel"],
        description="NUMA balancing's rules of this kernel era: 3.8 (3.8-3.12: pages only, no task placement; a page "
                    "moves at the second fault in a row from one node; the scan period, absolute, grows 10 jiffies a "
                    "fault that moves nothing, back to its minimum each 60 s); 3.13 (preferred node by task + group weight, swaps on "
                    "any gain of zero or more); 4.4 (3.15-4.18, pseudo-interleaving: active-node mask, memory spread over "
                    "the active nodes, swaps on any positive gain); 5.6 (4.19-5.6: swaps need SMALLIMP; a move to an idle "
                    "CPU only if the node loads end no further apart, load_too_imbalanced); 6.1 (5.7 on: a move to a node "
                    "with spare capacity takes the load balancer's NUMA imbalance test of numa_imbalance_kernel; from "
                    "5.19 no swap within a group while the destination has room) (docs/model.md)")


class CFS(LoadBalancer, ForkPlacement, Policy):
    """Linux CFS: NUMA-oblivious placement and load balancing, first-touch memory."""

    name = "cfs"
    description = "Linux CFS: fork/exec placement, scheduling-domain load balancing, first-touch memory"
    Options = CFSOptions

    def __init__(self, options: CFSOptions, machine, rng):
        super().__init__(options, machine, rng)
        self.o = options
        self.levels: list[Level] = build_levels(machine, options.model_dump())
        self.jiffy = 1_000_000_000 // options.hz
        ncpu = machine.n_cpus
        factor = 1 + int(np.log2(min(ncpu, 8)))
        self._latency = options.sched_latency_ms * factor * 1e6
        self._min_gran = options.min_granularity_ms * factor * 1e6
        self._base_slice = options.base_slice_ms * factor * 1e6
        self.entities: list[_Entity] = []
        # One balancing entity per domain and own group (the CPUs whose domain it is and whose own group
        # that is): the first idle CPU of the group's balance mask balances (where domains do not overlap,
        # the mask is the group's CPUs; where they do, it can hold CPUs of other domains: should_we_balance).
        for li, lvl in enumerate(self.levels):
            for si, own in enumerate(lvl.group_of):
                by_group: dict[int, list[int]] = {}
                for c, gi in sorted(own.items()):
                    by_group.setdefault(gi, []).append(c)
                for gi in sorted(by_group):
                    mine = tuple(by_group[gi])
                    mask = lvl.masks.get((si, gi), mine)
                    self.entities.append(_Entity(li, si, gi, cpus=mask, members=None if mask == mine else frozenset(mine)))
        self._entity = {(e.level, e.span, e.group): e for e in self.entities}
        self._domains = domains(self.levels, machine.cpu_core)  # per level and domain: its groups as Python values
        for e in self.entities:
            self._set_interval(e, float(len(self._domains[e.level][e.span].cpus)))
        self._stats_memo = [StatsMemo(lvl.pct) for lvl in self.levels]
        self._outside_cache: dict[tuple[int, int, int], tuple[tuple[int, ...], frozenset[int]]] = {}
        self._fork_groups: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}  # fork.py: CPUs by group
        llc = [lvl for lvl in self.levels if lvl.share_llc]
        if llc:
            llc_span_of, llc_cpus = llc[-1].span_of, llc[-1].spans
        else:  # one CPU per LLC
            llc_span_of, llc_cpus = np.arange(machine.n_cpus), [np.array([c]) for c in range(machine.n_cpus)]
        self._cpu_core = machine.cpu_core
        self._wake_tables = WakeTables(self.levels, llc_span_of, llc_cpus, machine.core_cpus, machine.cpu_core,
                                       machine.cpu_node, machine.distance)
        self._cpu_masks: dict[frozenset[int], np.ndarray] = {}
        self._no_mask = np.zeros(0, dtype=np.bool_)
        self._started = False
        self._proc_first: dict[int, int] = {}  # by process: its first thread (_first_of_process)
        self._next = 0
        self._stats_cache: dict[tuple[int, int], tuple] = {}
        self._moves_done = 0
        self._pull_rule = False  # whether the runtime runs the lowest level's pull (LoadBalancer.idle_rule)
        self.numab: NumaBalancing | None = None
        numa = [lvl for lvl in self.levels if lvl.numa]
        if (options.numa_balancing and numa) or (options.numa_balancing_tiering and machine.n_nodes > len(machine.cpu_nodes)):
            self.numab = NumaBalancing(machine, options, rng, _sd_numa_imb(machine, numa), options.imbalance_pct_numa)
        self._numab_next = 0

    # ------------------------------------------------------------- slices
    def slice_ns(self, nr_running: int) -> int:
        if self.o.eevdf:
            return int(self._base_slice)
        nr_latency = self._latency / self._min_gran
        period = self._latency if nr_running <= nr_latency else nr_running * self._min_gran
        return int(period / max(nr_running, 1))

    # ---------------------------------------------------------- placement
    def place(self, tid: int, sim: "View") -> int:
        cpu_of = sim.thread_cpu
        nr = np.array(sim.nr_running)
        allowed = sim.affinity(tid)
        pod = sim.pods[int(sim.thread_pod[tid])]
        fork = True
        if cpu_of[tid] >= 0:
            start = int(cpu_of[tid])  # displaced by an affinity change, or started anew where it ran
        elif tid == pod.tids[0] or cpu_of[pod.tids[0]] < 0:
            # exec of the pod's first process from the container runtime's CPU
            start = int(self.rng.integers(self.machine.n_cpus))
            fork = False
        else:
            first = self._first_of_process(tid, sim)  # its process's first (main) thread
            if tid == first or cpu_of[first] < 0:
                start = int(cpu_of[pod.tids[0]])  # exec of another process, started by the pod's first
                fork = False
            else:
                start = int(cpu_of[first])  # fork from its process's main thread
        self._started = True
        return self.find_dst_cpu(start, nr, allowed, fork)

    def _first_of_process(self, tid: int, sim: "View") -> int:
        """The first thread of ``tid``'s process (its workers come first), kept per process: processes do
        not change once their pod has arrived."""
        proc = int(sim.thread_process[tid])
        first = self._proc_first.get(proc)
        if first is None:
            first = self._proc_first[proc] = sim.processes[proc][1][0]
        return first

    def restarted(self, tid: int, sim: "View") -> None:
        if self.numab is not None:
            self.numab.forget(tid, float(sim.thread_cpu_time()[tid]))

    def wake(self, tid: int, waker_cpu: int | None, sim: "View") -> int:
        """``select_task_rq_fair`` for a wakeup: wake_affine, then select_idle_sibling (:mod:`.rules`)."""
        nr = sim.nr_running
        prev = int(sim.thread_cpu[tid])
        allowed = sim.affinity(tid)
        this = prev if waker_cpu is None else int(waker_cpu)
        mask = self._no_mask if allowed is None else self._cpu_mask(allowed)
        w = self._wake_tables
        cpu = wake_cpu(nr, prev, this, mask, w.span_of, w.pct, w.near, w.distance, w.nodes, w.llc_span_of, w.llc_cpus,
                       w.llc_start, w.llc_len, w.core_cpus, w.ways, w.cpu_core, self.machine.smt, self.o.imbalance_pct_mc)
        return int(cpu) if cpu >= 0 else self.find_dst_cpu(prev, np.array(nr), allowed)

    def wake_rule(self) -> WakeAffine | None:
        """:meth:`wake`'s placement as tables the runtime runs compiled (unless a subclass changed
        :meth:`wake`); it asks :meth:`wake` only when no CPU was found (then the fork's walk)."""
        if type(self).wake is not CFS.wake:
            return None
        return WakeAffine(self._wake_tables.packed(self.machine.smt, self.o.imbalance_pct_mc))

    def _cpu_mask(self, allowed: frozenset[int]) -> np.ndarray:
        """The CPUs of an affinity as a mask (one per distinct CPU set)."""
        mask = self._cpu_masks.get(allowed)
        if mask is None:
            mask = np.zeros(self.machine.n_cpus, dtype=np.bool_)
            mask[list(allowed)] = True
            self._cpu_masks[allowed] = mask
        return mask

    def next_tick(self, now: int) -> int | None:
        if not self._started:
            return None
        if self.numab is not None:
            return min(self._next, max(self._numab_next, now + 1))
        return self._next

    def tick(self, sim: "View") -> list[Decision]:
        moves = self._periodic(sim)
        out: list[Decision] = [Move(t, c) for t, c in moves.items()]
        if self.numab is not None and sim.now >= self._numab_next:
            self._numab_next = self.numab.next_tick(sim.now)
            # Balancer moves are applied first; NUMA balancing sees the state before them.
            out += [d for d in self.numab.tick(sim) if not (isinstance(d, Move) and d.tid in moves)]
        return out


def _sd_numa_imb(machine: Machine, numa: list[Level]) -> list[int]:
    """Per node, ``imb_numa_nr`` of its CPUs' lowest NUMA domain (``sd_numa``; 0 where a node has no NUMA
    domain, as the kernel leaves ``env.imb_numa_nr`` when ``sd_numa`` is NULL). From PKG up a CPU's chain is
    its node's, so one CPU per node tells; where the SLIT is not hierarchical a node's lowest kept NUMA
    domain can be at a higher level than another's, and its value larger."""
    out = [0] * machine.n_nodes
    for n in machine.cpu_nodes:
        cpu = int(machine.node_cpus[n][0])
        for lvl in numa:
            si = int(lvl.span_of[cpu])
            if si >= 0:
                out[n] = lvl.imb_numa_nr[si]
                break
    return out
