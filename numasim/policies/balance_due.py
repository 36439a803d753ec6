"""When the periodic balancer's entities are due, and which of them would find nothing, on arrays.

A part of :mod:`numasim.policies.balance`: :class:`DueTimes` keeps each (level, domain, group)
entity's last balancing time and intervals as arrays, beside the entities themselves, so that one
compiled loop per tick finds the earliest due time (:func:`earliest_due`) and the entities due
(:func:`due_now`), with whether each one's domain runs nothing, or (where the balancer's rules
say so, ``LoadBalancer._settled``) nothing on any CPU but one task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import jit
from .balance_pass import flat_groups

if TYPE_CHECKING:
    from .balance import _Entity

jit.fresh(__file__)

__all__ = ["DueTimes", "earliest_due", "due_now"]


class DueTimes:
    """The entities' last balancing times and intervals as arrays, to find the earliest due time
    and the entities due in one array operation: an entity's balancing CPU is busy when no CPU of
    its group is idle."""

    def __init__(self, entities: list[_Entity], domains: list[tuple[int, ...]], domain_of: list[int],
                 settled: list[bool]):
        self.cpus, self.start = flat_groups([e.cpus for e in entities])
        self.dcpus, self.dstart = flat_groups(domains)  # each domain's CPUs, once
        self.domain_of = np.array(domain_of, dtype=np.int64)  # entity -> its domain
        self.most = np.empty(len(domains), dtype=np.int64)  # due_now's scratch: the most tasks on a CPU, per domain
        # Whether the entity's balancing finds nothing while no CPU of its domain runs two tasks.
        self.settled = np.array(settled, dtype=np.bool_)
        self.order = np.empty(len(entities), dtype=np.int64)  # due_now's output
        self.quiet = np.empty(len(entities), dtype=np.bool_)  # ... and whether its balancing would find nothing
        self.update(entities)

    def update(self, entities: list[_Entity]) -> None:
        self.last = np.array([e.last for e in entities], dtype=np.int64)
        self.idle_ns = np.array([e.idle_ns for e in entities], dtype=np.int64)
        self.busy_ns = np.array([e.busy_ns for e in entities], dtype=np.int64)

    def set(self, k: int, e: _Entity) -> None:
        """Entity ``k`` balanced: its new last time and intervals."""
        self.last[k], self.idle_ns[k], self.busy_ns[k] = e.last, e.idle_ns, e.busy_ns

    def earliest(self, nr: np.ndarray, count: int = -1) -> int:
        """The earliest due time of the first ``count`` entities (all by default; at least one)."""
        return int(earliest_due(nr, self.cpus, self.start, self.last, self.idle_ns, self.busy_ns,
                                self.start.size if count < 0 else count))

    def due(self, nr: np.ndarray, now: int) -> tuple[list[int], list[bool]]:
        """The entities due at ``now`` with run counts ``nr``, ascending, and whether each one's balancing
        finds nothing: no CPU of its domain runs a task, or (``settled``) none runs two."""
        n = due_now(nr, self.cpus, self.start, self.last, self.idle_ns, self.busy_ns, now, self.dcpus, self.dstart,
                    self.domain_of, self.most, self.settled, self.order, self.quiet)
        return self.order[:n].tolist(), self.quiet[:n].tolist()


@jit.kernel
def _idle_group(nr, cpus, start, k):
    stop = start[k + 1] if k + 1 < start.size else cpus.size
    for j in range(start[k], stop):
        if nr[cpus[j]] == 0:
            return True
    return False


@jit.kernel
def earliest_due(nr, cpus, start, last, idle_ns, busy_ns, count):
    """The earliest due time of the first ``count`` (at least one) entities (:class:`DueTimes`' arrays) with run counts
    ``nr``: an entity's last time plus its idle interval if a CPU of its group (``cpus`` from ``start[k]``)
    is idle, else its busy one."""
    best = last[0] + (idle_ns[0] if _idle_group(nr, cpus, start, 0) else busy_ns[0])
    for k in range(1, count):
        due = last[k] + (idle_ns[k] if _idle_group(nr, cpus, start, k) else busy_ns[k])
        if due < best:
            best = due
    return best


@jit.kernel
def due_now(nr, cpus, start, last, idle_ns, busy_ns, now, dcpus, dstart, domain_of, most, settled, out, quiet):
    """Writes to ``out`` the entities due at ``now`` (ascending), to ``quiet`` whether no CPU of each
    one's domain (``dcpus`` from ``dstart[domain_of[k]]``) runs a task, or, where ``settled[k]``, none
    runs two; returns how many. Each domain is scanned once (``most``: scratch, -1 until scanned)."""
    most[:] = -1
    n = 0
    for k in range(start.size):
        if now >= last[k] + (idle_ns[k] if _idle_group(nr, cpus, start, k) else busy_ns[k]):
            out[n] = k
            d = domain_of[k]
            if most[d] < 0:
                most[d] = _most_running(nr, dcpus, dstart, d)
            quiet[n] = most[d] == 0 or (settled[k] and most[d] == 1)
            n += 1
    return n


@jit.kernel
def _most_running(nr, cpus, start, k):
    stop = start[k + 1] if k + 1 < start.size else cpus.size
    most = 0
    for j in range(start[k], stop):
        if nr[cpus[j]] > most:
            most = nr[cpus[j]]
            if most > 1:
                break
    return most
