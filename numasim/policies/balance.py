"""CFS load balancing through the scheduling-domain hierarchy (kernel/sched/fair.c, v6.x).

A part of :class:`numasim.policies.cfs.CFS`, which holds the state these methods share:
the domain levels (:mod:`numasim.policies.domains`), one balancing entity per level,
domain and group (``entities``, ``_entity``), the groups' CPUs concatenated per domain
(``_gidx``), a per-pass statistics cache and NUMA balancing (``numab``, for
``migrate_degrades_locality``). What it does:

* fork and exec placement, ``sched_balance_find_dst_cpu`` (:meth:`LoadBalancer.find_dst_cpu`);
* newidle balancing when a CPU falls idle, ``sched_balance_newidle`` (:meth:`LoadBalancer.idle`);
* periodic balancing per domain at its interval, ``sched_balance_domains`` and
  ``sched_balance_rq``: group statistics and classification, ``imbalance_pct``,
  ``calculate_imbalance``, ``detach_tasks``, ``nr_balance_failed`` escalation and active
  balancing (:meth:`LoadBalancer._periodic`).

docs/model.md lists what is kept and what is simplified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from .api import Decision, Move
from .domains import Level

if TYPE_CHECKING:
    from .api import View

__all__ = ["LoadBalancer"]

HAS_SPARE, FULLY_BUSY, OVERLOADED = 0, 1, 2
SCALE = 1024
MIGRATE_LOAD, MIGRATE_UTIL, MIGRATE_TASK = "load", "util", "task"


@dataclass
class _Stats:
    nr: int
    weight: int
    idle: int
    busy_cpus: int
    ncores: int
    kind: int
    avg_load: float

    @property
    def capacity(self) -> int:
        return self.weight * SCALE

    @property
    def load(self) -> int:
        return self.nr * SCALE

    @property
    def util(self) -> int:
        return self.busy_cpus * SCALE


@dataclass
class _Entity:
    """One (level, domain, group): the CPU that balances for this group at this level."""

    level: int
    span: int
    group: int
    last: int = 0
    interval_ms: float = 0.0
    failed: int = 0


class LoadBalancer:
    """Placement by load and task migration between runqueues (the mixin half of :class:`CFS`)."""

    def idle(self, cpu: int, sim: "View") -> list[Decision]:
        """``sched_balance_newidle``: a CPU that falls idle pulls work, lowest domain first."""
        nr = sim.nr_running
        if nr.max() <= 1:
            return []  # no runqueue is overloaded (rd->overloaded is clear)
        lvl = self.levels[0]
        if not self.machine.smt and not lvl.numa:
            # Lowest level, groups of one CPU: sched_balance_rq finds the CPU with the most
            # tasks (overloaded), computes migrate_task with an imbalance of one task, and
            # pulls one task that may run here.
            span = lvl.spans[int(lvl.span_of[cpu])]
            counts = nr[span]
            if counts.max() >= 2:
                src = int(span[int(np.argmax(counts))])
                queue = sim.runqueue(src)
                current = queue[int(self.rng.integers(len(queue)))]
                others = [t for t in queue if t != current]
                self.rng.shuffle(others)
                for t in others:
                    if sim.allowed(t, cpu):
                        return [Move(t, cpu)]
        cpu_of = np.array(sim.thread_cpu)
        active = np.array(sim.thread_active)
        nr = np.bincount(cpu_of[active], minlength=self.machine.n_cpus)
        # A newly idle CPU pulls only tasks that may run on it (can_migrate_task looks for no
        # other CPU of its group for CPU_NEWLY_IDLE), from a runqueue with another task to
        # run: when there is none anywhere, no level can pull anything.
        waiting = np.flatnonzero(active & (nr[np.maximum(cpu_of, 0)] >= 2))
        pullable = np.zeros(self.machine.n_cpus, dtype=bool)  # CPUs with a waiting task that may run here
        for t in waiting.tolist():
            if not pullable[cpu_of[t]] and sim.allowed(t, cpu):
                pullable[cpu_of[t]] = True
        moves: dict[int, int] = {}
        for li, lvl in enumerate(self.levels):
            si = int(lvl.span_of[cpu])
            if not pullable[lvl.spans[si]].any():
                continue  # nothing in this domain may come here: sched_balance_rq would pull nothing
            gi = lvl.group_of[si][cpu]
            e = _Entity(li, si, gi, failed=self._entity[(li, si, gi)].failed)
            self._balance(e, cpu, False, nr, cpu_of, active, sim, moves, newidle=True)
            if moves:
                break
        return [Move(t, c) for t, c in moves.items()]

    def find_dst_cpu(self, cpu: int, nr: NDArray[np.int64], allowed: frozenset[int] | None) -> int:
        """``sched_balance_find_dst_cpu``: walk down from the highest fork-balancing domain."""
        top = -1
        for li, lvl in enumerate(self.levels):
            if not lvl.fork:
                break
            top = li
        li = top
        while li >= 0:
            lvl = self.levels[li]
            si = int(lvl.span_of[cpu])
            group = self._find_dst_group(lvl, si, cpu, nr, allowed)
            if group is None:
                li -= 1
                continue
            new = self._group_cpu(group, nr, allowed, cpu)
            li -= 1
            cpu = new
        if allowed is not None and cpu not in allowed:
            cands = sorted(allowed)
            cpu = min(cands, key=lambda c: (nr[c], c))
        return cpu

    def _stats(self, cpus: NDArray[np.int64], nr: NDArray[np.int64], pct: int) -> _Stats:
        n = nr[cpus]
        s = int(n.sum())
        w = len(cpus)
        busy = int((n > 0).sum())
        cap, util, runnable = w * SCALE, busy * SCALE, s * SCALE
        overloaded = s > w and (cap * 100 < util * pct or cap * pct < runnable * 100)
        has_cap = s < w or (not (cap * pct < runnable * 100) and cap * 100 > util * pct)
        kind = OVERLOADED if overloaded else (HAS_SPARE if has_cap else FULLY_BUSY)
        ncores = len(set(int(c) for c in self._cpu_core[cpus]))
        return _Stats(s, w, w - busy, busy, ncores, kind, runnable * SCALE / cap)

    def _all_stats(self, li: int, si: int, nr: NDArray[np.int64], masked: NDArray[np.bool_] | None = None) -> list[_Stats]:
        """:meth:`_stats` for every group of one domain, vectorised.

        ``masked`` CPUs are left out of the sums, as ``update_sg_lb_stats`` sums only over
        ``env->cpus`` after a balancing attempt found their tasks all pinned; the group's
        weight and capacity stay whole.
        """
        cacheable = masked is None or not masked.any()
        if cacheable:
            # Every group of a domain balances against the same statistics until a task moves:
            # one computation per domain, CPU counts and move count (nr is a fresh array per pass).
            hit = self._stats_cache.get((li, si))
            if hit is not None and hit[0] is nr and hit[1] == self._moves_done:
                return hit[2]
        pct = self.levels[li].pct
        flat, starts, w, ncores = self._gidx[(li, si)]
        n = nr[flat]
        valid = np.ones(len(flat), dtype=bool) if masked is None else ~masked[flat]
        s = np.add.reduceat(n * valid, starts)
        busy = np.add.reduceat(((n > 0) & valid).astype(np.int64), starts)
        idle = np.add.reduceat(((n == 0) & valid).astype(np.int64), starts)
        cap, util, run = w * SCALE, busy * SCALE, s * SCALE
        over = (s > w) & ((cap * 100 < util * pct) | (cap * pct < run * 100))
        has_cap = (s < w) | (~(cap * pct < run * 100) & (cap * 100 > util * pct))
        kind = np.where(over, OVERLOADED, np.where(has_cap, HAS_SPARE, FULLY_BUSY))
        avg = run * SCALE / cap
        out = [
            _Stats(a, b, i, c, d, k, v)
            for a, b, i, c, d, k, v in zip(s.tolist(), w.tolist(), idle.tolist(), busy.tolist(), ncores.tolist(),
                                           kind.tolist(), avg.tolist())
        ]
        if cacheable:
            self._stats_cache[(li, si)] = (nr, self._moves_done, out)
        return out

    def _adjust_numa(self, imb: int, dst_running: int, imb_numa_nr: int) -> int:
        if dst_running > imb_numa_nr:
            return imb
        if imb <= self.o.numa_imbalance_min:
            return 0
        return imb

    def _find_dst_group(self, lvl: Level, si: int, cpu: int, nr, allowed) -> NDArray[np.int64] | None:
        groups = lvl.groups[si]
        local_i = lvl.group_of[si].get(cpu)
        local = idlest = None
        idlest_g = None
        for gi, g in enumerate(groups):
            if allowed is not None and not any(int(c) in allowed for c in g):
                continue
            st = self._stats(g, nr, lvl.pct)
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
        if lvl.numa:
            imb_nr = lvl.imb_numa_nr
            if allowed is not None:
                imb_nr = min(sum(1 for c in groups[local_i] if int(c) in allowed), imb_nr)
            imb = abs(local.idle - best.idle)
            if self._adjust_numa(imb, local.nr + 1, imb_nr) == 0:
                return None
        if local.idle >= best.idle:
            return None
        return idlest_g

    def _group_cpu(self, group, nr, allowed, this_cpu: int) -> int:
        cands = [int(c) for c in group if allowed is None or int(c) in allowed]
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

    def _interval_ns(self, e: _Entity, busy: bool) -> int:
        ms = e.interval_ms * (self.o.busy_factor if busy else 1)
        jiffies = max(int(ms * 1e6 // self.jiffy) - (1 if busy else 0), 1)
        return jiffies * self.jiffy

    def _balance_cpu(self, e: _Entity, nr) -> int:
        g = self.levels[e.level].groups[e.span][e.group]
        for c in g:
            if nr[c] == 0:
                return int(c)
        return int(g[0])

    def _periodic(self, sim: "View") -> dict[int, int]:
        """Periodic balancing (``sched_balance_domains``): every domain and group whose interval is
        due, from the CPU that balances for it; returns the moves (thread -> CPU) and sets the next due time."""
        now = sim.now
        cpu_of = np.array(sim.thread_cpu)
        active = np.array(sim.thread_active)
        nr = np.bincount(cpu_of[active], minlength=self.machine.n_cpus)
        moves: dict[int, int] = {}
        nxt = None
        for e in self.entities:
            dst = self._balance_cpu(e, nr)
            busy = bool(nr[dst] > 0)
            if now >= e.last + self._interval_ns(e, busy):
                if nr[self.levels[e.level].spans[e.span]].any():
                    found, moved = self._balance(e, dst, busy, nr, cpu_of, active, sim, moves)
                else:  # nothing runs in the domain: no busiest group, as sched_balance_rq finds
                    found, moved = False, 0
                w = float(self.levels[e.level].weight)
                # sched_balance_rq's back-off: min_interval after an imbalance, else doubling.
                e.interval_ms = w if found else min(e.interval_ms * 2, 2 * w)
                e.failed = 0 if moved or not found else e.failed + 1
                e.last = now
                busy = bool(nr[self._balance_cpu(e, nr)] > 0)
            due = e.last + self._interval_ns(e, busy)
            nxt = due if nxt is None else min(nxt, due)
        self._next = max(int(nxt if nxt is not None else now + self.jiffy), now + 1)
        return moves

    def _balance(self, e, dst, busy, nr, cpu_of, active, sim, moves, newidle: bool = False) -> tuple[bool, int]:
        """``sched_balance_rq`` for one domain and group; returns (imbalance found, tasks moved).

        When every task of the busiest CPU is pinned away from this group
        (``LBF_ALL_PINNED``), the kernel masks that CPU out and searches again
        (``goto redo``), one CPU at a time, until it finds a CPU with a task that may
        move or none is left (``out_all_pinned``: the domain counts as balanced). Here
        the first all-pinned result masks at once every CPU outside the group whose
        tasks are all pinned away from it, so the search usually reaches the CPU the kernel's
        redos would reach, without repeating them CPU by CPU. Simplified: the group
        statistics of that search then leave out every pinned-only CPU, not only the
        ones the kernel happened to try.
        """
        lvl = self.levels[e.level]
        local = lvl.groups[e.span][e.group]
        masked = np.zeros(self.machine.n_cpus, dtype=bool)
        outside = None
        while True:
            found, moved, pinned = self._balance_once(e, dst, busy, nr, cpu_of, active, sim, moves, newidle, masked)
            if not pinned:
                return found, moved
            masked[pinned] = True
            if outside is None:
                outside = np.setdiff1d(lvl.spans[e.span], local)
            movable = self._cpus_with_movable(outside, local, cpu_of, active, sim)
            masked[outside[~movable]] = True
            if not (movable & ~masked[outside] & (nr[outside] >= 2)).any():
                return False, 0

    @staticmethod
    def _cpus_with_movable(cpus, local, cpu_of, active, sim) -> NDArray[np.bool_]:
        """Per CPU of ``cpus``: whether one of its tasks may run on some CPU of ``local``."""
        here = frozenset(int(c) for c in local)
        out = np.zeros(len(cpus), dtype=bool)
        index = {int(c): i for i, c in enumerate(cpus)}
        for t in np.flatnonzero(active):
            i = index.get(int(cpu_of[t]))
            if i is None or out[i]:
                continue
            aff = sim.affinity(int(t))
            if aff is None or not aff.isdisjoint(here):
                out[i] = True
        return out

    def _balance_once(self, e, dst, busy, nr, cpu_of, active, sim, moves, newidle, masked) -> tuple[bool, int, list[int]]:
        lvl = self.levels[e.level]
        groups = lvl.groups[e.span]
        stats = self._all_stats(e.level, e.span, nr, masked)
        local = stats[e.group]
        sds_avg = sum(s.load for s in stats) * SCALE / sum(s.capacity for s in stats)
        # sched_balance_find_src_group
        best = None
        for gi, st in enumerate(stats):
            if gi == e.group or st.nr == 0:
                continue
            key = (st.kind, st.avg_load) if st.kind != HAS_SPARE else (st.kind, -st.idle, st.nr)
            if best is None or key > best[0]:
                best = (key, gi)
        if best is None:
            return False, 0, []
        bi = best[1]
        busiest = stats[bi]
        if local.kind > busiest.kind:
            return False, 0, []
        if local.kind == OVERLOADED:
            if local.avg_load >= busiest.avg_load or local.avg_load >= sds_avg:
                return False, 0, []
            if 100 * busiest.avg_load <= lvl.pct * local.avg_load:
                return False, 0, []
        force = lvl.prefer_sibling and local.kind == HAS_SPARE and self._sibling_imb(busy, local, busiest) > 1
        if not force and busiest.kind != OVERLOADED:
            if busy:
                return False, 0, []
            if busiest.weight > 1 and local.idle <= busiest.idle + 1:
                return False, 0, []
            if busiest.nr == 1:
                return False, 0, []
        kind, imbalance = self._imbalance(lvl, busy, local, busiest, sds_avg)
        if imbalance <= 0:
            return False, 0, []
        moved, pinned = self._detach(e, dst, groups[e.group], groups[bi], kind, imbalance, nr, cpu_of, active, sim,
                                     moves, masked, newidle)
        if moved or newidle:
            return True, moved, pinned
        if kind == MIGRATE_TASK and e.failed + 1 > lvl.nice_tries + 2:
            # active balance: push the running task of the busiest queue to dst
            src = self._busiest_queue(groups[bi], kind, imbalance, nr, excluded=set(np.flatnonzero(masked).tolist()))
            if src is not None:
                for t in self._queue(src, cpu_of, active):
                    if sim.allowed(t, dst):
                        self._do_move(t, src, dst, nr, cpu_of, moves)
                        return True, 1, []
        return True, 0, pinned

    def _sibling_imb(self, busy: bool, local: _Stats, busiest: _Stats) -> int:
        if busy or busiest.nr == 0:
            return 0
        if local.ncores == busiest.ncores:
            return max(0, busiest.nr - local.nr)
        nl, nb = local.ncores, busiest.ncores
        imb = (2 * max(0, nl * busiest.nr - nb * local.nr) + nl + nb) // (nl + nb)
        if imb <= 1 and local.nr == 0 and busiest.nr > 1:
            imb = 2
        return imb

    def _imbalance(self, lvl: Level, busy: bool, local: _Stats, busiest: _Stats, sds_avg: float):
        if local.kind == HAS_SPARE:
            if busiest.kind > FULLY_BUSY and not lvl.share_llc:
                imb = max(local.capacity, local.util) - local.util
                if not busy and imb == 0:
                    return MIGRATE_TASK, 1
                return MIGRATE_UTIL, imb
            if busiest.weight == 1 or lvl.prefer_sibling:
                imb = self._sibling_imb(busy, local, busiest)
            else:
                imb = max(0, local.idle - busiest.idle)
            if lvl.numa:
                imb = self._adjust_numa(imb, local.nr + 1, lvl.imb_numa_nr)
            return MIGRATE_TASK, imb >> 1
        if local.kind < OVERLOADED:
            if local.avg_load >= busiest.avg_load or local.avg_load >= sds_avg:
                return MIGRATE_LOAD, 0
        imb = min((busiest.avg_load - sds_avg) * busiest.capacity, (sds_avg - local.avg_load) * local.capacity) / SCALE
        return MIGRATE_LOAD, imb

    def _queue(self, cpu: int, cpu_of, active) -> list[int]:
        return [int(t) for t in np.flatnonzero((cpu_of == cpu) & active)]

    def _busiest_queue(self, group, kind, imbalance, nr, excluded: set[int]) -> int | None:
        best = None
        for c in group:
            c = int(c)
            if c in excluded or nr[c] == 0:
                continue
            if kind == MIGRATE_LOAD and nr[c] == 1 and SCALE > imbalance:
                continue
            if kind == MIGRATE_UTIL and nr[c] <= 1:
                continue
            if best is None or nr[c] > nr[best]:
                best = c
        return best

    def _detach(self, e, dst, local_g, busiest_g, kind, imbalance, nr, cpu_of, active, sim, moves, masked,
                newidle: bool = False) -> tuple[int, list[int]]:
        """Pull tasks from the busiest group's busiest CPUs; returns (moved, CPUs whose tasks were all pinned).

        A task that may not run on ``dst`` goes to another CPU of the local group it may run
        on (``LBF_DST_PINNED``, ``new_dst_cpu``), except when ``dst`` is newly idle: then it
        counts as pinned, as ``can_migrate_task`` has it."""
        excluded: set[int] = set(np.flatnonzero(masked).tolist())
        pinned_cpus: list[int] = []
        while True:
            src = self._busiest_queue(busiest_g, kind, imbalance, nr, excluded)
            if src is None:
                return 0, pinned_cpus
            queue = self._queue(src, cpu_of, active)
            if len(queue) <= 1:
                return 0, pinned_cpus
            current = queue[int(self.rng.integers(len(queue)))]
            candidates = [t for t in queue if t != current]
            self.rng.shuffle(candidates)
            moved = 0
            pinned = True
            for t in candidates[:32]:
                if nr[dst] == 0 and nr[src] <= 1 and moved:
                    break
                target = dst
                if not sim.allowed(t, dst):
                    if newidle:
                        continue
                    alt = [int(c) for c in local_g if sim.allowed(t, int(c))]
                    if not alt:
                        continue
                    target = min(alt, key=lambda c: (nr[c], c))
                pinned = False
                lvl = self.levels[e.level]
                if (self.numab is not None and lvl.numa and e.failed <= lvl.nice_tries
                        and self.numab.degrades_locality(t, src, target, nr[dst] == 0)):
                    continue  # migrate_degrades_locality: cache-hot until balancing keeps failing
                if kind == MIGRATE_LOAD:
                    if (SCALE >> min(e.failed, 31)) > imbalance:
                        continue
                    imbalance -= SCALE
                elif kind == MIGRATE_UTIL:
                    util = SCALE / max(nr[src], 1)
                    if util > imbalance:
                        continue
                    imbalance -= util
                else:
                    imbalance -= 1
                self._do_move(t, src, target, nr, cpu_of, moves)
                moved += 1
                if imbalance <= 0 or nr[src] <= 1:
                    break
            if moved or not pinned:
                return moved, []
            excluded.add(src)
            pinned_cpus.append(src)

    def _do_move(self, t: int, src: int, dst: int, nr, cpu_of, moves: dict[int, int]) -> None:
        self._moves_done += 1
        nr[src] -= 1
        nr[dst] += 1
        cpu_of[t] = dst
        moves[t] = dst
