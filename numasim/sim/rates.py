"""Progress and rates: lazy integration of counters, times per operation, the loaded-latency solve, cpufreq.

A part of :class:`numasim.sim.kernel.Simulation`, which holds the state these
methods share (see docs/architecture.md).
"""

from __future__ import annotations


import numpy as np
from numpy.typing import NDArray

from . import core, layout
from .firsttouch import POL_LOCAL
from .pages import touch_policy
from .fixed_point import access_rows
from .perf import LINE, RateInputs, solve_rates, thread_latency
from .state import TOUCH, WORK

__all__ = ["Rates"]

SMT_ROUNDS = 20  # at most this many solves at one instant to settle SMT capacities with latencies
SMT_TOL = 1e-3
REFRESH_NS = 25_000_000  # the latency fixed point follows small load changes within 25 ms


class Rates:
    @property
    def _dirty(self) -> bool:
        """Whether memory moved or rates changed since the last solve (compiled first touch sets it too)."""
        return self._ctlv[layout.DIRTY] != 0

    @_dirty.setter
    def _dirty(self, value: bool) -> None:
        self._ctlv[layout.DIRTY] = int(value)

    def _integrate(self, tids) -> None:
        """Bring the counters of ``tids`` (any iterable of thread ids) up to now at their current rates.

        The arithmetic is :func:`numasim.sim.core.integrate`; memory first-touched
        meanwhile is placed here, thread by thread in order. A thread named twice
        integrates once: the second time finds no time passed.
        """
        ids = tids if isinstance(tids, np.ndarray) else np.fromiter(tids, dtype=np.int64)
        sc = self._scratch
        if core.integrate(self._F, self._I, self._CF, self._CI, self._M, ids, ids.size, self.env.now, sc.s, sc.sf,
                          self._ctl):
            self._after_core()

    def _flush_miss_node(self, tids) -> None:
        """Spread the misses counted since the access rows of ``tids`` last changed over the nodes."""
        if len(tids) == 1:
            tid = tids[0]
            pending = self.miss_pending
            if pending[tid]:
                self.c_miss_node[tid] += pending[tid] * self.r_access[tid]
                pending[tid] = 0.0
            return
        # Several (a solve flushes every thread): array operations, the same sums element by element.
        row = self._F[layout.F_PENDING]
        ids = np.asarray(tids, dtype=np.int64)
        due = ids[row[ids] != 0.0]
        if due.size:
            self.c_miss_node[due] += row[due][:, None] * self.r_access[due]
            row[due] = 0.0

    def _access(self, tids: NDArray[np.int64]) -> NDArray[np.float64]:
        """Share of each thread's misses that each node serves, from where its pages are."""
        m = self.machine
        acc = np.empty((tids.size, m.n_nodes))
        I = self._I
        # (compiled: a few dozen numpy calls on rows of a few nodes were most of a solve's preparation)
        access_rows(np.asarray(tids, dtype=np.int64), I[layout.I_CPU], I[layout.I_SHARED_RID], I[layout.I_PRIVATE],
                    self._F[layout.F_SHARED_FRACTION], m.cpu_node, self.memory.weighted_bytes(), acc)
        if self._has_transient:
            # Buffers allocated and freed within a request get fresh pages where the thread runs now.
            tf = _gather(self.p_transient, tids)[:, None]
            if tf.any():
                acc = tf * self._touch_target(tids) + (1.0 - tf) * acc
        return acc

    def _touch_target(self, tids: NDArray[np.int64]) -> NDArray[np.float64]:
        """Where the pages a touching thread allocates go (rows sum to 1), by the policy its touch runs under
        (:func:`numasim.sim.pages.touch_policy`: the pod's, or a bind the workload's program sets)."""
        m = self.machine
        out = np.zeros((tids.size, m.n_nodes))
        local = self._pol[POL_LOCAL, self._I[layout.I_POD, tids]] != 0
        if local.any():  # the default policy: where the thread runs
            out[np.flatnonzero(local), self._CI[layout.CI_NODE, self._I[layout.I_CPU, tids[local]]]] = 1.0
        for i in np.flatnonzero(~local).tolist():
            tid = int(tids[i])
            node = self._cpu_node[self.t_cpu[tid]]
            mp = touch_policy(self.pods[self.t_pod[tid]])
            if mp.kind == "interleave":
                weights = np.asarray(mp.weights or [1] * len(mp.nodes), dtype=float)
                out[i, list(mp.nodes)] = weights / weights.sum()
            elif mp.kind == "preferred" and mp.nodes:
                out[i, mp.nodes[0]] = 1.0
            elif mp.kind == "bind":
                out[i, node if node in mp.nodes else min(mp.nodes, key=lambda n: m.distance[node, n])] = 1.0
            else:
                out[i, node] = 1.0
        return out

    def _phase_params(self, tids: NDArray[np.int64]):
        """Per-operation parameters of ``tids``: compute ns, misses, stall scale, access rows,
        the overlapped misses' share of the stall, write-backs per miss and coherence ns.

        A working thread's operation is its workload's; a thread touching its memory
        at start-up writes one cache line per operation, as a streaming store that
        overlaps as many misses as a stream (``mlp: hardware``), so first touch also queues
        for bandwidth.
        """
        cpu = _gather(self.t_cpu, tids)
        compute = _gather(self.p_cycles, tids) / self.f_cpu[np.maximum(cpu, 0)]
        misses = _gather(self.p_misses, tids)
        stall = _gather(self.p_stall, tids)
        ind = _gather(self.p_ind, tids)
        writes = _gather(self.p_writes, tids) if self._has_writes else None
        acc = self._access(tids)
        coherence = lock = None
        if self._has_coherence or self._has_lock:
            coherence, lock = self._shared_writes(tids, cpu, compute)
        touching = _gather(self.t_phase, tids) == TOUCH
        if touching.any():
            tt = tids[touching]
            compute[touching] = LINE / _gather(self.p_touch, tt)
            misses[touching] = 1.0
            stall[touching] = 1.0 / self.machine.stream_mlp
            ind[touching] = 1.0
            acc[touching] = self._touch_target(tt)
            if writes is not None:
                writes[touching] = 0.0  # the kernel zeroes pages with stores that skip the read (v1)
            if coherence is not None:
                coherence[touching] = 0.0
            if lock is not None:
                lock[0][touching] = -1
                lock[1][touching] = 0.0
        return compute, misses, stall, acc, ind, writes, coherence, lock

    def _shared_writes(self, tids: NDArray[np.int64], cpus: NDArray[np.int64], compute: NDArray[np.float64]):
        """What lines written by other threads of the process cost ``tids`` per operation.

        Returns the cache-to-cache stall per operation (coherence misses and the lines
        taken over with the lock) and, for threads that take their process's lock, the
        lock (the process, -1 for none) and the ns it is held per operation: the
        critical section's share of ``compute`` plus those lines' transfers.
        """
        xfer = self._c2c_ns(tids, cpus)
        lines = np.array([self.p_lock_lines[t] for t in tids.tolist()])
        coherence = np.array([self.p_coherence[t] for t in tids.tolist()]) * xfer + lines * xfer
        lock = None
        if self._has_lock:
            held = np.array([self.p_lock_cycles[t] / self.p_cycles[t] for t in tids.tolist()])
            takes = (held > 0.0) | (lines > 0.0)
            group = np.where(takes, np.array([self.t_proc[t] for t in tids.tolist()]), -1)
            lock = (group, np.where(takes, held * compute + lines * xfer, 0.0))
        return coherence, lock

    def _c2c_ns(self, tids: NDArray[np.int64], cpus: NDArray[np.int64]) -> NDArray[np.float64]:
        """Cache-to-cache latency of one line of ``tids``'s process that another thread wrote last:
        that thread is another working thread of the process, on a node in proportion to where
        they run; the line costs the machine's HITM latency to that node, plus the directory's
        extra trip when the line's home (where the process's shared memory is) is not the writer's
        node. On machines that say so, a writer on the same core or behind the same last-level
        cache costs less (``c2c_smt_ns``, ``c2c_llc_ns``). 0 for a thread with no other working
        thread."""
        out = np.zeros(tids.size)
        m = self.machine
        c2c, extra = m.c2c, m.c2c_not_writer_homed
        fine = self._c2c_levels
        homes = self.memory.distributions(_gather(self.t_shared_rid, tids))
        counts: dict[int, NDArray[np.float64]] = {}
        near: dict[int, tuple[dict[int, int], dict[int, int]]] = {}  # per process: threads per LLC, per core
        t_cpu, phase, node_of, llc_of = self.t_cpu, self.t_phase, self._cpu_node, self._cpu_llc
        for i, (tid, cpu) in enumerate(zip(tids.tolist(), cpus.tolist())):
            if cpu < 0 or not (self.p_coherence[tid] or self.p_lock_lines[tid]):
                continue
            p = self.t_proc[tid]
            if p not in counts:
                cnt = np.zeros(m.n_nodes)
                per_llc: dict[int, int] = {}
                per_core: dict[int, int] = {}
                for t in self.proc_tids[p]:
                    c = t_cpu[t]
                    if c >= 0 and phase[t] == WORK:
                        cnt[node_of[c]] += 1.0
                        if fine:
                            per_llc[llc_of[c]] = per_llc.get(llc_of[c], 0) + 1
                            core = self._core_id[c]
                            per_core[core] = per_core.get(core, 0) + 1
                counts[p] = cnt
                near[p] = (per_llc, per_core)
            others = counts[p].copy()
            own = node_of[cpu]
            me = 1 if phase[tid] == WORK and t_cpu[tid] == cpu else 0
            others[own] -= me
            total = others.sum()
            if total > 0:
                home = homes[i]
                cost = c2c[own] + extra[own] * (1.0 - home) if home.any() else c2c[own]
                spent = float(cost @ others)
                if fine:
                    # Writers sharing this thread's core or LLC cost their own latency, not the node's.
                    per_llc, per_core = near[p]
                    same_core = per_core.get(self._core_id[cpu], 0) - me
                    same_llc = per_llc.get(llc_of[cpu], 0) - me - same_core
                    local = float(cost[own])
                    smt, llc = self._c2c_smt, self._c2c_llc
                    llc = local if llc is None else llc
                    smt = llc if smt is None else smt
                    spent += same_llc * (llc - local) + same_core * (smt - local)
                out[i] = spent / total
        return out

    def _set_tau(self, tids: NDArray[np.int64], params: tuple | None = None) -> None:
        """Time per operation of ``tids`` at the current loaded latencies (``params``: their
        :meth:`_phase_params`, if the caller has them)."""
        if tids.size == 0:
            return
        if params is None and tids.size == 1 and self._set_tau_one(int(tids[0])):
            return
        compute, misses, stall, acc, ind, _writes, coherence, lock = params or self._phase_params(tids)
        m = self.machine
        cpus = _gather(self.t_cpu, tids)
        nodes = m.cpu_node[cpus]
        chip = None if m.cpu_chiplet is None else m.cpu_chiplet[cpus]
        lat = thread_latency(acc, self._lmat, nodes, self._chiplet_wait, chip)
        self._flush_miss_node(tids)
        self.r_access[tids] = acc
        local = acc[np.arange(tids.size), nodes]
        self.r_local[tids] = local
        self.r_latency[tids] = lat
        memory = misses * lat * stall
        tau = compute + memory + (0.0 if coherence is None else coherence)
        if lock is not None:
            group = lock[0]
            tau = tau + np.where(group >= 0, self._lock_wait[np.maximum(group, 0)], 0.0)
        thr = self.r_throttle[tids]
        if (thr != 1.0).any():  # its node's lines in flight are shared: it waits for room (fixed_point._share_lines)
            extra = tau * (thr - 1.0)
            memory = memory + extra
            tau = tau + extra
        cshare = compute / tau
        ishare = memory * ind / tau
        F = self._F
        F[layout.F_TAU, tids] = tau
        F[layout.F_CSHARE, tids] = cshare
        F[layout.F_ISHARE, tids] = ishare

    def _set_tau_one(self, tid: int) -> bool:
        """:meth:`_set_tau` for one thread in plain floats, the same operations in the same order as
        the arrays': a working thread whose time per op is compute plus memory stalls (no coherence,
        lock, chiplet link or per-request buffers; one moved across nodes costs this at each move),
        or a thread starting its start-up touch under the local memory policy (each new thread costs
        this). False, having done nothing, for any other thread."""
        cpu = self.t_cpu[tid]
        phase = self.t_phase[tid]
        if cpu < 0 or self.r_throttle[tid] != 1.0 or self.machine.cpu_chiplet is not None:
            return False
        node = self._cpu_node[cpu]
        local = [0.0] * self.machine.n_nodes
        local[node] = 1.0
        if phase == TOUCH:  # as _phase_params's touching rows: one line written per op, streaming, here
            if not self._pol[POL_LOCAL, self.t_pod[tid]]:
                return False
            acc = np.array(local)
            compute, misses, stall, ind = LINE / self.p_touch[tid], 1.0, 1.0 / self.machine.stream_mlp, 1.0
        else:
            shared_rid, private_rid = self.t_shared_rid[tid], self.t_private[tid]
            if (shared_rid < 0 or private_rid < 0 or phase != WORK or self._has_coherence or self._has_lock
                    or (self._has_transient and self.p_transient[tid])):
                return False
            shared = self.memory.distribution(shared_rid) or local  # not touched yet: allocated where used
            private = self.memory.distribution(private_rid) or local
            sf = self.p_shared[tid]
            acc = np.array([sf * a + (1.0 - sf) * b for a, b in zip(shared, private)])
            compute = self.p_cycles[tid] / float(self.f_cpu[cpu])
            misses, stall, ind = self.p_misses[tid], self.p_stall[tid], self.p_ind[tid]
        lat = float(thread_latency(acc[None], self._lmat, np.array([node]), None, None)[0])
        self._flush_miss_node((tid,))
        self.r_access[tid] = acc
        self.r_local[tid] = float(acc[node])
        self.r_latency[tid] = lat
        memory = misses * lat * stall
        tau = compute + memory
        self.r_tau[tid] = tau
        self.r_cshare[tid] = compute / tau
        self.r_ishare[tid] = memory * ind / tau
        return True

    def _solve_soon(self) -> None:
        """Solve once the events already due at this instant have run.

        Pods that arrive together, or threads that end their start-up touch at the
        same moment, then cost one solve, not one each.
        """
        if self._solve_at != self.env.now:
            self._solve_at = self.env.now
            ev = self.env.timeout(0)
            ev.callbacks.append(lambda _e: self._solve())

    def _solve(self) -> None:
        """Solve the loaded-latency fixed point for all threads and reset their times per op."""
        m = self.machine
        phase = np.asarray(self.t_phase)
        alive = np.flatnonzero((phase == TOUCH) | (phase == WORK))
        self._integrate(alive.tolist())
        self._dirty = False
        if alive.size == 0:
            return
        active = self.v_thread_active[alive]
        act = alive[active]
        # What the threads' operations are does not change during the solve: found once.
        params = self._phase_params(alive)
        act_params = params if act.size == alive.size else _rows(params, active)
        smt_tids: list[int] = []
        if m.smt:  # threads whose core has other busy hardware threads: their capacity depends on the latencies
            nr = self.nr
            busy = [c for c in range(m.n_cpus) if nr[c] and sum(1 for sib in self._core_of[c] if nr[sib]) > 1]
            smt_tids = self._on_cpus(busy) if busy else []
        for _round in range(SMT_ROUNDS):
            self._solve_once(act, act_params)
            self._set_tau(alive, params)
            if not smt_tids:
                break
            # The siblings' stall shares moved with the latencies, so do their SMT speeds, and
            # with them the load: solve again until the capacities settle.
            before = np.asarray(self.r_cap)[smt_tids]
            self._set_caps(smt_tids)
            after = np.asarray(self.r_cap)[smt_tids]
            if np.max(np.abs(after - before) / np.maximum(before, 1e-12)) < SMT_TOL:
                break
        if smt_tids:
            self._update_cpus(busy, integrated=True)  # the settled capacities: reschedule, requeue quota ends
        serving = alive[self.v_thread_active[alive] & np.isfinite(np.asarray(self.t_req_left)[alive])]
        if serving.size:
            self._reschedule(serving.tolist())  # times per operation changed: so do request completions

    def _solve_once(self, act: NDArray[np.int64], params: tuple) -> None:
        """One loaded-latency fixed point for the active threads ``act`` (``params``: their
        :meth:`_phase_params`) at their current capacities."""
        m = self.machine
        compute, misses, stall, acc, _ind, writes, coherence, lock = params
        extra_node = np.zeros(m.n_nodes)
        extra_link = np.zeros((m.n_nodes, m.n_nodes))
        for flow in self._flows.values():
            self._flow_traffic(flow, extra_node, extra_link)
        inp = RateInputs(
            cpu_node=m.cpu_node[self.v_thread_cpu[act]],
            capacity=np.asarray(self.r_cap)[act],
            compute_ns=compute,
            misses=misses,
            stall_scale=stall,
            access=acc,
            extra_node=extra_node,
            extra_link=extra_link,
            writes=writes,
            coherence_ns=coherence,
            chiplet=None if m.cpu_chiplet is None else m.cpu_chiplet[self.v_thread_cpu[act]],
            lock_group=None if lock is None else lock[0],
            lock_service=None if lock is None else lock[1],
        )
        sol = solve_rates(inp, m.latency, m.node_bandwidth, m.interconnect, m.curve, m.write_cost, m.node_curve,
                          m.chiplet_bandwidth, m.node_port, m.inflight_lines, x0=self._x, y0=self._y)
        self.n_solves += 1
        self._x, self._y, self._lmat, self._chiplet_wait = sol.x, sol.y, sol.lmat, sol.chiplet_wait
        self.r_throttle[:] = 1.0
        self.r_throttle[act] = sol.throttle
        self._set_lat_local()
        self.r_node_load, self.r_link_load = sol.node_load, sol.link_load
        self.r_node_util, self.r_link_util, self.r_link_traffic = sol.node_util, sol.link_util, sol.link_traffic
        self.r_chiplet_util = sol.chiplet_util
        self.r_lines_demand = sol.lines_demand
        if lock is not None:
            k = len(sol.lock_wait)
            self._lock_wait[:k], self.r_lock_util[:k] = sol.lock_wait, sol.lock_util
            self._lock_wait[k:], self.r_lock_util[k:] = 0.0, 0.0

    def _refresher(self):
        schedutil = self.machine.spec.governor == "schedutil" and self.f_min < self.f_max
        while True:
            yield self.env.timeout(REFRESH_NS)
            if schedutil:
                self._schedutil()
            if self._growing:
                # Memory that grows as threads work is placed at least this often, so the
                # access rows follow it even for threads that run without events.
                self._integrate(self._growing)
                self._growing = {t for t in self._growing if self._plans(t)}
            if self._dirty:
                self._solve()

    def _schedutil(self) -> None:
        """schedutil: f = 1.25 x f_max x util, util a PELT-like average (32 ms half-life)."""
        self._integrate(range(len(self.t_cpu)))
        busy_now = np.array(self.c_cpu_busy)
        busy = (busy_now - self._busy_seen) / REFRESH_NS
        self._busy_seen = busy_now
        decay = 0.5 ** (REFRESH_NS / 32e6)
        self._util = self._util * decay + (1 - decay) * np.clip(busy, 0.0, 1.0)
        freq = np.clip(1.25 * self.f_max * self._util, self.f_min, self.f_max)
        if np.any(np.abs(freq - self.f_cpu) > 1e-6):
            self.f_cpu = freq
            self._dirty = True


def _rows(params: tuple, rows: NDArray[np.bool_]) -> tuple:
    """The rows ``rows`` of :meth:`Rates._phase_params`' arrays (None stays None; the lock is a pair)."""
    def take(a):
        return None if a is None else a[rows]
    *arrays, lock = params
    return (*(take(a) for a in arrays), None if lock is None else (lock[0][rows], lock[1][rows]))


def _gather(values: list, tids: NDArray[np.int64]) -> NDArray:
    """``values[tids]`` as a new array: element by element for a few threads, else through one conversion."""
    if 0 < 4 * len(tids) < len(values):
        return np.array([values[t] for t in tids.tolist()])
    return np.asarray(values)[tids]
