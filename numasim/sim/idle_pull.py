"""The idle pull, compiled: the rule a policy may hand the runtime for a CPU that falls idle.

Linux's newidle balancing at a lowest domain of one-CPU groups (``Policy.idle_rule``,
:class:`~numasim.policies.api.PullOne`): :func:`pull_one` picks the thread to pull, with the
runtime's random draws; :func:`pullable` lists the CPUs a policy's own ``idle()`` could pull
from (``View.pullable``); :func:`wants_idle` says whether the policy is asked at all.
The event path (:mod:`numasim.sim.events`) calls them where a thread blocks or leaves.
"""

from __future__ import annotations

from .. import jit

from .layout import (CI_HEAD, CI_NR, CI_PULL_SPAN, DRAW_PULL, IDLE_ALWAYS, IDLE_OVERLOADED, IDLE_RULE, I_MASK,
                     I_NEXT, PULL_AT, PULL_RULE)
from ..policies.api import PULL_MAX_QUEUE

jit.fresh(__file__, "layout.py", "../policies/api.py")

__all__ = ["NO_DRAWS", "pull_one", "pullable", "wants_idle"]

NO_DRAWS = -2


@jit.kernel
def pull_one(I, CI, A, D, ctl, cpu):
    """The idle pull a policy may hand the runtime (``Policy.idle_rule``, :class:`~numasim.policies.api.PullOne`):
    the thread that CPU ``cpu``, just fallen idle, pulls, or -1 for none (then the policy's
    ``idle()``), or ``NO_DRAWS`` (NEEDS_DRAWS first).

    Linux's newidle balancing at a lowest domain of one-CPU groups: the busiest CPU of the
    domain (the first of them in CPU order from ``cpu`` on, wrapping: the order of the idle
    CPU's groups, ``domains.Level.order``) if it has two threads or more; there, one of its
    queued threads is running (picked at random: the model shares a CPU, it does not
    time-slice) and another, picked at random among those that may run on ``cpu``, moves.
    When none may (``LBF_ALL_PINNED``), the kernel leaves that CPU out and searches again:
    the next busiest, down to CPUs with two threads. The imbalance is half the busiest CPU's
    threads, one move while it holds at most ``PULL_MAX_QUEUE``; with more the kernel may
    move several, and the rule leaves the domain to the policy (-1, no draws used).
    """
    if ctl[PULL_RULE] == 0:
        return -1
    span, nr = CI[CI_PULL_SPAN], CI[CI_NR]
    most = 1
    for c in range(nr.size):
        if span[c] == span[cpu] and nr[c] > most:
            most = nr[c]
    if most > PULL_MAX_QUEUE:
        return -1
    for n in range(most, 1, -1):  # the busiest first; of equals, the first from cpu on (the domain's group ring)
        for k in range(nr.size):
            src = (cpu + k) % nr.size
            if span[src] != span[cpu] or nr[src] != n:
                continue
            at = ctl[PULL_AT]
            if at + 2 > D.shape[1]:
                return NO_DRAWS
            ctl[PULL_AT] = at + 2
            t = _pull_from(I, CI, A, D[DRAW_PULL, at], D[DRAW_PULL, at + 1], src, n, cpu)
            if t >= 0:
                return t
    return -1


@jit.kernel
def _pull_from(I, CI, A, u_running, u_pick, src, n, cpu):
    """One of the ``n`` threads queued on ``src`` runs (``u_running``); of the others that may run on
    ``cpu``, the one ``u_pick`` picks, or -1 for none."""
    running = int(u_running * n)
    t, k, movable = CI[CI_HEAD, src], 0, 0
    while t >= 0:
        if k != running and A[I[I_MASK, t], cpu]:
            movable += 1
        t, k = I[I_NEXT, t], k + 1
    if movable == 0:
        return -1
    j = int(u_pick * movable)
    t, k = CI[CI_HEAD, src], 0
    while t >= 0:
        if k != running and A[I[I_MASK, t], cpu]:
            if j == 0:
                return t
            j -= 1
        t, k = I[I_NEXT, t], k + 1
    return -1


@jit.kernel
def pullable(I, CI, A, cpu, out):
    """The CPUs with two threads or more queued, one of which may run on ``cpu``, ascending, into
    ``out``; returns how many (``View.pullable``)."""
    nr, k = CI[CI_NR], 0
    for c in range(nr.size):
        if nr[c] >= 2:
            t = CI[CI_HEAD, c]
            while t >= 0:
                if A[I[I_MASK, t], cpu]:
                    out[k] = c
                    k += 1
                    break
                t = I[I_NEXT, t]
    return k


@jit.kernel
def wants_idle(CI, ctl):
    """Whether a CPU that fell idle goes to the policy's ``idle()``: never if it has none; with
    ``idle_when = "overloaded"`` only while some CPU has two or more threads queued."""
    rule = ctl[IDLE_RULE]
    if rule == IDLE_OVERLOADED:
        nr = CI[CI_NR]
        for c in range(nr.size):
            if nr[c] >= 2:
                return True
        return False
    return rule == IDLE_ALWAYS
