"""The CPU runtime: runqueues, shares of a CPU (time slices, SMT), sleep and wake-up (CFS bandwidth control: sim/quota.py).

A part of :class:`numasim.sim.kernel.Simulation`, which holds the state these
methods share (see docs/architecture.md).
"""

from __future__ import annotations



import numpy as np

from . import core, events, idle_pull, layout
from .layout import N_ARM, N_MV, N_TOUCH, S_ARM, S_MV_CPU, S_MV_NOW, S_MV_TID
from ..errors import PolicyError
from ..policies.api import LeastLoaded, Policy, PullOne, WakeAffine
from ..policies.rules import check_packed
from .decisions import _real
from .memory import CHUNK
from .perf import LINE

# A policy's time slice: 1 us (a context switch costs about 2) to 10 s (the kernel's sysctl allowed 1 s).
MIN_SLICE_NS, MAX_SLICE_NS = 1_000, 10_000_000_000
TOUCH_STEP = 32 * CHUNK  # bytes a thread first-touches between two of its events (64 MiB)

__all__ = ["CpuRuntime"]


class CpuRuntime:
    def _set_cpu(self, tid: int, cpu: int) -> None:
        self.t_cpu[tid] = cpu

    def _enqueue(self, tid: int, cpu: int) -> None:
        self._slices_for(cpu)
        core.enqueue(self._I, self._B, self._CI, tid, cpu)

    def _dequeue(self, tid: int) -> None:
        core.dequeue(self._F, self._I, self._B, self._CI, tid)

    def _runqueue(self, cpu: int) -> list[int]:
        """The threads queued on ``cpu``, in the order they arrived."""
        out = []
        nxt = self.rq_next
        t = self.rq_head[cpu]
        while t >= 0:
            out.append(t)
            t = nxt[t]
        return out

    def _on_cpus(self, cpus: list[int]) -> list[int]:
        """Threads queued on ``cpus`` or, with SMT, on their siblings (by CPU, in runqueue order)."""
        if not self._smt and len(cpus) == 1:
            return self._runqueue(cpus[0])
        ids = np.array(cpus, dtype=np.int64)
        out = self._scratch_tids
        k = core.gather(self._I, self._CI, self._core_cpus, ids, ids.size, self._smt, out, self._scratch.s[layout.S_PICK])
        return out[:k].tolist()

    def _reschedule(self, tids) -> None:
        """Schedule each thread's next own event: end of its touch, or of its burst (:func:`numasim.sim.core.reschedule`)."""
        ids = np.array(tids, dtype=np.int64)
        self._ctlv[layout.NOW] = self.env.now
        core.reschedule(self._F, self._I, self._B, ids, ids.size, self._scratch.kf, self._scratch.s, self._ctl,
                        self._scratch.heap)
        self._after_core()

    def _arm(self) -> None:
        """Make sure a simpy timeout is pending for the earliest thread event (:func:`numasim.sim.core.arm`)."""
        core.arm(self._I, self._scratch.s, self._ctl, self._scratch.heap)
        self._after_core()

    def _fire(self, _ev: object) -> None:
        """The thread events due now (the armed timeout of :func:`numasim.sim.core.arm`)."""
        ctl = self._ctlv
        if 0 <= ctl[layout.TIMER_AT] <= self.env.now:
            ctl[layout.TIMER_AT] = -1
        self._ahead = True  # the events that follow too, up to simpy's next (sim/clock.py)
        try:
            self._run_core()
        finally:
            self._ahead = False
            ctl[layout.HORIZON] = -1

    def _run_core(self, start: int = 0, tid: int = 0, cpu: int = 0) -> None:
        """Run :func:`numasim.sim.events.fire` and give it what it stops for, until it is done:
        the thread events due now, or with ``start`` (``layout.WAKE_BEGIN`` or ``MOVE_BEGIN``)
        one wake-up of ``tid`` or one move of ``tid`` to ``cpu``.

        What Python does for it may run it again (a CPU fell idle, and the policy's
        ``idle()`` moves a thread there): the outer call's state is kept aside meanwhile.
        """
        ctl = self._ctlv
        outer = [ctl[k] for k in layout.FIRE_STATE] if self._core_depth else None
        if start:
            ctl[layout.TID] = tid
            ctl[layout.CPU] = cpu
            ctl[layout.PENDING] = start
            ctl[layout.SINGLE] = 1
        self._core_depth += 1
        try:
            self._serve_core(ctl)
        finally:
            self._core_depth -= 1
            if outer is not None:
                for k, v in zip(layout.FIRE_STATE, outer):
                    ctl[k] = v

    def _serve_core(self, ctl: memoryview) -> None:
        """Call the compiled events until they are done; after each call, do what they logged
        (:meth:`_after_core`: which also empties full logs, NEEDS_FLUSH, and places first-touched
        memory, NEEDS_TOUCH) and what they stopped for.

        Called from :meth:`_fire` (``_ahead``), the compiled events run on to later instants
        while no simpy event comes first; the clock follows them to the instant they stop at."""
        env = self.env
        ahead = self._ahead and self._core_depth == 1
        while True:
            ctl[layout.NOW] = env.now
            if ahead:
                ctl[layout.HORIZON] = env.horizon(self._until)
            code = events.fire(*self._fire_args)
            if ahead and ctl[layout.NOW] != env.now:
                env.skip_to(ctl[layout.NOW])
            self._after_core()
            if code == 0:
                return
            if code == layout.NEEDS_PLACE:
                self._place_wake(ctl[layout.TID], ctl[layout.WAKER])
            elif code == layout.NEEDS_TAU or code == layout.NEEDS_SMT:
                self._reshare_needs(code)
            elif code == layout.NEEDS_QUOTA:
                self._quotas()
            elif code == layout.NEEDS_IDLE:
                self._policy_idle(ctl[layout.CPU])
            elif code == layout.NEEDS_DRAWS:
                self._refill_draws()
            elif code == layout.NEEDS_XMOVE:
                tid = ctl[layout.TID]
                self._set_tau(np.array([tid]))
                self._refill_where_the_data_is(tid)
                self._dirty = True
            elif code == layout.NEEDS_SLICES:
                self._slices_for(ctl[layout.CPU])
            elif code == layout.EV_TOUCH:
                self._touch_step(ctl[layout.TID])
            elif code == layout.NEEDS_QUEUE:
                self._grow_queues()

    def _refill_where_the_data_is(self, tid: int) -> None:
        """A thread moved across nodes reloads its footprint from where its memory is: the compiled
        charge (:func:`numasim.sim.events.charge_move`) priced it at the new node's local latency;
        the difference to the thread's own miss latency there (its memory's mix, set by the
        :meth:`_set_tau` just done) is added to what it owes."""
        cpu, old = self.t_cpu[tid], self._ctlv[layout.PREV]
        extra = float(self.r_latency[tid]) - float(self._CF[layout.CF_LAT, cpu])
        if extra > 0.0:
            self._F[layout.F_DEBT, tid] += self._refill_ns(tid, old, cpu, extra)

    def _refill_ns(self, tid: int, old: int, cpu: int, latency_ns: float) -> float:
        """The stall of reloading what ``tid``'s cache loses going from CPU ``old`` to ``cpu``, each
        line at ``latency_ns``, its misses overlapped as its stream overlaps them: nothing on the same
        core, its L2 within one LLC (one LLC over both nodes with SNC), else its whole footprint."""
        foot = self._F[layout.F_FOOT, tid]
        if self.machine.cpu_core[old] == self.machine.cpu_core[cpu]:
            return 0.0
        if self._cpu_llc[old] == self._cpu_llc[cpu]:
            foot = min(foot, self._scratch.kf[layout.K_L2])
        return (foot / LINE) * latency_ns / max(self._F[layout.F_MLP, tid], 1.0)

    def _block(self, tid: int, idle: bool = True) -> None:
        """Take a running thread off its runqueue (:func:`numasim.sim.events.block`); an idle CPU then asks the
        policy for work (``idle=False``: the caller does, once it has taken off all it takes off)."""
        cpu = self.t_cpu[tid]
        self._ctlv[layout.NOW] = self.env.now
        need = events.block(*self._core_args, tid, 0)
        if need == layout.NEEDS_TOUCH:
            self._after_core()
            need = events.block(*self._core_args, tid, 1)
        self._reshare_finish(need)
        if idle and self.nr[cpu] == 0:
            self._idle(cpu)

    def _idle(self, cpu: int) -> None:
        """A CPU fell idle: the idle pull the policy handed over, if any (:func:`numasim.sim.idle_pull.pull_one`),
        else the policy's idle balancing."""
        pulled = idle_pull.pull_one(self._I, self._CI, self._A, self._scratch.draws, self._ctl, cpu)
        if pulled == idle_pull.NO_DRAWS:
            self._refill_draws()
            pulled = idle_pull.pull_one(self._I, self._CI, self._A, self._scratch.draws, self._ctl, cpu)
        if pulled >= 0:
            self._run_core(layout.MOVE_BEGIN, pulled, cpu)
        else:
            self._policy_idle(cpu)

    def _policy_idle(self, cpu: int) -> None:
        """The policy's idle balancing for ``cpu``, its decisions applied, if it can act
        (``Policy.idle_when``, :func:`numasim.sim.idle_pull.wants_idle`)."""
        if idle_pull.wants_idle(self._CI, self._ctl):
            for d in self._decisions(self.policy.idle(cpu, self.view), "idle"):
                self._apply(d)

    def _take_rules(self, ncpu: int) -> None:
        """The compiled rules the policy hands over (``Policy.idle_when``, ``idle_rule``, ``wake_rule``),
        checked; the idle pull's stream; the CPU masks the rules read (one row per distinct CPU set)."""
        self._ctlv[layout.IDLE_RULE] = (
            layout.IDLE_NEVER if type(self.policy).idle is Policy.idle
            else layout.IDLE_OVERLOADED if self.policy.idle_when == "overloaded" else layout.IDLE_ALWAYS)
        rule = self.policy.idle_rule()
        if rule is not None:
            span = np.asarray(rule.span) if isinstance(rule, PullOne) else np.zeros(0)
            if span.shape != (ncpu,) or span.dtype.kind not in "iu":
                raise PolicyError(self.policy.name, 0, "idle_rule",
                                  f"idle_rule() must return None or a PullOne whose span is one integer per CPU ({ncpu})")
            self.cpu_store.i[layout.CI_PULL_SPAN] = span
            self._ctlv[layout.PULL_RULE] = 1
        wake = self.policy.wake_rule()
        self._W = np.zeros(0, dtype=np.int64)  # WakeAffine's tables (one flat array)
        if isinstance(wake, WakeAffine):
            wrong = check_packed(wake.tables, ncpu)
            if wrong:
                raise PolicyError(self.policy.name, 0, "wake_rule", f"WakeAffine.tables must be {wrong}")
            self._W = np.array(wake.tables, dtype=np.int64)  # a copy: checked, it stays as checked
            self._ctlv[layout.WAKE_RULE] = layout.WAKE_AFFINE
        elif isinstance(wake, LeastLoaded):
            self._ctlv[layout.WAKE_RULE] = layout.WAKE_LEAST_LOADED
        elif wake is not None:
            raise PolicyError(self.policy.name, 0, "wake_rule", "wake_rule() must return None, a WakeAffine or a LeastLoaded")
        # The idle pull's own stream (layout.Scratch.draws, row DRAW_PULL).
        self._pull_rng = self._stream(layout.STREAM_PULL, 0)
        # The CPUs each thread may use, as rows of a mask (layout.I_MASK; CpuRuntime._set_affinity).
        self._A = np.ones((4, ncpu), dtype=np.bool_)
        self._A[1:] = False
        self._mask_rows: dict[frozenset[int] | None, int] = {None: 0}

    def _set_affinity(self, tid: int, cpus: frozenset[int] | None) -> None:
        """The CPUs ``tid`` may use (None: all), for Python (``t_affinity``) and as a row of the
        compiled code's CPU masks (``_A``, one row per distinct set; row 0: every CPU)."""
        cpus = None if cpus is None else frozenset(cpus)
        self.t_affinity[tid] = cpus
        row = self._mask_rows.get(cpus)
        if row is None:
            row = self._mask_rows[cpus] = len(self._mask_rows)
            if row == self._A.shape[0]:
                self._A = np.concatenate([self._A, np.zeros_like(self._A)])
                self._set_core_args()
            self._A[row, sorted(cpus)] = True
        self.t_mask[tid] = row

    def _wake(self, tid: int) -> None:
        """Wake ``tid`` up now, if it can run (:func:`numasim.sim.events.fire`, which also wakes
        threads whose think time ended)."""
        self._run_core(layout.WAKE_BEGIN, tid)

    def _place_wake(self, tid: int, waker: int) -> None:
        """The policy's CPU for a thread that wakes up (``waker``: the waker's CPU, -1 if none)."""
        cpu = self._id(self.policy.wake(tid, None if waker < 0 else waker, self.view), "wake()'s CPU", "wake")
        self._check_place(tid, cpu, "wake")
        self._ctlv[layout.CPU] = cpu

    def _refill_draws(self) -> None:
        """New random numbers where they were used up: for the wake-up path, uniform in [0, 1) for
        wakers, standard exponential for think times (times the mean think time, numpy's
        ``exponential``), from the engine's stream for them; for the idle pull, from its own;
        for each open-mode pod's arrivals, from two of the pod's own (times apart, picks)."""
        ctl, d = self._ctlv, self._scratch.draws
        if ctl[layout.PULL_AT] > layout.DRAWS - 2:
            d[layout.DRAW_PULL] = self._pull_rng.random(layout.DRAWS)
            ctl[layout.PULL_AT] = 0
        if ctl[layout.U_AT] == layout.DRAWS:
            d[layout.DRAW_U] = self._draw_rng.random(layout.DRAWS)
            ctl[layout.U_AT] = 0
        if ctl[layout.E_AT] == layout.DRAWS:
            d[layout.DRAW_E] = self._draw_rng.standard_exponential(layout.DRAWS)
            ctl[layout.E_AT] = 0
        P = self._P
        for p in self._injecting:  # each open-mode pod's arrivals: times apart and picks, streams of its own
            rngs = self._arrival_rngs.get(p)
            if rngs is None:
                rngs = self._arrival_rngs[p] = (self._stream(layout.STREAM_ARRIVALS, p),
                                                self._stream(layout.STREAM_PICKS, p))
            times, picks = layout.arrival_rows(p)
            if P[layout.P_ARR_E, p] == layout.DRAWS:
                d[times] = rngs[0].standard_exponential(layout.DRAWS)
                P[layout.P_ARR_E, p] = 0
            if P[layout.P_ARR_U, p] == layout.DRAWS:
                d[picks] = rngs[1].random(layout.DRAWS)
                P[layout.P_ARR_U, p] = 0

    def _update_cpus(self, cpus: list[int], integrated: bool = False) -> None:
        """Recompute the CPU shares of the threads on ``cpus`` and when their bursts end
        (:func:`numasim.sim.core.reshare`).

        Their progress must be integrated up to now first: by the caller, before it
        changed the runqueues (``integrated=True``), or here.
        """
        if not cpus:
            return
        n = len(cpus)
        s, ctl = self._scratch.s, self._ctlv
        s[layout.S_IN, :n] = cpus
        ctl[layout.N_IN] = n
        ctl[layout.NOW] = self.env.now
        ctl[layout.INTEGRATED] = integrated
        self._reshare_finish(core.reshare(*self._core_args, 0))

    def _reshare_finish(self, need: int) -> None:
        """Give :func:`numasim.sim.core.reshare` what it stopped for, until it is done; then CFS quotas."""
        self._reshare_needs(need)
        if self._has_quota:
            self._quotas()

    def _reshare_needs(self, need: int) -> None:
        """Give :func:`numasim.sim.core.reshare` what it stopped for, until it is done."""
        s, sf, ctl = self._scratch.s, self._scratch.sf, self._ctlv
        while need:
            self._after_core()
            if need == layout.NEEDS_TAU:
                self._set_tau(s[layout.S_NEED, :ctl[layout.N_NEED]].copy())
            elif need == layout.NEEDS_SMT:
                n = int(ctl[layout.N_TIDS])
                sf[layout.SF_FACT, :n] = self._smt_factors(s[layout.S_TIDS, :n].tolist())
            need = core.reshare(*self._core_args, int(ctl[layout.STAGE]))
        self._after_core()

    def _after_core(self) -> None:
        """Do what the compiled functions left to Python, in order: the timeouts to create (for the
        thread events), the memory to first-touch; and log the moves."""
        ctl = self._ctlv
        if not (ctl[N_ARM] or ctl[N_TOUCH] or ctl[N_MV]):
            return
        sv = self._sv  # element by element: plain ints, no slices or lists for the one or two of each
        k = ctl[N_ARM]
        if k:
            ctl[N_ARM] = 0
            now, timeout, fire = self.env.now, self.env.timeout, self._fire
            for i in range(k):
                timeout(sv[S_ARM, i] - now).callbacks.append(fire)
        k = ctl[N_TOUCH]
        if k:
            ctl[N_TOUCH] = 0
            s = self._scratch.s
            for tid, nbytes in zip(s[layout.S_TOUCH, :k].tolist(), self._scratch.sf[layout.SF_TOUCH, :k].tolist()):
                self._touch(tid, nbytes)
        k = ctl[N_MV]
        if k:
            ctl[N_MV] = 0
            for i in range(k):
                self._log_place(sv[S_MV_NOW, i], sv[S_MV_TID, i], sv[S_MV_CPU, i])

    def _set_caps(self, tids: list[int]) -> None:
        """Each thread's share of its CPU and its capacity: share x switch efficiency x SMT speed
        (:func:`numasim.sim.core.shares`, :func:`numasim.sim.core.capacities`)."""
        ids = np.array(tids, dtype=np.int64)
        eff = np.empty(ids.size)
        need = np.empty(ids.size, dtype=np.int64)
        k = core.shares(self._F, self._I, self._CF, self._CI, self._slice_ns, self._switch_ns, ids, ids.size, eff, need)
        if k:
            self._set_tau(need[:k].copy())
        fact = np.array(self._smt_factors(tids)) if self._smt else eff
        core.capacities(self._F, ids, ids.size, eff, fact, self._smt)

    def _smt_factors(self, tids: list[int]) -> list[float]:
        """Speed of each thread with its core's busy siblings, relative to the core alone.

        A thread alone on a core spends the shares ``a`` of its time per op computing,
        ``b`` in overlapped (independent) misses and the rest in dependent misses and
        coherence stalls. With ``k`` busy siblings:

        - the siblings split the core's out-of-order window (Hyper-Threading gives each
          active thread half the reorder, load and store buffers; docs/model.md), so
          each keeps at most ``core_mlp / k`` lines in flight, or, where the machine
          does not give ``core_mlp``, ``1/k`` of what it keeps alone, never fewer than
          one (:func:`numasim.sim.perf.lines_in_flight`): its overlapped-miss time grows
          by ``r = p_smt_r[tid][k]``;
        - its computing stretches by a factor ``s >= 1`` common to the core: the least
          at which the siblings' demand for the core's busiest execution resource,
          ``sum(u_j * a_j * f_j)``, fits the core, where ``u_j`` is the share of it
          thread ``j`` uses while it computes (``pipeline_share``; by default
          ``1 / smt_yield``, so two compute-bound threads share ``smt_yield``; a thread
          that fills the resource alone, ``u = 1``, gains nothing from a sibling; a thread
          stalled on a dependent miss leaves the pipeline to its sibling). Computed in
          units of the default share (``p_pipe = u * smt_yield``, 1.0 by default) against
          a capacity of ``smt_yield``.

        A thread's speed is ``f = 1 / (a s + b r + 1 - a - b)``. Time-shared CPUs
        count with the average shares of their runqueue.
        """
        m = self.machine
        nr, t_cpu, rq = self.nr, self.t_cpu, self._runqueue
        cshare, ishare, smt_r, pipe = self.r_cshare, self.r_ishare, self.p_smt_r, self.p_pipe
        memo: dict[int, tuple[float, int]] = {}
        out = []
        for tid in tids:
            c = t_cpu[tid]
            sibs = self._core_of[c]
            key = sibs[0]
            k = sum(1 for sib in sibs if nr[sib] > 0)
            if k <= 1:
                out.append(1.0)
                continue
            r = smt_r[tid][k]
            if key not in memo:
                terms = []
                for sib in sibs:
                    q = rq(sib) if nr[sib] else None
                    if q:
                        a = sum(cshare[t] for t in q) / len(q)
                        b = sum(ishare[t] * smt_r[t][k] for t in q) / len(q)
                        bb = sum(ishare[t] for t in q) / len(q)
                        u = sum(pipe[t] * cshare[t] for t in q) / len(q) / a if a > 0 else 0.0
                        terms.append((a, b + 1.0 - a - bb, u))
                memo[key] = (_stretch(terms, m.spec.smt_yield), k)
            s = memo[key][0]
            a, b = cshare[tid], ishare[tid]
            out.append(1.0 / (a * s + b * r + 1.0 - a - b))
        return out

    def _slices_for(self, cpu: int) -> None:
        """Ask the policy for its time slice with one thread more on ``cpu`` than now, if not asked yet."""
        n = self.nr[cpu] + 1
        known = self._slice_ns.size - 1
        if n > known:
            more = [self.policy.slice_ns(k) for k in range(known + 1, n + 1)]
            bad = [x for x in more if not (_real(x) and MIN_SLICE_NS <= x <= MAX_SLICE_NS)]
            if bad:
                raise PolicyError(self.policy.name, self.now, "slice_ns", f"slice_ns must return a time slice "
                                  f"of {MIN_SLICE_NS:,} to {MAX_SLICE_NS:,} ns, got {str(bad[0])[:50]}")
            more = [float(x) for x in more]
            self._slice_ns = np.concatenate([self._slice_ns, more])
            self._set_core_args()



def _stretch(terms: list[tuple[float, float, float]], capacity: float) -> float:
    """The least ``s >= 1`` with ``sum(w a / (a s + B)) <= capacity`` over ``terms`` of ``(a, B, w)``.

    ``w`` is a thread's pipeline share in units of a typical thread's (``1 / capacity``).
    The sum falls as ``s`` grows and is convex, so Newton's method from ``s = 1``
    climbs to the root without overshooting it.
    """
    s = 1.0
    for _ in range(50):
        h = sum(w * a / (a * s + b) for a, b, w in terms if a > 0) - capacity
        if h <= 1e-12:
            return s
        dh = -sum(w * a * a / (a * s + b) ** 2 for a, b, w in terms if a > 0)
        s -= h / dh
    return s
