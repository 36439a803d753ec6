"""The NUMA imbalance CFS tolerates, by kernel era (``numa_imbalance_kernel``): one place for the rules
the load balancer (:mod:`numasim.policies.balance`) and NUMA balancing (:mod:`numasim.policies.numab_moves`)
share. docs/model.md, "The NUMA imbalance by kernel era", gives the commits each rule was read from.

* ``3.10`` and ``5.4`` (mainline v3.x-v4.10 and v4.17-v5.4): no NUMA allowance; the load balancer of that era is
  :mod:`numasim.policies.balance_v4`, and NUMA balancing's move to an idle CPU is taken only
  if the destination node would not run more tasks than the source.
* ``5.10`` (mainline v5.6-v5.10): a fork stays local while the node has an idle CPU (57abff067a08); an
  imbalance is left while the busiest node runs at most ``NUMA_IMBALANCE_MIN`` tasks (b396f52326de), and
  NUMA balancing's move to an idle CPU while the destination would (fb86f5b21192, the destination's count).
* ``5.11`` (v5.11-v5.17): a quarter of the NUMA domain's CPUs at fork (23e6082a522e), a quarter of the
  busiest group's afterwards (7d2b5dd0bcc4).
* ``5.15`` (5.15.33 on): a quarter of the local node's CPUs, counting the task that moves (2cfb7a1b031b).
* ``5.18`` (v5.18-v5.19): ``imb_numa_nr``, one task per LLC of a node or a quarter of a one-LLC node
  (e496132ebedd); a fork stays local while its node would run at most that many tasks, whatever CPUs
  the task may use; the periodic balancer halves the difference before the test.
* ``6.1`` (v6.0 on): ``imb_numa_nr`` with v6.0's follow-ups: an eighth of a one-LLC node (026b98a93bbd),
  at fork also the nodes' idle CPUs within 2 and at most the CPUs the task may use there (cb29a5c19d2d,
  f5b2eeb49991), the periodic test before the halving.
"""

from __future__ import annotations

from .balance_pass import Stats
from .balance_v4 import ERAS

__all__ = ["adjust_numa_imbalance", "fork_stays_local", "periodic_numa_imbalance"]


def adjust_numa_imbalance(era: str, imb: int, dst_running: int, dst_weight: int, imb_numa_nr: int,
                          imb_min: int) -> int:
    """``adjust_numa_imbalance``: the imbalance left to act on (0: tolerated) when the destination would
    run ``dst_running`` tasks on ``dst_weight`` CPUs."""
    if era in ERAS:
        return imb  # no allowance before v5.6
    if era == "5.10":
        return 0 if dst_running <= imb_min else imb
    limit = imb_numa_nr if era in ("5.18", "6.1") else (dst_weight >> 2) - 1
    if dst_running > limit:
        return imb
    return 0 if imb <= imb_min else imb


def fork_stays_local(era: str, local: Stats, domain_cpus: int, imb_numa_nr: int) -> bool:
    """``find_idlest_group`` at a NUMA level with spare capacity, 5.x eras: does a new task stay on the
    local node whatever the imbalance? (6.1 weighs the imbalance itself: the balancer's own test.)"""
    if era == "5.10":
        return local.idle > 0
    if era == "5.11":
        return local.nr < domain_cpus >> 2
    if era == "5.18":
        return local.nr + 1 <= imb_numa_nr
    return local.nr + 1 < local.weight >> 2


def periodic_numa_imbalance(era: str, prefer_sibling: bool, local: Stats, busiest: Stats, imb_min: int,
                            imb_numa_nr: int) -> int:
    """``calculate_imbalance`` at a NUMA level with spare capacity, 5.x eras: the task (or idle-CPU)
    difference halved first, then 0 while the busiest group runs at most ``imb_min`` tasks (5.10), or up
    to ``imb_min`` tolerated while a group runs fewer tasks than a quarter of its CPUs: the busiest group
    (5.11), the local one after the move (5.15); or while the local one, after the move, would run at
    most ``imb_numa_nr`` (5.18)."""
    if busiest.weight == 1 or prefer_sibling:
        imb = max(0, busiest.nr - local.nr) >> 1
    else:
        imb = max(0, local.idle - busiest.idle) >> 1
    if era == "5.10":
        return 0 if busiest.nr <= imb_min else imb
    if era == "5.18":
        return adjust_numa_imbalance(era, imb, local.nr + 1, local.weight, imb_numa_nr, imb_min)
    running, weight = (busiest.nr, busiest.weight) if era == "5.11" else (local.nr + 1, local.weight)
    if running < weight >> 2 and imb <= imb_min:
        return 0
    return imb
