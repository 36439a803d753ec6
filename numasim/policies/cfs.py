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

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

from ..scenario import policy_defaults
from .base import Decision, Move, Policy, PolicyOptions, register
from .domains import Level, build_levels

if TYPE_CHECKING:
    from ..engine import SimView

__all__ = ["CFS", "CFSOptions"]

_D = policy_defaults("cfs")

HAS_SPARE, FULLY_BUSY, OVERLOADED = 0, 1, 2
SCALE = 1024
MIGRATE_LOAD, MIGRATE_UTIL, MIGRATE_TASK = "load", "util", "task"


class CFSOptions(PolicyOptions):
    """Tunables of the CFS model; defaults and sources in presets/policies/cfs.yaml."""

    hz: int = Field(default=_D["hz"], ge=100, le=1000)
    sched_latency_ms: float = Field(default=_D["sched_latency_ms"], gt=0)
    min_granularity_ms: float = Field(default=_D["min_granularity_ms"], gt=0)
    eevdf: bool = _D["eevdf"]
    base_slice_ms: float = Field(default=_D["base_slice_ms"], gt=0)
    busy_factor: int = Field(default=_D["busy_factor"], ge=1, le=64)
    imbalance_pct_smt: int = Field(default=_D["imbalance_pct_smt"], ge=100, le=200)
    imbalance_pct_mc: int = Field(default=_D["imbalance_pct_mc"], ge=100, le=200)
    imbalance_pct_numa: int = Field(default=_D["imbalance_pct_numa"], ge=100, le=200)
    cache_nice_tries_mc: int = Field(default=_D["cache_nice_tries_mc"], ge=0, le=10)
    cache_nice_tries_numa: int = Field(default=_D["cache_nice_tries_numa"], ge=0, le=10)
    numa_imbalance_min: int = Field(default=_D["numa_imbalance_min"], ge=0, le=64)
    node_reclaim_distance: int = Field(default=_D["node_reclaim_distance"], ge=10, le=255)


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


@register
class CFS(Policy):
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
        for li, lvl in enumerate(self.levels):
            for si, groups in enumerate(lvl.groups):
                for gi in range(len(groups)):
                    self.entities.append(_Entity(li, si, gi, 0, float(lvl.weight)))
        self._cpu_core = machine.cpu_core
        self._started = False
        self._next = 0

    # ------------------------------------------------------------- slices
    def slice_ns(self, nr_running: int) -> int:
        if self.o.eevdf:
            return int(self._base_slice)
        nr_latency = self._latency / self._min_gran
        period = self._latency if nr_running <= nr_latency else nr_running * self._min_gran
        return int(period / max(nr_running, 1))

    # ---------------------------------------------------------- placement
    def place(self, tid: int, sim: "SimView") -> int:
        cpu_of = sim.thread_cpu
        nr = np.array(sim.nr_running)
        allowed = sim.affinity(tid)
        pod = sim.pods[int(sim.thread_pod[tid])]
        if cpu_of[tid] >= 0:
            start = int(cpu_of[tid])  # displaced by an affinity change
        elif tid == pod.tids[0] or cpu_of[pod.tids[0]] < 0:
            # exec of the pod's first process from the container runtime's CPU
            start = int(self.rng.integers(self.machine.n_cpus))
        else:
            start = int(cpu_of[pod.tids[0]])  # fork from the main thread
        self._started = True
        return self.find_dst_cpu(start, nr, allowed)

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

    # --------------------------------------------------------- balancing
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

    def next_tick(self, now: int) -> int | None:
        if not self._started:
            return None
        return self._next

    def tick(self, sim: "SimView") -> list[Decision]:
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
                self._balance(e, dst, busy, nr, cpu_of, active, sim, moves)
                e.last = now
                busy = bool(nr[self._balance_cpu(e, nr)] > 0)
            due = e.last + self._interval_ns(e, busy)
            nxt = due if nxt is None else min(nxt, due)
        self._next = max(int(nxt if nxt is not None else now + self.jiffy), now + 1)
        return [Move(t, c) for t, c in moves.items()]

    def _balance(self, e, dst, busy, nr, cpu_of, active, sim, moves) -> None:
        lvl = self.levels[e.level]
        groups = lvl.groups[e.span]
        stats = [self._stats(g, nr, lvl.pct) for g in groups]
        local = stats[e.group]
        total_load = sum(s.load for s in stats)
        total_cap = sum(s.capacity for s in stats)
        sds_avg = total_load * SCALE / total_cap
        # sched_balance_find_src_group
        best = None
        for gi, st in enumerate(stats):
            if gi == e.group or st.nr == 0:
                continue
            if st.kind in (OVERLOADED, FULLY_BUSY):
                key = (st.kind, st.avg_load)
            else:
                key = (st.kind, -st.idle, st.nr)
            if best is None or key > best[0]:
                best = (key, gi)
        if best is None:
            self._balanced(e)
            return
        bi = best[1]
        busiest = stats[bi]
        if local.kind > busiest.kind:
            self._balanced(e)
            return
        if local.kind == OVERLOADED:
            if local.avg_load >= busiest.avg_load or local.avg_load >= sds_avg:
                self._balanced(e)
                return
            if 100 * busiest.avg_load <= lvl.pct * local.avg_load:
                self._balanced(e)
                return
        force = lvl.prefer_sibling and local.kind == HAS_SPARE and self._sibling_imb(busy, local, busiest) > 1
        if not force and busiest.kind != OVERLOADED:
            if busy:
                self._balanced(e)
                return
            if busiest.weight > 1 and local.idle <= busiest.idle + 1:
                self._balanced(e)
                return
            if busiest.nr == 1:
                self._balanced(e)
                return
        kind, imbalance = self._imbalance(lvl, busy, local, busiest, sds_avg)
        if imbalance <= 0:
            self._balanced(e)
            return
        e.interval_ms = float(lvl.weight)  # an imbalance was found: back to min_interval
        moved = self._detach(e, dst, groups[e.group], groups[bi], kind, imbalance, nr, cpu_of, active, sim, moves)
        if moved:
            e.failed = 0
            return
        e.failed += 1
        if kind == MIGRATE_TASK and e.failed > lvl.nice_tries + 2:
            # active balance: push the running task of the busiest queue to dst
            src = self._busiest_queue(groups[bi], kind, imbalance, nr, excluded=set())
            if src is not None:
                for t in self._queue(src, cpu_of, active):
                    if sim.allowed(t, dst):
                        self._do_move(t, src, dst, nr, cpu_of, moves)
                        e.failed = 0
                        break

    def _balanced(self, e: _Entity) -> None:
        w = self.levels[e.level].weight
        e.interval_ms = min(e.interval_ms * 2, 2.0 * w)

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

    def _detach(self, e, dst, local_g, busiest_g, kind, imbalance, nr, cpu_of, active, sim, moves) -> int:
        excluded: set[int] = set()
        while True:
            src = self._busiest_queue(busiest_g, kind, imbalance, nr, excluded)
            if src is None:
                return 0
            queue = self._queue(src, cpu_of, active)
            if len(queue) <= 1:
                return 0
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
                    alt = [int(c) for c in local_g if sim.allowed(t, int(c))]
                    if not alt:
                        continue
                    target = min(alt, key=lambda c: (nr[c], c))
                pinned = False
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
                return moved
            excluded.add(src)

    def _do_move(self, t: int, src: int, dst: int, nr, cpu_of, moves: dict[int, int]) -> None:
        nr[src] -= 1
        nr[dst] += 1
        cpu_of[t] = dst
        moves[t] = dst
