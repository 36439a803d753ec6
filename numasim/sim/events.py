"""The thread events, compiled: burst ends, request completions, wake-ups and policy moves.

:func:`fire` runs the events due at an instant, or one wake-up or move Python asks for,
with the primitives of :mod:`numasim.sim.core` (same buffers, same conventions). Each
event is a small state machine: where it needs Python (the policy's ``wake()`` or
``idle()``, first touch, a time per operation, SMT speeds, quotas, random numbers) it
stops with a code, keeps its stage in ``ctl[PENDING]``, and goes on from there when
called again (docs/architecture.md, "The fast path").
"""

from __future__ import annotations

import math


from .. import jit

from .layout import (M_COUNT, M_HIST, M_SINCE, M_TOTAL, B_ACTIVE, B_HELD, B_PAUSED, B_WAITING, B_WAKER, CF_LAT, CI_LLC, CI_NODE, CI_NR,
                     CPU, DRAW_E, DRAW_U, EV_TOUCH, E_AT, F_DEBT, F_FOOT, F_MLP, F_PLAN, F_REQ_LEFT,
                     F_REQ_OPS, F_THINK, HEAP_N, HORIZON, INTEGRATED,
                     I_ARRIVAL, I_CPU, I_GEN, I_MASK, I_MODE, I_MOVES, I_PHASE, I_POD, I_WAKEUPS, I_WGEN,
                     I_XMOVES, K_L2, LOG_CAP, MOVE_BEGIN, NEEDS_DRAWS, NEEDS_FLUSH, NEEDS_IDLE, NEEDS_PLACE,
                     NEEDS_QUOTA, NEEDS_SLICES, NEEDS_TOUCH, NEEDS_XMOVE, NOW, N_AHEAD, N_ARM, N_IN, N_MV,
                     N_TIDS, N_TOUCH, PENDING, PREV, PULL_CPU, PULL_TID, P_FIRST, P_THROTTLED,
                     QUOTA, SINGLE, SMT, S_IN, S_MV_CPU, S_MV_NOW, S_MV_TID, S_PICK, S_WORK,
                     TID, TIMER_AT, TIMER_PRE, U_AT, WAKER, WAKE_AFFINE, WAKE_BEGIN, WAKE_LEAST_LOADED, WAKE_RULE)
from .arrivals import arrival, take_request
from .core import arm, dequeue, enqueue, gather, heap_pop, heap_push, integrate, live, reschedule, reshare
from ..policies.api import PAGE
from ..policies.rules import least_loaded, wake_packed
from .perf import LINE
from .state import TOUCH, WORK
from .trace import LOG_STEP, N_BINS
from .idle_pull import NO_DRAWS, pull_one, wants_idle

jit.fresh(__file__, "layout.py", "core.py", "firsttouch.py", "memory.py", "arrivals.py", "perf.py", "state.py", "../policies/rules.py", "../policies/api.py",
          "trace.py", "idle_pull.py")

__all__ = ["fire", "block", "charge_move"]

# Where fire takes an event up again (ctl[PENDING]): a burst end's stages, a wake-up's, a move's.
_AFTER_INTEGRATE, _BLOCK_DEQUEUE, _BLOCK_RESHARED, _BLOCK_QUOTA, _THINK = range(1, 6)
_WAKE_PLACED, _WAKE_INTEGRATED, _WAKE_MOVED, _WAKE_RESHARED = range(WAKE_BEGIN + 1, WAKE_BEGIN + 5)
_MOVE_INTEGRATED, _MOVE_MOVED, _MOVE_RESHARED = range(MOVE_BEGIN + 1, MOVE_BEGIN + 4)


@jit.kernel
def fire(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, M, P, D, Q, A, W):
    """Run the thread events due at ``ctl[NOW]``, earliest first (:meth:`CpuRuntime._run_core`).

    A thread's burst end brings it up to now; if its request is not done, the rest is
    rescheduled; if it is, :func:`_complete` logs its response time and blocks it until
    its next request (in closed mode, a wake-up after a think time, in the heap too). A
    wake-up is :func:`_wake`'s. With ``ctl[PENDING] = WAKE_BEGIN`` and ``ctl[SINGLE]``,
    it wakes thread ``ctl[TID]`` up and returns (a wake-up Python asks for).

    It stops for the caller, with ``ctl[TID]`` the thread, for: EV_TOUCH (a thread's
    last start-up touch step ended; the others go on to the next step here), NEEDS_TOUCH / NEEDS_TAU / NEEDS_SMT (as :func:`reshare`), NEEDS_QUOTA
    (CFS quotas of the threads in ``s[S_TIDS]``), NEEDS_IDLE (``ctl[CPU]`` fell idle:
    the policy's idle balancing), NEEDS_FLUSH (logs full), NEEDS_DRAWS (random numbers
    used up), NEEDS_QUEUE (a pod's queue full: the rings grow), and :func:`_wake`'s; then it is called again to go on (``ctl[PENDING]``
    says where). 0 once no event is due (the next is armed). Events due later, up to
    ``ctl[HORIZON]`` (no simpy event before them, :mod:`numasim.sim.clock`), run too,
    ``ctl[NOW]`` moving to each one's instant: the caller moves the clock to where it stops.

    A thread the idle pull chose (:func:`pull_one`, ``ctl[PULL_TID]``) moves once the event
    that made its CPU idle is done, before the next event. A pod's open-mode arrival
    (:func:`numasim.sim.arrivals.arrival`) queues a request and wakes an idle worker, if any.
    """
    now = ctl[NOW]
    tid = ctl[TID]
    one = s[S_WORK]
    while True:
        pending = ctl[PENDING]
        ctl[PENDING] = 0
        if pending == 0 and ctl[PULL_TID] >= 0:
            tid = ctl[PULL_TID]
            ctl[TID] = tid
            ctl[CPU] = ctl[PULL_CPU]
            ctl[PULL_TID] = -1
            pending = MOVE_BEGIN
        elif pending == 0:
            if ctl[SINGLE] != 0:
                ctl[SINGLE] = 0
                return 0
            if ctl[N_ARM] > ctl[LOG_CAP] or ctl[N_MV] > ctl[LOG_CAP]:
                return NEEDS_FLUSH
            if ctl[HEAP_N] == 0 or H[0, 0] > now:
                while ctl[HEAP_N] > 0 and not live(H, I, 0):
                    heap_pop(H, ctl)
                if ctl[HEAP_N] > 0 and H[0, 0] <= ctl[HORIZON] and ctl[N_TOUCH] == 0:
                    # Run ahead: no simpy event is due before the next thread event, so no
                    # timeout is needed to reach it; the timers this call logged are dropped.
                    if ctl[N_ARM]:
                        ctl[N_ARM] = 0
                        ctl[TIMER_AT] = ctl[TIMER_PRE]
                    now = H[0, 0]
                    ctl[NOW] = now
                    ctl[N_AHEAD] += 1
                    continue
                arm(I, s, ctl, H)
                return 0
            tid, gen = H[1, 0], H[2, 0]
            if tid < 0:  # a pod's arrival (not popped if it stops: taken up again when called again)
                need = arrival(F, I, B, P, D, Q, ctl, H, -1 - tid, now)
                if need:
                    return need
                if ctl[TID] < 0:
                    continue  # no idle worker: the request waits in the queue
                tid = ctl[TID]
                pending = WAKE_BEGIN
            else:
                stands = live(H, I, 0)
                heap_pop(H, ctl)
                if not stands:
                    continue
                ctl[TID] = tid
                if gen < 0:
                    pending = WAKE_BEGIN
                elif not B[B_ACTIVE, tid]:
                    continue
                else:
                    one[0] = tid
                    if integrate(F, I, CF, CI, M, one, 1, now, s, sf, ctl):
                        ctl[PENDING] = _AFTER_INTEGRATE
                        return NEEDS_TOUCH
                    pending = _AFTER_INTEGRATE
        if pending >= MOVE_BEGIN:
            need = _move(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, M, tid, pending)
        elif pending >= WAKE_BEGIN:
            need = _wake(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, M, P, D, Q, A, W, tid, pending)
        else:
            need = _complete(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, M, P, D, Q, A, tid, pending)
        if need:
            return need


@jit.kernel
def _response_time(M, pod, now, ns):
    """Count a request of ``pod`` completed at ``now`` after ``ns`` in its response-time histogram
    (:class:`numasim.sim.trace.ResponseTimes`), if it completed in the measurement window."""
    hist, count, total, since = M[M_HIST], M[M_COUNT], M[M_TOTAL], M[M_SINCE]
    if now < since[0]:
        return
    k = int(math.log(max(ns, 1)) / LOG_STEP)
    hist[pod, min(k, N_BINS - 1)] += 1
    count[pod] += 1
    total[pod] += ns


@jit.kernel
def _stop(ctl, stage, need):
    """Stop for the caller with ``need``; the event goes on at ``stage`` when called again."""
    ctl[PENDING] = stage
    return need


@jit.kernel
def _complete(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, M, P, D, Q, A, tid, stage):
    """A thread's burst ended (it is up to now): reschedule the rest of its request, or
    complete it: log the response time; in open mode take the next request of the pod's
    queue if there is one; else block, and in closed mode think (a wake-up after an
    exponential think time, into the heap). Returns what it needs of the caller (0: done)."""
    now = ctl[NOW]
    if stage == _AFTER_INTEGRATE:
        if I[I_PHASE, tid] == TOUCH:
            if F[F_PLAN, tid] >= PAGE:  # a start-up touch step ended, more to touch: the next step
                one = s[S_WORK]
                one[0] = tid
                reschedule(F, I, B, one, 1, kf, s, ctl, H)
                return 0
            return EV_TOUCH  # the last one: Python touches what is left and starts the thread's work
        if F[F_REQ_LEFT, tid] > 1e-6:
            one = s[S_WORK]
            one[0] = tid
            reschedule(F, I, B, one, 1, kf, s, ctl, H)
            return 0
        _response_time(M, I[I_POD, tid], now, now - I[I_ARRIVAL, tid])
        F[F_REQ_LEFT, tid] = math.inf
        if I[I_MODE, tid] == 2 and take_request(F, I, P, Q, tid):
            one = s[S_WORK]
            one[0] = tid
            reschedule(F, I, B, one, 1, kf, s, ctl, H)
            return 0
        B[B_WAITING, tid] = True
        ctl[CPU] = I[I_CPU, tid]
        need = block(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, M, tid, 0)
        if need == NEEDS_TOUCH:
            return _stop(ctl, _BLOCK_DEQUEUE, need)
        if need:
            return _stop(ctl, _BLOCK_RESHARED, need)
        stage = _BLOCK_RESHARED
    if stage == _BLOCK_DEQUEUE:
        need = block(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, M, tid, 1)
        if need:
            return _stop(ctl, _BLOCK_RESHARED, need)
        stage = _BLOCK_RESHARED
    if stage == _BLOCK_RESHARED:
        if ctl[QUOTA] != 0 and ctl[N_TIDS] > 0:
            return _stop(ctl, _BLOCK_QUOTA, NEEDS_QUOTA)
        stage = _BLOCK_QUOTA
    if stage == _BLOCK_QUOTA and CI[CI_NR, ctl[CPU]] == 0:
        pulled = pull_one(I, CI, A, D, ctl, ctl[CPU])
        if pulled == NO_DRAWS:
            return _stop(ctl, _BLOCK_QUOTA, NEEDS_DRAWS)
        if pulled >= 0:
            ctl[PULL_TID] = pulled  # moved once this event is done (fire)
            ctl[PULL_CPU] = ctl[CPU]
        elif wants_idle(CI, ctl):
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


@jit.kernel
def block(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, M, tid, stage):
    """Take a running thread off its runqueue: the threads of its CPU are brought up to now
    (NEEDS_TOUCH: call again at stage 1), then share the CPU without it (:func:`reshare`'s needs)."""
    cpu = I[I_CPU, tid]
    if stage == 0:
        s[S_IN, 0] = cpu
        n = gather(I, CI, core_cpus, s[S_IN], 1, ctl[SMT] != 0, s[S_WORK], s[S_PICK])
        if integrate(F, I, CF, CI, M, s[S_WORK], n, ctl[NOW], s, sf, ctl):
            return NEEDS_TOUCH
    dequeue(F, I, B, CI, tid)
    I[I_GEN, tid] += 1
    s[S_IN, 0] = cpu
    ctl[N_IN] = 1
    ctl[INTEGRATED] = 1
    return reshare(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, M, 0)


@jit.kernel
def _wake(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, M, P, D, Q, A, W, tid, stage):
    """Thread ``tid`` wakes up, if it can run (working, not already queued, paused or held).

    Its waker, with ``p_waker_pod``, is a thread of its pod on a runqueue, picked at
    random (``ctl[WAKER]``, -1 if none); a new request starts if it was waiting for one
    (in open mode the pod's queue's first, if any: else it does not wake up).
    The policy's wake-up rule chooses its CPU (``Policy.wake_rule``), or the policy
    (NEEDS_PLACE: into ``ctl[CPU]``); it and the threads there
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
                if not take_request(F, I, P, Q, tid):
                    return 0
            else:
                I[I_ARRIVAL, tid] = now
                F[F_REQ_LEFT, tid] = F[F_REQ_OPS, tid]
            B[B_WAITING, tid] = False
        rule = ctl[WAKE_RULE]
        if rule == WAKE_AFFINE:
            prev = I[I_CPU, tid]
            cpu = wake_packed(W, CI[CI_NR], prev, prev if waker < 0 else waker, A[I[I_MASK, tid]])
        elif rule == WAKE_LEAST_LOADED:
            cpu = least_loaded(CI[CI_NR], A[I[I_MASK, tid]], core_cpus, ctl[SMT] != 0)
        else:
            cpu = -1
        if cpu < 0:
            return _stop(ctl, _WAKE_PLACED, NEEDS_PLACE)  # no CPU it may use found: the policy's wake()
        ctl[CPU] = cpu
        stage = _WAKE_PLACED
    cpu = ctl[CPU]
    if stage == _WAKE_PLACED:
        ctl[PREV] = I[I_CPU, tid]
        I[I_WAKEUPS, tid] += 1
        one = s[S_WORK]
        one[0] = tid
        s[S_IN, 0] = cpu
        n = gather(I, CI, core_cpus, s[S_IN], 1, ctl[SMT] != 0, one[1:], s[S_PICK])
        if integrate(F, I, CF, CI, M, one, n + 1, now, s, sf, ctl):
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
        return _join(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, M, tid, cpu, -1,
                     _WAKE_MOVED, _WAKE_RESHARED)
    return _quotas(ctl)


@jit.kernel
def charge_move(F, I, CF, CI, kf, s, ctl, tid, old, cpu):
    """Record a move of ``tid`` from CPU ``old`` to ``cpu`` (into the move log) and charge the cache
    refill it costs: within one LLC only the private caches (up to the L2) are lost, across LLCs
    the whole footprint, reloaded at the destination node's loaded latency. Across nodes the
    thread's CPU is set and 1 returned: its time per operation changes (the caller's), and the
    caller prices the refill at the thread's own memory latency there
    (``CpuRuntime._refill_where_the_data_is``)."""
    foot = F[F_FOOT, tid]
    if CI[CI_LLC, old] == CI[CI_LLC, cpu]:
        foot = min(foot, kf[K_L2])
    F[F_DEBT, tid] += (foot / LINE) * CF[CF_LAT, cpu] / max(F[F_MLP, tid], 1.0)
    I[I_MOVES, tid] += 1
    k = ctl[N_MV]
    s[S_MV_TID, k] = tid
    s[S_MV_CPU, k] = cpu
    s[S_MV_NOW, k] = ctl[NOW]
    ctl[N_MV] = k + 1
    if CI[CI_NODE, old] != CI[CI_NODE, cpu]:
        I[I_XMOVES, tid] += 1
        I[I_CPU, tid] = cpu
        return 1
    return 0


@jit.kernel
def _move(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, M, tid, stage):
    """A policy moves queued thread ``tid`` to CPU ``ctl[CPU]`` (another than its own): the threads
    of both CPUs are brought up to now, it leaves its runqueue, the move is charged
    (:func:`charge_move`; NEEDS_XMOVE across nodes), it joins the other (NEEDS_SLICES: the
    policy's slice for one thread more first) and both CPUs are re-shared, then CFS quotas."""
    cpu = ctl[CPU]
    if stage == MOVE_BEGIN:
        ctl[PREV] = I[I_CPU, tid]
        s[S_IN, 0] = ctl[PREV]
        s[S_IN, 1] = cpu
        n = gather(I, CI, core_cpus, s[S_IN], 2, ctl[SMT] != 0, s[S_WORK], s[S_PICK])
        if integrate(F, I, CF, CI, M, s[S_WORK], n, ctl[NOW], s, sf, ctl):
            return _stop(ctl, _MOVE_INTEGRATED, NEEDS_TOUCH)
        stage = _MOVE_INTEGRATED
    old = ctl[PREV]
    if stage == _MOVE_INTEGRATED:
        dequeue(F, I, B, CI, tid)
        if charge_move(F, I, CF, CI, kf, s, ctl, tid, old, cpu):
            return _stop(ctl, _MOVE_MOVED, NEEDS_XMOVE)
        stage = _MOVE_MOVED
    if stage == _MOVE_MOVED:
        return _join(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, M, tid, cpu, old,
                     _MOVE_MOVED, _MOVE_RESHARED)
    return _quotas(ctl)


@jit.kernel
def _join(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, M, tid, cpu, old, here, after):
    """Queue ``tid`` (brought up to now) on ``cpu`` and re-share that CPU, and CPU ``old`` too
    unless it is -1; then CFS quotas. NEEDS_SLICES first if the policy's slice for one thread
    more is not known (go on at stage ``here``); :func:`reshare`'s needs go on at ``after``."""
    if CI[CI_NR, cpu] + 1 >= slices.shape[0]:
        return _stop(ctl, here, NEEDS_SLICES)
    enqueue(I, B, CI, tid, cpu)
    k = 0
    if old >= 0:
        s[S_IN, 0] = old
        k = 1
    s[S_IN, k] = cpu
    ctl[N_IN] = k + 1
    ctl[INTEGRATED] = 1
    need = reshare(F, I, B, CF, CI, core_cpus, slices, kf, s, sf, ctl, H, M, 0)
    if need:
        return _stop(ctl, after, need)
    return _quotas(ctl)


@jit.kernel
def _quotas(ctl):
    """NEEDS_QUOTA if any pod's CPU limit can bind (the caller reschedules the quotas of the
    threads just re-shared, and the event is done), else done."""
    if ctl[QUOTA] != 0:
        return _stop(ctl, 0, NEEDS_QUOTA)
    return 0
