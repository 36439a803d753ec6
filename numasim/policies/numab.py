"""Linux automatic NUMA balancing, as an option of the CFS model (``numa_balancing: true``).

Follows kernel/sched/fair.c (v6.x) and mm/memory.c; docs/model.md lists what is
kept and simplified. In short:

* **Scanning.** Each process (a pod has one or more) has a scan gate
  ``numa_next_scan``; a task whose CPU time has advanced by its scan period since
  its last turn, finding the gate open, marks the next ``scan_size`` bytes of its
  process's present memory (in address order: the shared heap, then each thread's
  private memory) and moves the gate by its scan period. A full pass over the
  memory increments the process's scan sequence.
* **Hinting faults.** Every marked chunk (2 MiB, a transparent huge page) is
  faulted by the next thread that touches it: its owner for private memory, else a
  thread of the process chosen in proportion to its DRAM miss rate. A fault costs the
  faulting thread ``fault_us`` of CPU time.
* **Migration filter** (``should_numa_migrate_memory``): a remote chunk moves to
  the faulting CPU's node when, early on, it is a first or private fault; otherwise
  only if the previous fault on it came from that node (two-stage filter), and it
  is private, the task has no group, or the group's CPU faults on the destination
  beat the source by 3x or by the 3/4 hysteresis. The copy costs the faulting thread
  ``bytes / migrate_copy_gbps``.
* **Statistics and placement** (``task_numa_placement``, once per pass): per-task
  faults by node, private or shared, halved each pass; threads that share memory
  join one numa group; the preferred node is the node with the most (group)
  faults; the scan period adapts (10 slots, 7/10 threshold) between
  ``task_scan_min`` and ``task_scan_max``.
* **Task moves** (``numa_migrate_preferred``): every min(1 s, period/16) a task off
  its preferred node moves to an idle CPU there if the node has spare capacity and
  the imbalance is allowed, or swaps with a task whose own placement improves; the
  periodic load balancer avoids moves that degrade locality but may undo them.
* **Memory tiering** (``numa_balancing_tiering``, mode 2): a marked chunk on a CPU-less
  node touched within ``hot_threshold_ms`` of its scan is promoted to the faulting CPU's
  node, within a rate limit, if the node has room above its watermark, after reclaim
  demoted its coldest chunks when ``demotion_enabled``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .api import CHUNK, Charge, Decision, MoveChunks
from .numab_moves import MS, TaskMoves
from .tiering import Tiering

if TYPE_CHECKING:
    from .api import View
    from ..model.machine import Machine

__all__ = ["NumaBalancing"]

ACTIVE_NODE_FRACTION = 3
PERIOD_SLOTS = 10
PERIOD_THRESHOLD = 7
MAX_SCAN_WINDOW_MB_S = 2560


@dataclass
class _Task:
    period_ms: float
    node_stamp: float = 0.0  # CPU time (ns) at which the task may next trigger a scan
    seq: int = 0  # its process's scan sequence at this task's last placement
    mem: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # faults by memory node, [shared, private]
    cpu: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # faults by CPU node
    membuf: list[float] = field(default_factory=list)  # this pass's faults, [node * 2 + private] (plain floats: one per fault)
    cpubuf: list[float] = field(default_factory=list)
    total: float = 0.0
    locality: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # remote, local, failed
    preferred: int = -1
    retry: int = 0


@dataclass
class _Group:
    mem: np.ndarray
    cpu: np.ndarray
    total: float = 0.0
    tasks: set[int] = field(default_factory=set)
    active: set[int] = field(default_factory=set)  # 4.4's active_nodes mask (hysteresis); 6.1 recomputes a count


@dataclass
class _Mm:
    next_scan: int
    seq: int = 0
    pos: int = 0  # chunk offset of the scan in the process's address space


class NumaBalancing(TaskMoves):
    """The state and mechanism of automatic NUMA balancing for one simulation."""

    def __init__(self, machine: "Machine", opts, rng: np.random.Generator, imb_numa_nr: int, numa_pct: int):
        self.m = machine
        self.o = opts
        self.rng = rng
        self.imb_numa_nr = imb_numa_nr
        self.pct = 100 + (numa_pct - 100) // 2  # task_numa_migrate's imbalance_pct (108; 112 with 4.x's 125)
        # update_numa_stats' task_capacity before 4.19: a node's cores (SMT siblings share one), else its CPUs.
        self.task_capacity = [len(set(machine.cpu_core[machine.node_cpus[n]].tolist())) if n in machine.cpu_nodes
                              else 0 for n in range(machine.n_nodes)]
        self.n = machine.n_nodes
        self.tasks: dict[int, _Task] = {}
        self.groups: dict[int, _Group] = {}  # by process: threads of one process join one group
        self.group_of: dict[int, int] = {}
        self.mms: dict[int, _Mm] = {}
        self.last: dict[int, tuple[list[int], list[int]]] = {}  # region -> (last tid, last nid) per chunk
        self._cpu_node = machine.cpu_node.tolist()
        self.rate_window: dict[int, tuple[int, int]] = {}  # node -> (100 ms window, bytes migrated in it)
        self.tick_ns = 10 * MS
        # Memory tiering: CPU-less nodes are the slow tier (numasim/policies/tiering.py).
        self.tier = Tiering(machine, opts, rng) if opts.numa_balancing_tiering else None
        self.slow = frozenset(range(machine.n_nodes)) - frozenset(machine.cpu_nodes)

    # ------------------------------------------------------------- helpers
    def _task(self, tid: int) -> _Task:
        if tid not in self.tasks:
            z = np.zeros((self.n, 2))
            self.tasks[tid] = _Task(self.o.scan_delay_ms, 0.0, 0, z.copy(), z.copy(), [0.0] * (2 * self.n), [0.0] * (2 * self.n))
        return self.tasks[tid]

    def _windows(self, rss: int) -> int:
        return max(1, math.ceil(rss / (self.o.scan_size_mb * 2**20)))

    def _scan_min(self, rss: int) -> float:
        floor = 1000.0 / (MAX_SCAN_WINDOW_MB_S / self.o.scan_size_mb)
        return max(floor, self.o.scan_period_min_ms / self._windows(rss))

    def _scan_start(self, rss: int, tid: int) -> float:
        """task_scan_start: the first period after the initial delay."""
        smin = self._scan_min(rss)
        g = self.groups.get(self.group_of.get(tid, -1))
        if g is None:
            return smin
        t = self.tasks[tid]
        shared, private = t.mem[:, 0].sum(), t.mem[:, 1].sum()
        return max(smin, smin * len(g.tasks) * (shared + 1) / (private + shared + 1))

    def _scan_max(self, rss: int, tid: int) -> float:
        smin = self._scan_min(rss)
        smax = self.o.scan_period_max_ms / self._windows(rss)
        g = self.groups.get(self.group_of.get(tid, -1))
        if g is not None:
            t = self.tasks[tid]
            shared, private = t.mem[:, 0].sum(), t.mem[:, 1].sum()
            smax = max(smax, smax * len(g.tasks) * (shared + 1) / (private + shared + 1))
        return max(smin, smax)

    def _weight(self, tid: int, nid: int, group: bool) -> float:
        if group:
            g = self.groups.get(self.group_of.get(tid, -1))
            if g is None or g.total <= 0:
                return 0.0
            # group_weight: per mille of the group's faults (3.13 scaled it to 1200, a bias toward the group)
            return (1200.0 if self.o.numa_balancing_kernel == "3.13" else 1000.0) * g.mem[nid] / g.total
        t = self.tasks.get(tid)
        if t is None or t.total <= 0:
            return 0.0
        return 1000.0 * t.mem[nid].sum() / t.total

    def preferred(self, tid: int) -> int:
        t = self.tasks.get(tid)
        return -1 if t is None else t.preferred

    # --------------------------------------------------------------- tick
    def next_tick(self, now: int) -> int:
        return now + self.tick_ns

    def tick(self, sim: "View") -> list[Decision]:
        out: list[Decision] = []
        now = sim.now
        cpu_time = sim.thread_cpu_time()
        alive = sim.thread_alive
        miss = sim.thread_miss_rate
        pods = sim.pods
        for proc, (pod_index, members) in enumerate(sim.processes):
            pod = pods[pod_index]
            if pod.status != "running":
                continue
            mm = self.mms.get(proc)
            if mm is None:
                mm = self.mms[proc] = _Mm(next_scan=now + int(self.o.scan_delay_ms * MS))
            if now < mm.next_scan:
                continue
            # task_tick_numa: a running task whose CPU time passed its stamp opens the gate.
            runners = [t for t in members if sim.thread_active[t]]
            self.rng.shuffle(runners)
            for tid in runners:
                task = self._task(tid)
                if cpu_time[tid] > task.node_stamp + task.period_ms * MS:
                    if task.node_stamp == 0.0:
                        task.period_ms = self._scan_start(sim.process_memory(proc), tid)
                    task.node_stamp = cpu_time[tid]
                    mm.next_scan = now + int(task.period_ms * MS)
                    out += self._scan(proc, members, mm, sim, miss, alive)
                    break
        out += self._migrate_tasks(sim)
        return out

    # --------------------------------------------------------------- scan
    def _scan(self, proc: int, members, mm: _Mm, sim: "View", miss, alive) -> list[Decision]:
        regions = sim.process_regions(proc)
        for rid, _owner, nodes in regions:
            if rid not in self.last:
                self.last[rid] = ([-1] * len(nodes), [-1] * len(nodes))
        budget = max(1, int(self.o.scan_size_mb * 2**20 // CHUNK))
        marked = self._next_chunks(mm, regions, budget)
        if not self.o.numa_balancing:
            # Tiering only (mode 2): pages on a top-tier node are not marked (change_pte_range).
            marked = [c for c in marked if c[3] in self.slow]
        if not marked:
            return []
        if self.tier is not None:
            self.tier.begin_scan(sim)
        tids = np.array(members)
        weights = miss[tids] * np.array([alive[t] for t in tids])
        # Nothing the scan decides applies before it ends: each thread's node, its memory policy
        # and the nodes' free memory are the same at each of its faults.
        thread_cpu, thread_pod, pods, cpu_node = sim.thread_cpu, sim.thread_pod, sim.pods, self._cpu_node
        where = {t: (cpu_node[thread_cpu[t]], pods[thread_pod[t]].mempolicy) for t in members}
        free = sim.node_free()
        out: list[Decision] = []
        moves: dict[tuple[int, int, int], list[int]] = {}
        faults: dict[int, int] = {}
        # A shared chunk's fault comes from one of the process's threads, in proportion to its misses.
        n_shared = sum(1 for _rid, owner, _i, _n in marked if owner < 0)
        wsum = float(weights.sum())
        pickers = iter(self.rng.choice(len(tids), size=n_shared, p=weights / wsum).tolist()
                       if n_shared and wsum > 0 else [])
        for rid, owner, i, mem_nid in marked:
            if owner >= 0:
                tid = owner
                if not alive[tid]:
                    continue
            else:
                if wsum <= 0:
                    continue
                tid = int(tids[next(pickers)])
            faults[tid] = faults.get(tid, 0) + 1
            cpu_nid, mp = where[tid]
            if self.tier is not None and mem_nid in self.slow:
                # A slow-tier page: task statistics as usual (mode 3), promotion by hotness alone.
                if self.o.numa_balancing:
                    self._fault(tid, proc, mm, rid, i, mem_nid, cpu_nid, mp, free, sim, decide=False)
                dst = (self.tier.promote(tid, proc, rid, i, mem_nid, sim, miss, out)
                       if self._may_move(mp, cpu_nid) else None)  # mpol_misplaced comes first
            else:
                dst = self._fault(tid, proc, mm, rid, i, mem_nid, cpu_nid, mp, free, sim)
            if dst is not None:
                moves.setdefault((rid, dst, tid), []).append(i)
        pages = 1 if self.o.thp else CHUNK // 4096
        for tid, k in faults.items():
            out.append(Charge(tid, k * pages * self.o.fault_us * 1000.0, faults=k * pages))
        for (rid, dst, tid), idx in moves.items():
            out.append(MoveChunks(rid, tuple(idx), dst, tid, self.o.migrate_copy_gbps))
        return out

    @staticmethod
    def _next_chunks(mm: _Mm, regions, budget: int) -> list[tuple[int, int, int, int]]:
        """The next ``budget`` touched chunks from the scan offset, in address order (task_numa_work).

        ``mm.pos`` counts touched chunks of the process's regions laid end to end; reaching
        the end wraps to the start and begins a new scan sequence. Only the marked
        chunks are turned into tuples: building the whole list per scan was most of a
        NUMA-balancing run's time.
        """
        touched = [np.flatnonzero(nodes >= 0) for _rid, _owner, nodes in regions]
        total = sum(len(t) for t in touched)
        if total == 0:
            return []
        if mm.pos >= total:
            mm.pos = 0
        lo, hi = mm.pos, mm.pos + budget
        out: list[tuple[int, int, int, int]] = []
        base = 0
        for (rid, owner, nodes), idx in zip(regions, touched):
            if base >= hi:
                break
            if base + len(idx) > lo:
                for i in idx[max(lo - base, 0): hi - base].tolist():
                    out.append((rid, owner, i, int(nodes[i])))
            base += len(idx)
        mm.pos = hi
        if mm.pos >= total:
            mm.pos = 0
            mm.seq += 1
        return out

    def _fault(self, tid: int, proc: int, mm: _Mm, rid: int, i: int, mem_nid: int, cpu_nid: int, mp, free,
               sim: "View", decide: bool = True) -> int | None:
        """task_numa_fault + should_numa_migrate_memory for one chunk of process ``proc`` (scan state ``mm``)
        that thread ``tid`` on node ``cpu_nid`` (memory policy ``mp``) faults on; returns the node to move
        it to (``decide=False``: the statistics only). ``free``: each node's free bytes."""
        task = self._task(tid)
        last_tid, last_nid = self.last[rid]
        prev_tid, prev_nid = last_tid[i], last_nid[i]
        last_tid[i], last_nid[i] = tid, cpu_nid
        priv = 1 if prev_tid < 0 or prev_tid == tid else 0
        if not priv:
            self._join(tid, proc, prev_tid)
        if task.seq != mm.seq:
            self._placement(tid, mm, sim)  # task_numa_fault folds the last pass's faults first (once per pass)
        local = mem_nid == cpu_nid
        migrate = False
        if not local and decide and self._may_move(mp, cpu_nid):
            g = self.groups.get(self.group_of.get(tid, -1))
            if (task.preferred < 0 or task.seq <= 4) and priv:
                migrate = True
            elif prev_tid >= 0 and prev_nid != cpu_nid:
                migrate = False
            elif prev_tid == tid or g is None:
                migrate = True
            else:
                migrate = self._shared_migrate(g, cpu_nid, mem_nid)
        dst = None
        if migrate:
            if free[cpu_nid] >= CHUNK and self._within_rate_limit(cpu_nid, sim.now):
                dst = cpu_nid
                mem_nid = cpu_nid
            else:
                task.locality[2] += 1  # MIGRATE_FAIL: the scan period will double
        task.membuf[2 * mem_nid + priv] += 1.0
        task.cpubuf[2 * cpu_nid + priv] += 1.0
        task.locality[1 if local else 0] += 1
        return dst

    @staticmethod
    def _may_move(mp, cpu_nid: int) -> bool:
        """mpol_misplaced: only memory whose policy ``mp`` lets NUMA balancing act (the default policy, or
        a bind with MPOL_F_NUMA_BALANCING / a cpuset) moves, and a bound page only to a node it is bound to.
        The fault still counts in the task's statistics."""
        return mp.migrates and (mp.kind != "bind" or cpu_nid in mp.nodes)

    def _shared_migrate(self, g: _Group, dst: int, src: int) -> bool:
        """should_numa_migrate_memory for a shared page of a group that passed the two-stage filter."""
        era = self.o.numa_balancing_kernel
        if era == "3.13":
            return True  # the two-stage filter alone
        if era == "4.4":
            # Pseudo-interleaving (v3.15-v4.18): only into an active node; out of an inactive
            # one always; between active nodes from the busier to the less used (1/4 hysteresis).
            if dst not in g.active:
                return False
            if src not in g.active:
                return True
            return g.mem[dst] < g.mem[src] * 3 / 4
        if g.cpu[dst] > g.cpu[src] * ACTIVE_NODE_FRACTION:
            return True
        return g.cpu[dst] * g.mem[src] * 3 > g.cpu[src] * g.mem[dst] * 4

    def _active_nodes(self, g: _Group) -> set[int]:
        """The CPU nodes the group uses actively (numa_group_count_active_nodes / update_numa_active_node_mask)."""
        if self.o.numa_balancing_kernel == "4.4":
            return g.active
        top = max((g.cpu[n] for n in self.m.cpu_nodes), default=0.0)
        return {n for n in self.m.cpu_nodes if g.cpu[n] * ACTIVE_NODE_FRACTION > top}

    def _update_active(self, g: _Group) -> None:
        """v3.15-v4.18: a node joins the mask above 6/16 of the busiest node's CPU faults, leaves below 3/16."""
        top = max((g.cpu[n] for n in self.m.cpu_nodes), default=0.0)
        for n in self.m.cpu_nodes:
            if n not in g.active:
                if g.cpu[n] > top * 6 / 16:
                    g.active.add(n)
            elif g.cpu[n] < top * 3 / 16:
                g.active.discard(n)

    def _within_rate_limit(self, node: int, now: int) -> bool:
        """Kernels 3.8-4.18 let at most ratelimit MB per 100 ms migrate into a node."""
        limit = self.o.migrate_rate_limit_mbps
        if limit is None:
            return True
        window = now // (100 * MS)
        start, used = self.rate_window.get(node, (window, 0))
        if start != window:
            used = 0
        if used + CHUNK > limit * 2**20 / 10:
            self.rate_window[node] = (window, used)
            return False
        self.rate_window[node] = (window, used + CHUNK)
        return True

    def _join(self, tid: int, proc: int, other: int) -> None:
        """task_numa_group: threads of one process that share pages join one group."""
        g = self.groups.get(proc)
        if g is None:
            g = self.groups[proc] = _Group(np.zeros(self.n), np.zeros(self.n))
        for t in (tid, other):
            if t >= 0 and t not in g.tasks:
                g.tasks.add(t)
                self.group_of[t] = proc
                task = self._task(t)
                g.mem += task.mem.sum(axis=1)
                g.cpu += task.cpu.sum(axis=1)
                g.total += task.total

    # ---------------------------------------------------------- placement
    def _placement(self, tid: int, mm: _Mm, sim: "View") -> None:
        """task_numa_placement, at the first fault of ``tid`` in its process's new scan pass (``mm``)."""
        task = self.tasks[tid]
        task.seq = mm.seq
        g = self.groups.get(self.group_of.get(tid, -1))
        membuf = np.array(task.membuf).reshape(self.n, 2)
        buf_shared, buf_private = membuf[:, 0].sum(), membuf[:, 1].sum()
        diff = membuf - task.mem / 2
        fdiff = np.array(task.cpubuf).reshape(self.n, 2) - task.cpu / 2
        task.mem += diff
        task.cpu += fdiff
        task.total += diff.sum()
        if g is not None:
            g.mem += diff.sum(axis=1)
            g.cpu += fdiff.sum(axis=1)
            g.total += diff.sum()
        task.membuf = [0.0] * (2 * self.n)
        task.cpubuf = [0.0] * (2 * self.n)
        before = task.preferred
        own = task.mem.sum(axis=1)
        if g is not None and self.o.numa_balancing_kernel == "4.4":
            self._update_active(g)
        faults = g.mem if g is not None else own
        if faults.max() > 0:  # only a node with CPUs can be preferred (task_numa_placement skips !N_CPU nodes)
            nodes = self.m.cpu_nodes
            task.preferred = max(nodes, key=lambda n: (faults[n], -n))
            if g is not None and self.o.numa_balancing_kernel == "3.13":
                # v3.13: a task whose own busiest node differs from its group's takes the node
                # with the most task + group weight (the group's scaled by 1.2).
                if max(nodes, key=lambda n: (own[n], -n)) != task.preferred:
                    task.preferred = max(nodes, key=lambda n: (self._weight(tid, n, False) + self._weight(tid, n, True), -n))
        if task.preferred != before and self.o.numa_balancing_kernel != "6.1":
            task.retry = 0  # before 4.19 placement called numa_migrate_preferred at once
        self._update_period(task, tid, sim, buf_shared, buf_private)

    def _update_period(self, task: _Task, tid: int, sim: "View", shared: float, private: float) -> None:
        """update_task_scan_period: slow down when mostly local or private, speed up otherwise."""
        rss = sim.process_memory(int(sim.thread_process[tid]))
        remote, local, failed = task.locality
        if local + shared == 0 or failed:
            task.period_ms = min(self._scan_max(rss, tid), task.period_ms * 2)
            return
        slot = math.ceil(task.period_ms / PERIOD_SLOTS)
        lr = int(local * PERIOD_SLOTS / (local + remote)) if local + remote else 0
        ps = int(private * PERIOD_SLOTS / (private + shared)) if private + shared else 0
        if ps >= PERIOD_THRESHOLD:
            diff = max(1, ps - PERIOD_THRESHOLD) * slot
        elif lr >= PERIOD_THRESHOLD:
            diff = max(1, lr - PERIOD_THRESHOLD) * slot
        else:
            diff = -(PERIOD_THRESHOLD - max(lr, ps)) * slot
        task.period_ms = float(np.clip(task.period_ms + diff, self._scan_min(rss), self._scan_max(rss, tid)))
        task.locality = [0.0, 0.0, 0.0]

    # ------------------------------------------------------------- moves
