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
import math
from collections import deque
from typing import Callable

import numpy as np
import simpy
from numpy.typing import NDArray

from ..model.machine import Machine
from ..policies.api import (
    PAGE,
    Policy,
)
from .memory import Memory
from .perf import LINE
from .state import NEW, TOUCH
from .trace import PodInstance, Trace
from .cpu import CpuRuntime
from .decisions import Decisions
from .drivers import Drivers
from .pages import PageRuntime
from .rates import REFRESH_NS, Rates
from .view import SimView

__all__ = ["Simulation"]


class Simulation(Drivers, Decisions, CpuRuntime, PageRuntime, Rates):
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
        self._miss_pending = np.zeros(nt)  # misses not yet spread over c_miss_node's nodes
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
        self._has_quota = False  # whether any pod's limit can bind
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

    def _event(self, kind: str, text: str) -> None:
        self.events.append((self.now, kind, text))

    def _on_thread_event(self, tid: int, gen: int) -> None:
        if gen != self.t_gen[tid] or not self.t_active[tid]:
            return
        self._integrate((tid,))
        if self.t_phase[tid] == TOUCH:
            if sum(p[1] for p in self.t_touch_plan[tid]) < PAGE:
                self._touch(tid, float(PAGE))
            if not self.t_touch_plan[tid] and self.t_phase[tid] == TOUCH:
                self._finish_touch(tid)
            else:
                self._reschedule((tid,))
            return
        if self.t_req_left[tid] > 1e-6:
            self._reschedule((tid,))
            return
        self._complete(tid)

    def _reschedule(self, tids) -> None:
        """Schedule each thread's next own event: end of its touch, or of its burst.

        The per-thread path reads numpy arrays once per value into Python floats:
        arithmetic on numpy scalars costs several times more (docs/performance.md).
        """
        now = self.env.now
        gen, active, phase = self.t_gen, self.t_active, self.t_phase
        heap = self._heap
        for tid in tids:
            tid = int(tid)
            g = int(gen[tid]) + 1
            gen[tid] = g
            if not active[tid]:
                continue
            cap = float(self.r_cap[tid])
            if cap <= 0.0:
                continue
            if phase[tid] == TOUCH:
                left = sum(p[1] for p in self.t_touch_plan[tid])
                eta = (float(self.t_debt[tid]) + left * float(self.r_tau[tid]) / LINE) / cap
            else:
                req = float(self.t_req_left[tid])
                if req == math.inf:
                    continue
                eta = (float(self.t_debt[tid]) + max(req, 0.0) * float(self.r_tau[tid])) / cap
            if eta == math.inf or eta != eta:
                continue
            heapq.heappush(heap, (now + max(math.ceil(eta), 1), tid, g))
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

    def _snapshot(self) -> None:
        everyone = np.arange(len(self.t_cpu))
        self._integrate(everyone)
        self._flush_miss_node(everyone)
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
