"""The CPU runtime: runqueues, shares of a CPU (time slices, SMT), sleep and wake-up, CFS bandwidth control.

A part of :class:`numasim.sim.kernel.Simulation`, which holds the state these
methods share (see docs/architecture.md).
"""

from __future__ import annotations


import math

import numpy as np

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
        n = self.nr[cpu] + 1
        self.nr[cpu] = n
        self.v_nr_running[cpu] = n
        self.rq[cpu].append(tid)

    def _dequeue(self, tid: int) -> None:
        cpu = self.t_cpu[tid]
        self.t_active[tid] = False
        self.v_thread_active[tid] = False
        n = self.nr[cpu] - 1
        self.nr[cpu] = n
        self.v_nr_running[cpu] = n
        self.rq[cpu].remove(tid)
        self.r_share[tid] = 0.0
        self.r_cap[tid] = 0.0

    def _on_cpus(self, cpus: list[int]) -> list[int]:
        """Threads queued on ``cpus`` or, with SMT, on their siblings."""
        rq = self.rq
        if self._smt:
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
        tids = self._on_cpus(cpus)
        if not integrated:
            self._integrate(tids)
        if not tids:
            return
        self._set_caps(tids)
        self._reschedule(tids)
        if self._has_quota:
            for p in {self.t_pod[t] for t in tids}:
                if self.q_quota[p] != math.inf:
                    self._quota_schedule(p)

    def _set_caps(self, tids: list[int]) -> None:
        """Each thread's share of its CPU and its capacity: share x switch efficiency x SMT speed."""
        nr, t_cpu, cpu_node, lat = self.nr, self.t_cpu, self._cpu_node, self._lmat_diag
        refill, stall, tau, share, slices = self._refill_lines, self.p_stall, self.r_tau, self.r_share, self._slices
        switch_ns = self._switch_ns
        need_tau = []
        effs = []
        for tid in tids:
            c = t_cpu[tid]
            n = nr[c]
            eff = 1.0
            if n > 1:
                # A switched-in thread first refills its cache footprint (up to the L2) from memory.
                cost = switch_ns + refill[tid] * lat[cpu_node[c]] * stall[tid]
                sl = slices.get(n)
                if sl is None:
                    sl = self._slice(n)
                eff = sl / (sl + cost) if sl > 0 else 1.0
            share[tid] = 1.0 / n
            effs.append(eff)
            if tau[tid] == math.inf:
                need_tau.append(tid)
        if need_tau:
            self._set_tau(np.array(need_tau))
        cap = self.r_cap
        if self._smt:
            for tid, eff, f in zip(tids, effs, self._smt_factors(tids)):
                cap[tid] = share[tid] * eff * f
        else:
            for tid, eff in zip(tids, effs):
                cap[tid] = share[tid] * eff

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
        nr, t_cpu, rq = self.nr, self.t_cpu, self.rq
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
                    q = rq[sib]
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
