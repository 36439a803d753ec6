"""NUMA balancing's numa groups and task placement (kernel/sched/fair.c: ``task_numa_group``,
``task_numa_placement``, ``numa_group_count_active_nodes``, ``update_numa_active_node_mask``).

A part of :class:`numasim.policies.numab.NumaBalancing`, which holds the state these
methods share: the machine (``m``), options (``o``), per-task statistics (``tasks`` and the
``t_*`` arrays), the groups (``groups``, ``group_of``, ``g_mem``, ``g_cpu``, ``g_active``)
and the weights (``_weight``). Threads of one process that share pages join one group; once
a scan pass, a task folds its fault statistics and takes the node with the most (group)
faults as its preferred node, by the rules of the kernel era selected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .numab_faults import ACTIVE_NODE_FRACTION

if TYPE_CHECKING:
    from .api import View

__all__ = ["Group", "Groups"]


@dataclass
class Group:
    mem: np.ndarray  # rows of NumaBalancing.g_mem, g_cpu, g_active (views)
    cpu: np.ndarray
    active: np.ndarray  # 4.4's active_nodes mask (hysteresis); 6.1 recomputes a count
    total: float = 0.0
    tasks: set[int] = field(default_factory=set)



class Groups:
    """Numa groups and task placement (the mixin part of :class:`NumaBalancing`)."""

    def _active_nodes(self, g: Group) -> set[int]:
        """The CPU nodes the group uses actively (numa_group_count_active_nodes / update_numa_active_node_mask)."""
        nodes = self._cpu_nodes
        if self.o.numa_balancing_kernel == "4.4":
            return set(nodes[g.active[nodes]].tolist())
        faults = g.cpu[nodes]
        top = faults.max() if faults.size else 0.0
        return set(nodes[faults * ACTIVE_NODE_FRACTION > top].tolist())

    def _update_active(self, g: Group) -> None:
        """v3.15-v4.18: a node joins the mask above 6/16 of the busiest node's CPU faults, leaves below 3/16."""
        top = max((g.cpu[n] for n in self.m.cpu_nodes), default=0.0)
        for n in self.m.cpu_nodes:
            if not g.active[n]:
                if g.cpu[n] > top * 6 / 16:
                    g.active[n] = True
            elif g.cpu[n] < top * 3 / 16:
                g.active[n] = False

    def _join(self, tid: int, proc: int, other: int) -> None:
        """task_numa_group: threads of one process that share pages join one group."""
        g = self.groups.get(proc)
        if g is None:
            g = self.groups[proc] = Group(self.g_mem[proc], self.g_cpu[proc], self.g_active[proc])
        for t in (tid, other):
            if t >= 0 and t not in g.tasks:
                g.tasks.add(t)
                self.group_of[t] = proc
                self.t_group[t] = proc
                task = self._task(t)
                g.mem += task.mem.sum(axis=1)
                g.cpu += task.cpu.sum(axis=1)
                g.total += task.total

    def _placement(self, tid: int, mm, sim: "View") -> None:
        """task_numa_placement, at the first fault of ``tid`` in its process's new scan pass (``mm``)."""
        task = self.tasks[tid]
        self.t_seq[tid] = mm.seq
        g = self.groups.get(self.group_of.get(tid, -1))
        membuf = self.t_membuf[tid].reshape(self.n, 2).copy()
        buf_shared, buf_private = membuf[:, 0].sum(), membuf[:, 1].sum()
        diff = membuf - task.mem / 2
        fdiff = self.t_cpubuf[tid].reshape(self.n, 2) - task.cpu / 2
        task.mem += diff
        task.cpu += fdiff
        task.total += diff.sum()
        if g is not None:
            g.mem += diff.sum(axis=1)
            g.cpu += fdiff.sum(axis=1)
            g.total += diff.sum()
        self.t_membuf[tid] = 0.0
        self.t_cpubuf[tid] = 0.0
        before = int(self.t_pref[tid])
        own = self.t_own[tid] = task.mem.sum(axis=1)
        self.t_total[tid] = task.total
        if self.o.numa_balancing_kernel == "3.8":
            return  # "FIXME: Scheduling placement policy hints go here" (v3.8): no preferred node; its scan
            # period follows each fault instead (NumaBalancing._period_38)
        if g is not None and self.o.numa_balancing_kernel == "4.4":
            self._update_active(g)
        by_node = g.mem if g is not None else own
        if by_node.max() > 0:  # only a node with CPUs can be preferred (task_numa_placement skips !N_CPU nodes)
            nodes = self.m.cpu_nodes
            pref = max(nodes, key=lambda n: (by_node[n], -n))
            if g is not None and self.o.numa_balancing_kernel == "3.13":
                # v3.13: a task whose own busiest node differs from its group's takes the node
                # with the most task + group weight (the group's scaled by 1.2).
                if max(nodes, key=lambda n: (own[n], -n)) != pref:
                    pref = max(nodes, key=lambda n: (self._weight(tid, n, False) + self._weight(tid, n, True), -n))
            self.t_pref[tid] = pref
        if self.t_pref[tid] != before and self.o.numa_balancing_kernel != "6.1":
            self.t_retry[tid] = 0  # before 4.19 placement called numa_migrate_preferred at once
        self._update_period(tid, sim, buf_shared, buf_private)
