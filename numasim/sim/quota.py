"""CFS bandwidth control: a pod's CPU limit as a quota per period, throttling and release.

A part of :class:`numasim.sim.kernel.Simulation`, which holds the state these
methods share (see docs/architecture.md).
"""

from __future__ import annotations

import math

import numpy as np

from . import layout
from .state import TOUCH, WORK
from .trace import PodInstance

__all__ = ["Bandwidth", "CFS_PERIOD_NS"]

CFS_PERIOD_NS = 100_000_000  # cpu.cfs_period_us default (Documentation/scheduler/sched-bwc.rst)


class Bandwidth:
    """The CFS bandwidth-control part of :class:`~numasim.sim.kernel.Simulation`."""

    def _quotas(self) -> None:
        """Recompute when the pods whose threads were just reshared (``s[S_TIDS]``) use up their quotas.

        All of them at once, as arrays: a CPU shared by many limited pods reshares them all
        at every change of its load.
        """
        s, ctl = self._scratch.s, self._ctlv
        idx = np.unique(self._I[layout.I_POD, s[layout.S_TIDS, :ctl[layout.N_TIDS]]])
        idx = idx[np.isfinite(self.q_quota[idx]) & (self._P[layout.P_THROTTLED, idx] == 0)]
        if not idx.size:
            return
        parts = [self._q_ids[p] for p in idx.tolist()]
        ids = np.concatenate(parts)
        self._integrate(ids)
        starts = np.zeros(len(parts), dtype=np.int64)
        np.cumsum([len(x) for x in parts[:-1]], out=starts[1:])
        F = self._F
        rate = np.add.reduceat(F[layout.F_SHARE, ids], starts)
        used = np.add.reduceat(F[layout.F_CPU, ids], starts)
        run = rate > 0  # with no thread running, the due time is left as it was (see _quota_due)
        left = self.q_quota[idx[run]] - (used[run] - self.q_base[idx[run]])
        self.q_due[idx[run]] = self.now + np.maximum(np.ceil(left / rate[run]), 1.0)
        self._quota_arm()

    def _pod_cpu(self, p: int) -> float:
        """CPU time the pod's threads have used so far, ns (integrated to now)."""
        tids = self.q_tids[p]
        self._integrate(tids)
        return math.fsum(self.c_cpu[t] for t in tids)

    def _bandwidth(self, pod: PodInstance):
        """CFS bandwidth control: refill the pod's quota every period, release throttled threads."""
        p = pod.index
        while pod.status == "running":
            start = self.now
            self.q_base[p] = self._pod_cpu(p)
            self._quota_schedule(p)
            yield self.env.timeout(CFS_PERIOD_NS)
            self.quota_log.append((start, p, self._pod_cpu(p) - self.q_base[p]))
            if self.q_throttled[p]:
                self._unthrottle(p)

    def _quota_schedule(self, p: int) -> None:
        """Schedule the moment the pod's threads use up this period's quota, at their current shares."""
        if self.q_throttled[p] or self.q_quota[p] == math.inf:
            return
        self._integrate(self.q_tids[p])
        self._quota_due(p)
        self._quota_arm()

    def _quota_due(self, p: int) -> None:
        """Set ``q_due[p]`` from the pod's CPU time so far (its threads integrated to now) and current shares.

        With no thread running, the due time is left as it was: a check then finds the quota
        not used up and looks again.
        """
        tids = self.q_tids[p]
        rate = sum(self.r_share[t] for t in tids)
        if rate <= 0:
            return
        left = self.q_quota[p] - (math.fsum(self.c_cpu[t] for t in tids) - self.q_base[p])
        self.q_due[p] = self.now + max(math.ceil(left / rate), 1)

    def _quota_arm(self) -> None:
        """Keep one timer, at the earliest due time of all pods: a reshare then moves a number,
        not an event (each reshare of a CPU shared by many limited pods would otherwise leave
        an event per pod: time quadratic in the pods)."""
        due = float(self.q_due.min())
        if due < self._q_timer_at:
            self._q_timer_at = due
            self._q_timer_gen += 1
            ev = self.env.timeout(int(due) - self.now)
            ev.callbacks.append(lambda _e, g=self._q_timer_gen: self._quota_timer(g))

    def _quota_timer(self, gen: int) -> None:
        if gen != self._q_timer_gen:
            return  # an earlier timer took its place
        self._q_timer_at = math.inf
        due = np.flatnonzero(self.q_due <= self.now).tolist()
        self.q_due[due] = math.inf
        for p in due:
            self._quota_check(p)
        self._quota_arm()

    def _quota_check(self, p: int) -> None:
        if self.q_throttled[p] or self.pods[p].status != "running":
            return
        if self._pod_cpu(p) - self.q_base[p] < self.q_quota[p] - 1.0:
            self._quota_schedule(p)
            return
        # Quota exhausted: the pod's runnable threads wait for the next period.
        self.q_throttled[p] = True
        self.q_since[p] = self.now
        self.q_due[p] = math.inf
        cpus = []
        for tid in self.q_tids[p]:
            if self.t_active[tid]:
                cpus.append(self.t_cpu[tid])
                self._integrate(self._on_cpus([self.t_cpu[tid]]))
                self._dequeue(tid)
                self.t_gen[tid] += 1
                self.t_held[tid] = True
        self._update_cpus(cpus, integrated=True)
        for cpu in set(cpus):
            if self.nr[cpu] == 0:
                self._idle(cpu)

    def _release_hold(self, tid: int) -> None:
        """A throttled thread that goes to sleep (a pause) is no longer waiting for CPU time: its
        throttled time so far is counted and it leaves the hold (waking in a throttled pod holds it again)."""
        if self.t_held[tid]:
            p = self.t_pod[tid]
            self.c_throttled[p] += self.now - max(self.q_since[p], self._held_from.pop(tid, self.q_since[p]))
            self.t_held[tid] = False

    def _wake_after_pause(self, tid: int) -> None:
        """Wake a thread at a pause's edge; held at once if its pod is throttled, it counts from now."""
        self._wake(tid)
        if self.t_held[tid]:
            self._held_from[tid] = self.now

    def _unthrottle(self, p: int) -> None:
        self.q_throttled[p] = False
        held = [t for t in self.q_tids[p] if self.t_held[t]]
        since = self.q_since[p]
        self.c_throttled[p] += sum(self.now - max(since, self._held_from.pop(t, since)) for t in held)
        cpus = []
        for tid in held:
            self.t_held[tid] = False
            if self.t_paused[tid] or self.t_phase[tid] not in (TOUCH, WORK):
                continue
            cpu = self.t_cpu[tid]
            self._integrate([tid] + self._on_cpus([cpu]))
            self.t_last[tid] = self.now
            self._enqueue(tid, cpu)
            cpus.append(cpu)
        self._update_cpus(cpus, integrated=True)
