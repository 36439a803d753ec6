"""Workload drivers: pod arrivals, threads starting, requests (closed and open loop), stop-the-world pauses.

A part of :class:`numasim.sim.kernel.Simulation`, which holds the state these
methods share (see docs/architecture.md).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import PolicyError
from . import arrivals, layout
from .arrivals import interarrival
from .layout import STREAM_ARRIVALS, STREAM_PAUSES, STREAM_PICKS, STREAM_PULL  # noqa: F401 (named here for tests)
from .quota import CFS_PERIOD_NS
from .state import TOUCH, WORK
from .trace import PodInstance

__all__ = ["Drivers"]

# Random streams of their own, below the engine's (SeedSequence spawn keys; the wake-up
# path's is the engine's first spawned child, 0).


class Drivers:
    def _arrivals(self):
        for pod in sorted(self.pods, key=lambda p: (p.arrival_ns, p.index)):
            if pod.arrival_ns > self.env.now:
                yield self.env.timeout(pod.arrival_ns - self.env.now)
            self._arrive(pod)
            self._solve_soon()
            if not self._tick_wakeup.triggered:
                self._tick_wakeup.succeed()

    def _arrive(self, pod: PodInstance) -> None:
        adm = self._check_admission(self.policy.admit(pod, self.view))
        pod.admission = adm
        if not adm.accepted:
            pod.status = "rejected"
            pod.reason = adm.reason
            self._event("rejected", f"{pod.name}: {adm.reason}")
            return
        if adm.affinity is not None and len(adm.affinity) != pod.threads:
            raise PolicyError(self.policy.name, self.now, adm, "affinity must list one CPU set per thread")
        pod.status = "running"
        pod.mempolicy = adm.mempolicy
        prof = pod.profile
        shared = int(round(pod.memory * prof.shared_fraction))
        private = (pod.memory - shared) // pod.threads
        hot = (prof.hot_fraction, prof.hot_access_share) if prof.hot_fraction is not None else None
        index = {tid: k for k, tid in enumerate(pod.tids)}
        given = 0
        for j, members in enumerate(pod.procs):
            # Each process's shared memory is its share of the pod's, by its threads.
            mine = shared - given if j == len(pod.procs) - 1 else shared * len(members) // pod.threads
            given += mine
            proc = self.t_proc[members[0]]
            rid = self.memory.add_region(pod.index, -1, mine, hot, proc)
            for i, tid in enumerate(members):
                self.t_shared_rid[tid] = rid
                self.t_private[tid] = self.memory.add_region(pod.index, tid, private, hot, proc)
                plan = [[self.t_private[tid], private]]
                if prof.touch != "main":
                    part = mine // len(members) + (1 if i < mine % len(members) else 0)
                    plan.append([rid, part])
                elif i == 0:
                    plan.append([rid, mine])
                self._set_plan(tid, [(r, b) for r, b in plan if b > 0])
                if adm.affinity is not None:
                    aff = adm.affinity[index[tid]]
                    self._check_cpus(aff, adm)
                    self._set_affinity(tid, aff)
                    self.affinity_log.append((self.now, tid, aff))
                self.p_cycles[tid] *= 1.0 + adm.overhead.cpu
                self.p_stall[tid] *= 1.0 + adm.overhead.memory
            for h in pod.helpers[j]:  # the process's collector threads work on its shared memory
                self.t_shared_rid[h] = rid
                self.t_private[h] = self.t_private[members[0]]  # never used: all their misses are shared
                self.p_cycles[h] *= 1.0 + adm.overhead.cpu
                self.p_stall[h] *= 1.0 + adm.overhead.memory
        self._set_touch_policy(pod)
        self._set_core_args()  # the memory's arrays grew
        # With a single toucher, a process's other threads start once its memory is touched
        # (as a JVM with AlwaysPreTouch starts its workers after pre-touching the heap).
        for tid in pod.tids if prof.touch != "main" else [members[0] for members in pod.procs]:
            self._start_thread(tid)
        for proc in range(len(pod.procs)):
            for h in pod.helpers[proc]:
                self._start_helper(h)
        if prof.pause_interval_ms is not None:
            for members in pod.procs:  # each process (JVM) collects on its own
                self.env.process(self._pauses(pod, members))
        if prof.restart_interval_ms is not None:
            for members in pod.procs:
                self.env.process(self._restarts(pod, members))

        if adm.cpu_quota is not None:
            if adm.cpu_quota < len(pod.all_tids):  # otherwise the limit can never bind
                self.q_quota[pod.index] = adm.cpu_quota * CFS_PERIOD_NS
                self.q_tids[pod.index] = pod.all_tids
                self._q_ids[pod.index] = np.array(pod.all_tids, dtype=np.int64)
                self._has_quota = True
                self._ctlv[layout.QUOTA] = 1
                self.env.process(self._bandwidth(pod))

    def _start_thread(self, tid: int) -> None:
        cpu = self._id(self.policy.place(tid, self.view), "place()'s CPU", "place")
        self._check_place(tid, cpu, "place")
        # A thread whose memory grows as it works (touch: work) touches it from WORK.
        plans = self._plans(tid)
        self.t_phase[tid] = TOUCH if plans and not self.p_grow[tid] else WORK
        if plans and self.p_grow[tid]:
            self._growing.add(tid)
        self.t_last[tid] = self.now
        self._log_place(self.env.now, tid, cpu)
        if self.q_throttled[self.t_pod[tid]]:
            self._set_cpu(tid, cpu)
            self.t_held[tid] = True
            return
        self._integrate(self._on_cpus([cpu]))
        self._enqueue(tid, cpu)
        self._update_cpus([cpu], integrated=True)
        self._dirty = True
        if self.t_phase[tid] == WORK:
            self._begin_work(tid)

    def _start_helper(self, tid: int) -> None:
        """A collector thread is created (forked from its process, placed by the policy) and sleeps
        until the first pause: it takes its process's CPUs (the union of its workers')."""
        self._follow_affinity(tid)
        cpu = self._id(self.policy.place(tid, self.view), "place()'s CPU", "place")
        self._check_place(tid, cpu, "place")
        self._set_cpu(tid, cpu)
        self.t_phase[tid] = WORK
        self.t_paused[tid] = True
        self.t_last[tid] = self.now
        self._log_place(self.env.now, tid, cpu)

    def _follow_affinity(self, helper: int) -> None:
        """A collector thread may run on any CPU one of its process's workers may (None: all): HotSpot
        starts it in the process's cpuset, and a later affinity change of the workers carries it along."""
        members = self.proc_tids[self.t_proc[helper]]
        sets = [self.t_affinity[t] for t in members]
        cpus = None if any(a is None for a in sets) else frozenset().union(*sets)
        if cpus == self.t_affinity[helper]:
            return
        self._set_affinity(helper, cpus)
        self.affinity_log.append((self.now, helper, cpus))
        if cpus is not None and self.t_cpu[helper] >= 0 and self.t_cpu[helper] not in cpus:
            cpu = self._id(self.policy.place(helper, self.view), "place()'s CPU", "place")
            if self.t_active[helper]:
                self._move(helper, cpu, "affinity")
            else:
                self._check_place(helper, cpu, "place")
                self._set_cpu(helper, cpu)

    def _begin_work(self, tid: int) -> None:
        """A thread starts serving requests: the first one (closed) or the queue's (open)."""
        mode = self.p_req_mode[tid]
        pod = self.pods[self.t_pod[tid]]
        if mode == 2 and pod.index not in self._injecting and all(self.t_phase[t] == WORK for t in pod.tids):
            # The injector starts once the service is up: every worker has touched its memory.
            self._start_arrivals(pod.index)
        if mode == 1:
            self.t_req_arrival[tid] = self.now
            self.t_req_left[tid] = self.p_req_ops[tid]
        elif mode == 2 and not self._take_request(tid):
            self.t_waiting[tid] = True
            if self.t_active[tid]:
                self._block(tid)
            return
        self._reschedule((tid,))

    def _take_request(self, tid: int) -> bool:
        """Start the next request of the pod's open-mode queue, if any (:func:`numasim.sim.arrivals.take_request`)."""
        return arrivals.take_request(self._F, self._I, self._P, self._Q, tid)

    def _stream(self, kind: int, ident: int) -> np.random.Generator:
        """The random stream of one pod's arrivals or one process's pauses (``ident``: the pod, or
        the process's first thread), derived from the engine's seed and its own name alone: it
        draws the same numbers whatever the policy does, and whatever order the streams start in
        (common random numbers across the variants of a seed)."""
        seq = self.rng.bit_generator.seed_seq
        return np.random.default_rng(np.random.SeedSequence(seq.entropy, spawn_key=(*seq.spawn_key, kind, ident)))

    def _start_arrivals(self, p: int) -> None:
        """Pod ``p``'s open-mode arrivals begin, if it is running (each then draws the next:
        numasim.sim.arrivals.arrival)."""
        if self.pods[p].status != "running":
            return
        self._injecting.add(p)
        self._P[layout.P_OPEN, p] = 1
        self._ctlv[layout.NOW] = self.env.now
        if arrivals.next_arrival(self._F, self._I, self._P, self._scratch.draws, self._ctl, self._scratch.heap, p,
                               self.env.now):
            self._refill_draws()
            arrivals.next_arrival(self._F, self._I, self._P, self._scratch.draws, self._ctl, self._scratch.heap, p,
                                self.env.now)
        self._arm()

    def _set_rate(self, p: int, rate_ns: float) -> None:
        """Pod ``p``'s open-mode arrivals per ns from now on (its mean time between them, for the compiled code)."""
        self.q_rate[p] = rate_ns
        for tid in self.pods[p].tids:
            self.p_interarrival[tid] = interarrival(rate_ns)

    def _grow_queues(self) -> None:
        """Twice as long a ring for every pod's queue (one is full); every ring starts again at 0."""
        P, Q = self._P, self._Q
        cap = Q.shape[1]
        grown = np.zeros((Q.shape[0], 2 * cap), dtype=np.int64)
        for q in range(Q.shape[0]):
            k, h = int(P[layout.P_QLEN, q]), int(P[layout.P_QHEAD, q])
            grown[q, :k] = np.roll(Q[q], -h)[:k]
            P[layout.P_QHEAD, q] = 0
        self._Q = grown
        self._set_core_args()

    def drive_open(self, rates_per_s: dict[int, float]) -> None:
        """From now on, the pods named (by index) take requests open-loop, Poisson at these rates per second.

        The SLA search's ladder (numasim.analysis.sla) changes the rate of a running
        simulation. A thread serving a closed-loop request finishes it; one that is
        thinking takes the next request from the queue when its think time ends, or waits
        for one. The next arrival already drawn keeps its time; later ones are at the new rate.
        """
        for p, rate in rates_per_s.items():
            if not 0 < rate < math.inf:
                raise ValueError(f"pod {p}: an open-mode rate must be a finite number of requests per second > 0, got {rate}")
            pod = self.pods[p]
            self._set_rate(p, rate / 1e9)
            for tid in pod.tids:
                self.p_req_mode[tid] = 2
            if pod.status == "running" and p not in self._injecting:
                self._start_arrivals(p)

    def _restarts(self, pod: PodInstance, members: tuple[int, ...]):
        """Every ``restart_interval_ms`` (or after each of its intervals in turn, the last repeating) the
        process's workers end and new threads take their places
        (docs/model.md, Threads started anew): those past their start-up touch, whether running,
        held by the pod's CPU limit, thinking, waiting for a request or in a pause. The runnable ones
        are all taken off their CPUs before any CPU left idle balances; then each, in order, is
        forgotten by the policy (``Policy.restarted``) and placed as a new thread (``Policy.place``:
        the first from where it ran, the others forked from their process's first thread), with a cold cache
        (:meth:`_cold_cache`). The runnable ones are queued there (held, if the pod is throttled); the
        others wake there when their think time, request or pause ends."""
        given = pod.profile.restart_interval_ms
        intervals = [max(int(ms * 1e6), 1) for ms in (given if isinstance(given, list) else [given])]
        done = 0  # restarts so far
        while True:
            yield self.env.timeout(intervals[min(done, len(intervals) - 1)])  # a list's last interval repeats
            done += 1
            if pod.status != "running":
                return
            ready = [t for t in members if self.t_phase[t] == WORK]
            runnable, left = set(), set()
            for tid in ready:
                if self.t_held[tid]:
                    self._release_hold(tid)
                    runnable.add(tid)
                elif self.t_active[tid]:
                    runnable.add(tid)
                    left.add(int(self.t_cpu[tid]))
                    self._block(tid, idle=False)
            placed = []
            for k, tid in enumerate(ready):
                old = int(self.t_cpu[tid])
                self.policy.restarted(tid, self.view)
                if k:
                    self._set_cpu(tid, -1)  # a new thread: place() forks it from its process's first
                cpu = self._id(self.policy.place(tid, self.view), "place()'s CPU", "place")
                self._check_place(tid, cpu, "place")
                self._set_cpu(tid, cpu)
                self._log_place(self.env.now, tid, cpu)
                self._cold_cache(tid, old, cpu)
                if tid not in runnable:
                    continue
                if self.q_throttled[self.t_pod[tid]]:
                    self.t_held[tid] = True
                    self._held_from[tid] = self.now
                    continue
                self._integrate(self._on_cpus([cpu]))
                self.t_last[tid] = self.now
                self._enqueue(tid, cpu)
                self._update_cpus([cpu], integrated=True)
                self._dirty = True
                placed.append(tid)
            if placed:
                self._reschedule(tuple(placed))
            for cpu in sorted(left):
                if self.nr[cpu] == 0:
                    self._idle(cpu)

    def _cold_cache(self, tid: int, old: int, cpu: int) -> None:
        """A new thread's cache is cold: it reloads its footprint at its own miss latency on ``cpu`` (one
        that shares its predecessor's last core finds it there; one that shares its LLC reloads its L2
        only), as a debt that replaces what the predecessor still owed for an earlier move."""
        self._set_tau(np.array([tid]))
        cold = self._refill_ns(tid, old, cpu, float(self.r_latency[tid]))  # (a working thread has run: old >= 0)
        self._F[layout.F_DEBT, tid] = max(self._F[layout.F_DEBT, tid], cold)

    def _pauses(self, pod: PodInstance, members: tuple[int, ...]):
        """Stop-the-world pauses (a JVM's safepoints): every thread of one process blocks at once."""
        prof = pod.profile
        rng = self._stream(STREAM_PAUSES, members[0])
        while pod.status == "running":
            yield self.env.timeout(max(int(rng.exponential(prof.pause_interval_ms * 1e6)), 1))
            if pod.status != "running":
                return
            held = [t for t in members if self.t_phase[t] == WORK]
            for tid in held:
                self.t_paused[tid] = True
                self._release_hold(tid)
                if self.t_active[tid]:
                    self._block(tid)
            # The collector runs while the workers wait (none wait yet while they first-touch their memory).
            gc = self.proc_helpers[self.t_proc[members[0]]] if held else ()
            for tid in gc:
                self.t_paused[tid] = False
                self._wake_after_pause(tid)
            yield self.env.timeout(max(int(rng.exponential(prof.pause_ms * 1e6)), 1))
            for tid in gc:
                self.t_paused[tid] = True
                self._release_hold(tid)
                if self.t_active[tid]:
                    self._block(tid)
            for tid in held:
                self.t_paused[tid] = False
                self._wake_after_pause(tid)
