"""Open-mode requests, compiled: each pod's queue of arrival times (a ring) and its Poisson arrivals.

A pod's next arrival is an entry of the thread-event heap (thread ``-1 - pod``): when it is
due, :func:`numasim.sim.events.fire` calls :func:`arrival`, which queues the request, draws
the next arrival and names the idle worker to wake. A worker takes its next request with
:func:`take_request`. The random numbers come from two streams of the pod's own, drawn by
Python in batches into ``Scratch.draws`` (``layout.arrival_rows``).
"""

from __future__ import annotations


from .. import jit

from .core import heap_pop, heap_push
from .layout import (ARRIVAL_ROWS, B_ACTIVE, B_HELD, B_PAUSED, B_WAITING, F_INTERARRIVAL, F_REQ_LEFT, F_REQ_OPS,
                     I_ARRIVAL, I_PHASE, I_POD, NEEDS_DRAWS, NEEDS_QUEUE, P_ARR_E, P_ARR_U, P_FIRST, P_OPEN,
                     P_QHEAD, P_QLEN, TID)
from .state import WORK

jit.fresh(__file__, "layout.py", "core.py", "state.py")

__all__ = ["FAR", "arrival", "interarrival", "next_arrival", "take_request"]

FAR = 4e18  # ns: a time between arrivals beyond any run (a rate of 0)


def interarrival(rate_ns: float) -> float:
    """The mean time between arrivals (ns) at ``rate_ns`` per ns."""
    return 1.0 / rate_ns if rate_ns > 0 else FAR




@jit.kernel
def arrival(F, I, B, P, D, Q, ctl, H, p, now):
    """Pod ``p``'s next open-mode request arrives now (the heap's top entry, popped here): it joins
    the pod's queue, the next arrival is drawn (exponential, at the pod's current rate) while
    its arrivals go on, and an idle worker, picked at random, is named in ``ctl[TID]``
    (-1 if none) for the caller to wake up. NEEDS_DRAWS or NEEDS_QUEUE (a full ring) first,
    the entry left in the heap."""
    width = D.shape[1]
    if P[P_ARR_U, p] == width or (P[P_OPEN, p] != 0 and P[P_ARR_E, p] == width):
        return NEEDS_DRAWS
    if P[P_QLEN, p] == Q.shape[1]:
        return NEEDS_QUEUE
    heap_pop(H, ctl)
    u = D[ARRIVAL_ROWS + 1 + 2 * p, P[P_ARR_U, p]]
    P[P_ARR_U, p] += 1
    head, n = P[P_QHEAD, p], P[P_QLEN, p]
    Q[p, (head + n) % Q.shape[1]] = now
    P[P_QLEN, p] = n + 1
    if P[P_OPEN, p] != 0:
        next_arrival(F, I, P, D, ctl, H, p, now)
    k = 0
    for t in range(P[P_FIRST, p], P[P_FIRST, p + 1]):
        if _idle_worker(I, B, t):
            k += 1
    ctl[TID] = -1
    if k:
        j = int(u * k)
        for t in range(P[P_FIRST, p], P[P_FIRST, p + 1]):
            if _idle_worker(I, B, t):
                if j == 0:
                    ctl[TID] = t
                    break
                j -= 1
    return 0


@jit.kernel
def _idle_worker(I, B, t):
    """A worker waiting for a request: working, not paused, held or queued."""
    return (B[B_WAITING, t] and I[I_PHASE, t] == WORK and not B[B_PAUSED, t] and not B[B_HELD, t]
            and not B[B_ACTIVE, t])


@jit.kernel
def next_arrival(F, I, P, D, ctl, H, p, now):
    """Put pod ``p``'s next arrival in the heap, an exponential time from ``now`` at its current
    mean time between arrivals (``p_interarrival``, ns); NEEDS_DRAWS if its numbers are used up."""
    at = P[P_ARR_E, p]
    if at == D.shape[1]:
        return NEEDS_DRAWS
    P[P_ARR_E, p] = at + 1
    step = max(int(min(D[ARRIVAL_ROWS + 2 * p, at] * F[F_INTERARRIVAL, P[P_FIRST, p]], FAR)), 1)
    heap_push(H, I, ctl, now + step, -1 - p, 0)
    return 0


@jit.kernel
def take_request(F, I, P, Q, tid):
    """Start the next request of ``tid``'s pod's open-mode queue (a ring per pod in ``Q``), if there is one."""
    pod = I[I_POD, tid]
    n = P[P_QLEN, pod]
    if n == 0:
        return False
    head = P[P_QHEAD, pod]
    I[I_ARRIVAL, tid] = Q[pod, head]
    P[P_QHEAD, pod] = (head + 1) % Q.shape[1]
    P[P_QLEN, pod] = n - 1
    F[F_REQ_LEFT, tid] = F[F_REQ_OPS, tid]
    return True
