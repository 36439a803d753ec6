"""CFS's fork and exec placement, ``sched_balance_find_dst_cpu`` (kernel/sched/fair.c v6.x; before v5.5: balance_v4).

A part of :class:`numasim.policies.cfs.CFS`, beside :class:`numasim.policies.balance.LoadBalancer`,
whose state it shares (the domain levels, each domain's groups as Python values, the group
statistics by the numbers they come from): from the highest fork-balancing domain down,
the idlest group, then its idlest CPU; docs/model.md lists what is kept.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from . import balance_v4
from .balance_pass import HAS_SPARE, SCALE, Stats, flat_groups
from .imbalance import adjust_numa_imbalance, fork_stays_local

__all__ = ["ForkPlacement"]


class ForkPlacement:
    """Where a new (or exec'd) thread starts (the mixin part of :class:`~numasim.policies.cfs.CFS`)."""

    def find_dst_cpu(self, cpu: int, nr: NDArray[np.int64], allowed: frozenset[int] | None, fork: bool = True) -> int:
        """``sched_balance_find_dst_cpu``: walk down from the CPU's highest fork-balancing domain (a fork's,
        or an exec's). Where it moves to another CPU, it goes on from that CPU's highest domain smaller
        than the one it chose in (the next level down, where domains do not overlap)."""
        counts = nr
        nr = nr.tolist()
        levels = self.levels
        li = -1
        for k, lvl in enumerate(levels):
            if not lvl.fork:
                break
            if lvl.span_of[cpu] >= 0:
                li = k
        while li >= 0:
            si = int(levels[li].span_of[cpu])
            if si < 0:
                li -= 1
                continue
            group = self._find_dst_group(li, si, cpu, nr, allowed, fork, counts)
            if group is None:
                li -= 1
                continue
            new = self._group_cpu(group, nr, allowed, cpu)
            if new == cpu:
                li -= 1
                continue
            weight = len(self._domains[li][si].cpus)
            cpu = new
            li = -1  # the new CPU's highest fork-balancing domain lighter than that one
            for k, lvl in enumerate(levels):
                sk = int(lvl.span_of[cpu])
                if sk < 0:
                    continue
                if len(self._domains[k][sk].cpus) >= weight:
                    break
                if lvl.fork:
                    li = k
        if allowed is not None and cpu not in allowed:
            cands = sorted(allowed)
            cpu = min(cands, key=lambda c: (nr[c], c))
        return cpu

    def _stats(self, li: int, group: tuple[tuple[int, ...], int, int], nr: list[int]) -> Stats:
        """``update_sg_lb_stats`` for one group (its CPUs, weight and cores) of level ``li``: see :class:`StatsMemo`."""
        cpus, w, ncores = group
        n = [nr[c] for c in cpus]
        idle = n.count(0)  # counts are never negative
        return self._stats_memo[li][(w, ncores, sum(n), w - idle, idle)]

    def _group_counts(self, li: int, si: int, counts: NDArray[np.int64]) -> tuple[list[int], list[int]]:
        """Tasks and idle CPUs of each group of one domain, summed in two array operations."""
        hit = self._fork_groups.get((li, si))
        if hit is None:
            hit = self._fork_groups[(li, si)] = flat_groups([cpus for cpus, _w, _n in self._domains[li][si].groups])
        flat, starts = hit
        per = counts[flat]
        return np.add.reduceat(per, starts).tolist(), np.add.reduceat((per == 0).astype(np.int64), starts).tolist()

    def _find_dst_group(self, li: int, si: int, cpu: int, nr: list[int], allowed, fork: bool = True,
                        counts: NDArray[np.int64] | None = None) -> tuple[int, ...] | None:
        lvl = self.levels[li]
        groups = self._domains[li][si].groups
        local_i = lvl.group_of[si][cpu]
        order = lvl.order(si, cpu)
        era = self.o.numa_imbalance_kernel
        if era in balance_v4.ERAS:
            return balance_v4.find_dst_group(era, groups, order, allowed, lambda g: self._stats(li, g, nr),
                                             lvl.pct, lvl.numa, fork)
        local = idlest = None
        idlest_g = None
        # update_sg_lb_stats for every group: the sums of _stats, for all groups at once
        tasks, idles = self._group_counts(li, si, np.asarray(nr) if counts is None else counts)
        memo = self._stats_memo[li]
        for gi in order:
            g, w, ncores = groups[gi]
            if allowed is not None and allowed.isdisjoint(g):
                continue
            st = memo[(w, ncores, tasks[gi], w - idles[gi], idles[gi])]
            if gi == local_i:
                local = st
                continue
            key = (st.kind, st.avg_load if st.kind != HAS_SPARE else -st.idle, st.util)
            if idlest is None or key < idlest[0]:
                idlest = (key, st)
                idlest_g = g
        if idlest is None:
            return None
        best = idlest[1]
        if local is None:
            return idlest_g
        if local.kind < best.kind:
            return None
        if local.kind > best.kind:
            return idlest_g
        if best.kind != HAS_SPARE:
            imbalance = SCALE * (lvl.pct - 100) // 100
            if lvl.numa and best.avg_load + imbalance >= local.avg_load:
                return None
            if best.avg_load >= local.avg_load + imbalance:
                return None
            if 100 * local.avg_load <= lvl.pct * best.avg_load:
                return None
            return idlest_g
        era = self.o.numa_imbalance_kernel
        if lvl.numa and era != "6.1":
            if fork_stays_local(era, local, len(self._domains[li][si].cpus), lvl.imb_numa_nr[si]):
                return None
        elif lvl.numa:
            imb_nr = lvl.imb_numa_nr[si]
            if allowed is not None:
                imb_nr = min(sum(1 for c in groups[local_i][0] if c in allowed), imb_nr)
            imb = abs(local.idle - best.idle)
            if adjust_numa_imbalance("6.1", imb, local.nr + 1, local.weight, imb_nr, self.o.numa_imbalance_min) == 0:
                return None
        if local.idle >= best.idle:
            return None
        return idlest_g

    def _group_cpu(self, group: tuple[int, ...], nr: list[int], allowed, this_cpu: int) -> int:
        cands = [c for c in group if allowed is None or c in allowed]
        if not cands:
            return this_cpu
        idle = [c for c in cands if nr[c] == 0]
        if idle:
            if self.machine.smt:
                whole = [c for c in idle if all(nr[s] == 0 for s in self.machine.siblings(c))]
                if whole:
                    return whole[0]
            return idle[0]
        return min(cands, key=lambda c: (nr[c], c))
