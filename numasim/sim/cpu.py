"""The CPU runtime: runqueues, shares of a CPU (time slices, SMT), sleep and wake-up, CFS bandwidth control.

A part of :class:`numasim.sim.kernel.Simulation`, which holds the state these
methods share (see docs/architecture.md).
"""

from __future__ import annotations


import math

import numpy as np

from .perf import LINE
from .state import TOUCH, WORK
from .trace import PodInstance

__all__ = ["CpuRuntime"]

CFS_PERIOD_NS = 100_000_000  # cpu.cfs_period_us default (Documentation/scheduler/sched-bwc.rst)


class CpuRuntime:
    def _set_cpu(self, tid: int, cpu: int) -> None:
        self.t_cpu[tid] = cpu
        self.v_thread_cpu[tid] = cpu

    def _enqueue(self, tid: int, cpu: int) -> None:
        self._set_cpu(tid, cpu)
        self.t_active[tid] = True
        self.v_thread_active[tid] = True
        self.nr[cpu] += 1
        self.v_nr_running[cpu] += 1
        self.rq[cpu].append(tid)

    def _dequeue(self, tid: int) -> None:
        cpu = self.t_cpu[tid]
        self.t_active[tid] = False
        self.v_thread_active[tid] = False
        self.nr[cpu] -= 1
        self.v_nr_running[cpu] -= 1
        self.rq[cpu].remove(tid)
        self.r_share[tid] = 0.0
        self.r_cap[tid] = 0.0

    def _on_cpus(self, cpus: list[int]) -> list[int]:
        """Threads queued on ``cpus`` or, with SMT, on their siblings."""
        rq = self.rq
        if self.machine.smt:
            cpus = sorted({s for c in cpus for s in self._core_of[c]})
        elif len(cpus) == 1:
            return list(rq[cpus[0]])
        else:
            cpus = sorted(set(cpus))
        return [t for c in cpus for t in rq[c]]

    def _block(self, tid: int) -> None:
        """Take a running thread off its runqueue; an idle CPU then asks the policy for work."""
        cpu = self.t_cpu[tid]
        self._integrate(self._on_cpus([cpu]))
        self._dequeue(tid)
        self.t_gen[tid] += 1
        self._update_cpus([cpu], integrated=True)
        if self.nr[cpu] == 0:
            for d in self.policy.idle(cpu, self.view):
                self._apply(d)

    def _wake(self, tid: int) -> None:
        if self.t_phase[tid] != WORK or self.t_active[tid] or self.t_paused[tid] or self.t_held[tid]:
            return
        waker = None
        if self.p_waker_pod[tid]:
            pod = self.pods[self.t_pod[tid]]
            others = [t for t in pod.tids if t != tid and self.t_active[t]]
            if others:
                waker = self.t_cpu[others[int(self.rng.integers(len(others)))]]
        if self.t_waiting[tid]:
            # A new request: after a think time (closed), or the next in the queue (open).
            if self.p_req_mode[tid] == 2:
                if not self._take_request(tid):
                    return
            else:
                self.t_req_arrival[tid] = self.env.now
                self.t_req_left[tid] = self.p_req_ops[tid]
            self.t_waiting[tid] = False
        cpu = self._id(self.policy.wake(tid, waker, self.view), "wake()'s CPU", "wake")
        self._check_place(tid, cpu, "wake")
        prev = self.t_cpu[tid]
        self.c_wakeups[tid] += 1
        self._integrate([tid] + self._on_cpus([cpu]))
        if cpu != prev:
            self._charge_move(tid, prev, cpu)
        if self.q_throttled[self.t_pod[tid]]:
            self._set_cpu(tid, cpu)
            self.t_held[tid] = True
            return
        self._enqueue(tid, cpu)
        self._update_cpus([cpu], integrated=True)

    def _update_cpus(self, cpus: list[int], integrated: bool = False) -> None:
        """Recompute the CPU shares of the threads on ``cpus``.

        Their progress must be integrated up to now first: by the caller, before it
        changed the runqueues (``integrated=True``), or here.
        """
        if not cpus:
            return
        m = self.machine
        tids = self._on_cpus(cpus)
        if not integrated:
            self._integrate(tids)
        if not tids:
            return
        spec = m.spec
        smt = m.smt
        l2 = spec.l2_kib * 1024
        nr, t_cpu, cpu_node, lat = self.nr, self.t_cpu, self._cpu_node, self._lmat_diag
        footprint, stall, tau = self.p_footprint, self.p_stall, self.r_tau
        need_tau = []
        for tid in tids:
            c = t_cpu[tid]
            n = nr[c]
            share = 1.0 / n
            factor = 1.0
            if smt:
                k = sum(1 for sib in self._core_of[c] if nr[sib] > 0)
                if k > 1:
                    factor = spec.smt_yield / k
            eff = 1.0
            if n > 1:
                refill = min(footprint[tid], l2) / LINE
                cost = spec.context_switch_ns + refill * lat[cpu_node[c]] * stall[tid]
                sl = self._slice(n)
                eff = sl / (sl + cost) if sl > 0 else 1.0
            self.r_share[tid] = share
            self.r_cap[tid] = share * factor * eff
            if tau[tid] == math.inf:
                need_tau.append(tid)
        if need_tau:
            self._set_tau(np.array(need_tau))
        self._reschedule(tids)
        if self._has_quota:
            for p in {self.t_pod[t] for t in tids}:
                if self.q_quota[p] != math.inf:
                    self._quota_schedule(p)

    def _slice(self, n: int) -> float:
        if n not in self._slices:
            self._slices[n] = float(self.policy.slice_ns(n))
        return self._slices[n]

    def _pod_cpu(self, p: int) -> float:
        """CPU time the pod's threads have used so far, ns (integrated to now)."""
        tids = self.pods[p].tids
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
        self.q_gen[p] += 1
        used = self._pod_cpu(p)
        rate = sum(self.r_share[t] for t in self.pods[p].tids)
        if rate <= 0:
            return
        left = self.q_quota[p] - (used - self.q_base[p])
        gen = self.q_gen[p]
        ev = self.env.timeout(max(math.ceil(left / rate), 1))
        ev.callbacks.append(lambda _e, q=p, g=gen: self._quota_check(q, g))

    def _quota_check(self, p: int, gen: int) -> None:
        if gen != self.q_gen[p] or self.q_throttled[p] or self.pods[p].status != "running":
            return
        if self._pod_cpu(p) - self.q_base[p] < self.q_quota[p] - 1.0:
            self._quota_schedule(p)
            return
        # Quota exhausted: the pod's runnable threads wait for the next period.
        self.q_throttled[p] = True
        self.q_since[p] = self.now
        cpus = []
        for tid in self.pods[p].tids:
            if self.t_active[tid]:
                cpus.append(self.t_cpu[tid])
                self._integrate(self._on_cpus([self.t_cpu[tid]]))
                self._dequeue(tid)
                self.t_gen[tid] += 1
                self.t_held[tid] = True
        self._update_cpus(cpus, integrated=True)
        for cpu in set(cpus):
            if self.nr[cpu] == 0:
                for d in self.policy.idle(cpu, self.view):
                    self._apply(d)

    def _unthrottle(self, p: int) -> None:
        self.q_throttled[p] = False
        held = [t for t in self.pods[p].tids if self.t_held[t]]
        self.c_throttled[p] += (self.now - self.q_since[p]) * len(held)
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
