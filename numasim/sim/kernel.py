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

import copy
import traceback
from array import array
from pathlib import Path
import math
from typing import Callable

import numpy as np
from numpy.typing import NDArray

from ..errors import NumasimError, PolicyError
from ..model.machine import Machine
from ..policies.api import CHUNK, MAX_TICKS_PER_S, PAGE, Policy
from .memory import Memory
from .perf import LINE, lines_in_flight
from .state import NEW, TOUCH
from . import firsttouch, layout
from .store import Store
from .trace import PodInstance, ResponseTimes, Trace, number_threads
from .cpu import TOUCH_STEP, CpuRuntime
from .decisions import Decisions, _int
from .arrivals import interarrival
from .clock import Clock
from .drivers import Drivers
from .pages import PageRuntime
from .quota import Bandwidth
from .rates import Rates
from .sampling import Sampling
from .view import SimView

__all__ = ["Simulation"]


class Simulation(Drivers, Decisions, CpuRuntime, Bandwidth, PageRuntime, Rates, Sampling):
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
    sample_bytes
        The most its samples may take: a run whose samples would take more samples every few
        intervals (:mod:`numasim.sim.sampling`).
    rng
        The engine's random stream, which the engine's own streams derive from: think times
        and wakers, each pod's open-mode arrivals, each process's pauses.
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
        sample_bytes: int = 32 * 2**20,
    ):
        self.machine = machine
        self.pods = pods
        self.policy = policy
        self.duration_ns = int(duration_ns)
        self.warmup_ns = int(warmup_ns)
        self.sample_ns = int(sample_ns)
        self.sample_bytes = int(sample_bytes)
        self.rng = rng
        # The wake-up path's own stream (think times, wakers), drawn in batches (layout.Scratch.draws).
        self._draw_rng = rng.spawn(1)[0]
        self.progress = progress
        self.env = Clock()
        self._until = 0  # the instant _step_until runs to
        self.view = SimView(self)
        self.memory = Memory(machine)

        # Threads and processes numbered across pods (workers first, then collector threads).
        n_workers, self.proc_pod, self.proc_tids, self.proc_helpers, self.t_proc = number_threads(pods)
        nt = len(self.t_proc)
        n_gc = nt - n_workers
        self.n_workers = n_workers
        n = machine.n_nodes
        # Every chunk any pod can have (its regions' sizes add up to its memory, each rounded up to a
        # chunk), so that the regions' node arrays the View hands out stay live views for the run.
        self.memory.reserve(sum(p.spec.memory // CHUNK + p.spec.processes + p.spec.threads for p in pods))
        # Per-thread and per-CPU numbers are built as lists here, then moved into a Store
        # (see layout.THREAD_FIELDS): memoryviews for the event path's one-at-a-time reads and
        # writes, numpy arrays over the same memory for whole-array code and the View.
        self.t_pod = [self.proc_pod[proc] for proc in self.t_proc]
        self.t_cpu = [-1] * nt
        self.t_phase = [NEW] * nt
        self.t_active = [False] * nt
        self.t_affinity: list[frozenset[int] | None] = [None] * nt
        self.t_private = [-1] * nt
        self.t_debt = [0.0] * nt
        self.t_req_left = [math.inf] * nt  # operations left in the current request
        self.t_req_arrival = [0] * nt  # when the current request arrived
        self.t_waiting = [False] * nt  # blocked with no request to serve
        self.t_last = [0] * nt
        self.t_gen = [0] * nt
        self.t_paused = [False] * nt
        self.t_wgen = [0] * nt  # think times started: a think's wake-up is void once a later think began
        self.t_mask = [0] * nt  # the row of the CPU masks (_A) of t_affinity: 0, every CPU
        prof = [pods[pi].profile for pi in self.t_pod]
        self.p_cycles = [pr.cycles_per_op for pr in prof]
        self.p_misses = [float(pr.llc_misses_per_op) for pr in prof]
        # Misses per op stall for d + (1 - d) / mlp latencies: the dependent ones in full, the
        # others overlapped up to what a hardware thread keeps in flight. p_ind: the overlapped
        # part's share. p_smt_r[t][k]: how much longer the overlapped part takes with k busy
        # hardware threads on the core (docs/model.md, SMT by stall).
        mlps = [machine.stream_mlp if pr.mlp == "hardware" else float(pr.mlp) for pr in prof]
        tmlp, cmlp = machine.thread_mlp, machine.core_mlp
        self.p_mlp = [lines_in_flight(w, tmlp, cmlp, 1) for w in mlps]
        ways = machine.spec.threads_per_core if machine.smt else 1
        self.p_smt_r = [[m / lines_in_flight(w, tmlp, cmlp, max(k, 1)) for k in range(ways + 1)]
                        for w, m in zip(mlps, self.p_mlp)]
        self.p_stall = [pr.dependent_fraction + (1 - pr.dependent_fraction) / m for pr, m in zip(prof, self.p_mlp)]
        self.p_ind = [(1 - pr.dependent_fraction) / m / st for pr, m, st in zip(prof, self.p_mlp, self.p_stall)]
        # SMT: the share of its core's busiest execution resource a thread uses while computing,
        # in units of a typical thread's (1 / smt_yield): exactly 1.0 unless the workload says.
        self.p_pipe = [1.0 if pr.pipeline_share is None else float(pr.pipeline_share) * machine.spec.smt_yield
                       for pr in prof]
        self.p_writes = [float(pr.write_fraction) for pr in prof]
        self.p_coherence = [float(pr.coherence_misses_per_op) for pr in prof]
        self._has_writes = any(self.p_writes)
        self._has_coherence = any(self.p_coherence)
        # A process-wide lock: cycles held and lines taken over from the last holder, per op.
        self.p_lock_cycles = [float(pr.lock_cycles_per_op) for pr in prof]
        self.p_lock_lines = [float(pr.lock_lines_per_op) for pr in prof]
        self._has_lock = any(self.p_lock_cycles) or any(self.p_lock_lines)
        # Share of the misses to the shared region (its share of the bytes, unless given apart).
        self.p_shared = [pr.shared_fraction if pr.private_access_share is None else 1.0 - pr.private_access_share
                         for pr in prof]
        self.p_touch = [pr.touch_gbps for pr in prof]  # bytes per full-core ns
        self.p_grow = [pr.touch_gbps if pr.touch == "work" else 0.0 for pr in prof]  # bytes allocated per work ns
        self.p_transient = [pr.transient_fraction for pr in prof]
        self._has_transient = any(self.p_transient)
        self._growing: set[int] = set()  # threads whose memory still grows as they work
        self._touch_turn: dict[int, int] = {}  # per process: the next thread whose node takes a chunk (private_touch: pod)
        self.p_footprint = [float(pr.cache_footprint_mib * 2**20) for pr in prof]
        # Lines a thread refills when it is switched back in (its footprint, up to the L2).
        self.refill_lines = [min(f, machine.spec.l2_kib * 1024) / LINE for f in self.p_footprint]
        self._switch_ns = machine.spec.context_switch_ns
        self._smt = machine.smt
        reqs = [pr.requests for pr in prof]
        self.p_req_mode = [0 if r is None else (1 if r.mode == "closed" else 2) for r in reqs]
        self.p_req_ops = [math.inf if r is None else float(r.ops) for r in reqs]
        self.p_think = [0.0 if r is None else r.think_ms * 1e6 for r in reqs]
        self._injecting: set[int] = set()
        self.latencies = ResponseTimes(len(pods), self.warmup_ns)
        self.n_events = 0
        # Open mode: each pod's arrival rate per ns (drive_open changes it).
        self.q_rate = [req.rate_per_s / 1e9 if req is not None and req.mode == "open" else 0.0
                       for req in (pod.profile.requests for pod in pods)]
        # ... and each thread's pod's mean time between arrivals (ns), for the compiled arrivals.
        self.p_interarrival = [interarrival(self.q_rate[pod.index]) for pod in pods for _ in pod.tids] + [0.0] * n_gc
        self._arrival_rngs: dict[int, tuple[np.random.Generator, np.random.Generator]] = {}
        self.p_waker_pod = [pr.waker == "pod" for pr in prof]
        # A collector thread reads and writes its process's shared memory as the workers do (their
        # misses and stalls per cycle of work), takes no requests, allocates nothing of its own and
        # takes no lock of the application's; it runs only in pauses (Drivers._pauses).
        for t in range(n_workers, nt):
            self.p_shared[t] = 1.0
            self.p_coherence[t] = self.p_lock_cycles[t] = self.p_lock_lines[t] = 0.0
            self.p_grow[t] = self.p_transient[t] = 0.0
            self.p_req_mode[t] = 0
            self.p_req_ops[t] = math.inf
            self.p_think[t] = 0.0
            self.p_waker_pod[t] = False  # woken by the VM thread, which is not modelled: as by a timer on its own CPU
        self.nr = [0] * machine.n_cpus
        # CPU frequency (GHz) per CPU, set by the machine's cpufreq governor.
        spec = machine.spec
        self.f_max = spec.frequency_ghz
        self.f_min = spec.min_frequency_ghz or spec.frequency_ghz
        self.f_cpu = np.full(machine.n_cpus, self.f_min if spec.governor == "powersave" else self.f_max)
        self._util = np.zeros(machine.n_cpus)  # schedutil's decaying utilisation per CPU
        self._busy_seen = np.zeros(machine.n_cpus)
        self.rq_next = [-1] * nt  # runqueues: linked lists through the threads (numasim.sim.core)
        self.rq_prev = [-1] * nt
        self.rq_head = [-1] * machine.n_cpus
        self.rq_tail = [-1] * machine.n_cpus
        self._core_of = [machine.core_cpus[int(machine.cpu_core[c])] for c in range(machine.n_cpus)]
        self._cpu_node = machine.cpu_node.tolist()
        self._cpu_llc = machine.cpu_llc.tolist()
        self._pull_span = [0] * machine.n_cpus  # the domain of the policy's idle pull (Policy.idle_rule)
        self._core_id = machine.cpu_core.tolist()
        # Cache-to-cache transfers by level: the same core, the same LLC, then by node.
        self._c2c_smt, self._c2c_llc = spec_c2c = machine.spec.c2c_smt_ns, machine.spec.c2c_llc_ns
        self._c2c_levels = machine.spec.cores_per_llc is not None or any(v is not None for v in spec_c2c)
        self._slice_ns = np.zeros(2)  # the policy's time slice by threads on a CPU (from 2 on)
        self.t_shared_rid = [0] * nt
        self.t_plan_left = [0.0] * nt  # bytes still to first-touch (the sum of t_touch_plan's)

        # Cumulative counters.
        self.c_ops = [0.0] * nt
        self.c_cpu = [0.0] * nt
        self.c_wait = [0.0] * nt
        self.c_miss = [0.0] * nt
        self.c_miss_local = [0.0] * nt
        self.c_miss_node = np.zeros((nt, n))
        self.miss_pending = [0.0] * nt  # misses not yet spread over c_miss_node's nodes
        self.c_moves = [0] * nt
        self.c_xmoves = [0] * nt
        self.c_wakeups = [0] * nt
        self.c_faults = [0] * nt
        self.c_numa_moves = [0] * nt
        self.c_kernel_ns = [0.0] * nt
        self.c_cpu_busy = [0.0] * machine.n_cpus
        self.lat_local = [0.0] * machine.n_cpus  # the loaded latency of each CPU's own node (set below)
        self.c_pages_moved = np.zeros(len(pods))
        self.c_promoted = np.zeros(len(pods))  # bytes moved from a CPU-less (slower) node to a CPU node
        self.c_demoted = np.zeros(len(pods))  # and back
        self._cpu_node_set = frozenset(machine.cpu_nodes)
        # CFS bandwidth control, per pod.
        npods = len(pods)
        self.q_quota = np.full(npods, math.inf)  # CPU ns allowed per period
        self._has_quota = False  # whether any pod's limit can bind
        self.q_base = np.zeros(npods)  # the pod's CPU time at the start of the period
        self.q_throttled = [False] * npods
        self.q_due = np.full(npods, math.inf)  # when each pod's quota runs out at its threads' current shares
        self.q_tids: list[tuple[int, ...]] = [()] * npods  # the threads whose CPU time counts against it
        self._q_ids = [np.zeros(0, dtype=np.int64)] * npods  # the same as arrays
        self._q_timer_at = math.inf  # the one pending quota timer (the earliest due)
        self._q_timer_gen = 0
        self.q_since = [0] * npods
        self.t_held = [False] * nt  # runnable, but held by a throttled pod
        self.c_throttled = np.zeros(npods)  # thread-ns of runnable time held by throttling
        self._held_from: dict[int, int] = {}  # threads held since a pause's edge, not since the throttle began
        self.quota_log: list[tuple[int, int, float]] = []  # (period start, pod, CPU ns used)

        # Current rates.
        self.r_share = [0.0] * nt  # share of its CPU's time
        self.r_cap = [0.0] * nt  # full-core ns of work per wall ns
        self.r_tau = [math.inf] * nt  # full-core ns per operation
        self.r_access = np.zeros((nt, n))
        self.local = [1.0] * nt  # share of each thread's misses its own node serves
        self.r_latency = np.zeros(nt)
        self._lmat = machine.latency.copy()
        self.r_node_load = np.zeros(n)  # bytes/ns on each memory node at the last solve
        self.r_node_util = np.zeros(n)
        self.r_link_load = np.zeros((n, n))  # node-to-node flows, bytes/ns
        self.r_link_util = np.zeros(len(machine.interconnect.bandwidth))
        self.r_link_traffic = np.zeros(len(machine.interconnect.bandwidth))  # bytes/ns per link and direction
        self.r_cshare = [1.0] * nt  # share of the time per op spent computing (SMT)
        self.r_ishare = [0.0] * nt  # share spent in overlapped misses (SMT shares them)
        self._x = np.ones(n)
        self._y = np.ones(len(machine.interconnect.bandwidth))
        self._chiplet_wait = np.zeros(len(machine.chiplet_bandwidth))  # ns per miss at each chiplet link
        self.r_throttle = np.ones(nt)  # per thread: how much its node's lines in flight slow it (1: not at all)
        self.r_chiplet_util = np.zeros(len(machine.chiplet_bandwidth))
        self.r_lines_demand = np.zeros(n)  # per node: lines wanted over its lines in flight (0: no limit)
        self._lock_wait = np.zeros(len(self.proc_tids))  # ns per op waiting for each process's lock
        self.r_lock_util = np.zeros(len(self.proc_tids))  # share of the time each process's lock is held
        self._solve_at = -1  # the instant a solve is pending for

        self._flows: dict[int, dict] = {}
        self._tick_wakeup = self.env.event()
        self.placements = array("q")  # (time, tid, cpu) triples, 24 bytes each, up to a cap (Sampling._log_place)
        self._place_cap = 3 * max(1024, self.sample_bytes // 48)  # its int64s: a move is 24 bytes, twice with the trace's copy
        self.placements_until: int | None = None  # when the log filled; None: it did not
        self.affinity_log: list[tuple[int, int, frozenset[int] | None]] = []
        self.events: list[tuple[int, str, str]] = []
        self.n_solves = 0
        self._sample_times = np.zeros(0, dtype=np.int64)  # set by the sampler
        self._samples: dict[str, NDArray] = {}  # one array per quantity, a row per sample time
        self._n_samples = 0
        self._proj = None  # the projected counters a sample reads (Sampling._snapshot), allocated at the first sample

        self._to_store(nt, machine.n_cpus)

    def _to_store(self, nt: int, ncpu: int) -> None:
        """Move the per-thread and per-CPU lists into typed buffers (:class:`Store`)."""
        fields = {name: getattr(self, name) for group in layout.THREAD_FIELDS for name in group}
        self.store = Store(nt, *layout.THREAD_FIELDS)
        for name, values in fields.items():
            setattr(self, name, self.store.fill(name, values))
        cpu_fields = {name: getattr(self, name) for group in layout.CPU_FIELDS for name in group}
        self.cpu_store = Store(ncpu, *layout.CPU_FIELDS)
        for name, values in cpu_fields.items():
            setattr(self, name, self.cpu_store.fill(name, values))
        # The View's arrays and whole-array code: the same memory as numpy arrays.
        self.v_thread_cpu = self.store.array("t_cpu")
        self.v_thread_active = self.store.array("t_active")
        self.v_nr_running = self.cpu_store.array("nr")
        self.r_local = self.store.array("local")
        # What the compiled kernels (numasim.sim.core) take: the buffers, constants, scratch.
        self._F, self._I, self._B = self.store.f, self.store.i, self.store.b
        self._CF, self._CI = self.cpu_store.f, self.cpu_store.i
        ways = max(len(c) for c in self.machine.core_cpus)
        self._core_cpus = np.full((ncpu, ways), -1, dtype=np.int64)
        for c in range(ncpu):
            sibs = self._core_of[c]
            self._core_cpus[c, :len(sibs)] = sibs
        self._scratch = layout.Scratch(nt, ncpu, self._smt, self._switch_ns, float(TOUCH_STEP),
                                       float(self.machine.spec.l2_kib * 1024), len(self.pods))
        # Per pod (layout.P_*): its first thread (a pod's threads are numbered in a row), whether it is
        # throttled, and the head and length of its open-mode queue, a ring of arrival times in _Q.
        npods = len(self.pods)
        self._P = np.zeros((7, npods + 1), dtype=np.int64)
        self._P[layout.P_ARR_E] = self._P[layout.P_ARR_U] = layout.DRAWS  # none drawn yet
        self._P[layout.P_FIRST] = [p.tids[0] for p in self.pods] + [self.n_workers]
        self._P[layout.P_THROTTLED, :npods] = self.q_throttled
        self.q_throttled = memoryview(self._P[layout.P_THROTTLED])
        self._Q = np.zeros((npods, 16), dtype=np.int64)
        self._ctl = self._scratch.ctl
        self._ctlv = memoryview(self._ctl)  # Python's reads and writes: plain ints, no numpy scalars
        self._sv = memoryview(self._scratch.s)  # the same for the compiled code's logs (s[row, i])
        self._take_rules(ncpu)
        self._scratch_tids = np.empty(nt + 1, dtype=np.int64)
        # First touch (numasim.sim.firsttouch): each thread's plan, the regions and bytes still to
        # touch in each (PLAN_ENTRIES pairs); each pod's policy for it (POL_* rows).
        self._plan = np.zeros((nt, 2 * firsttouch.PLAN_ENTRIES), dtype=np.int64)
        self._pol = np.zeros((firsttouch.POL_MASK + self.machine.n_nodes, npods + 1), dtype=np.int64)
        self._set_lat_local()
        self._set_core_args()
        self._core_depth = 0  # calls of _run_core under way
        self._ahead = False  # whether _run_core may run later instants too (CpuRuntime._fire)

    def _set_core_args(self) -> None:
        """The arguments the compiled entry points take first (numasim.sim.core, numasim.sim.events; the
        memory's arrays and the first-touch tables are the last of them, ``M``;
        events.fire also takes the pod table, the random numbers, the queues, the CPU masks and the
        policy's wake-up rule)."""
        sc = self._scratch
        self._M = self.memory.arrays() + (self._pol, self._plan) + self.latencies.arrays()  # layout.M_*
        self._core_args = (self._F, self._I, self._B, self._CF, self._CI, self._core_cpus, self._slice_ns, sc.kf,
                           sc.s, sc.sf, sc.ctl, sc.heap, self._M)
        self._fire_args = self._core_args + (self._P, sc.draws, self._Q, self._A, self._W)

    def _set_lat_local(self) -> None:
        """Each CPU's own node's loaded latency, from the latency matrix of the last solve."""
        self._CF[layout.CF_LAT] = np.diag(self._lmat)[self.machine.cpu_node]

    @property
    def now(self) -> int:
        return self.env.now  # an int: every timeout is a whole number of ns

    def run(self) -> Trace:
        """Run to ``duration_ns`` and return the trace (of the run so far: :meth:`advance` may go on)."""
        self.env.process(self._arrivals())
        self.env.process(self._ticker())
        self.env.process(self._sampler())
        self.env.process(self._refresher())
        self._step_until(self.duration_ns)
        self._snapshot()  # the run's end, after every event of its last instant (the sampler leaves it)
        if self.progress is not None:
            self.progress(1.0)
        samples = {k: v[: self._n_samples] for k, v in self._samples.items()}
        return Trace(
            machine=self.machine,
            policy=self.policy.name,
            duration_ns=self.duration_ns,
            warmup_ns=self.warmup_ns,
            pods=[copy.copy(p) for p in self.pods],  # their status as of now, whatever comes after
            thread_pod=np.array(self.t_pod, dtype=np.int64),
            sample_times=self._sample_times[: self._n_samples].copy(),
            samples=samples,
            placements=np.frombuffer(self.placements, dtype=np.int64).reshape(-1, 3).copy(),
            placements_until_ns=self.placements_until,
            affinity_log=list(self.affinity_log),
            quota_log=list(self.quota_log),
            latencies=self.latencies,
            events=list(self.events),
            n_events=self.n_events,
            n_solves=self.n_solves,
        )

    def advance(self, until_ns: int) -> None:
        """Go on simulating, after :meth:`run`, up to ``until_ns`` exactly.

        The trace :meth:`run` returned does not change; what happens from here on is
        measured by :meth:`measure`.
        """
        if until_ns > self.env.now:
            self.env.timeout(until_ns - self.env.now)  # so that the clock reaches until_ns
        self._step_until(until_ns)

    def measure(self, since_ns: int) -> ResponseTimes:
        """Record the response times of requests completed from ``since_ns`` on, from now on, in a new histogram."""
        self.latencies = ResponseTimes(len(self.pods), since_ns)
        self._set_core_args()
        return self.latencies

    def _step_until(self, until_ns: int) -> None:
        n_events = 0
        env = self.env
        self._until = until_ns
        try:
            while env.peek() <= until_ns:
                env.step()
                n_events += 1
        except NumasimError:
            raise
        except (Exception, SystemExit) as exc:  # (a policy's sys.exit() is its failure, not the program's end)
            # simpy re-raises a copy of a process's exception, the original as its cause.
            original = exc.__cause__ if isinstance(exc.__cause__, type(exc)) else exc
            culprit = _policy_frame(original, type(self.policy))
            if culprit is None:
                raise  # not raised in the policy's code: a bug of numasim's
            raise PolicyError(self.policy.name, self.now, culprit,
                              f"raised {type(exc).__name__}: {str(exc)[:300]}") from original
        finally:
            ctl = self._ctlv  # with the instants the compiled code ran on its own (sim/clock.py)
            self.n_events += n_events + ctl[layout.N_AHEAD]
            ctl[layout.N_AHEAD] = 0

    def _ticker(self):
        ticks = 0
        while True:
            nxt = self.policy.next_tick(self.now)
            if nxt is None:
                self._tick_wakeup = self.env.event()
                yield self._tick_wakeup
                continue
            when = _int(nxt)
            if when is None:
                raise PolicyError(self.policy.name, self.now, "next_tick",
                                  f"next_tick must return None or a time in ns (an integer), got {str(nxt)[:50]!r}")
            # Now or a time already past means 1 ns from now. A policy that ticks faster than
            # the estimate allows would run for longer than any budget: it is stopped, not waited for.
            ticks += 1
            if ticks > MAX_TICKS_PER_S * (1 + self.now / 1e9):
                raise PolicyError(self.policy.name, self.now, "next_tick",
                                  f"next_tick asked for more than {MAX_TICKS_PER_S:,} ticks a simulated second "
                                  "(counted from the start, with a first second's allowance)")
            yield self.env.timeout(max(when - self.now, 1))
            self._apply_all(self._decisions(self.policy.tick(self.view), "tick"))

    def _event(self, kind: str, text: str) -> None:
        self.events.append((self.now, kind, text))

    def _touch_step(self, tid: int) -> None:
        """A thread's start-up touch step ended (it is up to now): touch on, or start working."""
        if self.t_plan_left[tid] < PAGE:
            self._touch(tid, float(PAGE))
        if not self._plans(tid) and self.t_phase[tid] == TOUCH:
            self._finish_touch(tid)
        else:
            self._reschedule((tid,))


def _policy_frame(exc: BaseException, cls: type) -> str | None:
    """Where in the code of policy class ``cls`` (or its bases) ``exc`` was raised, innermost frame first.

    The policy's files are those of its methods' code (a class sent by value to a worker
    process, or defined in a notebook, has no importable module, but its code objects
    keep their file names); the contract's default methods do not count.
    """
    files = set()
    for klass in cls.__mro__:
        if klass is Policy or klass is object:
            continue
        for attr in vars(klass).values():
            func = getattr(attr, "__func__", attr)
            code = getattr(func, "__code__", None)
            if code is not None:
                files.add(code.co_filename)
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename in files:
            # A class sent to a worker by value (cloudpickle) has lost its file's name: the registry kept it.
            name = getattr(cls, "_numasim_file", None) if frame.filename == "<dynamic-code>" else None
            return f"in {frame.name}() at {Path(name or frame.filename).name}:{frame.lineno}"
    return None
