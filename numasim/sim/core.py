"""The CPU runtime's arithmetic, compiled: runqueues, progress of threads, CPU shares and burst ends.

These functions work on the runtime's :class:`~numasim.sim.store.Store` buffers as numpy
arrays (the rows and scratch slots are :mod:`numasim.sim.layout`'s), a row per field and a column per thread (``F`` floats, ``I`` ints, ``B`` flags) or
per CPU (``CF``, ``CI``), and are compiled by numba (``@njit``); with
``NUMBA_DISABLE_JIT=1`` the same code runs as plain Python (the test suite runs the
engine both ways and compares). Each does, for several threads at once and in the
order the Python runtime did it, what one runtime method did, so results are the
same to the last bit. What needs Python objects (first-touching memory, the
loaded-latency solve, SMT speeds, policies) is left to the caller: :func:`reshare`
stops and says what it needs, and the caller goes on from that stage.

Runqueues are doubly linked lists through the threads (``rq_next``, ``rq_prev``) with a
head and a tail per CPU: O(1) to add a thread at the tail or take one out, and a walk
gives the threads in the order they arrived, whatever the number of threads.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .layout import (ANSWER, B_ACTIVE, B_HELD, B_PAUSED, B_WAITING, B_WAKER, CF_BUSY, CF_LAT, CI_HEAD, CI_LLC,
                     CI_NODE, CI_NR, CI_TAIL, CPU, DRAW_E, DRAW_U, EV_COMPLETE, EV_TOUCH, E_AT, F_CAP, F_CPU, F_DEBT,
                     F_FOOT, F_GROW, F_LOCAL, F_MISS, F_MISSES, F_MISS_LOCAL, F_MLP, F_OPS, F_PENDING, F_PLAN,
                     F_REFILL, F_REQ_LEFT, F_REQ_OPS, F_SHARE, F_STALL, F_TAU, F_THINK, F_WAIT, HEAP_N, INTEGRATED,
                     I_ARRIVAL, I_CPU, I_GEN, I_LAST, I_MODE, I_MOVES, I_NEXT, I_PHASE, I_POD, I_PREV, I_WAKEUPS,
                     I_WGEN, I_XMOVES, K_L2, K_SWITCH, K_TOUCH_STEP, LOG_CAP, NEEDS_DRAWS, NEEDS_FLUSH, NEEDS_IDLE,
                     NEEDS_PLACE, NEEDS_QUOTA, NEEDS_REQUEST, NEEDS_SLICES, NEEDS_SMT, NEEDS_TAU, NEEDS_TOUCH,
                     NEEDS_XMOVE, NOW, N_ARM, N_IN, N_LAT, N_MV, N_NEED, N_TIDS, N_TOUCH, PENDING, PREV, P_FIRST,
                     P_THROTTLED, QUOTA, SF_EFF, SF_FACT, SF_TOUCH, SINGLE, SMT, STAGE, S_ARM, S_IN, S_LAT_NOW,
                     S_LAT_NS, S_LAT_POD, S_MV_CPU, S_MV_TID, S_NEED, S_TIDS, S_TOUCH, S_WORK, TID, TIMER_AT, U_AT,
                     WAKER, WAKE_BEGIN)
from .perf import LINE
from .state import TOUCH, WORK

__all__ = ["integrate", "enqueue", "dequeue", "gather", "shares", "capacities",
           "reshare", "reschedule", "arm", "heap_push", "heap_pop", "fire", "block", "charge_move"]

# Where fire takes an event up again (ctl[PENDING]): a burst end's stages, then a wake-up's.
_AFTER_INTEGRATE, _BLOCK_DEQUEUE, _BLOCK_RESHARED, _BLOCK_QUOTA, _THINK = range(1, 6)
_WAKE_REQUEST, _WAKE_PLACED, _WAKE_INTEGRATED, _WAKE_MOVED, _WAKE_RESHARED = range(WAKE_BEGIN + 1, WAKE_BEGIN + 6)
_NEVER = 2.0**62  # ns, about 146 years: an end later than this is no end


@njit(cache=True)
def enqueue(I, B, CI, tid, cpu):
    """Put ``tid`` at the tail of ``cpu``'s runqueue; returns the CPU's new count."""
    I[I_CPU, tid] = cpu
    B[B_ACTIVE, tid] = True
    tail = CI[CI_TAIL, cpu]
    I[I_PREV, tid] = tail
    I[I_NEXT, tid] = -1
    if tail >= 0:
        I[I_NEXT, tail] = tid
    else:
        CI[CI_HEAD, cpu] = tid
    CI[CI_TAIL, cpu] = tid
    CI[CI_NR, cpu] += 1
    return CI[CI_NR, cpu]


@njit(cache=True)
def dequeue(F, I, B, CI, tid):
    """Take ``tid`` off its CPU's runqueue; it gets no share of any CPU."""
    cpu = I[I_CPU, tid]
    B[B_ACTIVE, tid] = False
    prev, nxt = I[I_PREV, tid], I[I_NEXT, tid]
    if prev >= 0:
        I[I_NEXT, prev] = nxt
    else:
        CI[CI_HEAD, cpu] = nxt
    if nxt >= 0:
        I[I_PREV, nxt] = prev
    else:
        CI[CI_TAIL, cpu] = prev
    I[I_PREV, tid] = -1
    I[I_NEXT, tid] = -1
    CI[CI_NR, cpu] -= 1
    F[F_SHARE, tid] = 0.0
    F[F_CAP, tid] = 0.0


@njit(cache=True)
def gather(I, CI, core_cpus, cpus, n, smt, out):
    """The threads queued on ``cpus[:n]`` or, with ``smt``, on their cores' CPUs, by CPU and in
    runqueue order, into ``out``; returns their number."""
    if smt:
        picked = np.empty(n * core_cpus.shape[1], dtype=np.int64)
        m = 0
        for j in range(n):
            for s in core_cpus[cpus[j]]:
                if s >= 0:
                    picked[m] = s
                    m += 1
        order = np.unique(picked[:m])
    elif n == 1:
        order = cpus[:1]
    else:
        order = np.unique(cpus[:n])
    k = 0
    for c in order:
        t = CI[CI_HEAD, c]
        while t >= 0:
            out[k] = t
            k += 1
            t = I[I_NEXT, t]
    return k


@njit(cache=True)
def integrate(F, I, CF, tids, n, now, s, sf, ctl):
    """Bring the counters of ``tids[:n]`` up to ``now`` at their current rates; returns how
    many threads first-touched memory meanwhile.

    That memory is not placed here: the threads and bytes are added, in order, to the
    touch log (``s[S_TOUCH]``, ``sf[SF_TOUCH]``, ``ctl[N_TOUCH]``), which the caller
    places before anything else happens. A thread named twice integrates once: the
    second time finds no time passed.
    """
    k = ctl[N_TOUCH]
    k0 = k
    for j in range(n):
        tid = tids[j]
        dt = now - I[I_LAST, tid]
        if dt <= 0:
            continue
        I[I_LAST, tid] = now
        share = F[F_SHARE, tid]
        if share == 0.0:
            continue  # asleep, not started or dead: nothing accrues
        cpu_ns = share * dt
        F[F_CPU, tid] += cpu_ns
        F[F_WAIT, tid] += (1.0 - share) * dt
        CF[CF_BUSY, I[I_CPU, tid]] += cpu_ns
        work = F[F_CAP, tid] * dt
        debt = F[F_DEBT, tid]
        if debt > 0.0:
            pay = min(debt, work)
            F[F_DEBT, tid] = debt - pay
            work -= pay
        phase = I[I_PHASE, tid]
        if phase == WORK:
            ops = work / F[F_TAU, tid]
            F[F_OPS, tid] += ops
            F[F_REQ_LEFT, tid] -= ops
            miss = ops * F[F_MISSES, tid]
            if miss > 0.0:
                F[F_MISS, tid] += miss
                F[F_MISS_LOCAL, tid] += miss * F[F_LOCAL, tid]
                F[F_PENDING, tid] += miss  # spread over nodes when the access row changes
            grow = F[F_GROW, tid]
            if grow != 0.0 and F[F_PLAN, tid] > 0.0 and work > 0.0:
                # The thread's memory grows as it works: the new pages are first-touched where
                # it ran since its last integration (its CPU changes only after one).
                s[S_TOUCH, k] = tid
                sf[SF_TOUCH, k] = work * grow
                k += 1
        elif phase == TOUCH and work > 0.0:
            s[S_TOUCH, k] = tid
            sf[SF_TOUCH, k] = work * LINE / F[F_TAU, tid]
            k += 1
    ctl[N_TOUCH] = k
    return k - k0


@njit(cache=True)
def reshare(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, stage):
    """Recompute the shares of the threads on the CPUs ``s[S_IN, :ctl[N_IN]]`` and their next burst ends.

    Stages, each going on to the next unless it needs the caller first:

    0. gather the threads (into ``s[S_TIDS]``) and, unless ``ctl[INTEGRATED]``, bring
       them up to now; memory they first-touched: NEEDS_TOUCH.
    1. each thread's share of its CPU and its switch efficiency (:func:`shares`);
       threads whose time per operation is unknown: NEEDS_TAU (``s[S_NEED]``).
    2. capacity, ``share x efficiency``; on an SMT machine also x the SMT speed, which
       the caller computes: NEEDS_SMT (into ``sf[SF_FACT]``, then stage 3).
    4. the threads' burst ends into the heap (:func:`reschedule`).
    """
    tids = s[S_TIDS]
    if stage == 0:
        n = gather(I, CI, core_cpus, s[S_IN], ctl[N_IN], ctl[SMT] != 0, tids)
        ctl[N_TIDS] = n
        if n == 0:
            return 0
        if ctl[INTEGRATED] == 0 and integrate(F, I, CF, tids, n, ctl[NOW], s, sf, ctl):
            ctl[STAGE] = 1
            return NEEDS_TOUCH
        stage = 1
    n = ctl[N_TIDS]
    if stage == 1:
        k = shares(F, I, CF, CI, slices, kf[K_SWITCH], tids, n, sf[SF_EFF], s[S_NEED])
        if k:
            ctl[N_NEED] = k
            ctl[STAGE] = 2
            return NEEDS_TAU
        stage = 2
    if stage == 2 and ctl[SMT] != 0:
        ctl[STAGE] = 3
        return NEEDS_SMT
    capacities(F, tids, n, sf[SF_EFF], sf[SF_FACT], stage == 3)
    reschedule(F, I, B, tids, n, kf, s, ctl, H)
    return 0


@njit(cache=True)
def shares(F, I, CF, CI, slices, switch_ns, tids, n, eff, need):
    """Each of ``tids[:n]``'s share of its CPU and its switch efficiency (into ``eff``); the
    threads whose time per operation is not known yet go to ``need`` (their number is returned)."""
    k = 0
    for j in range(n):
        tid = tids[j]
        c = I[I_CPU, tid]
        nr = CI[CI_NR, c]
        e = 1.0
        if nr > 1:
            # A switched-in thread first refills its cache footprint (up to the L2) from memory.
            cost = switch_ns + F[F_REFILL, tid] * CF[CF_LAT, c] * F[F_STALL, tid]
            sl = slices[nr]
            e = sl / (sl + cost) if sl > 0 else 1.0
        F[F_SHARE, tid] = 1.0 / nr
        eff[j] = e
        if F[F_TAU, tid] == math.inf:
            need[k] = tid
            k += 1
    return k


@njit(cache=True)
def capacities(F, tids, n, eff, fact, smt):
    """Capacity of each of ``tids[:n]``: share x switch efficiency, x its SMT speed ``fact`` with ``smt``."""
    for j in range(n):
        tid = tids[j]
        if smt:
            F[F_CAP, tid] = F[F_SHARE, tid] * eff[j] * fact[j]
        else:
            F[F_CAP, tid] = F[F_SHARE, tid] * eff[j]


@njit(cache=True)
def reschedule(F, I, B, tids, n, kf, s, ctl, H):
    """Put the end of the burst or touch step of each of ``tids[:n]``, at its current rate, into the heap.

    Every thread's generation moves on, superseding its pending end; then the earliest
    end is armed (:func:`arm`).
    """
    now = ctl[NOW]
    for j in range(n):
        tid = tids[j]
        g = I[I_GEN, tid] + 1
        I[I_GEN, tid] = g
        if not B[B_ACTIVE, tid]:
            continue
        cap = F[F_CAP, tid]
        if cap <= 0.0:
            continue
        if I[I_PHASE, tid] == TOUCH:
            # First touch advances in steps, so that threads touching at once share a node
            # that fills up the way page faults interleave, not one whole region after another.
            left = min(F[F_PLAN, tid], kf[K_TOUCH_STEP])
            eta = (F[F_DEBT, tid] + left * F[F_TAU, tid] / LINE) / cap
        else:
            req = F[F_REQ_LEFT, tid]
            if req == math.inf:
                continue
            eta = (F[F_DEBT, tid] + (0.0 if 0.0 > req else req) * F[F_TAU, tid]) / cap
        if not eta < _NEVER:  # infinite, not a number, or past any run's end
            continue
        step = math.ceil(eta)
        heap_push(H, I, ctl, now + (step if step > 1 else 1), tid, g)
    arm(I, s, ctl, H)


@njit(cache=True)
def _live(H, I, j):
    """Whether heap entry ``j`` still stands: a burst end of the thread's current generation, or
    the wake-up of its latest think time (generation ``-1 - wgen``)."""
    gen = H[2, j]
    if gen >= 0:
        return gen == I[I_GEN, H[1, j]]
    return -1 - gen == I[I_WGEN, H[1, j]]


@njit(cache=True)
def arm(I, s, ctl, H):
    """Make sure a timeout is pending for the earliest thread event.

    Thread events wait in the heap and are superseded whenever a thread's share
    changes; only the earliest valid one needs a simpy timeout, so a superseded one
    costs a heap entry, not a simulated event. The times of the timeouts to create go
    to ``s[S_ARM]`` (``ctl[N_ARM]`` of them), in order.
    """
    while ctl[HEAP_N] > 0 and not _live(H, I, 0):
        heap_pop(H, ctl)
    if ctl[HEAP_N] == 0:
        return
    when = H[0, 0]
    if ctl[TIMER_AT] >= 0 and ctl[TIMER_AT] <= when:
        return
    ctl[TIMER_AT] = when
    k = ctl[N_ARM]
    s[S_ARM, k] = when
    ctl[N_ARM] = k + 1


@njit(cache=True)
def _less(H, a, b):
    for r in range(3):
        if H[r, a] != H[r, b]:
            return H[r, a] < H[r, b]
    return False


@njit(cache=True)
def _swap(H, a, b):
    for r in range(3):
        H[r, a], H[r, b] = H[r, b], H[r, a]


@njit(cache=True)
def heap_push(H, I, ctl, when, tid, gen):
    """Add a thread event; a full heap first drops its superseded entries (each thread has at most
    two live: a burst end and a wake-up)."""
    n = ctl[HEAP_N]
    if n == H.shape[1]:
        m = 0
        for j in range(n):
            if _live(H, I, j):
                for r in range(3):
                    H[r, m] = H[r, j]
                m += 1
        n = m
        for j in range(n // 2 - 1, -1, -1):
            _sift_down(H, j, n)
    H[0, n], H[1, n], H[2, n] = when, tid, gen
    j = n
    while j > 0:
        parent = (j - 1) // 2
        if not _less(H, j, parent):
            break
        _swap(H, j, parent)
        j = parent
    ctl[HEAP_N] = n + 1


@njit(cache=True)
def _sift_down(H, j, n):
    while True:
        child = 2 * j + 1
        if child >= n:
            return
        if child + 1 < n and _less(H, child + 1, child):
            child += 1
        if not _less(H, child, j):
            return
        _swap(H, j, child)
        j = child


@njit(cache=True)
def heap_pop(H, ctl):
    """Take the earliest entry off the heap (the caller reads it at column 0 first)."""
    n = ctl[HEAP_N] - 1
    ctl[HEAP_N] = n
    if n > 0:
        for r in range(3):
            H[r, 0] = H[r, n]
        _sift_down(H, 0, n)


@njit(cache=True)
def fire(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, P, D):
    """Run the thread events due at ``ctl[NOW]``, earliest first (:meth:`Simulation._run_core`).

    A thread's burst end brings it up to now; if its request is not done, the rest is
    rescheduled; if it is, :func:`_complete` logs its response time and blocks it until
    its next request (in closed mode, a wake-up after a think time, in the heap too). A
    wake-up is :func:`_wake`'s. With ``ctl[PENDING] = WAKE_BEGIN`` and ``ctl[SINGLE]``,
    it wakes thread ``ctl[TID]`` up and returns (a wake-up Python asks for).

    It stops for the caller, with ``ctl[TID]`` the thread, for: EV_TOUCH (a start-up
    touch step ended), EV_COMPLETE (an open-mode request is done: the queue is
    Python's), NEEDS_TOUCH / NEEDS_TAU / NEEDS_SMT (as :func:`reshare`), NEEDS_QUOTA
    (CFS quotas of the threads in ``s[S_TIDS]``), NEEDS_IDLE (``ctl[CPU]`` fell idle:
    the policy's idle balancing), NEEDS_FLUSH (logs full), NEEDS_DRAWS (random numbers
    used up), and :func:`_wake`'s; then it is called again to go on (``ctl[PENDING]``
    says where). 0 once no event is due (the next is armed).
    """
    now = ctl[NOW]
    tid = ctl[TID]
    one = s[S_WORK]
    while True:
        pending = ctl[PENDING]
        ctl[PENDING] = 0
        if pending == 0:
            if ctl[SINGLE] != 0:
                ctl[SINGLE] = 0
                return 0
            if ctl[N_ARM] > ctl[LOG_CAP] or ctl[N_LAT] > ctl[LOG_CAP] or ctl[N_MV] > ctl[LOG_CAP]:
                return NEEDS_FLUSH
            if ctl[HEAP_N] == 0 or H[0, 0] > now:
                arm(I, s, ctl, H)
                return 0
            tid, gen = H[1, 0], H[2, 0]
            live = _live(H, I, 0)
            heap_pop(H, ctl)
            if not live:
                continue
            ctl[TID] = tid
            if gen < 0:
                pending = WAKE_BEGIN
            elif not B[B_ACTIVE, tid]:
                continue
            else:
                one[0] = tid
                if integrate(F, I, CF, one, 1, now, s, sf, ctl):
                    ctl[PENDING] = _AFTER_INTEGRATE
                    return NEEDS_TOUCH
                pending = _AFTER_INTEGRATE
        if pending >= WAKE_BEGIN:
            need = _wake(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, P, D, tid, pending)
        else:
            need = _complete(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, D, tid, pending)
        if need:
            return need


@njit(cache=True)
def _stop(ctl, stage, need):
    """Stop for the caller with ``need``; the event goes on at ``stage`` when called again."""
    ctl[PENDING] = stage
    return need


@njit(cache=True)
def _complete(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, D, tid, stage):
    """A thread's burst ended (it is up to now): reschedule the rest of its request, or
    complete it: log the response time, block, and in closed mode think (a wake-up after
    an exponential think time, into the heap). Returns what it needs of the caller (0: done)."""
    now = ctl[NOW]
    if stage == _AFTER_INTEGRATE:
        if I[I_PHASE, tid] == TOUCH:
            return EV_TOUCH
        if F[F_REQ_LEFT, tid] > 1e-6:
            one = s[S_WORK]
            one[0] = tid
            reschedule(F, I, B, one, 1, kf, s, ctl, H)
            return 0
        k = ctl[N_LAT]
        s[S_LAT_POD, k] = I[I_POD, tid]
        s[S_LAT_NOW, k] = now
        s[S_LAT_NS, k] = now - I[I_ARRIVAL, tid]
        ctl[N_LAT] = k + 1
        F[F_REQ_LEFT, tid] = math.inf
        if I[I_MODE, tid] == 2:
            return EV_COMPLETE
        B[B_WAITING, tid] = True
        ctl[CPU] = I[I_CPU, tid]
        need = block(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, tid, 0)
        if need == NEEDS_TOUCH:
            return _stop(ctl, _BLOCK_DEQUEUE, need)
        if need:
            return _stop(ctl, _BLOCK_RESHARED, need)
        stage = _BLOCK_RESHARED
    if stage == _BLOCK_DEQUEUE:
        need = block(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, tid, 1)
        if need:
            return _stop(ctl, _BLOCK_RESHARED, need)
        stage = _BLOCK_RESHARED
    if stage == _BLOCK_RESHARED:
        if ctl[QUOTA] != 0 and ctl[N_TIDS] > 0:
            return _stop(ctl, _BLOCK_QUOTA, NEEDS_QUOTA)
        stage = _BLOCK_QUOTA
    if stage == _BLOCK_QUOTA and CI[CI_NR, ctl[CPU]] == 0:
        return _stop(ctl, _THINK, NEEDS_IDLE)
    if I[I_MODE, tid] == 1:
        think = F[F_THINK, tid]
        step = 1
        if think > 0.0:
            k = ctl[E_AT]
            if k == D.shape[1]:
                return _stop(ctl, _THINK, NEEDS_DRAWS)
            ctl[E_AT] = k + 1
            step = max(int(think * D[DRAW_E, k]), 1)
        # A later think voids this one's wake-up (a thread woken early, by a pause's end, may
        # finish another request and think again before it is due).
        I[I_WGEN, tid] += 1
        heap_push(H, I, ctl, now + step, tid, -1 - I[I_WGEN, tid])
    return 0


@njit(cache=True)
def block(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, tid, stage):
    """Take a running thread off its runqueue: the threads of its CPU are brought up to now
    (NEEDS_TOUCH: call again at stage 1), then share the CPU without it (:func:`reshare`'s needs)."""
    cpu = I[I_CPU, tid]
    if stage == 0:
        s[S_IN, 0] = cpu
        n = gather(I, CI, core_cpus, s[S_IN], 1, ctl[SMT] != 0, s[S_WORK])
        if integrate(F, I, CF, s[S_WORK], n, ctl[NOW], s, sf, ctl):
            return NEEDS_TOUCH
    dequeue(F, I, B, CI, tid)
    I[I_GEN, tid] += 1
    s[S_IN, 0] = cpu
    ctl[N_IN] = 1
    ctl[INTEGRATED] = 1
    return reshare(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, 0)


@njit(cache=True)
def _wake(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, P, D, tid, stage):
    """Thread ``tid`` wakes up, if it can run (working, not already queued, paused or held).

    Its waker, with ``p_waker_pod``, is a thread of its pod on a runqueue, picked at
    random (``ctl[WAKER]``, -1 if none); a new request starts if it was waiting for one
    (NEEDS_REQUEST in open mode: Python's queue, ``ctl[ANSWER]`` 1 if one was taken).
    The policy chooses its CPU (NEEDS_PLACE: into ``ctl[CPU]``); it and the threads there
    are brought up to now; a move is charged (:func:`charge_move`; NEEDS_XMOVE across
    nodes); a throttled pod's thread is held, others are queued and the CPU re-shared
    (NEEDS_SLICES: the policy's slice for one thread more first), then CFS quotas.
    """
    now = ctl[NOW]
    if stage == WAKE_BEGIN:
        if I[I_PHASE, tid] != WORK or B[B_ACTIVE, tid] or B[B_PAUSED, tid] or B[B_HELD, tid]:
            return 0
        waker = -1
        if B[B_WAKER, tid]:
            pod = I[I_POD, tid]
            k = 0
            for t in range(P[P_FIRST, pod], P[P_FIRST, pod + 1]):
                if t != tid and B[B_ACTIVE, t]:
                    k += 1
            if k:
                u = ctl[U_AT]
                if u == D.shape[1]:
                    return _stop(ctl, WAKE_BEGIN, NEEDS_DRAWS)
                ctl[U_AT] = u + 1
                j = int(D[DRAW_U, u] * k)
                for t in range(P[P_FIRST, pod], P[P_FIRST, pod + 1]):
                    if t != tid and B[B_ACTIVE, t]:
                        if j == 0:
                            waker = I[I_CPU, t]
                            break
                        j -= 1
        ctl[WAKER] = waker
        if B[B_WAITING, tid]:
            if I[I_MODE, tid] == 2:
                return _stop(ctl, _WAKE_REQUEST, NEEDS_REQUEST)
            I[I_ARRIVAL, tid] = now
            F[F_REQ_LEFT, tid] = F[F_REQ_OPS, tid]
            B[B_WAITING, tid] = False
        return _stop(ctl, _WAKE_PLACED, NEEDS_PLACE)
    if stage == _WAKE_REQUEST:
        if ctl[ANSWER] == 0:
            return 0
        B[B_WAITING, tid] = False
        return _stop(ctl, _WAKE_PLACED, NEEDS_PLACE)
    cpu = ctl[CPU]
    if stage == _WAKE_PLACED:
        ctl[PREV] = I[I_CPU, tid]
        I[I_WAKEUPS, tid] += 1
        one = s[S_WORK]
        one[0] = tid
        s[S_IN, 0] = cpu
        n = gather(I, CI, core_cpus, s[S_IN], 1, ctl[SMT] != 0, one[1:])
        if integrate(F, I, CF, one, n + 1, now, s, sf, ctl):
            return _stop(ctl, _WAKE_INTEGRATED, NEEDS_TOUCH)
        stage = _WAKE_INTEGRATED
    if stage == _WAKE_INTEGRATED:
        prev = ctl[PREV]
        if cpu != prev and charge_move(F, I, CF, CI, kf, s, ctl, tid, prev, cpu):
            return _stop(ctl, _WAKE_MOVED, NEEDS_XMOVE)
        stage = _WAKE_MOVED
    if stage == _WAKE_MOVED:
        if P[P_THROTTLED, I[I_POD, tid]]:
            I[I_CPU, tid] = cpu
            B[B_HELD, tid] = True
            return 0
        if CI[CI_NR, cpu] + 1 >= slices.shape[0]:
            return _stop(ctl, _WAKE_MOVED, NEEDS_SLICES)
        enqueue(I, B, CI, tid, cpu)
        s[S_IN, 0] = cpu
        ctl[N_IN] = 1
        ctl[INTEGRATED] = 1
        need = reshare(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, 0)
        if need:
            return _stop(ctl, _WAKE_RESHARED, need)
    if ctl[QUOTA] != 0:
        return _stop(ctl, 0, NEEDS_QUOTA)
    return 0


@njit(cache=True)
def charge_move(F, I, CF, CI, kf, s, ctl, tid, old, cpu):
    """Record a move of ``tid`` from CPU ``old`` to ``cpu`` (into the move log) and charge the cache
    refill it costs: within one LLC only the private caches (up to the L2) are lost, across LLCs
    the whole footprint, reloaded at the destination node's loaded latency. Across nodes the
    thread's CPU is set and 1 returned: its time per operation changes (the caller's)."""
    foot = F[F_FOOT, tid]
    if CI[CI_LLC, old] == CI[CI_LLC, cpu]:
        foot = min(foot, kf[K_L2])
    F[F_DEBT, tid] += (foot / LINE) * CF[CF_LAT, cpu] / max(F[F_MLP, tid], 1.0)
    I[I_MOVES, tid] += 1
    k = ctl[N_MV]
    s[S_MV_TID, k] = tid
    s[S_MV_CPU, k] = cpu
    ctl[N_MV] = k + 1
    if CI[CI_NODE, old] != CI[CI_NODE, cpu]:
        I[I_XMOVES, tid] += 1
        I[I_CPU, tid] = cpu
        return 1
    return 0
