"""The CPU runtime's arithmetic, compiled: runqueues, progress of threads, CPU shares and burst ends.

These functions work on the runtime's :class:`~numasim.sim.store.Store` buffers as numpy
arrays (the rows and scratch slots are :mod:`numasim.sim.layout`'s), a row per field and
a column per thread (``F`` floats, ``I`` ints, ``B`` flags) or per CPU (``CF``, ``CI``),
and are compiled by numba (:func:`numasim.jit.kernel`: no array is allocated here); with
``NUMBA_DISABLE_JIT=1`` the same code runs as plain Python (the test suite runs the
engine both ways and compares). Each does, for several threads at once and in the
order the Python runtime did it, what one runtime method did, so results are the
same to the last bit. What needs Python objects (first-touching memory, the
loaded-latency solve, SMT speeds, policies) is left to the caller: :func:`reshare`
stops and says what it needs, and the caller goes on from that stage.

Runqueues are doubly linked lists through the threads (``rq_next``, ``rq_prev``) with a
head and a tail per CPU: O(1) to add a thread at the tail or take one out, and a walk
gives the threads in the order they arrived, whatever the number of threads.

The thread events built on them (burst ends, completions, wake-ups, policy moves) are
:mod:`numasim.sim.events`'.
"""

from __future__ import annotations

import math

from .. import jit

from .layout import (B_ACTIVE, CF_BUSY, CF_LAT, CI_HEAD, CI_NR, CI_TAIL, DIRTY, F_CAP, F_CPU, F_DEBT, F_GROW, F_LOCAL,
                     F_MISS, F_MISSES, F_MISS_LOCAL, F_OPS, F_PENDING, F_PLAN, F_REFILL, F_REQ_LEFT, F_SHARE,
                     F_STALL, F_TAU, F_WAIT, HEAP_N, INTEGRATED, I_CPU, I_GEN, I_LAST, I_NEXT, I_PHASE, I_PREV,
                     I_WGEN, K_SWITCH, K_TOUCH_STEP, NEEDS_SMT, NEEDS_TAU, NEEDS_TOUCH, NOW, N_ARM, N_IN, N_NEED,
                     N_TIDS, N_TOUCH, SF_EFF, SF_FACT, SF_TOUCH, SMT, STAGE, S_ARM, S_IN, S_NEED, S_PICK, S_TIDS, S_TOUCH,
                     TIMER_AT, TIMER_PRE)
from .firsttouch import touch
from .perf import LINE
from .state import TOUCH, WORK

jit.fresh(__file__, "layout.py", "perf.py", "state.py", "firsttouch.py", "memory.py", "../policies/api.py")

__all__ = ["integrate", "project", "PROJECTED", "enqueue", "dequeue", "gather", "shares", "capacities",
           "reshare", "reschedule", "live", "arm", "heap_push", "heap_pop"]

_NEVER = 2.0**62  # ns, about 146 years: an end later than this is no end


@jit.kernel
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


@jit.kernel
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


@jit.kernel
def gather(I, CI, core_cpus, cpus, n, smt, out, pick):
    """The threads queued on ``cpus[:n]`` or, with ``smt``, on their cores' CPUs, by CPU and in
    runqueue order, into ``out``; returns their number. ``pick`` is scratch (the CPUs, sorted,
    each once: no allocation)."""
    m = 0
    for j in range(n):
        if smt:
            for sib in core_cpus[cpus[j]]:
                if sib >= 0:
                    m = _insert(pick, m, sib)
        else:
            m = _insert(pick, m, cpus[j])
    k = 0
    for j in range(m):
        t = CI[CI_HEAD, pick[j]]
        while t >= 0:
            out[k] = t
            k += 1
            t = I[I_NEXT, t]
    return k


@jit.kernel
def _insert(a, m, v):
    """Insert ``v`` into the ascending ``a[:m]`` unless it is there; returns the new length."""
    j = m
    while j > 0 and a[j - 1] > v:
        j -= 1
    if j > 0 and a[j - 1] == v:
        return m
    for i in range(m, j, -1):
        a[i] = a[i - 1]
    a[j] = v
    return m + 1


@jit.kernel
def integrate(F, I, CF, CI, M, tids, n, now, s, sf, ctl):
    """Bring the counters of ``tids[:n]`` up to ``now`` at their current rates; returns how
    many threads first-touched memory meanwhile that is not placed yet.

    The memory a thread first-touches is placed here (:func:`numasim.sim.firsttouch.touch`,
    ``ctl[DIRTY]`` set) unless that needs Python, or an earlier touch waits for Python:
    then the thread and bytes are added, in order, to the touch log (``s[S_TOUCH]``,
    ``sf[SF_TOUCH]``, ``ctl[N_TOUCH]``), which the caller places before anything else
    happens. A thread named twice integrates once: the second time finds no time passed.
    """
    k = ctl[N_TOUCH]
    k0 = k
    for j in range(n):
        tid = tids[j]
        dt = now - I[I_LAST, tid]
        if dt <= 0:
            continue
        I[I_LAST, tid] = now
        if F[F_SHARE, tid] == 0.0:
            continue  # asleep, not started or dead: nothing accrues
        cpu_ns, wait_ns, work, debt, ops, miss = _accrual(F, I, tid, dt)
        F[F_CPU, tid] += cpu_ns
        F[F_WAIT, tid] += wait_ns
        CF[CF_BUSY, I[I_CPU, tid]] += cpu_ns
        F[F_DEBT, tid] = debt
        phase = I[I_PHASE, tid]
        touched = -1.0  # bytes first-touched meanwhile (-1: none)
        if phase == WORK:
            F[F_OPS, tid] += ops
            F[F_REQ_LEFT, tid] -= ops
            if miss > 0.0:
                F[F_MISS, tid] += miss
                F[F_MISS_LOCAL, tid] += miss * F[F_LOCAL, tid]
                F[F_PENDING, tid] += miss  # spread over nodes when the access row changes
            grow = F[F_GROW, tid]
            if grow != 0.0 and F[F_PLAN, tid] > 0.0 and work > 0.0:
                # The thread's memory grows as it works: the new pages are first-touched where
                # it ran since its last integration (its CPU changes only after one).
                touched = work * grow
        elif phase == TOUCH and work > 0.0:
            touched = work * LINE / F[F_TAU, tid]
        if touched >= 0.0:
            if k == 0 and touch(M, I, CI, F, tid, touched):
                ctl[DIRTY] = 1
            else:
                s[S_TOUCH, k] = tid
                sf[SF_TOUCH, k] = touched
                k += 1
    ctl[N_TOUCH] = k
    return k - k0


@jit.kernel
def _accrual(F, I, tid, dt):
    """What ``dt`` ns at ``tid``'s current share and capacity add (it must have a share): CPU ns, wait ns,
    the work left once its kernel debt is paid, the debt left, and in its work phase operations and misses."""
    share = F[F_SHARE, tid]
    work = F[F_CAP, tid] * dt
    debt = F[F_DEBT, tid]
    if debt > 0.0:
        pay = min(debt, work)
        debt -= pay
        work -= pay
    ops = 0.0
    miss = 0.0
    if I[I_PHASE, tid] == WORK:
        ops = work / F[F_TAU, tid]
        miss = ops * F[F_MISSES, tid]
    return share * dt, (1.0 - share) * dt, work, debt, ops, miss


@jit.kernel
def project(F, I, CF, n, now, out, busy):
    """The counters of threads ``0..n-1`` and CPUs as :func:`integrate` would bring them to ``now``,
    changing nothing: what a sample reads, so that sampling never steers a run (integrating
    at a sample instant would split each thread's accrual, place memory first-touched
    meanwhile, and with that move rates and event times).

    ``out`` rows (:data:`PROJECTED`): operations, CPU ns, wait ns, misses, local misses and
    misses not yet spread over nodes, a column per thread; ``busy``: each CPU's busy ns.
    Memory first-touched since a thread's last integration is not in them (it is placed
    then, at most one touch step or refresh interval later).
    """
    for c in range(CF.shape[1]):
        busy[c] = CF[CF_BUSY, c]
    for tid in range(n):
        ops, cpu, wait = F[F_OPS, tid], F[F_CPU, tid], F[F_WAIT, tid]
        miss, miss_local, pending = F[F_MISS, tid], F[F_MISS_LOCAL, tid], F[F_PENDING, tid]
        dt = now - I[I_LAST, tid]
        if dt > 0 and F[F_SHARE, tid] != 0.0:
            cpu_ns, wait_ns, _work, _debt, d_ops, d_miss = _accrual(F, I, tid, dt)
            cpu += cpu_ns
            wait += wait_ns
            busy[I[I_CPU, tid]] += cpu_ns
            ops += d_ops
            if d_miss > 0.0:
                miss += d_miss
                miss_local += d_miss * F[F_LOCAL, tid]
                pending += d_miss
        out[0, tid], out[1, tid], out[2, tid] = ops, cpu, wait
        out[3, tid], out[4, tid], out[5, tid] = miss, miss_local, pending


PROJECTED = ("ops", "cpu", "wait", "miss", "miss_local", "pending")  # :func:`project`'s rows


@jit.kernel
def reshare(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, M, stage):
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
        n = gather(I, CI, core_cpus, s[S_IN], ctl[N_IN], ctl[SMT] != 0, tids, s[S_PICK])
        ctl[N_TIDS] = n
        if n == 0:
            return 0
        if ctl[INTEGRATED] == 0 and integrate(F, I, CF, CI, M, tids, n, ctl[NOW], s, sf, ctl):
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


@jit.kernel
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


@jit.kernel
def capacities(F, tids, n, eff, fact, smt):
    """Capacity of each of ``tids[:n]``: share x switch efficiency, x its SMT speed ``fact`` with ``smt``."""
    for j in range(n):
        tid = tids[j]
        if smt:
            F[F_CAP, tid] = F[F_SHARE, tid] * eff[j] * fact[j]
        else:
            F[F_CAP, tid] = F[F_SHARE, tid] * eff[j]


@jit.kernel
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


@jit.kernel
def live(H, I, j):
    """Whether heap entry ``j`` still stands: a burst end of the thread's current generation, or
    the wake-up of its latest think time (generation ``-1 - wgen``); a pod's next arrival
    (thread ``-1 - pod``) always does."""
    if H[1, j] < 0:
        return True
    gen = H[2, j]
    if gen >= 0:
        return gen == I[I_GEN, H[1, j]]
    return -1 - gen == I[I_WGEN, H[1, j]]


@jit.kernel
def arm(I, s, ctl, H):
    """Make sure a timeout is pending for the earliest thread event.

    Thread events wait in the heap and are superseded whenever a thread's share
    changes; only the earliest valid one needs a simpy timeout, so a superseded one
    costs a heap entry, not a simulated event. The times of the timeouts to create go
    to ``s[S_ARM]`` (``ctl[N_ARM]`` of them), in order.
    """
    while ctl[HEAP_N] > 0 and not live(H, I, 0):
        heap_pop(H, ctl)
    if ctl[HEAP_N] == 0:
        return
    when = H[0, 0]
    if ctl[TIMER_AT] >= 0 and ctl[TIMER_AT] <= when:
        return
    k = ctl[N_ARM]
    if k == 0:
        ctl[TIMER_PRE] = ctl[TIMER_AT]
    ctl[TIMER_AT] = when
    s[S_ARM, k] = when
    ctl[N_ARM] = k + 1


@jit.kernel
def _less(H, a, b):
    for r in range(3):
        if H[r, a] != H[r, b]:
            return H[r, a] < H[r, b]
    return False


@jit.kernel
def _swap(H, a, b):
    for r in range(3):
        H[r, a], H[r, b] = H[r, b], H[r, a]


@jit.kernel
def heap_push(H, I, ctl, when, tid, gen):
    """Add a thread event; a full heap first drops its superseded entries (each thread has at most
    two live: a burst end and a wake-up)."""
    n = ctl[HEAP_N]
    if n == H.shape[1]:
        m = 0
        for j in range(n):
            if live(H, I, j):
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


@jit.kernel
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


@jit.kernel
def heap_pop(H, ctl):
    """Take the earliest entry off the heap (the caller reads it at column 0 first)."""
    n = ctl[HEAP_N] - 1
    ctl[HEAP_N] = n
    if n > 0:
        for r in range(3):
            H[r, 0] = H[r, n]
        _sift_down(H, 0, n)


@jit.kernel
def miss_rates(F, I, out):
    """DRAM misses per ns of each thread at its current rate into ``out``: ops per ns (capacity over time
    per op) times misses per op while working, else 0 (the View's ``thread_miss_rate``; as numpy would
    give it with ``nan_to_num`` of the ops per ns: a 0/0 is 0, x/0 the largest float)."""
    big = 1.7976931348623157e308
    for t in range(out.size):
        r = 0.0
        if I[I_PHASE, t] == WORK:
            cap, tau = F[F_CAP, t], F[F_TAU, t]
            if tau != 0.0:
                r = cap / tau
            elif cap != 0.0 and cap == cap:
                r = math.copysign(math.inf, cap)
            if r != r:
                r = 0.0
            elif r == math.inf:
                r = big
            elif r == -math.inf:
                r = -big
        out[t] = r * F[F_MISSES, t]
