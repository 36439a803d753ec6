"""CFS load balancing through the scheduling-domain hierarchy (kernel/sched/fair.c v6.x, the 5.x NUMA rules; before v5.5: balance_v4).

A part of :class:`numasim.policies.cfs.CFS`, which holds the state these methods share:
the domain levels (:mod:`numasim.policies.domains`), one balancing entity per level,
domain and group (``entities``, ``_entity``), each domain's CPUs and groups as Python
tuples (``_domains``), the group statistics by the numbers they come from
(``_stats_memo``), a per-pass statistics cache and NUMA balancing (``numab``, for
``migrate_degrades_locality``). What it does:

* (fork and exec placement, ``sched_balance_find_dst_cpu``: :mod:`numasim.policies.fork`);
* newidle balancing when a CPU falls idle, ``sched_balance_newidle`` (:meth:`LoadBalancer.idle`);
* periodic balancing per domain at its interval, ``sched_balance_domains`` and
  ``sched_balance_rq``: group statistics and classification, ``imbalance_pct``,
  ``calculate_imbalance``, ``detach_tasks``, ``nr_balance_failed`` escalation and active
  balancing (:meth:`LoadBalancer._periodic`).

docs/model.md lists what is kept and what is simplified. A balancing pass works on plain
Python values (:mod:`numasim.policies.balance_pass`): its arrays are one domain's or one
group's, too small for numpy's cost per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .api import PULL_MAX_QUEUE, Decision, Move, PullOne
from . import balance_v4
from .balance_due import DueTimes
from .balance_pass import FULLY_BUSY, HAS_SPARE, OVERLOADED, SCALE, Pass, Stats
from .domains import Level
from .imbalance import adjust_numa_imbalance, periodic_numa_imbalance

if TYPE_CHECKING:
    from .api import View

__all__ = ["LoadBalancer"]

MIGRATE_LOAD, MIGRATE_UTIL, MIGRATE_TASK = "load", "util", "task"
MIGRATE_LOAD_V4 = "load-v4"  # before v5.5: a task moves if half its load fits the imbalance


@dataclass
class _Entity:
    """One (level, domain, group): the CPU that balances for this group at this level."""

    level: int
    span: int
    group: int
    last: int = 0
    interval_ms: float = 0.0
    failed: int = 0
    cpus: tuple[int, ...] = ()  # the group's CPUs: its first idle one balances for it, else its first
    # Where groups overlap, the group's balance mask is ``cpus`` and may hold CPUs of other domains (or of
    # none at this level): this domain is balanced only when the CPU chosen is one of these (should_we_balance).
    members: frozenset[int] | None = None
    idle_ns: int = 0  # the interval in ns when that CPU is idle (LoadBalancer._set_interval)
    busy_ns: int = 0  # ... and when it is busy


class LoadBalancer:
    """Placement by load and task migration between runqueues (the mixin half of :class:`CFS`)."""

    _due: DueTimes | None = None

    @property
    def idle_when(self) -> str:  # type: ignore[override]
        """Newidle balancing pulls queued threads only (rd->overloaded); a subclass that changes
        :meth:`idle` is asked always."""
        return "overloaded" if type(self).idle is LoadBalancer.idle else "always"

    def idle_rule(self) -> PullOne | None:
        """Where the lowest domain's groups are single CPUs that share an LLC (a core's hardware
        threads; an LLC's cores without SMT), ``sched_balance_rq`` there (v5.5 on) finds the CPU
        with the most tasks (overloaded), computes migrate_task with an imbalance of half its
        tasks, one while it has at most three, and pulls that many tasks that may run here; if
        every task there is pinned away, the next busiest. The runtime runs the one-move case
        compiled (:class:`~numasim.policies.api.PullOne`, ``idle_pull.pull_one``) and asks
        :meth:`idle` when it pulls nothing, which then starts at the next level, unless a CPU of
        the lowest domain holds more than three tasks (the rule then left the domain to it).
        Before v5.5 the imbalance is a load that depends on the whole domain: no rule."""
        lvl = self.levels[0] if self.levels else None
        if (type(self).idle is not LoadBalancer.idle or lvl is None or lvl.numa or not lvl.share_llc
                or self.o.numa_imbalance_kernel in balance_v4.ERAS or not all(d.single for d in self._domains[0])
                or (lvl.span_of < 0).any()):
            return None  # (a subclass's own idle(); no levels: one CPU; a lowest level some CPUs lack)
        self._pull_rule = True
        return PullOne(np.asarray(lvl.span_of, dtype=np.int64))

    def idle(self, cpu: int, sim: "View") -> list[Decision]:
        """``sched_balance_newidle``: a CPU that falls idle pulls work, lowest domain first (the lowest
        by the runtime's pull of :meth:`idle_rule`, if it took it and the domain was its to balance)."""
        # A newly idle CPU pulls only tasks that may run on it (can_migrate_task looks for no
        # other CPU of its group for CPU_NEWLY_IDLE), from a runqueue with another task to
        # run: when there is none anywhere (no runqueue is overloaded, rd->overloaded, or
        # none holds such a task), no level can pull anything.
        sources = sim.pullable(cpu)
        if not sources:
            return []
        sources = set(sources)
        p = Pass(sim)
        first = 0
        if self._pull_rule and max(p.nr[c] for c in self._domains[0][int(self.levels[0].span_of[cpu])].cpus) <= PULL_MAX_QUEUE:
            first = 1  # the runtime's pull balanced the lowest domain (idle_rule)
        for li in range(first, len(self.levels)):
            lvl = self.levels[li]
            si = int(lvl.span_of[cpu])
            if si < 0:
                continue  # no domain of this CPU's at this level
            if sources.isdisjoint(self._domains[li][si].cpus):
                continue  # nothing in this domain may come here: sched_balance_rq would pull nothing
            gi = lvl.group_of[si][cpu]
            e = _Entity(li, si, gi, failed=self._entity[(li, si, gi)].failed)
            self._balance(e, cpu, False, p, newidle=True)
            if p.moves:
                break
        return [Move(t, c) for t, c in p.moves.items()]

    def _all_stats(self, li: int, si: int, nr: list[int], masked: set[int] | frozenset[int] = frozenset()) -> list[Stats]:
        """:meth:`_stats` for every group of one domain.

        ``masked`` CPUs are left out of the sums, as ``update_sg_lb_stats`` sums only over
        ``env->cpus`` after a balancing attempt found their tasks all pinned; the group's
        weight and capacity stay whole.
        """
        if not masked:
            # Every group of a domain balances against the same statistics until a task moves:
            # one computation per domain, CPU counts and move count (nr is a fresh list per pass).
            hit = self._stats_cache.get((li, si))
            if hit is not None and hit[0] is nr and hit[1] == self._moves_done:
                return hit[2]
        memo, d = self._stats_memo[li], self._domains[li][si]
        if d.single and not masked:
            one = memo.one_cpu
            out = [one[nr[c]] for c in d.cpus]
        else:
            out = []
            for cpus, w, ncores in d.groups:
                n = [nr[c] for c in cpus if c not in masked] if masked else [nr[c] for c in cpus]
                idle = n.count(0)  # counts are never negative
                out.append(memo[(w, ncores, sum(n), len(n) - idle, idle)])
        if not masked:
            self._stats_cache[(li, si)] = (nr, self._moves_done, out)
        return out

    def _set_interval(self, e: _Entity, ms: float) -> None:
        """The entity's balancing interval, and in ns (whole jiffies) when its CPU is idle and when busy."""
        e.interval_ms = ms
        e.idle_ns = max(int(ms * 1e6 // self.jiffy), 1) * self.jiffy
        e.busy_ns = max(int(ms * self.o.busy_factor * 1e6 // self.jiffy) - 1, 1) * self.jiffy

    @staticmethod
    def _balance_cpu(e: _Entity, nr: list[int]) -> int:
        for c in e.cpus:
            if nr[c] == 0:
                return c
        return e.cpus[0]

    def _periodic(self, sim: "View") -> dict[int, int]:
        """Periodic balancing (``sched_balance_domains``): every domain and group whose interval is
        due, from the CPU that balances for it; returns the moves (thread -> CPU) and sets the next due time.

        The entities due, and the earliest next due time, are found for all at once from the arrays of
        :class:`DueTimes` (most entities are not due at a tick; with NUMA balancing most ticks are its
        own, and find nothing due), and with them the entities whose balancing would find nothing
        (:meth:`_settled`): those only back off. That holds until a task moves: from then on the
        entities after it are taken one by one, each seeing the run counts the moves before it left,
        as the kernel's loop over CPUs and domains does."""
        now = sim.now
        if not self.entities:  # one CPU: no domains
            self._next = now + max(self.jiffy, 1)
            return {}
        times = self._due
        if times is None:
            index: dict[tuple[int, int], int] = {}
            domain_of = [index.setdefault((e.level, e.span), len(index)) for e in self.entities]
            times = self._due = DueTimes(self.entities, [self._domains[li][si].cpus for li, si in index],
                                          domain_of, [self._settled(e) for e in self.entities])
        nr0 = sim.nr_running
        earliest = times.earliest(nr0)
        if now < earliest:
            self._next = max(earliest, now + 1)
            return {}
        p = Pass(sim)
        nr = p.nr
        due_k, quiet = times.due(nr0, now)
        for k, q in zip(due_k, quiet):
            e = self.entities[k]
            if q:  # sched_balance_rq would find no imbalance (_settled): _visit's outcome, shortened
                cap = 2.0 * len(self._domains[e.level][e.span].cpus)
                if e.interval_ms != cap:
                    self._set_interval(e, min(e.interval_ms * 2, cap))
                e.failed, e.last = 0, now
                times.set(k, e)
                continue
            due = self._visit(e, nr, p, now)
            times.set(k, e)
            if p.moves:
                break
        else:
            self._next = max(times.earliest(nr0), now + 1)
            return p.moves
        # A task moved at entity k: those before it saw the pass's first run counts, the rest see the moves.
        nxt = min(times.earliest(nr0, k), due) if k else due
        for e in self.entities[k + 1:]:
            nxt = min(nxt, self._visit(e, nr, p, now))
        self._next = max(nxt, now + 1)
        times.update(self.entities)
        return p.moves

    def _settled(self, e: _Entity) -> bool:
        """Whether ``e``'s balancing finds nothing while no CPU of its domain runs two tasks (it finds nothing
        where none runs one, in every era): where the domain's groups are single CPUs and the level does not
        prefer siblings (in practice the lowest level), a busiest CPU running one task is no imbalance for a
        periodic pass. From v5.5 (``_balance_once``) a busiest group with one task ends the search before
        any active balancing; before (``balance_v4.find_busiest_group``) a busy balancing CPU's load is
        already the busiest's, and an idle one's group has one idle CPU, no more than the busiest's plus one."""
        return self._domains[e.level][e.span].single and not self.levels[e.level].prefer_sibling[e.span]

    def _visit(self, e: _Entity, nr: list[int], p: Pass, now: int) -> int:
        """Balance ``e``'s domain and group if due; returns when it is next due."""
        busy = nr[self._balance_cpu(e, nr)] > 0
        if now >= e.last + (e.busy_ns if busy else e.idle_ns):
            dst = self._balance_cpu(e, nr)
            if e.members is not None and dst not in e.members:
                found, moved = False, 0  # another domain's CPU balances for the group: out_balanced here
            elif any(nr[c] for c in self._domains[e.level][e.span].cpus):
                found, moved = self._balance(e, dst, busy, p)
            else:  # nothing runs in the domain: no busiest group, as sched_balance_rq finds
                found, moved = False, 0
            w = float(len(self._domains[e.level][e.span].cpus))
            # sched_balance_rq's back-off: min_interval after an imbalance, else doubling.
            self._set_interval(e, w if found else min(e.interval_ms * 2, 2 * w))
            e.failed = 0 if moved or not found else e.failed + 1
            e.last = now
            busy = nr[self._balance_cpu(e, nr)] > 0
        return e.last + (e.busy_ns if busy else e.idle_ns)

    def _balance(self, e: _Entity, dst: int, busy: bool, p: Pass, newidle: bool = False) -> tuple[bool, int]:
        """``sched_balance_rq`` for one domain and group; returns (imbalance found, tasks moved).

        When every task of the busiest CPU is pinned away from this group
        (``LBF_ALL_PINNED``), the kernel masks that CPU out and searches again
        (``goto redo``), one CPU at a time, until it finds a CPU with a task that may
        move or none is left (``out_all_pinned``: the domain counts as balanced). Here
        the first all-pinned result masks at once every CPU outside the group that has
        tasks, all pinned away from it, so the search usually reaches the CPU the kernel's
        redos would reach, without repeating them CPU by CPU. Simplified: the group
        statistics of that search then leave out every pinned-only CPU, not only the
        ones the kernel happened to try. Idle CPUs are never masked (the kernel never
        picks one as the busiest), so they still count as idle.
        """
        masked: set[int] = set()
        movable: list[int] | None = None
        while True:
            found, moved, pinned = self._balance_once(e, dst, busy, p, newidle, masked)
            if not pinned:
                return found, moved
            masked.update(pinned)
            if movable is None:
                # Once: no task moved in an attempt that found pinned CPUs. A masked CPU stays masked.
                outside, local = self._outside(e)
                movable = self._cpus_with_movable([c for c in outside if c not in masked and p.nr[c]], local, p)
                # Only CPUs with tasks, all pinned away: an idle CPU is never the busiest, so the
                # kernel never drops it from env->cpus, and it still counts as idle in its group.
                masked.update(set(c for c in outside if p.nr[c]).difference(movable))
            if not any(c not in masked and p.nr[c] >= 2 for c in movable):
                return False, 0

    def _outside(self, e: _Entity) -> tuple[tuple[int, ...], frozenset[int]]:
        """The CPUs of ``e``'s domain outside its group, ascending, and the group's CPUs (cached)."""
        key = (e.level, e.span, e.group)
        hit = self._outside_cache.get(key)
        if hit is None:
            local = frozenset(self._domains[e.level][e.span].groups[e.group][0])
            hit = self._outside_cache[key] = (tuple(c for c in self._domains[e.level][e.span].cpus if c not in local), local)
        return hit

    @staticmethod
    def _cpus_with_movable(cpus: list[int], local: frozenset[int], p: Pass) -> list[int]:
        """The CPUs of ``cpus`` with a task that may run on some CPU of ``local``."""
        affinity, queue = p.sim.affinity, p.queue
        out = []
        for c in cpus:
            for t in queue(c):
                aff = affinity(t)
                if aff is None or not aff.isdisjoint(local):
                    out.append(c)
                    break
        return out

    def _balance_once(self, e: _Entity, dst: int, busy: bool, p: Pass, newidle: bool,
                      masked: set[int]) -> tuple[bool, int, list[int]]:
        lvl = self.levels[e.level]
        groups = self._domains[e.level][e.span].groups
        stats = self._all_stats(e.level, e.span, p.nr, masked)
        if self.o.numa_imbalance_kernel in balance_v4.ERAS:
            idle = balance_v4.CPU_NEWLY_IDLE if newidle else (balance_v4.CPU_NOT_IDLE if busy else balance_v4.CPU_IDLE)
            found = balance_v4.find_busiest_group(stats, lvl.order(e.span, dst), lvl.pct, idle,
                                                  lvl.prefer_sibling[e.span], p.nr[dst] > 0)
            if found is None:
                return False, 0, []
            bi, imbalance = found
            return self._pull(e, dst, groups, bi, MIGRATE_LOAD_V4, imbalance, p, masked, newidle)
        local = stats[e.group]
        # the groups' load summed over their capacities summed, as integers until the division
        sds_avg = sum(s.nr for s in stats) * SCALE * SCALE / (self._domains[e.level][e.span].weight * SCALE)
        bi = self._pick_busiest(stats, lvl.order(e.span, dst), e.group, self._domains[e.level][e.span].groups)
        if bi is None:
            return False, 0, []
        busiest = stats[bi]
        if local.kind > busiest.kind:
            return False, 0, []
        if local.kind == OVERLOADED:
            if local.avg_load >= busiest.avg_load or local.avg_load >= sds_avg:
                return False, 0, []
            if 100 * busiest.avg_load <= lvl.pct * local.avg_load:
                return False, 0, []
        prefer = lvl.prefer_sibling[e.span]
        force = prefer and local.kind == HAS_SPARE and self._sibling_imb(busy, local, busiest) > 1
        if not force and busiest.kind != OVERLOADED:
            if busy:
                return False, 0, []
            if busiest.weight > 1 and local.idle <= busiest.idle + 1:
                return False, 0, []
            if busiest.nr == 1:
                return False, 0, []
        kind, imbalance = self._imbalance(lvl, e.span, busy, local, busiest, sds_avg)
        if imbalance <= 0:
            return False, 0, []
        return self._pull(e, dst, groups, bi, kind, imbalance, p, masked, newidle)

    def _pick_busiest(self, stats: list[Stats], order: tuple[int, ...], local: int, groups) -> int | None:
        """``sched_balance_find_src_group``'s busiest group (``update_sd_pick_busiest``): the highest group type;
        of overloaded groups the highest average load, of groups with spare capacity the fewest idle CPUs,
        then the most tasks, each keeping the first of equals in the CPU's ``order``. A fully busy group's
        average load is never computed (update_sg_lb_stats computes it for overloaded groups only), so all
        fully busy groups tie: the first is kept, or from v6.5 (``fully_busy_last``) the last, unless the
        first is one core's SMT siblings (a group of one core's CPUs)."""
        best = None
        for gi in order:
            st = stats[gi]
            if gi == local or st.nr == 0:
                continue
            if best is not None:
                b = stats[best]
                if st.kind < b.kind:
                    continue
                if st.kind == b.kind:
                    if st.kind == OVERLOADED and st.avg_load <= b.avg_load:
                        continue
                    if st.kind == HAS_SPARE and (st.idle, -st.nr) >= (b.idle, -b.nr):
                        continue
                    if st.kind == FULLY_BUSY:
                        _, w, ncores = groups[best]
                        if not self.o.fully_busy_last or (ncores == 1 and w > 1):
                            continue
            best = gi
        return best

    def _pull(self, e: _Entity, dst: int, groups, bi: int, kind: str, imbalance: float, p: Pass, masked: set[int],
              newidle: bool) -> tuple[bool, int, list[int]]:
        """``detach_tasks`` from the busiest group ``bi``, then active balancing once balancing keeps failing
        (v5.5 on: when the imbalance is counted in tasks; before: whatever it is counted in)."""
        lvl = self.levels[e.level]
        moved, pinned = self._detach(e, dst, groups[e.group][0], groups[bi][0], kind, imbalance, p, masked, newidle)
        if moved or newidle:
            return True, moved, pinned
        if kind in (MIGRATE_TASK, MIGRATE_LOAD_V4) and e.failed + 1 > lvl.nice_tries + 2:
            # active balance: push the running task of the busiest queue to dst
            src = self._busiest_queue(groups[bi][0], kind, imbalance, p.nr, excluded=masked | {dst})
            if src is not None:
                for t in p.queue(src):
                    if p.sim.allowed(t, dst):
                        self._do_move(t, src, dst, p)
                        return True, 1, []
        return True, 0, pinned

    def _sibling_imb(self, busy: bool, local: Stats, busiest: Stats) -> int:
        if busy or busiest.nr == 0:
            return 0
        if local.ncores == busiest.ncores:
            return max(0, busiest.nr - local.nr)
        nl, nb = local.ncores, busiest.ncores
        imb = (2 * max(0, nl * busiest.nr - nb * local.nr) + nl + nb) // (nl + nb)
        if imb <= 1 and local.nr == 0 and busiest.nr > 1:
            imb = 2
        return imb

    def _imbalance(self, lvl: Level, si: int, busy: bool, local: Stats, busiest: Stats, sds_avg: float):
        prefer, imb_numa_nr = lvl.prefer_sibling[si], lvl.imb_numa_nr[si]
        if local.kind == HAS_SPARE:
            if busiest.kind > FULLY_BUSY and not lvl.share_llc:
                imb = max(local.capacity, local.util) - local.util
                if not busy and imb == 0:
                    return MIGRATE_TASK, 1
                return MIGRATE_UTIL, imb
            era = self.o.numa_imbalance_kernel
            if lvl.numa and era != "6.1":
                return MIGRATE_TASK, periodic_numa_imbalance(era, prefer, local, busiest,
                                                             self.o.numa_imbalance_min, imb_numa_nr)
            if busiest.weight == 1 or prefer:
                imb = self._sibling_imb(busy, local, busiest)
            else:
                imb = max(0, local.idle - busiest.idle)
            if lvl.numa:
                imb = adjust_numa_imbalance("6.1", imb, local.nr + 1, local.weight, imb_numa_nr,
                                            self.o.numa_imbalance_min)
            return MIGRATE_TASK, imb >> 1
        if local.kind < OVERLOADED:
            if local.avg_load >= busiest.avg_load or local.avg_load >= sds_avg:
                return MIGRATE_LOAD, 0
        imb = min((busiest.avg_load - sds_avg) * busiest.capacity, (sds_avg - local.avg_load) * local.capacity) / SCALE
        return MIGRATE_LOAD, imb

    def _busiest_queue(self, group: tuple[int, ...], kind, imbalance, nr: list[int], excluded: set[int]) -> int | None:
        best = None
        for c in group:
            if c in excluded or nr[c] == 0:
                continue
            if kind in (MIGRATE_LOAD, MIGRATE_LOAD_V4) and nr[c] == 1 and SCALE > imbalance:
                continue
            if kind == MIGRATE_UTIL and nr[c] <= 1:
                continue
            if best is None or nr[c] > nr[best]:
                best = c
        return best

    def _detach(self, e: _Entity, dst: int, local_g: tuple[int, ...], busiest_g: tuple[int, ...], kind, imbalance,
                p: Pass, masked: set[int], newidle: bool = False) -> tuple[int, list[int]]:
        """Pull tasks from the busiest group's busiest CPUs; returns (moved, CPUs whose tasks were all pinned).

        A task that may not run on ``dst`` goes to another CPU of the local group it may run
        on (``LBF_DST_PINNED``, ``new_dst_cpu``), except when ``dst`` is newly idle: then it
        counts as pinned, as ``can_migrate_task`` has it."""
        nr, sim = p.nr, p.sim
        excluded = set(masked)
        excluded.add(dst)  # overlapping groups: the busiest group can hold the balancing CPU itself
        pinned_cpus: list[int] = []
        while True:
            src = self._busiest_queue(busiest_g, kind, imbalance, nr, excluded)
            if src is None:
                return 0, pinned_cpus
            queue = p.queue(src)
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
                    # never the task's own CPU, which overlapping groups can hold (Yicong Yang, "sched/fair: Don't
                    # balance task to its current running CPU", v6.5: lore.kernel.org/all/20230524072018.62204-1-yangyicong@huawei.com)
                    alt = [c for c in local_g if c != src and sim.allowed(t, c)]
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
                elif kind == MIGRATE_LOAD_V4:
                    if SCALE // 2 > imbalance:
                        continue
                    imbalance -= SCALE
                elif kind == MIGRATE_UTIL:
                    util = SCALE / max(nr[src], 1)
                    if util > imbalance:
                        continue
                    imbalance -= util
                else:
                    imbalance -= 1
                self._do_move(t, src, target, p)
                moved += 1
                if imbalance <= 0 or nr[src] <= 1:
                    break
            if moved or not pinned:
                return moved, []
            excluded.add(src)
            pinned_cpus.append(src)

    def _do_move(self, t: int, src: int, dst: int, p: Pass) -> None:
        self._moves_done += 1
        p.move(t, src, dst)
