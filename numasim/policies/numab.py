"""Linux automatic NUMA balancing, as an option of the CFS model (``numa_balancing: true``).

Follows kernel/sched/fair.c (v6.x) and mm/memory.c; docs/model.md lists what is
kept and simplified. In short:

* **Scanning.** Each process (a pod has one or more) has a scan gate
  ``numa_next_scan``; a task whose CPU time has advanced by its scan period since
  its last turn, finding the gate open, marks the next ``scan_size`` bytes of its
  process's present memory (in address order: the shared heap, then each thread's
  private memory) and moves the gate by its scan period. A full pass over the
  memory increments the process's scan sequence. From 3.13 memory whose policy
  lacks ``MPOL_F_MOF`` (numactl's bind, preferred or interleave without
  ``balancing``) is not scanned (``vma_policy_mof``).
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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .api import CHUNK, Charge, Decision, MoveChunks
from .numab_faults import (ERA_38, ERA_313, ERA_44, ERA_61, compact_moves, faults, pick_faulters, scan_prep,
                           shared_migrate, take_counts, within_rate_limit)
from .numab_groups import Group, Groups
from .numab_moves import MS, TaskMoves
from .numab_period import ScanPeriod
from .tiering import Tiering

if TYPE_CHECKING:
    from .api import View
    from ..model.machine import Machine

__all__ = ["NumaBalancing"]

# task_numa_work scans up to this many scan sizes of address space ("virtpages") to find scan_size's
# worth of pages it marks, skipping ranges it marks nothing in (fair.c).
VIRT_WINDOWS = 8
# v3.8: sysctl_numa_balancing_scan_period_reset, 60 s: how often a process's scanning task's period goes
# back to its minimum ("this blunt hammer", task_numa_work).
RESET_38_NS = 60_000 * MS


def _room(buf: np.ndarray, n: int) -> np.ndarray:
    """``buf`` (rows of scratch), or a larger one if its rows are shorter than ``n``."""
    return buf if buf.shape[1] >= n else np.empty((buf.shape[0], max(n, 2 * buf.shape[1])), dtype=buf.dtype)


@dataclass
class _Task:
    """A task's NUMA statistics; the ones each fault updates are rows of :class:`NumaBalancing`'s arrays
    (``t_membuf``, ``t_cpubuf``, ``t_loc``, ``t_seq``, ``t_pref``: :mod:`numasim.policies.numab_faults`)."""

    node_stamp: float = 0.0  # CPU time (ns) at which the task may next trigger a scan (its period: t_period)
    mem: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # faults by memory node, [shared, private]
    cpu: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # faults by CPU node
    total: float = 0.0


@dataclass
class _Mm:
    """A process's scan state (its gate, ``numa_next_scan``, is :attr:`NumaBalancing.next_scan`)."""

    seq: int = 0
    pos: int = 0  # chunk offset of the scan in the process's address space
    reset: int = 0  # v3.8: when its scanning task's period next goes back to the minimum (numa_next_reset)


class NumaBalancing(ScanPeriod, TaskMoves, Groups):
    """The state and mechanism of automatic NUMA balancing for one simulation."""

    def __init__(self, machine: "Machine", opts, rng: np.random.Generator, imb_numa_nr: list[int], numa_pct: int):
        self.m = machine
        self.o = opts
        self.rng = rng
        self.imb_numa_nr = imb_numa_nr  # per node: its CPUs' lowest NUMA domain's (sd_numa), 0 for none
        self.pct = 100 + (numa_pct - 100) // 2  # task_numa_migrate's imbalance_pct (108; 112 with 4.x's 125)
        # update_numa_stats' task_capacity before 4.19: a node's cores (SMT siblings share one), else its CPUs.
        self.task_capacity = [len(set(machine.cpu_core[machine.node_cpus[n]].tolist())) if n in machine.cpu_nodes
                              else 0 for n in range(machine.n_nodes)]
        self.n = machine.n_nodes
        self.tasks: dict[int, _Task] = {}
        self.groups: dict[int, Group] = {}  # by process: threads of one process join one group
        self.group_of: dict[int, int] = {}
        self.mms: dict[int, _Mm] = {}
        # Each chunk's last fault (thread, node; -1: none), in flat arrays: a region's from r_last[rid].
        self.l_tid = np.zeros(0, dtype=np.int64)
        self.l_nid = np.zeros(0, dtype=np.int64)
        self.r_owner = np.zeros(0, dtype=np.int64)  # by region id: its owner thread (-1: shared), its first
        self.r_last = np.zeros(0, dtype=np.int64)  # slot (-1: not seen yet)
        self._cpu_node = machine.cpu_node.astype(np.int64)
        self._cpu_nodes = np.array(machine.cpu_nodes, dtype=np.int64)
        self.rate = np.full((2, machine.n_nodes), -1, dtype=np.int64)  # per node: 100 ms window, bytes migrated in it
        self.rate[1] = 0
        self.era = {"3.8": ERA_38, "3.13": ERA_313, "4.4": ERA_44}.get(opts.numa_balancing_kernel, ERA_61)
        limit = opts.migrate_rate_limit_mbps  # bytes a node may take per 100 ms window; -1: no limit
        self.rate_limit = -1.0 if limit is None else limit * 2**20 / 10
        self.t_pref: np.ndarray | None = None  # the per-thread and per-group arrays: at the first tick (_alloc)
        self.tick_ns = 10 * MS
        # Memory tiering: CPU-less nodes are the slow tier (numasim/policies/tiering.py).
        self.tier = Tiering(machine, opts, rng) if opts.numa_balancing_tiering else None
        self.slow = frozenset(range(machine.n_nodes)) - frozenset(machine.cpu_nodes)

    # ------------------------------------------------------------- helpers
    def _alloc(self, n_threads: int, n_procs: int) -> None:
        """The arrays the compiled faults share (numab_faults): per thread this pass's faults by memory and
        CPU node ``[node * 2 + private]``, locality (remote, local, failed), the pass last folded, the preferred
        node and the group; per group (a process's) its faults by memory and CPU node and active nodes."""
        n = self.n
        self.t_membuf = np.zeros((n_threads, 2 * n))
        self.t_cpubuf = np.zeros((n_threads, 2 * n))
        self.t_loc = np.zeros((n_threads, 3))
        self.t_seq = np.zeros(n_threads, dtype=np.int64)
        self.t_pref = np.full(n_threads, -1, dtype=np.int64)
        # One more than the threads: the last stands for a task that exited (DEAD below), in no group.
        self.t_group = np.full(n_threads + 1, -1, dtype=np.int64)
        self.dead = n_threads  # a last fault by a task that exited: another pid's, to whoever faults next
        self.t_born = np.zeros(n_threads)  # CPU time (ns) its thread id had when the task began (0: at the start)
        self.t_known = np.zeros(n_threads, dtype=np.bool_)  # whether the task has statistics (self.tasks) yet
        self.t_retry = np.zeros(n_threads, dtype=np.int64)  # when the task may next try to move to its node
        self.t_period = np.zeros(n_threads)  # its scan period (ms)
        self.t_own = np.zeros((n_threads, n))  # its faults by memory node (task.mem summed over shared and private)
        self.t_total = np.zeros(n_threads)  # and in all (task.total)
        self.t_order = np.zeros(0, dtype=np.int64)  # the tasks with statistics, in the order they got them
        self.next_scan = np.full(n_procs, -1, dtype=np.int64)  # each process's scan gate (-1: not seen running yet)
        self.g_mem = np.zeros((n_procs, n))
        self.g_cpu = np.zeros((n_procs, n))
        self.g_active = np.zeros((n_procs, n), dtype=np.bool_)
        self._cpu_nid = np.zeros(n_threads, dtype=np.int64)  # scratch: each member's node during a scan
        self._may = np.zeros(n_threads, dtype=np.bool_)  # and whether its pages may move there
        self._nfault = np.zeros(n_threads, dtype=np.int64)  # scratch: each thread's faults in a scan (who_faults)
        self._order = np.zeros(n_threads, dtype=np.int64)  # and the threads that fault, in order
        self._counts = np.zeros(n_threads, dtype=np.int64)  # and their counts (take_counts)
        self._weights = np.zeros(n_threads)  # scratch: a scan's threads' weights for shared faults
        self._cdf = np.zeros(n_threads)  # and their cumulative share
        self._no_draws = np.zeros(0)
        self._proc_tids: dict[int, np.ndarray] = {}
        self._chunk_buf = np.empty((4, 256), dtype=np.int64)  # scratch: a scan's chunks' owner, slot, thread, node
        self._moves_buf = np.empty((4, 256), dtype=np.int64)  # and the ones that move (compact_moves)
        self._due = np.zeros(n_threads, dtype=np.int64)  # scratch: the tasks due to try to move (due_tasks)
        self._slow = np.array([k in self.slow and self.tier is not None for k in range(n)], dtype=np.bool_)

    def _task(self, tid: int) -> _Task:
        if tid not in self.tasks:
            z = np.zeros((self.n, 2))
            self.tasks[tid] = _Task(0.0, z.copy(), z.copy())
            self.t_known[tid] = True
            self.t_period[tid] = self.o.scan_delay_ms
            self.t_order = np.append(self.t_order, tid)
        return self.tasks[tid]

    def forget(self, tid: int, cpu_time_ns: float) -> None:
        """Thread ``tid`` exited and a new one takes its id: ``task_numa_free`` takes the old task's faults
        out of its group's and leaves the group; the new task starts as ``init_numa_balancing`` starts a
        thread (no faults, no preferred node, no group, the scan delay as its period, counted in its own CPU
        time from now: ``cpu_time_ns``, the id's so far). Its process's scan state (the mm's) stays, and the
        pages the old task faulted last keep that fault's node, by a task that exited (:attr:`dead`): to the
        next to fault them, another pid's, as the kernel's cpupid would be (shared, and no group to join)."""
        if self.t_pref is None:
            return  # nothing known yet: the arrays come at the first tick
        self.l_tid[self.l_tid == tid] = self.dead
        self.t_born[tid] = cpu_time_ns
        task = self.tasks.pop(tid, None)
        if task is not None:
            proc = self.group_of.pop(tid, None)
            g = self.groups.get(proc) if proc is not None else None
            if g is not None and tid in g.tasks:
                g.tasks.discard(tid)
                g.mem -= task.mem.sum(axis=1)
                g.cpu -= task.cpu.sum(axis=1)
                g.total -= task.total
            self.t_order = self.t_order[self.t_order != tid]
        self.t_known[tid] = False
        self.t_group[tid] = -1
        self.t_pref[tid] = -1
        self.t_seq[tid] = 0
        self.t_retry[tid] = 0
        self.t_period[tid] = 0.0
        self.t_own[tid] = 0.0
        self.t_total[tid] = 0.0
        self.t_membuf[tid] = 0.0
        self.t_cpubuf[tid] = 0.0
        self.t_loc[tid] = 0.0

    def _last(self, regions) -> None:
        """Room for the last faults of the chunks of ``regions`` not seen yet (-1: none); each region's
        owner and first slot (``r_owner``, ``r_last``)."""
        known = self.r_last.size
        if regions and regions[-1][0] < known and self.r_last[regions[-1][0]] >= 0:
            return  # (all are seen with the newest, which a region added later would follow)
        new = [(rid, owner, len(nodes)) for rid, owner, nodes in regions if rid >= known or self.r_last[rid] < 0]
        if new:
            at = self.l_tid.size
            top = max(rid for rid, _o, _k in new) + 1
            if top > self.r_owner.size:
                grow = max(top, 2 * self.r_owner.size) - self.r_owner.size
                self.r_owner = np.concatenate([self.r_owner, np.full(grow, -1, dtype=np.int64)])
                self.r_last = np.concatenate([self.r_last, np.full(grow, -1, dtype=np.int64)])
            for rid, owner, k in new:
                self.r_last[rid] = at
                self.r_owner[rid] = owner
                at += k
            grow = np.full(at - self.l_tid.size, -1, dtype=np.int64)
            self.l_tid = np.concatenate([self.l_tid, grow])
            self.l_nid = np.concatenate([self.l_nid, grow])

    def _weight(self, tid: int, nid: int, group: bool) -> float:
        if group:
            g = self.groups.get(self.group_of.get(tid, -1))
            if g is None or g.total <= 0:
                return 0.0
            # group_weight: per mille of the group's faults (3.13 scaled it to 1200, a bias toward the group)
            return (1200.0 if self.o.numa_balancing_kernel == "3.13" else 1000.0) * g.mem[nid] / g.total
        total = self.t_total[tid]
        if total <= 0:
            return 0.0
        return 1000.0 * self.t_own[tid, nid] / total

    def preferred(self, tid: int) -> int:
        return -1 if self.t_pref is None else int(self.t_pref[tid])

    # --------------------------------------------------------------- tick
    def next_tick(self, now: int) -> int:
        return now + self.tick_ns

    def tick(self, sim: "View") -> list[Decision]:
        out: list[Decision] = []
        now = sim.now
        if self.t_pref is None:
            self._alloc(len(sim.thread_cpu), len(sim.processes))
        if self.tier is not None:
            self.tier.begin_tick(sim)
        due = np.flatnonzero(self.next_scan <= now)  # the processes whose scan gate is open (or not set yet)
        if due.size:
            out += self._open_gates(due.tolist(), sim)
        out += self._migrate_tasks(sim)
        return out

    def _open_gates(self, due: list[int], sim: "View") -> list[Decision]:
        """task_tick_numa for the processes ``due``: the first running task (in random order) whose CPU
        time passed its stamp scans and moves its process's gate (``next_scan``) by its scan period. A
        process first seen running gets its gate ``scan_delay_ms`` on."""
        out: list[Decision] = []
        now = sim.now
        pods, procs = sim.pods, sim.processes
        cpu_time = alive = miss = None  # read at the first open gate (nothing changes them during the tick)
        active = sim.thread_active
        # Free memory as this tick's migrations leave it: what a tick decides applies when it ends, so its
        # scans share one account (memory tiering's, when it is on, so that promotions count too).
        free = None
        for proc in due:
            pod_index, members = procs[proc]
            if pods[pod_index].status != "running":
                continue
            mm = self.mms.get(proc)
            if mm is None:
                mm = self.mms[proc] = _Mm(reset=now + RESET_38_NS)
                self.next_scan[proc] = now + int(self.o.scan_delay_ms * MS)
                if now < self.next_scan[proc]:
                    continue
            runners = [t for t in members if active[t]]
            self.rng.shuffle(runners)
            if cpu_time is None:
                cpu_time, alive, miss = sim.thread_cpu_time(), sim.thread_alive, sim.thread_miss_rate
                free = self.tier.free if self.tier is not None else np.array(sim.node_free(), dtype=np.int64)
            for tid in runners:
                task = self._task(tid)
                if cpu_time[tid] - self.t_born[tid] > task.node_stamp + self.t_period[tid] * MS:
                    if self.era == ERA_38:
                        reset = now > mm.reset  # numa_next_reset
                        if reset:
                            mm.reset = now + RESET_38_NS
                        if reset or task.node_stamp == 0.0:
                            self.t_period[tid] = self.o.scan_period_min_ms
                    elif task.node_stamp == 0.0:
                        self.t_period[tid] = self._scan_start(sim.process_memory(proc), tid)
                    task.node_stamp = cpu_time[tid] - self.t_born[tid]
                    self.next_scan[proc] = now + int(self.t_period[tid] * MS)
                    out += self._scan(proc, members, mm, sim, miss, alive, free)
                    break
        return out

    # --------------------------------------------------------------- scan
    def _scan(self, proc: int, members, mm: _Mm, sim: "View", miss, alive, free: np.ndarray) -> list[Decision]:
        mp = sim.pods[int(sim.thread_pod[members[0]])].mempolicy  # (a process's threads are one pod's)
        if not mp.migrates and self.era != ERA_38:
            # task_numa_work skips a VMA whose policy lacks MPOL_F_MOF (vma_policy_mof; commit fc3147245d19,
            # "mm: numa: Limit NUMA scanning to migrate-on-fault VMAs", from 3.13): memory the user bound,
            # preferred or interleaved explicitly takes no hinting faults, so it gives the task no fault
            # statistics, no preferred node and no task placement. 3.8-3.12 scanned it (and never moved it).
            return []
        self._last(sim.process_regions(proc))
        budget = max(1, int(self.o.scan_size_mb * 2**20 // CHUNK))
        marked = self._next_chunks(mm, proc, sim, budget) if self.o.numa_balancing else self._next_slow(mm, proc, sim, budget)
        if marked is None:
            return []
        c_rid, c_i, c_nid = marked
        n = c_rid.size
        if not n:
            return []
        tids = self._tids(proc, members)
        k = tids.size
        if self.tier is not None:
            self.tier.begin_scan(float(sum(miss[t] for t in members)), float(sim.process_memory(proc)))
        buf = self._chunk_buf = _room(self._chunk_buf, n)
        c_owner, c_off, c_tid, dst = buf[0, :n], buf[1, :n], buf[2, :n], buf[3, :n]
        weights, cdf = self._weights[:k], self._cdf[:k]
        n_shared = scan_prep(c_rid, c_i, self.r_owner, self.r_last, tids, miss, alive, sim.thread_cpu, self._cpu_node,
                             c_owner, c_off, weights, self._cpu_nid)
        # Nothing the scan decides applies before the tick ends: each thread's node and its memory
        # policy are the same at each of its faults; free memory is the tick's account (``free``),
        # which each migration decided updates.
        self._may[tids] = self._may_move_to(mp, self._cpu_nid[tids])
        # Who faults each chunk: its owner for private memory (none if it died); for shared memory one
        # of the process's threads, in proportion to its misses (none if no thread misses).
        wsum = float(weights.sum())
        u = self.rng.random(n_shared) if n_shared and wsum > 0 else self._no_draws
        m = pick_faulters(c_owner, alive, tids, weights, wsum, u, cdf, c_tid, self._nfault, self._order, dst)
        out: list[Decision] = []
        args = (c_tid, c_off, c_nid, dst, self._cpu_nid, self._may, free, self._slow, self.l_tid, self.l_nid,
                self.t_known, self.t_membuf, self.t_cpubuf, self.t_loc, self.t_seq, self.t_pref, self.t_group, self.g_mem,
                self.g_cpu, self.g_active, proc, mm.seq, self.era, self.rate, sim.now // (100 * MS), self.rate_limit)
        j = faults(0, *args)
        while j < n:
            # What the compiled faults leave to Python: a group join, a task's placement, a slow-tier page.
            if c_tid[j] >= 0:  # (a chunk nobody faults: the compiled loop passes it over)
                dst[j] = self._fault_py(int(c_tid[j]), proc, mm, int(c_rid[j]), int(c_off[j]), int(c_i[j]),
                                        int(c_nid[j]), mp, free, sim, out)
            j = faults(j + 1, *args)
        pages = 1 if self.o.thp else CHUNK // 4096
        take_counts(self._order, m, self._nfault, self._counts)
        for tid, faults_k in zip(self._order[:m].tolist(), self._counts[:m].tolist()):  # in the order of first faults
            out.append(Charge(tid, faults_k * pages * self.o.fault_us * 1000.0, faults=faults_k * pages))
        self._moves_buf = _room(self._moves_buf, n)
        moved = compact_moves(c_rid, dst, c_tid, c_i, self._moves_buf)
        if self.era == ERA_38:
            self._period_38(m, moved, pages)
        moves: dict[tuple[int, int, int], list[int]] = {}
        for rid, node, tid, i in zip(*self._moves_buf[:, :moved].tolist()):
            moves.setdefault((rid, node, tid), []).append(i)
        for (rid, node, tid), idx in moves.items():
            out.append(MoveChunks(rid, tuple(idx), node, tid, self.o.migrate_copy_gbps))
        return out

    def _period_38(self, m: int, moved: int, pages: int) -> None:
        """v3.8's task_numa_fault: each fault that moved nothing (a huge page's is one; without THP, one
        per 4 KiB page) adds 10 jiffies to the faulting task's scan period, up to its maximum."""
        step = 10 * 1000.0 / self.o.hz
        movers = self._moves_buf[2, :moved]
        for tid, faults_k in zip(self._order[:m].tolist(), self._counts[:m].tolist()):
            still = (faults_k - int(np.count_nonzero(movers == tid))) * pages
            if still > 0:
                self.t_period[tid] = min(self.o.scan_period_max_ms, self.t_period[tid] + step * still)

    def _tids(self, proc: int, members) -> np.ndarray:
        """A process's threads as an array (made once: a process's threads do not change)."""
        tids = self._proc_tids.get(proc)
        if tids is None or tids.size != len(members):
            tids = self._proc_tids[proc] = np.array(members, dtype=np.int64)
        return tids

    def _fault_py(self, tid: int, proc: int, mm: _Mm, rid: int, off: int, i: int, mem_nid: int, mp, free,
                  sim: "View", out: list[Decision]) -> int:
        """One chunk's fault in Python (``mp``: the memory policy of the thread's pod); the node it moves
        to, or -1."""
        cpu_nid = int(self._cpu_nid[tid])
        if self.tier is not None and mem_nid in self.slow:
            # A slow-tier page: task statistics as usual (mode 3), promotion by hotness alone.
            if self.o.numa_balancing:
                self._fault(tid, proc, mm, off, mem_nid, cpu_nid, mp, free, sim, decide=False)
            dst = (self.tier.promote(tid, rid, i, mem_nid, sim, out)
                   if self._may_move(mp, cpu_nid) else None)  # mpol_misplaced comes first
        else:
            dst = self._fault(tid, proc, mm, off, mem_nid, cpu_nid, mp, free, sim)
        return -1 if dst is None else dst

    @staticmethod
    def _next_chunks(mm: _Mm, proc: int, sim: "View", budget: int):
        """The next ``budget`` touched chunks of process ``proc`` from its scan offset, in address order
        (task_numa_work): arrays of their region, index and node; None if nothing is touched.

        ``mm.pos`` counts touched chunks of the process's regions laid end to end; reaching
        the end wraps to the start and begins a new scan sequence.
        """
        chunks, total = sim.process_chunks(proc, mm.pos, budget)
        if total == 0:
            return None
        if mm.pos >= total:
            mm.pos = 0
            chunks, total = sim.process_chunks(proc, 0, budget)
        mm.pos += budget
        if mm.pos >= total:
            mm.pos = 0
            mm.seq += 1
        return chunks

    def _next_slow(self, mm: _Mm, proc: int, sim: "View", budget: int):
        """Tiering only (mode 2): the slow-tier chunks of the next windows of ``budget`` chunks. Pages on a
        top-tier node are not marked (change_pte_range), and task_numa_work counts a range against its scan
        size only if it marked something there; so it goes on, window by window, until one has a chunk it
        marks, or :data:`VIRT_WINDOWS` windows are behind it, or it reaches the end of the process's memory
        (the next scan starts over: reset_ptenuma_scan). None if no window had one."""
        for _ in range(VIRT_WINDOWS):
            seq = mm.seq
            window = self._next_chunks(mm, proc, sim, budget)
            if window is None:
                return None
            keep = self._slow[window[2]]
            if keep.any():
                return tuple(a[keep] for a in window)
            if mm.seq != seq:
                return None
        return None

    def _fault(self, tid: int, proc: int, mm: _Mm, off: int, mem_nid: int, cpu_nid: int, mp, free,
               sim: "View", decide: bool = True) -> int | None:
        """task_numa_fault + should_numa_migrate_memory for one chunk of process ``proc`` (scan state ``mm``;
        its last fault at ``off``) that thread ``tid`` on node ``cpu_nid`` (memory policy ``mp``) faults on;
        returns the node to move it to (``decide=False``: the statistics only). ``free``: each node's free
        bytes. :func:`numasim.policies.numab_faults.faults` is this, compiled, for the faults that need no
        join, placement or tier."""
        self._task(tid)
        prev_tid, prev_nid = int(self.l_tid[off]), int(self.l_nid[off])
        self.l_tid[off], self.l_nid[off] = tid, cpu_nid
        priv = 1 if prev_tid < 0 or prev_tid == tid else 0
        if not priv and self.era != ERA_38 and prev_tid != self.dead:  # (3.8 had no groups; an exited task
            self._join(tid, proc, prev_tid)  # is no longer running anywhere: task_numa_group's no_join)
        if self.t_seq[tid] != mm.seq:
            self._placement(tid, mm, sim)  # task_numa_fault folds the last pass's faults first (once per pass)
        local = mem_nid == cpu_nid
        migrate = False
        if not local and decide and self._may_move(mp, cpu_nid):
            grouped = self.t_group[tid] >= 0
            if self.era == ERA_38:
                migrate = prev_tid >= 0 and prev_nid == cpu_nid  # the two-stage filter alone
            elif (self.t_pref[tid] < 0 or self.t_seq[tid] <= 4) and priv:
                migrate = True
            elif prev_tid >= 0 and prev_nid != cpu_nid:
                migrate = False
            elif prev_tid == tid or not grouped:
                migrate = True
            else:
                migrate = shared_migrate(self.era, self.g_mem, self.g_cpu, self.g_active, int(self.t_group[tid]),
                                         cpu_nid, mem_nid)
        dst = None
        if migrate:
            if free[cpu_nid] >= CHUNK and within_rate_limit(self.rate, cpu_nid, sim.now // (100 * MS), self.rate_limit):
                dst = cpu_nid
                free[cpu_nid] -= CHUNK
                free[mem_nid] += CHUNK
                mem_nid = cpu_nid
            else:
                self.t_loc[tid, 2] += 1  # MIGRATE_FAIL: the scan period will double
        self.t_membuf[tid, 2 * mem_nid + priv] += 1.0
        self.t_cpubuf[tid, 2 * cpu_nid + priv] += 1.0
        self.t_loc[tid, 1 if local else 0] += 1
        return dst

    @staticmethod
    def _may_move(mp, cpu_nid: int) -> bool:
        """mpol_misplaced: only memory whose policy ``mp`` lets NUMA balancing act (the default policy, or
        a bind with MPOL_F_NUMA_BALANCING / a cpuset) moves, and a bound page only to a node it is bound to.
        (From 3.13 other memory takes no faults at all, :meth:`_scan`; in the 3.8 era its faults count.)"""
        return mp.migrates and (mp.kind != "bind" or cpu_nid in mp.nodes)

    @staticmethod
    def _may_move_to(mp, nids: np.ndarray) -> np.ndarray | bool:
        """:meth:`_may_move` for each of ``nids`` (one answer for all where the nodes don't matter)."""
        if not mp.migrates or mp.kind != "bind":
            return bool(mp.migrates)
        return np.isin(nids, mp.nodes)

    # ------------------------------------------------------------- moves
