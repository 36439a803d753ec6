"""NUMA balancing's task moves: ``numa_migrate_preferred`` / ``task_numa_migrate`` and the load balancer's
``migrate_degrades_locality`` (kernel/sched/fair.c).

A part of :class:`numasim.policies.numab.NumaBalancing`, which holds the state these
methods share: the machine (``m``), options (``o``), per-task statistics (``tasks``),
numa groups (``groups``, ``group_of``), the NUMA imbalance allowance (``imb_numa_nr``,
``pct``) and the weights (``_weight``). A task off its preferred node moves to an idle
CPU there when the imbalance allows, or swaps with a task whose own placement improves,
by the rules of the kernel era selected (docs/model.md, "Kernel eras").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .api import Decision, Move
from .imbalance import adjust_numa_imbalance
from .numab_faults import due_tasks

if TYPE_CHECKING:
    from .api import View

__all__ = ["TaskMoves", "SMALLIMP"]

SMALLIMP = 30  # task_numa_compare: a swap must improve by this much (per mille), v4.19 on
MS = 1_000_000


@dataclass
class _MoveContext:
    """One pass of task moves: run counts and runqueues as the pass's moves change them."""

    nr: np.ndarray
    rq: dict[int, list[int]]
    claimed: set[int]  # CPUs already used by a move in this pass (rq->numa_migrate_on)

    def apply(self, tid: int, src: int, dst: int) -> None:
        self.claimed.update({src, dst})
        self.rq[src].remove(tid)
        self.rq[dst].append(tid)
        self.nr[src] -= 1
        self.nr[dst] += 1


class TaskMoves:
    """Task placement by NUMA balancing (the mixin half of :class:`NumaBalancing`)."""

    def _adjust(self, imb: int, dst_running: int, dst_weight: int, src: int) -> int:
        """``adjust_numa_imbalance`` as task_numa_find_cpu calls it, by the load balancer's era, with the
        ``imb_numa_nr`` of the source CPU's lowest NUMA domain (task_numa_migrate reads ``sd_numa`` of
        ``env.src_cpu``; from PKG up a CPU's domains are its node's)."""
        return adjust_numa_imbalance(self.o.numa_imbalance_kernel, imb, dst_running, dst_weight, self.imb_numa_nr[src],
                                     self.o.numa_imbalance_min)

    def _migrate_tasks(self, sim: "View") -> list[Decision]:
        """numa_migrate_preferred / task_numa_migrate for tasks off their preferred node."""
        now = sim.now
        m = self.m
        era = self.o.numa_balancing_kernel
        ctx = None  # the run counts and runqueues, read once a task is due to try
        out: list[Decision] = []
        # The tasks due to try, in the order they got statistics (found at once: nothing in the loop
        # changes another task's preferred node, activity or retry time).
        thread_cpu = sim.thread_cpu
        m_due = due_tasks(self.t_order, self.t_pref, sim.thread_active, self.t_retry, self.t_period, thread_cpu,
                          self._cpu_node, now, self._due)
        for tid in self._due[:m_due].tolist():
            pref = int(self.t_pref[tid])
            src_cpu = int(thread_cpu[tid])
            src = int(m.cpu_node[src_cpu])
            if ctx is None:
                ctx = _MoveContext(np.array(sim.nr_running), {c: sim.runqueue(c) for c in range(m.n_cpus)}, set())
            if src_cpu in ctx.claimed:
                continue
            g = self.groups.get(self.group_of.get(tid, -1))
            tw, gw = self._weight(tid, src, False), self._weight(tid, src, True)
            best = None
            if era != "4.4" or self._has_capacity(src, pref, ctx.nr):
                best = self._find_cpu(tid, src_cpu, pref, self._weight(tid, pref, False) - tw,
                                      self._weight(tid, pref, True) - gw, None, sim, ctx)
            active = self._active_nodes(g) if g is not None and era != "3.13" else set()  # 3.13 had none
            if best is None or len(active) > 1:
                # "No space available on the preferred nid. Look elsewhere", and from v4.x also
                # whenever the group spans several active nodes: nodes where the task or the
                # group gains.
                for nid in m.cpu_nodes:
                    if nid in (src, pref):
                        continue
                    timp, gimp = self._weight(tid, nid, False) - tw, self._weight(tid, nid, True) - gw
                    if timp < 0 and gimp < 0:
                        continue
                    if era == "4.4" and not self._has_capacity(src, nid, ctx.nr):
                        continue
                    best = self._find_cpu(tid, src_cpu, nid, timp, gimp, best, sim, ctx)
            if g is not None and era != "3.13":
                # A grouped task settles where it is, or where it went, if that node is active
                # (v4.4 checks the mask; v6.1 always), so a spread group stops chasing one node.
                nid = src if best is None else int(m.cpu_node[best[1]])
                if era == "6.1" or nid in active:
                    self.t_pref[tid] = nid
            if best is None:
                continue
            _, c, cur = best
            out.append(Move(tid, c, numa=True))
            ctx.apply(tid, src_cpu, c)
            if cur is not None:
                out.append(Move(cur, src_cpu, numa=True))
                ctx.apply(cur, c, src_cpu)
        return out

    def _find_cpu(self, tid: int, src_cpu: int, dst: int, taskimp: float, groupimp: float,
                  best: tuple[float, int, int | None] | None, sim: "View", ctx: "_MoveContext"):
        """task_numa_find_cpu + task_numa_compare on node ``dst``: the best (improvement, CPU, task to swap) so far."""
        m = self.m
        src = int(m.cpu_node[src_cpu])
        grouped = tid in self.group_of
        imp = groupimp if grouped else taskimp
        nr = ctx.nr
        src_nr = int(nr[m.node_cpus[src]].sum())
        dst_nr = int(nr[m.node_cpus[dst]].sum())
        cap_src, cap_dst = len(m.node_cpus[src]), len(m.node_cpus[dst])
        dst_spare = dst_nr < cap_dst
        modern = self.o.numa_balancing_kernel == "6.1"
        maymove = self._move_allowed(src, dst, src_nr, dst_nr, cap_src, cap_dst)
        for c in m.node_cpus[dst]:
            c = int(c)
            if c in ctx.claimed or not sim.allowed(tid, c):
                continue
            queue = ctx.rq[c]
            if not queue:
                if maymove and imp >= (best[0] if best else 0.0):
                    best = (imp, c, None)
                continue
            cur = queue[0]
            if not sim.allowed(cur, src_cpu):
                continue
            cur_grouped = cur in self.group_of
            same = cur_grouped == grouped and (not grouped or self.group_of[cur] == self.group_of[tid])
            if same:
                if dst_spare and modern:
                    continue  # no swaps inside a group while the node has room (v5.19)
                # The same group: the tasks' own faults decide.
                cimp = taskimp + self._weight(cur, src, False) - self._weight(cur, dst, False)
                if grouped:
                    cimp -= cimp / 16
            else:
                cimp = imp + self._weight(cur, src, cur_grouped) - self._weight(cur, dst, cur_grouped)
            if self.preferred(cur) == dst:
                cimp -= cimp / 16
            elif self.preferred(cur) == src:
                cimp += cimp / 8
            if maymove and imp > cimp and imp > (best[0] if best else 0.0):
                best = (imp, c, None)
                continue
            if not self._swap_ok(cimp, best[0] if best is not None else None):
                continue
            best = (cimp, c, cur)
        return best

    def _move_allowed(self, src: int, dst: int, src_nr: int, dst_nr: int, cap_src: int, cap_dst: int) -> bool:
        """May a task move from node ``src`` to an idle CPU of node ``dst`` (node loads ``src_nr``, ``dst_nr``
        tasks on ``cap_src``, ``cap_dst`` CPUs)? By era: before v4.19 :meth:`_may_move_old`; v5.7 on, a
        destination with spare capacity takes the load balancer's NUMA imbalance test (fb86f5b21192);
        otherwise, and always in v4.19-v5.6, ``load_too_imbalanced``: the node loads must end no further
        apart than they were."""
        era = self.o.numa_balancing_kernel
        if era in ("3.13", "4.4"):
            return self._may_move_old(src, dst, src_nr, dst_nr, cap_src, cap_dst)
        if era == "6.1" and dst_nr < cap_dst:
            return self._adjust(max(0, (dst_nr + 1) - (src_nr - 1)), dst_nr + 1, cap_dst, src) == 0
        return abs((dst_nr + 1) * cap_src - (src_nr - 1) * cap_dst) <= abs(dst_nr * cap_src - src_nr * cap_dst)

    def _may_move_old(self, src: int, dst: int, src_nr: int, dst_nr: int, cap_src: int, cap_dst: int) -> bool:
        """task_numa_compare's test for a move to an idle CPU before v4.19 (no spare-capacity shortcut,
        which came with v5.7): not when the source node runs within its task capacity (v3.13: below
        it) and the destination has no free capacity ("Is there capacity at our destination?"); then the node
        loads after the move within ``imbalance_pct`` of each other, or, from v3.15, no further
        apart than before (``load_too_imbalanced``). Loads are task counts."""
        tcap = self.task_capacity
        within = src_nr < tcap[src] if self.o.numa_balancing_kernel == "3.13" else src_nr <= tcap[src]
        if within and dst_nr >= tcap[dst]:
            return False
        return not self._too_imbalanced(src_nr - 1, dst_nr + 1, src_nr, dst_nr, cap_src, cap_dst)

    def _too_imbalanced(self, src: int, dst: int, osrc: int, odst: int, cap_src: int, cap_dst: int) -> bool:
        """``load_too_imbalanced`` of v3.15-v4.18 (v3.13: the threshold alone), loads as task counts."""
        if dst < src:
            src, dst = dst, src
        imb = dst * cap_src * 100 - src * cap_dst * self.pct
        if imb <= 0:
            return False
        if self.o.numa_balancing_kernel == "3.13":
            return True
        if odst < osrc:
            osrc, odst = odst, osrc
        return imb > odst * cap_src * 100 - osrc * cap_dst * self.pct

    def _has_capacity(self, src: int, dst: int, nr: np.ndarray) -> bool:
        """``numa_has_capacity`` (v4.2-v4.18): a node is searched only if the source is not free while it is
        full, and the source's load exceeds the destination's within ``imbalance_pct``."""
        m, tcap = self.m, self.task_capacity
        s, d = int(nr[m.node_cpus[src]].sum()), int(nr[m.node_cpus[dst]].sum())
        if s < tcap[src] and d >= tcap[dst]:
            return False
        return s * len(m.node_cpus[dst]) * self.pct > d * len(m.node_cpus[src]) * 100

    def _swap_ok(self, imp: float, best: float | None) -> bool:
        """task_numa_compare's swap test, by kernel: is a swap of improvement ``imp`` taken over ``best``?

        With one task on each CPU (the only case this model swaps in), kernels before
        4.19 skipped the load check ("balance doesn't matter much if we're running a
        task per cpu") and took any improvement at least (3.13) or above (3.14-4.18) the
        best so far, starting from 0; 4.19 on require ``SMALLIMP`` and beating the best
        by half of it.
        """
        rule = self.o.numa_balancing_kernel
        floor = 0.0 if best is None else best
        if rule == "3.13":
            return imp >= floor
        if rule == "4.4":
            return imp > floor
        return imp >= SMALLIMP and (best is None or imp > best + SMALLIMP / 2)

    def degrades_locality(self, tid: int, src_cpu: int, dst_cpu: int, idle: bool) -> bool:
        """migrate_degrades_locality: would this load-balancer move hurt a placed task?

        In v3.13 the check was a scheduler feature off by default (``NUMA_RESIST_LOWER``):
        the ``3.13`` era never resists, nor does ``3.8``, which had no task placement. The v4 series folded it into an always-on check (the
        ``4.4`` and ``6.1`` eras): a move off the preferred node degrades locality.
        Simplified: the kernel says so only while the source runqueue holds a task that is
        not on its own preferred node (``nr_running > nr_preferred_running``); the model
        always does (docs/model.md).
        """
        if self.o.numa_balancing_kernel in ("3.8", "3.13"):  # (3.8 has no preferred node to resist for)
            return False
        pref = self.preferred(tid)
        if pref < 0:
            return False
        src, dst = int(self.m.cpu_node[src_cpu]), int(self.m.cpu_node[dst_cpu])
        if src == dst or dst == pref:
            return False
        if src == pref:
            return True
        if idle:
            return False
        grouped = tid in self.group_of
        return self._weight(tid, dst, grouped) < self._weight(tid, src, grouped)
