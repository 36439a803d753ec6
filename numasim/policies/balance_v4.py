"""The load balancer before its v5.5 rework (``numa_imbalance_kernel: "3.10"`` and ``"5.4"``): average loads and ``imbalance_pct``.

Read from kernel/sched/fair.c: ``find_idlest_group`` for fork and exec placement as it stood
until v4.10 (``3.10``) and from v4.17 to v5.4 (``5.4``); ``update_sd_lb_stats``,
``find_busiest_group``, ``calculate_imbalance`` and ``fix_small_imbalance`` for periodic,
idle and newidle balancing, read from v4.19 (v3.10's differ in details docs/model.md lists).
Vincent Guittot's rework (0b0695f2b34a "sched/fair: Rework load_balance()", v5.5) replaced the average-load test with group types and migration
types (the ``5.10`` to ``6.1`` eras, :mod:`numasim.policies.balance`); before it there was
no NUMA imbalance allowance: nodes were balanced on their average load per CPU, within
``imbalance_pct``.

Pure functions over :class:`~numasim.policies.balance_pass.Stats`. Loads are task counts:
every task weighs ``NICE_0_LOAD`` (1024), so a group's load is its tasks x 1024 and
``avg_load`` its tasks x 1024 per CPU, in the kernel's integer arithmetic. Simplified (and
said so in docs/model.md): the ``cpu_load[]`` history that ``LB_BIAS`` used through v4.19
(gone in v4.20), PELT's blocked load (``avg_load`` and ``runnable_load`` are the same
here), ``group_imbalanced`` (the affinity retry is the one of :mod:`numasim.policies.balance`)
and the NUMA-balancing classification of runqueues (``fbq_type``).
"""

from __future__ import annotations

from collections.abc import Callable

from .balance_pass import SCALE, Stats

__all__ = ["CPU_IDLE", "CPU_NEWLY_IDLE", "CPU_NOT_IDLE", "ERAS", "find_busiest_group", "find_dst_group",
           "find_idlest_group"]

ERAS = ("3.10", "5.4")  # the numa_imbalance_kernel values this module serves
CPU_NOT_IDLE, CPU_IDLE, CPU_NEWLY_IDLE = 0, 1, 2
_OTHER, _OVERLOADED = 0, 2  # group_type: group_other, group_overloaded (group_imbalanced is not modelled)


def _avg(st: Stats) -> int:
    """``avg_load``: the group's load per unit of capacity, ``load * SCHED_CAPACITY_SCALE / capacity``."""
    return st.nr * SCALE * SCALE // (st.weight * SCALE)


def _has_capacity(st: Stats, pct: int) -> bool:
    """``group_has_capacity``: fewer tasks than CPUs, or utilisation below the capacity by ``imbalance_pct``."""
    return st.nr < st.weight or st.weight * SCALE * 100 > st.busy_cpus * SCALE * pct


def _overloaded(st: Stats, pct: int) -> bool:
    """``group_is_overloaded``: more tasks than CPUs and utilisation within ``imbalance_pct`` of the capacity."""
    return st.nr > st.weight and st.weight * SCALE * 100 < st.busy_cpus * SCALE * pct


def find_dst_group(era: str, groups: list[tuple[tuple[int, ...], int, int]], order: tuple[int, ...],
                   allowed: frozenset[int] | None, stats: Callable[[tuple], Stats], pct: int, numa: bool,
                   fork: bool) -> tuple[int, ...] | None:
    """The CPUs of the group a new task goes to among a domain's ``groups`` (``stats`` gives one's
    statistics), or None to stay in the local group, the first of ``order`` (the groups as the
    CPU lists them); groups the task may not use are skipped."""
    mine = None
    others: list[Stats] = []
    cands: list[tuple[int, ...]] = []
    local_i = order[0]
    for gi in order:
        group = groups[gi]
        if allowed is not None and allowed.isdisjoint(group[0]):
            continue
        if gi == local_i:
            mine = stats(group)
        else:
            others.append(stats(group))
            cands.append(group[0])
    pick = find_idlest_group(era, mine, others, pct, numa, fork)
    return None if pick is None else cands[pick]


def find_idlest_group(era: str, local: Stats | None, others: list[Stats], pct: int, numa: bool,
                      fork: bool) -> int | None:
    """``find_idlest_group``: the index in ``others`` of the group a new task goes to, or None to stay local.

    ``local`` is the group of the CPU the task forks or execs on (None if the task may not
    run there). ``3.10`` (v2.6.x-v4.10): the least loaded group unless the local group's
    load is below it by the factor ``100 + (imbalance_pct - 100) / 2`` per cent, whatever
    the level. ``5.4`` (v4.17-v5.4): a fork compares loads only; an exec first takes the
    spare capacity of an idle CPU, its own group's if it has one (the new task's
    utilisation is taken as 0); across NUMA nodes a task stays local unless the other
    node's load per CPU is lower by more than ``imbalance_pct - 100`` per cent of one task.
    """
    imbalance = SCALE * (pct - 100) // 100
    scale = 100 + (pct - 100) // 2
    if era == "3.10":
        if not others:
            return None
        loads = [_avg(st) for st in others]
        pick = loads.index(min(loads))
        if local is not None and 100 * _avg(local) < scale * loads[pick]:
            return None
        return pick
    idlest = None
    min_load = min_avg = None
    most_spare, most_spare_i = 0, None
    for i, st in enumerate(others):
        load = _avg(st)
        if min_load is None or min_load > load + imbalance:
            idlest, min_load, min_avg = i, load, load
        elif load < min_load + imbalance and 100 * min_avg > scale * load:
            idlest, min_avg = i, load
        spare = SCALE if st.idle else 0  # the most spare capacity of one of its CPUs
        if most_spare < spare:
            most_spare, most_spare_i = spare, i
    if local is None:
        return idlest
    this_load = _avg(local)
    if not fork:
        this_spare = SCALE if local.idle else 0
        if this_spare > 0 and scale * this_spare > 100 * most_spare:
            return None
        if most_spare > 0:
            return most_spare_i
    if idlest is None:
        return None
    assert min_load is not None and min_avg is not None
    if numa and min_load + imbalance >= this_load:
        return None  # "consider staying local" across NUMA domains (2c83362734da, v4.17)
    if min_load > this_load + imbalance:
        return None
    if this_load < min_load + imbalance and 100 * this_load < scale * min_avg:
        return None
    return idlest


def find_busiest_group(stats: list[Stats], order: tuple[int, ...], pct: int, idle: int, prefer_sibling: bool,
                       dst_has_tasks: bool) -> tuple[int, int] | None:
    """``find_busiest_group``: (index of the busiest group, load to move), or None when balanced.

    ``idle`` is how the balancing CPU is: ``CPU_NOT_IDLE``, ``CPU_IDLE`` (periodic balancing
    from an idle CPU) or ``CPU_NEWLY_IDLE``; ``dst_has_tasks`` whether it runs any task
    (``cpu_avg_load_per_task`` of an empty local group).
    """
    local_i = order[0]
    local = stats[local_i]
    local_cap = _has_capacity(local, pct)
    best, best_type, best_avg, best_full = None, _OTHER, 0, False
    total = weight = 0
    for gi in order:
        st = stats[gi]
        total += st.nr
        weight += st.weight
        if gi == local_i:
            continue
        full = _overloaded(st, pct)
        if prefer_sibling and local_cap and st.nr > local.nr + 1:
            full = True  # the child prefers its siblings: move all the excess tasks away
        kind = _OVERLOADED if full else _OTHER
        avg = _avg(st)
        if kind > best_type or (kind == best_type and avg > best_avg):  # update_sd_pick_busiest
            best, best_type, best_avg, best_full = gi, kind, avg, full
    if best is None or stats[best].nr == 0:
        return None
    busiest = stats[best]
    sds_avg = SCALE * total * SCALE // (weight * SCALE)
    local_avg = _avg(local)
    if not (idle != CPU_NOT_IDLE and local_cap and best_full):
        if local_avg >= best_avg or local_avg >= sds_avg:
            return None
        if idle == CPU_IDLE:
            if best_type != _OVERLOADED and local.idle <= busiest.idle + 1:
                return None
        elif 100 * best_avg <= pct * local_avg:
            return None
    imbalance = _calculate_imbalance(local, busiest, local_avg, best_avg, sds_avg, _overloaded(local, pct),
                                     best_type == _OVERLOADED, dst_has_tasks)
    return (best, imbalance) if imbalance else None


def _calculate_imbalance(local: Stats, busiest: Stats, local_avg: int, busiest_avg: int, sds_avg: int,
                         local_full: bool, busiest_full: bool, dst_has_tasks: bool) -> int:
    """``calculate_imbalance``: the load to pull, at least one task's when ``fix_small_imbalance`` finds it worth it."""
    if busiest_avg <= sds_avg or local_avg >= sds_avg:
        return _fix_small_imbalance(local, busiest, local_avg, busiest_avg, 0, dst_has_tasks)
    cap_b, cap_l = busiest.weight * SCALE, local.weight * SCALE
    above = None  # load_above_capacity: "if there aren't any idle CPUs, avoid creating some"
    if busiest_full and local_full and busiest.nr * SCALE > cap_b:
        above = (busiest.nr * SCALE - cap_b) * SCALE // cap_b
    max_pull = busiest_avg - sds_avg if above is None else min(busiest_avg - sds_avg, above)
    imbalance = min(max_pull * cap_b, (sds_avg - local_avg) * cap_l) // SCALE
    if imbalance < SCALE:  # less than the busiest group's load per task
        return _fix_small_imbalance(local, busiest, local_avg, busiest_avg, imbalance, dst_has_tasks)
    return imbalance


def _fix_small_imbalance(local: Stats, busiest: Stats, local_avg: int, busiest_avg: int, imbalance: int,
                         dst_has_tasks: bool) -> int:
    """``fix_small_imbalance``: one task's load if moving it evens the groups or adds used capacity, else ``imbalance``."""
    per_task = SCALE  # busiest->load_per_task: every task weighs NICE_0_LOAD
    local_per_task = SCALE if local.nr or dst_has_tasks else 0
    imbn = 2  # (1 only when the busiest group's tasks are heavier than the local group's)
    cap_b, cap_l = busiest.weight * SCALE, local.weight * SCALE
    scaled = per_task * SCALE // cap_b
    if busiest_avg + scaled >= local_avg + scaled * imbn:
        return per_task
    capa_now = (cap_b * min(per_task, busiest_avg) + cap_l * min(local_per_task, local_avg)) // SCALE
    capa_move = cap_b * min(per_task, busiest_avg - scaled) if busiest_avg > scaled else 0
    if busiest_avg * cap_b < per_task * SCALE:
        tmp = busiest_avg * cap_b // cap_l
    else:
        tmp = per_task * SCALE // cap_l
    capa_move = (capa_move + cap_l * min(local_per_task, local_avg + tmp)) // SCALE
    return per_task if capa_move > capa_now else imbalance
