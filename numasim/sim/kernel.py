"""The simulation engine: threads, CPUs and memory on a simpy.Environment.

The engine knows no policy by name (house rule 1). It asks the policy what to
do when a pod arrives, where a new, woken or displaced thread goes, what to
do when a CPU falls idle and, at the times the policy asks for, what to
change; it carries the decisions out, checks them (affinity, CPU ids, node
capacity) and charges for them (cache refill after a move, page-copy
bandwidth).

Between events every thread progresses at a constant rate. Threads queued on
one CPU share it equally (processor sharing, the fluid limit of CFS's fair
time slices); the slice length sets how much of each slice a context switch
takes. A thread runs in bursts of CPU time and sleeps between them if its
workload blocks. Progress is integrated per thread, lazily: an event touches
only the threads whose share of a CPU it changes. The loaded-latency fixed
point (:func:`numasim.sim.perf.solve_rates`) is solved again when memory or
thread placement changes: at once for arrivals, page copies and the end of a
start-up touch, and at most every ``refresh_ns`` for the small changes that
sleeps, wake-ups and moves make to the load on the memory system.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Callable

import numpy as np
import simpy
from numpy.typing import NDArray

from ..errors import PolicyError
from ..model.machine import Machine
from ..policies.api import (
    PAGE,
    Charge,
    Decision,
    MemPolicy,
    MigratePages,
    Move,
    MoveChunks,
    Policy,
    SetAffinity,
    SetMemPolicy,
)
from .memory import AllocationFailure, Memory
from .perf import LINE, RateInputs, refill_ns, solve_rates
from .state import DEAD, NEW, TOUCH, WORK
from .trace import PodInstance, Trace
from .view import SimView

__all__ = ["Simulation"]
MIGRATION_STEP_NS = 100_000_000  # page copies are applied in 100 ms steps
TOUCH_MLP = 16.0  # first-touch writes stream like STREAM's stores (the stream preset's mlp)
CFS_PERIOD_NS = 100_000_000  # cpu.cfs_period_us default (Documentation/scheduler/sched-bwc.rst)
REFRESH_NS = 25_000_000  # the latency fixed point follows small load changes within 25 ms


class Simulation:
    """One run of one policy on one machine with one set of pods.

    Parameters
    ----------
    machine
        The machine.
    pods
        Pod instances (with specs and resolved profiles).
    policy
        The policy instance.
    duration_ns, warmup_ns
        Simulated time, and the start of the measurement window.
    sample_ns
        Interval of the recorded time series.
    rng
        The engine's random stream (burst and sleep lengths, wakers).
    """

    def __init__(
        self,
        machine: Machine,
        pods: list[PodInstance],
        policy: Policy,
        duration_ns: int,
        warmup_ns: int,
        sample_ns: int,
        rng: np.random.Generator,
        progress: Callable[[float], None] | None = None,
    ):
        self.machine = machine
        self.pods = pods
        self.policy = policy
        self.duration_ns = int(duration_ns)
        self.warmup_ns = int(warmup_ns)
        self.sample_ns = int(sample_ns)
        self.rng = rng
        self.progress = progress
        self.env = simpy.Environment()
        self.view = SimView(self)
        self.memory = Memory(machine)

        nt = sum(p.spec.threads for p in pods)
        n = machine.n_nodes
        tids = 0
        for p in pods:
            p.tids = tuple(range(tids, tids + p.spec.threads))
            tids += p.spec.threads
        self.t_pod = np.array([p.index for p in pods for _ in p.tids], dtype=np.int64)
        self.t_cpu = np.full(nt, -1, dtype=np.int64)
        self.t_phase = np.full(nt, NEW, dtype=np.int64)
        self.t_active = np.zeros(nt, dtype=bool)
        self.t_affinity: list[frozenset[int] | None] = [None] * nt
        self.t_private = np.full(nt, -1, dtype=np.int64)
        self.t_touch_plan: list[list[list[int]]] = [[] for _ in range(nt)]  # [[rid, bytes left], ...]
        self.t_debt = np.zeros(nt)
        self.t_req_left = np.full(nt, np.inf)  # operations left in the current request
        self.t_req_arrival = np.zeros(nt, dtype=np.int64)  # when the current request arrived
        self.t_waiting = np.zeros(nt, dtype=bool)  # blocked with no request to serve
        self.t_last = np.zeros(nt, dtype=np.int64)
        self.t_gen = np.zeros(nt, dtype=np.int64)
        self.t_paused = np.zeros(nt, dtype=bool)
        prof = [pods[int(pi)].profile for pi in self.t_pod]
        self.p_cycles = np.array([pr.cycles_per_op for pr in prof])
        self.p_misses = np.array([pr.llc_misses_per_op for pr in prof])
        self.p_mlp = np.array([pr.mlp for pr in prof])
        self.p_stall = 1.0 / self.p_mlp
        self.p_shared = np.array([pr.shared_fraction for pr in prof])
        self.p_touch = np.array([pr.touch_gbps for pr in prof])  # bytes per full-core ns
        self.p_footprint = np.array([pr.cache_footprint_mib * 2**20 for pr in prof])
        reqs = [pr.requests for pr in prof]
        self.p_req_mode = np.array([0 if r is None else (1 if r.mode == "closed" else 2) for r in reqs])
        self.p_req_ops = np.array([np.inf if r is None else r.ops for r in reqs])
        self.p_think = np.array([0.0 if r is None else r.think_ms * 1e6 for r in reqs])
        self.queue: list[deque[int]] = [deque() for _ in pods]  # open mode: arrival times per pod
        self._injecting: set[int] = set()
        self.lat_time: list[int] = []  # request completions: time, pod, response time (ns)
        self.lat_pod: list[int] = []
        self.lat_value: list[int] = []
        self.p_waker_pod = np.array([pr.waker == "pod" for pr in prof])
        self.nr = np.zeros(machine.n_cpus, dtype=np.int64)
        # CPU frequency (GHz) per CPU, set by the machine's cpufreq governor.
        spec = machine.spec
        self.f_max = spec.frequency_ghz
        self.f_min = spec.min_frequency_ghz or spec.frequency_ghz
        self.f_cpu = np.full(machine.n_cpus, self.f_min if spec.governor == "powersave" else self.f_max)
        self._util = np.zeros(machine.n_cpus)  # schedutil's decaying utilisation per CPU
        self._busy_seen = np.zeros(machine.n_cpus)
        self.rq: list[list[int]] = [[] for _ in range(machine.n_cpus)]
        self._core_of = [machine.core_cpus[int(machine.cpu_core[c])] for c in range(machine.n_cpus)]
        self._slices: dict[int, float] = {}
        self.t_shared_rid = np.zeros(nt, dtype=np.int64)

        # Cumulative counters.
        self.c_ops = np.zeros(nt)
        self.c_cpu = np.zeros(nt)
        self.c_wait = np.zeros(nt)
        self.c_miss = np.zeros(nt)
        self.c_miss_local = np.zeros(nt)
        self.c_miss_node = np.zeros((nt, n))
        self.c_moves = np.zeros(nt, dtype=np.int64)
        self.c_xmoves = np.zeros(nt, dtype=np.int64)
        self.c_wakeups = np.zeros(nt, dtype=np.int64)
        self.c_faults = np.zeros(nt, dtype=np.int64)
        self.c_numa_moves = np.zeros(nt, dtype=np.int64)
        self.c_kernel_ns = np.zeros(nt)
        self.c_cpu_busy = np.zeros(machine.n_cpus)
        self.c_pages_moved = np.zeros(len(pods))
        # CFS bandwidth control, per pod.
        npods = len(pods)
        self.q_quota = np.full(npods, np.inf)  # CPU ns allowed per period
        self.q_base = np.zeros(npods)  # the pod's CPU time at the start of the period
        self.q_throttled = np.zeros(npods, dtype=bool)
        self.q_gen = np.zeros(npods, dtype=np.int64)
        self.q_since = np.zeros(npods, dtype=np.int64)
        self.t_held = np.zeros(nt, dtype=bool)  # runnable, but held by a throttled pod
        self.c_throttled = np.zeros(npods)  # thread-ns of runnable time held by throttling
        self.quota_log: list[tuple[int, int, float]] = []  # (period start, pod, CPU ns used)

        # Current rates.
        self.r_share = np.zeros(nt)  # share of its CPU's time
        self.r_cap = np.zeros(nt)  # full-core ns of work per wall ns
        self.r_tau = np.full(nt, np.inf)  # full-core ns per operation
        self.r_access = np.zeros((nt, n))
        self.r_local = np.ones(nt)
        self.r_latency = np.zeros(nt)
        self._lmat = machine.latency.copy()
        self.r_node_load = np.zeros(n)  # bytes/ns on each memory node at the last solve
        self.r_link_load = np.zeros((n, n))
        self._x = np.ones(n)
        self._y = np.ones((n, n))
        self._dirty = False
        self._last_solve = -REFRESH_NS

        self._flows: dict[int, dict] = {}
        self._heap: list[tuple[int, int, int]] = []  # (time, tid, generation)
        self._timer_at: int | None = None
        self._tick_wakeup = self.env.event()
        self.placements: list[tuple[int, int, int]] = []
        self.affinity_log: list[tuple[int, int, frozenset[int] | None]] = []
        self.migrations: list[tuple[int, int, int, int]] = []
        self.page_moves: list[tuple[int, int, int, int, int]] = []
        self.events: list[tuple[int, str, str]] = []
        self.n_solves = 0
        self._sample_times: list[int] = []
        self._samples: dict[str, list[NDArray]] = {}

    @property
    def now(self) -> int:
        return self.env.now  # an int: every timeout is a whole number of ns

    # ------------------------------------------------------------------ run
    def run(self) -> Trace:
        """Run to ``duration_ns`` and return the trace."""
        self.env.process(self._arrivals())
        self.env.process(self._ticker())
        self.env.process(self._sampler())
        self.env.process(self._refresher())
        n_events = 0
        env = self.env
        while env.peek() <= self.duration_ns:
            env.step()
            n_events += 1
        samples = {k: np.stack(v) for k, v in self._samples.items()}
        return Trace(
            machine=self.machine,
            policy=self.policy.name,
            duration_ns=self.duration_ns,
            warmup_ns=self.warmup_ns,
            pods=self.pods,
            thread_pod=self.t_pod.copy(),
            sample_times=np.array(self._sample_times, dtype=np.int64),
            samples=samples,
            placements=self.placements,
            affinity_log=self.affinity_log,
            migrations=self.migrations,
            page_moves=self.page_moves,
            quota_log=self.quota_log,
            latencies=np.array([self.lat_time, self.lat_pod, self.lat_value], dtype=np.int64).T.reshape(-1, 3),
            events=self.events,
            n_events=n_events,
            n_solves=self.n_solves,
        )

    def _arrivals(self):
        for pod in sorted(self.pods, key=lambda p: (p.arrival_ns, p.index)):
            if pod.arrival_ns > self.env.now:
                yield self.env.timeout(pod.arrival_ns - self.env.now)
            self._arrive(pod)
            self._solve()
            if not self._tick_wakeup.triggered:
                self._tick_wakeup.succeed()

    def _ticker(self):
        while True:
            nxt = self.policy.next_tick(self.now)
            if nxt is None:
                self._tick_wakeup = self.env.event()
                yield self._tick_wakeup
                continue
            yield self.env.timeout(max(int(nxt) - self.now, 1))
            for d in self.policy.tick(self.view):
                self._apply(d)

    def _sampler(self):
        times = sorted(set(range(0, self.duration_ns + 1, self.sample_ns)) | {self.warmup_ns, self.duration_ns})
        for t in times:
            if t > self.env.now:
                yield self.env.timeout(t - self.env.now)
            self._snapshot()
            if self.progress is not None:
                self.progress(t / self.duration_ns)

    def _refresher(self):
        schedutil = self.machine.spec.governor == "schedutil" and self.f_min < self.f_max
        while True:
            yield self.env.timeout(REFRESH_NS)
            if schedutil:
                self._schedutil()
            if self._dirty:
                self._solve()

    def _schedutil(self) -> None:
        """schedutil: f = 1.25 x f_max x util, util a PELT-like average (32 ms half-life)."""
        self._integrate(np.arange(len(self.t_cpu)))
        busy = (self.c_cpu_busy - self._busy_seen) / REFRESH_NS
        self._busy_seen = self.c_cpu_busy.copy()
        decay = 0.5 ** (REFRESH_NS / 32e6)
        self._util = self._util * decay + (1 - decay) * np.clip(busy, 0.0, 1.0)
        freq = np.clip(1.25 * self.f_max * self._util, self.f_min, self.f_max)
        if np.any(np.abs(freq - self.f_cpu) > 1e-6):
            self.f_cpu = freq
            self._dirty = True

    # ------------------------------------------------------------ arrivals
    def _arrive(self, pod: PodInstance) -> None:
        adm = self.policy.admit(pod, self.view)
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
        self._check_mempolicy(adm.mempolicy, adm)
        prof = pod.profile
        shared = int(round(pod.memory * prof.shared_fraction))
        private = (pod.memory - shared) // pod.threads
        pod.shared_rid = self.memory.add_region(pod.index, -1, shared)
        for k, tid in enumerate(pod.tids):
            self.t_shared_rid[tid] = pod.shared_rid
            self.t_private[tid] = self.memory.add_region(pod.index, tid, private)
            plan = [[int(self.t_private[tid]), private]]
            if prof.touch == "threads":
                part = shared // pod.threads + (1 if k < shared % pod.threads else 0)
                plan.append([pod.shared_rid, part])
            elif k == 0:
                plan.append([pod.shared_rid, shared])
            self.t_touch_plan[tid] = [p for p in plan if p[1] > 0]
            if adm.affinity is not None:
                aff = adm.affinity[k]
                self._check_cpus(aff, adm)
                self.t_affinity[tid] = aff
                self.affinity_log.append((self.now, tid, aff))
            self.p_cycles[tid] *= 1.0 + adm.overhead.cpu
            self.p_stall[tid] *= 1.0 + adm.overhead.memory
        # With a single toucher, the other threads start once the memory is touched
        # (as a JVM with AlwaysPreTouch starts its workers after pre-touching the heap).
        for tid in pod.tids if prof.touch == "threads" else pod.tids[:1]:
            self._start_thread(tid)
        if prof.pause_interval_ms is not None:
            self.env.process(self._pauses(pod))

        if adm.cpu_quota is not None:
            if adm.cpu_quota <= 0:
                raise PolicyError(self.policy.name, self.now, adm, "cpu_quota must be > 0")
            if adm.cpu_quota < pod.threads:  # otherwise the limit can never bind
                self.q_quota[pod.index] = adm.cpu_quota * CFS_PERIOD_NS
                self.env.process(self._bandwidth(pod))

    def _start_thread(self, tid: int) -> None:
        cpu = int(self.policy.place(tid, self.view))
        self._check_place(tid, cpu, "place")
        self.t_phase[tid] = TOUCH if self.t_touch_plan[tid] else WORK
        self.t_last[tid] = self.now
        self.placements.append((self.now, tid, cpu))
        if self.q_throttled[self.t_pod[tid]]:
            self.t_cpu[tid] = cpu
            self.t_held[tid] = True
            return
        self._integrate(self._on_cpus([cpu]))
        self._enqueue(tid, cpu)
        self._update_cpus([cpu], integrated=True)
        self._dirty = True
        if self.t_phase[tid] == WORK:
            self._begin_work(tid)

    # ------------------------------------------------------------ requests
    def _begin_work(self, tid: int) -> None:
        """A thread starts serving requests: the first one (closed) or the queue's (open)."""
        mode = self.p_req_mode[tid]
        pod = self.pods[int(self.t_pod[tid])]
        if mode == 2 and pod.index not in self._injecting and all(self.t_phase[t] == WORK for t in pod.tids):
            # The injector starts once the service is up: every worker has touched its memory.
            self._injecting.add(pod.index)
            self.env.process(self._open_arrivals(pod))
        if mode == 1:
            self.t_req_arrival[tid] = self.now
            self.t_req_left[tid] = self.p_req_ops[tid]
        elif mode == 2 and not self._take_request(tid):
            self.t_waiting[tid] = True
            if self.t_active[tid]:
                self._block(tid)
            return
        self._reschedule(np.array([tid]))

    def _take_request(self, tid: int) -> bool:
        q = self.queue[int(self.t_pod[tid])]
        if not q:
            return False
        self.t_req_arrival[tid] = q.popleft()
        self.t_req_left[tid] = self.p_req_ops[tid]
        return True

    def _complete(self, tid: int) -> None:
        """The thread finished its request: record the response time, then think or take the next."""
        p = int(self.t_pod[tid])
        self.lat_time.append(self.now)
        self.lat_pod.append(p)
        self.lat_value.append(self.now - int(self.t_req_arrival[tid]))
        self.t_req_left[tid] = np.inf
        if self.p_req_mode[tid] == 2 and self._take_request(tid):
            self._reschedule(np.array([tid]))
            return
        self.t_waiting[tid] = True
        self._block(tid)
        if self.p_req_mode[tid] == 1:
            think = max(int(self.rng.exponential(self.p_think[tid])), 1) if self.p_think[tid] > 0 else 1
            ev = self.env.timeout(think)
            ev.callbacks.append(lambda _e, t=tid: self._wake(t))

    def _open_arrivals(self, pod: PodInstance):
        """Poisson arrivals of requests at an open-mode pod; an idle worker is woken for each."""
        rate = pod.profile.requests.rate_per_s / 1e9  # per ns
        q = self.queue[pod.index]
        while pod.status == "running":
            yield self.env.timeout(max(int(self.rng.exponential(1.0 / rate)), 1))
            q.append(self.now)
            idle = [t for t in pod.tids if self.t_waiting[t] and self.t_phase[t] == WORK
                    and not self.t_paused[t] and not self.t_held[t] and not self.t_active[t]]
            if idle:
                self._wake(idle[int(self.rng.integers(len(idle)))])

    # ----------------------------------------------------------- checks
    def _check_cpus(self, cpus: frozenset[int] | None, decision: object) -> None:
        if cpus is None:
            return
        if not cpus or min(cpus) < 0 or max(cpus) >= self.machine.n_cpus:
            raise PolicyError(self.policy.name, self.now, decision,
                              f"CPU set must be non-empty and within 0-{self.machine.n_cpus - 1}")

    def _check_mempolicy(self, mp: MemPolicy, decision: object) -> None:
        if any(n < 0 or n >= self.machine.n_nodes for n in mp.nodes):
            raise PolicyError(self.policy.name, self.now, decision,
                              f"memory policy names a node outside 0-{self.machine.n_nodes - 1}")
        if mp.kind in ("bind", "interleave") and not mp.nodes:
            raise PolicyError(self.policy.name, self.now, decision, f"memory policy {mp.kind} needs nodes")

    def _check_place(self, tid: int, cpu: int, decision: object) -> None:
        if not 0 <= cpu < self.machine.n_cpus:
            raise PolicyError(self.policy.name, self.now, decision, f"CPU {cpu} does not exist")
        aff = self.t_affinity[tid]
        if aff is not None and cpu not in aff:
            raise PolicyError(self.policy.name, self.now, decision,
                              f"thread {tid} may not run on CPU {cpu} (affinity {sorted(aff)})")

    # ----------------------------------------------------------- decisions
    def _apply(self, d: Decision) -> None:
        if isinstance(d, Move):
            if d.numa and self.t_active[d.tid] and self.t_cpu[d.tid] != d.cpu:
                self.c_numa_moves[d.tid] += 1
            self._move(d.tid, int(d.cpu), d)
        elif isinstance(d, MoveChunks):
            self._move_chunks(d)
        elif isinstance(d, Charge):
            if not 0 <= d.tid < len(self.t_cpu) or d.ns < 0:
                raise PolicyError(self.policy.name, self.now, d, "bad thread or negative time")
            self._integrate(np.array([d.tid]))
            self.t_debt[d.tid] += d.ns
            self.c_faults[d.tid] += d.faults
            self.c_kernel_ns[d.tid] += d.ns
        elif isinstance(d, SetAffinity):
            self._check_cpus(d.cpus, d)
            for tid in d.tids:
                self.t_affinity[tid] = d.cpus
                self.affinity_log.append((self.now, tid, d.cpus))
                if self.t_active[tid] and self.t_cpu[tid] not in d.cpus:
                    self._move(tid, int(self.policy.place(tid, self.view)), d)
        elif isinstance(d, MigratePages):
            if not 0 <= d.dst < self.machine.n_nodes or d.rate_gbps <= 0 or d.nbytes < 0:
                raise PolicyError(self.policy.name, self.now, d, "bad node, rate or size")
            self._start_flow(d)
        elif isinstance(d, SetMemPolicy):
            self._check_mempolicy(d.mempolicy, d)
            self.pods[d.pod].mempolicy = d.mempolicy
        else:
            raise PolicyError(self.policy.name, self.now, d, "unknown decision type")

    def _move(self, tid: int, cpu: int, decision: object) -> None:
        if not 0 <= tid < len(self.t_cpu) or not self.t_active[tid]:
            raise PolicyError(self.policy.name, self.now, decision, f"thread {tid} is not on a runqueue")
        self._check_place(tid, cpu, decision)
        old = int(self.t_cpu[tid])
        if old == cpu:
            return
        self._integrate(self._on_cpus([old, cpu]))
        self._dequeue(tid)
        self._charge_move(tid, old, cpu)
        self._enqueue(tid, cpu)
        self._update_cpus([old, cpu], integrated=True)

    def _charge_move(self, tid: int, old: int, cpu: int) -> None:
        """Record a move and charge the cache refill it costs."""
        m = self.machine
        src, dst = int(m.cpu_node[old]), int(m.cpu_node[cpu])
        # Within one LLC only the private caches are lost; across LLCs, the whole footprint.
        footprint = self.p_footprint[tid]
        if m.cpu_socket[old] == m.cpu_socket[cpu] and m.spec.nodes_per_socket == 1:
            footprint = min(footprint, m.spec.l2_kib * 1024)
        self.t_debt[tid] += refill_ns(footprint, float(self._lmat[dst, dst]), self.p_mlp[tid])
        self.c_moves[tid] += 1
        self.migrations.append((self.now, tid, old, cpu))
        self.placements.append((self.now, tid, cpu))
        if src != dst:
            self.c_xmoves[tid] += 1
            self.t_cpu[tid] = cpu
            self._set_tau(np.array([tid]))
            self._dirty = True

    def _enqueue(self, tid: int, cpu: int) -> None:
        self.t_cpu[tid] = cpu
        self.t_active[tid] = True
        self.nr[cpu] += 1
        self.rq[cpu].append(tid)

    def _dequeue(self, tid: int) -> None:
        cpu = int(self.t_cpu[tid])
        self.t_active[tid] = False
        self.nr[cpu] -= 1
        self.rq[cpu].remove(tid)
        self.r_share[tid] = 0.0
        self.r_cap[tid] = 0.0

    def _event(self, kind: str, text: str) -> None:
        self.events.append((self.now, kind, text))

    # ------------------------------------------------------ sleep and wake
    def _on_thread_event(self, tid: int, gen: int) -> None:
        if gen != self.t_gen[tid] or not self.t_active[tid]:
            return
        self._integrate(np.array([tid]))
        if self.t_phase[tid] == TOUCH:
            if sum(p[1] for p in self.t_touch_plan[tid]) < PAGE:
                self._touch(tid, float(PAGE))
            if not self.t_touch_plan[tid] and self.t_phase[tid] == TOUCH:
                self._finish_touch(tid)
            else:
                self._reschedule(np.array([tid]))
            return
        if self.t_req_left[tid] > 1e-6:
            self._reschedule(np.array([tid]))
            return
        self._complete(tid)

    def _block(self, tid: int) -> None:
        """Take a running thread off its runqueue; an idle CPU then asks the policy for work."""
        cpu = int(self.t_cpu[tid])
        self._integrate(self._on_cpus([cpu]))
        self._dequeue(tid)
        self.t_gen[tid] += 1
        self._update_cpus([cpu], integrated=True)
        if self.nr[cpu] == 0:
            for d in self.policy.idle(cpu, self.view):
                self._apply(d)

    def _pauses(self, pod: PodInstance):
        """Stop-the-world pauses (a JVM's safepoints): every thread of the pod blocks at once."""
        prof = pod.profile
        while pod.status == "running":
            yield self.env.timeout(max(int(self.rng.exponential(prof.pause_interval_ms * 1e6)), 1))
            if pod.status != "running":
                return
            held = [t for t in pod.tids if self.t_phase[t] == WORK]
            for tid in held:
                self.t_paused[tid] = True
                if self.t_active[tid]:
                    self._block(tid)
            yield self.env.timeout(max(int(self.rng.exponential(prof.pause_ms * 1e6)), 1))
            for tid in held:
                self.t_paused[tid] = False
                self._wake(tid)

    def _wake(self, tid: int) -> None:
        if self.t_phase[tid] != WORK or self.t_active[tid] or self.t_paused[tid] or self.t_held[tid]:
            return
        waker = None
        if self.p_waker_pod[tid]:
            pod = self.pods[int(self.t_pod[tid])]
            others = [t for t in pod.tids if t != tid and self.t_active[t]]
            if others:
                waker = int(self.t_cpu[others[int(self.rng.integers(len(others)))]])
        if self.t_waiting[tid]:
            # A new request: after a think time (closed), or the next in the queue (open).
            if self.p_req_mode[tid] == 2:
                if not self._take_request(tid):
                    return
            else:
                self.t_req_arrival[tid] = self.now
                self.t_req_left[tid] = self.p_req_ops[tid]
            self.t_waiting[tid] = False
        cpu = int(self.policy.wake(tid, waker, self.view))
        self._check_place(tid, cpu, "wake")
        prev = int(self.t_cpu[tid])
        self.c_wakeups[tid] += 1
        self._integrate(np.concatenate([[tid], self._on_cpus([cpu])]))
        if cpu != prev:
            self._charge_move(tid, prev, cpu)
        if self.q_throttled[self.t_pod[tid]]:
            self.t_cpu[tid] = cpu
            self.t_held[tid] = True
            return
        self._enqueue(tid, cpu)
        self._update_cpus([cpu], integrated=True)

    # ------------------------------------------------------ CPU bandwidth
    def _pod_tids(self, p: int) -> NDArray[np.int64]:
        return np.array(self.pods[p].tids, dtype=np.int64)

    def _bandwidth(self, pod: PodInstance):
        """CFS bandwidth control: refill the pod's quota every period, release throttled threads."""
        p = pod.index
        tids = self._pod_tids(p)
        while pod.status == "running":
            start = self.now
            self._integrate(tids)
            self.q_base[p] = self.c_cpu[tids].sum()
            self._quota_schedule(p)
            yield self.env.timeout(CFS_PERIOD_NS)
            self._integrate(tids)
            self.quota_log.append((start, p, float(self.c_cpu[tids].sum() - self.q_base[p])))
            if self.q_throttled[p]:
                self._unthrottle(p)

    def _quota_schedule(self, p: int) -> None:
        """Schedule the moment the pod's threads use up this period's quota, at their current shares."""
        if self.q_throttled[p] or not np.isfinite(self.q_quota[p]):
            return
        self.q_gen[p] += 1
        tids = self._pod_tids(p)
        self._integrate(tids)
        rate = float(self.r_share[tids].sum())
        if rate <= 0:
            return
        left = self.q_quota[p] - (self.c_cpu[tids].sum() - self.q_base[p])
        gen = int(self.q_gen[p])
        ev = self.env.timeout(max(int(np.ceil(left / rate)), 1))
        ev.callbacks.append(lambda _e, q=p, g=gen: self._quota_check(q, g))

    def _quota_check(self, p: int, gen: int) -> None:
        if gen != self.q_gen[p] or self.q_throttled[p] or self.pods[p].status != "running":
            return
        tids = self._pod_tids(p)
        self._integrate(tids)
        if self.c_cpu[tids].sum() - self.q_base[p] < self.q_quota[p] - 1.0:
            self._quota_schedule(p)
            return
        # Quota exhausted: the pod's runnable threads wait for the next period.
        self.q_throttled[p] = True
        self.q_since[p] = self.now
        cpus = []
        for tid in tids:
            if self.t_active[tid]:
                cpus.append(int(self.t_cpu[tid]))
                self._integrate(self._on_cpus([int(self.t_cpu[tid])]))
                self._dequeue(int(tid))
                self.t_gen[tid] += 1
                self.t_held[tid] = True
        self._update_cpus(cpus, integrated=True)
        for cpu in set(cpus):
            if self.nr[cpu] == 0:
                for d in self.policy.idle(cpu, self.view):
                    self._apply(d)

    def _unthrottle(self, p: int) -> None:
        self.q_throttled[p] = False
        held = [int(t) for t in self._pod_tids(p) if self.t_held[t]]
        self.c_throttled[p] += (self.now - self.q_since[p]) * len(held)
        cpus = []
        for tid in held:
            self.t_held[tid] = False
            if self.t_paused[tid] or self.t_phase[tid] not in (TOUCH, WORK):
                continue
            cpu = int(self.t_cpu[tid])
            self._integrate(np.concatenate([[tid], self._on_cpus([cpu])]))
            self.t_last[tid] = self.now
            self._enqueue(tid, cpu)
            cpus.append(cpu)
        self._update_cpus(cpus, integrated=True)

    def _move_chunks(self, d: MoveChunks) -> None:
        if not 0 <= d.region < len(self.memory.regions) or not 0 <= d.dst < self.machine.n_nodes or d.copy_gbps <= 0:
            raise PolicyError(self.policy.name, self.now, d, "bad region, node or copy rate")
        reg = self.memory.regions[d.region]
        moved = 0
        for i in d.chunks:
            src = int(reg.node[i])
            got = self.memory.move_chunk(d.region, int(i), d.dst)
            if got:
                moved += got
                self.page_moves.append((self.now, reg.pod, src, d.dst, got))
        if moved:
            self.c_pages_moved[reg.pod] += moved
            self._integrate(np.array([d.tid]))
            cost = moved / d.copy_gbps
            self.t_debt[d.tid] += cost
            self.c_kernel_ns[d.tid] += cost
            self._dirty = True

    # ------------------------------------------------------- page copying
    def _start_flow(self, d: MigratePages) -> None:
        flow = {"d": d, "left": int(d.nbytes)}
        self._flows[d.pod] = flow
        self.env.process(self._flow(flow))

    def _flow(self, flow: dict):
        d: MigratePages = flow["d"]
        self._solve()
        while flow["left"] > 0 and self._flows.get(d.pod) is flow:
            yield self.env.timeout(MIGRATION_STEP_NS)
            if self._flows.get(d.pod) is not flow:
                return
            budget = int(min(flow["left"], d.rate_gbps * MIGRATION_STEP_NS))
            moved = self._copy_pages(d.pod, d.dst, budget)
            flow["left"] = 0 if moved == 0 else flow["left"] - moved
            if flow["left"] <= 0:
                del self._flows[d.pod]
            self._solve()

    def _copy_pages(self, pod_index: int, dst: int, budget: int) -> int:
        pod = self.pods[pod_index]
        rids = [pod.shared_rid] + [int(self.t_private[t]) for t in pod.tids]
        per = np.array([self.memory.placed(r) for r in rids])  # regions x nodes
        per[:, dst] = 0
        total = per.sum()
        if total <= 0 or budget <= 0:
            return 0
        moved = 0
        for r, row in zip(rids, per):
            for src in np.flatnonzero(row):
                got = self.memory.migrate(r, int(src), dst, int(budget * row[src] / total))
                if got:
                    moved += got
                    self.page_moves.append((self.now, pod_index, int(src), dst, got))
        self.c_pages_moved[pod_index] += moved
        return moved

    # --------------------------------------------------------- integration
    def _on_cpus(self, cpus: list[int]) -> NDArray[np.int64]:
        """Threads queued on ``cpus`` or, with SMT, on their siblings."""
        if self.machine.smt:
            cpus = sorted({s for c in cpus for s in self._core_of[c]})
        else:
            cpus = sorted(set(cpus))
        return np.array([t for c in cpus for t in self.rq[c]], dtype=np.int64)

    def _integrate(self, tids: NDArray[np.int64]) -> None:
        """Bring the counters of ``tids`` up to now at their current rates."""
        if len(tids) <= 8:
            for tid in tids:
                self._integrate_one(int(tid))
            return
        tids = np.unique(tids)  # callers may name a thread twice; np.add.at would count it twice
        now = self.now
        dt = (now - self.t_last[tids]).astype(float)
        self.t_last[tids] = now
        live = (dt > 0) & (self.r_share[tids] > 0)
        if not live.any():
            return
        tids, dt = tids[live], dt[live]
        share = self.r_share[tids]
        cpu_ns = share * dt
        self.c_cpu[tids] += cpu_ns
        self.c_wait[tids] += (1.0 - share) * dt
        np.add.at(self.c_cpu_busy, self.t_cpu[tids], cpu_ns)
        work = self.r_cap[tids] * dt
        pay = np.minimum(self.t_debt[tids], work)
        self.t_debt[tids] -= pay
        work -= pay
        phase = self.t_phase[tids]
        run = phase == WORK
        if run.any():
            rt = tids[run]
            ops = work[run] / self.r_tau[rt]
            self.c_ops[rt] += ops
            self.t_req_left[rt] -= ops
            miss = ops * self.p_misses[rt]
            self.c_miss[rt] += miss
            self.c_miss_local[rt] += miss * self.r_local[rt]
            self.c_miss_node[rt] += miss[:, None] * self.r_access[rt]
        touching = phase == TOUCH
        if touching.any():
            for tid, w in zip(tids[touching], work[touching]):
                if w > 0:
                    self._touch(int(tid), w * LINE / self.r_tau[tid])

    def _integrate_one(self, tid: int) -> None:
        """:meth:`_integrate` for one thread, in scalar arithmetic (most events touch 1-3 threads)."""
        now = self.now
        dt = now - int(self.t_last[tid])
        if dt <= 0:
            return
        self.t_last[tid] = now
        share = float(self.r_share[tid])
        if share == 0.0:
            return  # asleep, not started or dead: nothing accrues
        cpu_ns = share * dt
        self.c_cpu[tid] += cpu_ns
        self.c_wait[tid] += (1.0 - share) * dt
        self.c_cpu_busy[self.t_cpu[tid]] += cpu_ns
        work = float(self.r_cap[tid]) * dt
        debt = float(self.t_debt[tid])
        if debt > 0.0:
            pay = min(debt, work)
            self.t_debt[tid] = debt - pay
            work -= pay
        phase = self.t_phase[tid]
        if phase == WORK:
            ops = work / float(self.r_tau[tid])
            self.c_ops[tid] += ops
            self.t_req_left[tid] -= ops
            miss = ops * float(self.p_misses[tid])
            if miss > 0.0:
                self.c_miss[tid] += miss
                self.c_miss_local[tid] += miss * float(self.r_local[tid])
                self.c_miss_node[tid] += miss * self.r_access[tid]
        elif phase == TOUCH and work > 0.0:
            self._touch(tid, work * LINE / float(self.r_tau[tid]))

    def _touch(self, tid: int, nbytes: float) -> None:
        plan = self.t_touch_plan[tid]
        pod = self.pods[int(self.t_pod[tid])]
        node = int(self.machine.cpu_node[self.t_cpu[tid]])
        left = int(round(nbytes))
        if pod.status != "running":
            return
        while plan and left > 0:
            rid, want = plan[0]
            take = min(want, left)
            try:
                self.memory.allocate(rid, take, node, pod.mempolicy)
            except AllocationFailure as exc:
                # The kernel OOM-kills the pod. Killing it here, in the middle of
                # integrating one of its threads, would pull that thread from under its
                # caller: the kill is its own event, right after this one.
                pod.status = "failing"
                ev = self.env.timeout(0)
                ev.callbacks.append(lambda _e, p=pod, r=f"out of memory: {exc}": self._kill(p, r))
                return
            plan[0][1] -= take
            left -= take
            if plan[0][1] <= 0:
                plan.pop(0)
        self._dirty = True

    def _finish_touch(self, tid: int) -> None:
        self.t_phase[tid] = WORK
        pod = self.pods[int(self.t_pod[tid])]
        if pod.profile.touch == "main" and tid == pod.tids[0]:
            for other in pod.tids[1:]:
                self._start_thread(other)
        self._solve()
        self._begin_work(tid)

    def _kill(self, pod: PodInstance, reason: str) -> None:
        if pod.status == "failed":
            return
        pod.status = "failed"
        pod.reason = reason
        self._event("failed", f"{pod.name}: {reason}")
        cpus = [int(self.t_cpu[t]) for t in pod.tids if self.t_active[t]]
        self._integrate(np.concatenate([np.array(pod.tids), self._on_cpus(cpus)]))
        for tid in pod.tids:
            if self.t_active[tid]:
                self._dequeue(tid)
            self.t_phase[tid] = DEAD
            self.t_held[tid] = False
            self.t_gen[tid] += 1
            self.t_touch_plan[tid] = []
            self.placements.append((self.now, tid, -1))
        for rid, reg in enumerate(self.memory.regions):
            if reg.pod == pod.index:
                self.memory.release(rid)
        self._flows.pop(pod.index, None)
        self._update_cpus(cpus, integrated=True)
        self._dirty = True

    # ------------------------------------------------------------- rates
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
        if tids.size == 0:
            return
        spec = m.spec
        l2 = spec.l2_kib * 1024
        need_tau = []
        for tid in tids:
            tid = int(tid)
            c = int(self.t_cpu[tid])
            n = int(self.nr[c])
            share = 1.0 / n
            factor = 1.0
            if m.smt:
                k = sum(1 for sib in self._core_of[c] if self.nr[sib] > 0)
                if k > 1:
                    factor = spec.smt_yield / k
            eff = 1.0
            if n > 1:
                node = int(m.cpu_node[c])
                refill = min(float(self.p_footprint[tid]), l2) / LINE
                cost = spec.context_switch_ns + refill * float(self._lmat[node, node]) * float(self.p_stall[tid])
                sl = self._slice(n)
                eff = sl / (sl + cost) if sl > 0 else 1.0
            self.r_share[tid] = share
            self.r_cap[tid] = share * factor * eff
            if self.r_tau[tid] == np.inf:
                need_tau.append(tid)
        if need_tau:
            self._set_tau(np.array(need_tau))
        self._reschedule(tids)
        for p in {int(self.t_pod[t]) for t in tids}:
            if np.isfinite(self.q_quota[p]):
                self._quota_schedule(p)

    def _slice(self, n: int) -> float:
        if n not in self._slices:
            self._slices[n] = float(self.policy.slice_ns(n))
        return self._slices[n]

    def _reschedule(self, tids: NDArray[np.int64]) -> None:
        """Schedule each thread's next own event: end of its touch, or of its burst."""
        for tid in tids:
            tid = int(tid)
            self.t_gen[tid] += 1
            if not self.t_active[tid]:
                continue
            cap, share = self.r_cap[tid], self.r_share[tid]
            if self.t_phase[tid] == TOUCH:
                left = sum(p[1] for p in self.t_touch_plan[tid])
                eta = (self.t_debt[tid] + left * self.r_tau[tid] / LINE) / cap if cap > 0 else np.inf
            elif np.isfinite(self.t_req_left[tid]) and cap > 0:
                eta = (self.t_debt[tid] + max(self.t_req_left[tid], 0.0) * self.r_tau[tid]) / cap
            else:
                eta = np.inf
            if not np.isfinite(eta):
                continue
            heapq.heappush(self._heap, (self.now + max(int(np.ceil(eta)), 1), tid, int(self.t_gen[tid])))
        self._arm()

    def _arm(self) -> None:
        """Make sure a simpy timeout is pending for the earliest thread event.

        Thread events (the end of a burst or of a start-up touch) wait in a heap
        and are superseded whenever a thread's share changes; only the earliest
        valid one has a timeout in the environment, so superseded ones cost a
        heap entry, not a simulated event.
        """
        heap = self._heap
        while heap and heap[0][2] != self.t_gen[heap[0][1]]:
            heapq.heappop(heap)
        if not heap:
            return
        when = heap[0][0]
        if self._timer_at is not None and self._timer_at <= when:
            return
        self._timer_at = when
        ev = self.env.timeout(when - self.now)
        ev.callbacks.append(self._fire)

    def _fire(self, _ev: simpy.Event) -> None:
        now = self.now
        if self._timer_at is not None and self._timer_at <= now:
            self._timer_at = None
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, tid, gen = heapq.heappop(heap)
            self._on_thread_event(tid, gen)
        self._arm()

    def _access(self, tids: NDArray[np.int64]) -> NDArray[np.float64]:
        """Share of each thread's misses that each node serves, from where its pages are."""
        m = self.machine
        dist = self.memory.distributions()
        local = np.zeros((tids.size, m.n_nodes))
        local[np.arange(tids.size), m.cpu_node[self.t_cpu[tids]]] = 1.0
        shared = dist[self.t_shared_rid[tids]]
        private = dist[self.t_private[tids]]
        # Memory not touched yet is allocated where it is first used: count it as local.
        shared = np.where(shared.sum(axis=1, keepdims=True) > 0, shared, local)
        private = np.where(private.sum(axis=1, keepdims=True) > 0, private, local)
        sf = self.p_shared[tids][:, None]
        return sf * shared + (1.0 - sf) * private

    def _touch_target(self, tids: NDArray[np.int64]) -> NDArray[np.float64]:
        """Where the pages a touching thread allocates go (rows sum to 1), by memory policy."""
        m = self.machine
        out = np.zeros((tids.size, m.n_nodes))
        for i, tid in enumerate(tids):
            node = int(m.cpu_node[self.t_cpu[tid]])
            mp = self.pods[int(self.t_pod[tid])].mempolicy
            if mp.kind == "interleave":
                out[i, list(mp.nodes)] = 1.0 / len(mp.nodes)
            elif mp.kind == "preferred" and mp.nodes:
                out[i, mp.nodes[0]] = 1.0
            elif mp.kind == "bind":
                out[i, node if node in mp.nodes else min(mp.nodes, key=lambda n: m.distance[node, n])] = 1.0
            else:
                out[i, node] = 1.0
        return out

    def _phase_params(self, tids: NDArray[np.int64]):
        """Per-operation parameters of ``tids``: compute ns, misses, stall scale and access rows.

        A working thread's operation is its workload's; a thread touching its memory
        at start-up writes one cache line per operation, as a streaming store that
        overlaps ``TOUCH_MLP`` misses, so first touch also queues for bandwidth.
        """
        compute = self.p_cycles[tids] / self.f_cpu[np.maximum(self.t_cpu[tids], 0)]
        misses = self.p_misses[tids].copy()
        stall = self.p_stall[tids].copy()
        acc = self._access(tids)
        touching = self.t_phase[tids] == TOUCH
        if touching.any():
            tt = tids[touching]
            compute[touching] = LINE / self.p_touch[tt]
            misses[touching] = 1.0
            stall[touching] = 1.0 / TOUCH_MLP
            acc[touching] = self._touch_target(tt)
        return compute, misses, stall, acc

    def _set_tau(self, tids: NDArray[np.int64]) -> None:
        """Time per operation of ``tids`` at the current loaded latencies."""
        if tids.size == 0:
            return
        compute, misses, stall, acc = self._phase_params(tids)
        nodes = self.machine.cpu_node[self.t_cpu[tids]]
        lat = np.einsum("tn,tn->t", acc, self._lmat[nodes])
        self.r_access[tids] = acc
        self.r_local[tids] = acc[np.arange(tids.size), nodes]
        self.r_latency[tids] = lat
        self.r_tau[tids] = compute + misses * lat * stall

    def _solve(self) -> None:
        """Solve the loaded-latency fixed point for all threads and reset their times per op."""
        m = self.machine
        alive = np.flatnonzero((self.t_phase == TOUCH) | (self.t_phase == WORK))
        self._integrate(alive)
        self._dirty = False
        self._last_solve = self.now
        if alive.size == 0:
            return
        act = alive[self.t_active[alive]]
        compute, misses, stall, acc = self._phase_params(act)
        extra_node = np.zeros(m.n_nodes)
        extra_link = np.zeros((m.n_nodes, m.n_nodes))
        for flow in self._flows.values():
            self._flow_traffic(flow, extra_node, extra_link)
        inp = RateInputs(
            cpu_node=m.cpu_node[self.t_cpu[act]],
            capacity=self.r_cap[act],
            compute_ns=compute,
            misses=misses,
            stall_scale=stall,
            access=acc,
            extra_node=extra_node,
            extra_link=extra_link,
        )
        sol = solve_rates(inp, m.latency, m.node_bandwidth, m.link_bandwidth, m.curve, x0=self._x, y0=self._y)
        self.n_solves += 1
        self._x, self._y, self._lmat = sol.x, sol.y, sol.lmat
        self.r_node_load, self.r_link_load = sol.node_load, sol.link_load
        self._set_tau(alive)
        serving = alive[self.t_active[alive] & np.isfinite(self.t_req_left[alive])]
        if serving.size:
            self._reschedule(serving)  # times per operation changed: so do request completions

    def _flow_traffic(self, flow: dict, node: NDArray, link: NDArray) -> None:
        d: MigratePages = flow["d"]
        held = self.memory.pod_bytes(len(self.pods))[d.pod].astype(float)
        held[d.dst] = 0
        if held.sum() <= 0:
            return
        src_share = held / held.sum()
        node += d.rate_gbps * src_share
        node[d.dst] += d.rate_gbps
        link[d.dst] += d.rate_gbps * src_share

    # ----------------------------------------------------------- samples
    def _snapshot(self) -> None:
        self._integrate(np.arange(len(self.t_cpu)))
        self._sample_times.append(self.now)
        snap = {
            "ops": self.c_ops,
            "cpu": self.c_cpu,
            "wait": self.c_wait,
            "miss": self.c_miss,
            "miss_local": self.c_miss_local,
            "miss_node": self.c_miss_node,
            "moves": self.c_moves,
            "xmoves": self.c_xmoves,
            "wakeups": self.c_wakeups,
            "faults": self.c_faults,
            "numa_moves": self.c_numa_moves,
            "kernel": self.c_kernel_ns,
            "cpu_busy": self.c_cpu_busy,
            "pages_moved": self.c_pages_moved,
            "throttled": self.c_throttled,
            "pod_memory": self.memory.pod_bytes(len(self.pods)),
            "thread_cpu": self.t_cpu,
            "thread_active": self.t_active,
            "thread_local": self.r_local,
            "node_load": self.r_node_load,
            "link_load": self.r_link_load,
        }
        for k, v in snap.items():
            self._samples.setdefault(k, []).append(np.array(v, copy=True))
