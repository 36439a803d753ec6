"""The simulation engine: threads, CPUs and memory on a simpy.Environment.

The engine knows no policy by name (house rule 1). It asks the policy what to
do when a pod arrives, where to put a thread, and, at the times the policy
asks for, what to change; it carries the decisions out, checks them
(affinity, CPU ids, node capacity) and charges for them (cache refill after a
move, page-copy bandwidth).

Between events every thread progresses at a constant rate. Threads queued on
one CPU share it equally (processor sharing, the fluid limit of CFS's fair
time slices); the slice length sets how much of each slice a context switch
takes. Rates are recomputed (:func:`numasim.perf.solve_rates`) only when
something that affects them changes: a thread is placed or moved, a pod
starts or finishes touching its memory, pages move. Every simulated event,
including those, goes through the ``simpy.Environment``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import simpy
from numpy.typing import NDArray

from .errors import PolicyError
from .machine import Machine
from .memory import AllocationFailure, Memory
from .perf import RateInputs, refill_ns, solve_rates, switch_efficiency
from .policies.base import (
    Admission,
    Decision,
    MemPolicy,
    MigratePages,
    Move,
    Policy,
    SetAffinity,
    SetMemPolicy,
)
from .workload import PodSpec, WorkloadProfile

__all__ = ["Simulation", "SimView", "PodInstance", "Trace"]

NEW, TOUCHING, RUNNING, DEAD = 0, 1, 2, 3
MIGRATION_STEP_NS = 100_000_000  # page copies are applied in 100 ms steps


@dataclass
class PodInstance:
    """One running (or refused) pod: a replica of a :class:`PodSpec`."""

    index: int
    name: str
    group: str
    replica: int
    spec: PodSpec
    profile: WorkloadProfile
    arrival_ns: int
    tids: tuple[int, ...] = ()
    status: str = "pending"  # pending | running | rejected | failed
    reason: str = ""
    admission: Admission | None = None
    shared_rid: int = -1
    mempolicy: MemPolicy = field(default_factory=MemPolicy)

    @property
    def threads(self) -> int:
        return self.spec.threads

    @property
    def cpus(self) -> float:
        return self.spec.cpus

    @property
    def memory(self) -> int:
        return self.spec.memory


@dataclass
class Trace:
    """What a run recorded; :func:`numasim.metrics.summarize` derives metrics from it."""

    machine: Machine
    policy: str
    duration_ns: int
    warmup_ns: int
    pods: list[PodInstance]
    thread_pod: NDArray[np.int64]
    sample_times: NDArray[np.int64]
    samples: dict[str, NDArray]
    placements: list[tuple[int, int, int]]  # (time, tid, cpu); cpu -1 when the thread stops
    affinity_log: list[tuple[int, int, frozenset[int] | None]]  # (time, tid, cpus)
    migrations: list[tuple[int, int, int, int]]  # (time, tid, from cpu, to cpu)
    page_moves: list[tuple[int, int, int, int, int]]  # (time, pod, src, dst, bytes)
    events: list[tuple[int, str, str]]  # (time, kind, text)
    n_events: int
    n_solves: int


class SimView:
    """Read-only view of the simulation state that policies see."""

    def __init__(self, sim: "Simulation"):
        self._sim = sim

    @property
    def now(self) -> int:
        return int(self._sim.env.now)

    @property
    def machine(self) -> Machine:
        return self._sim.machine

    @property
    def pods(self) -> tuple[PodInstance, ...]:
        return tuple(self._sim.pods)

    @property
    def thread_pod(self) -> NDArray[np.int64]:
        return _ro(self._sim.t_pod)

    @property
    def thread_cpu(self) -> NDArray[np.int64]:
        return _ro(self._sim.t_cpu)

    @property
    def thread_active(self) -> NDArray[np.bool_]:
        """Threads that exist and compete for a CPU."""
        s = self._sim
        return (s.t_state == TOUCHING) | (s.t_state == RUNNING)

    def affinity(self, tid: int) -> frozenset[int] | None:
        return self._sim.t_affinity[tid]

    def allowed(self, tid: int, cpu: int) -> bool:
        aff = self._sim.t_affinity[tid]
        return aff is None or cpu in aff

    @property
    def nr_running(self) -> NDArray[np.int64]:
        """Threads queued on each CPU (running or waiting)."""
        return _ro(self._sim.nr_running())

    def runqueue(self, cpu: int) -> list[int]:
        s = self._sim
        return [int(t) for t in np.flatnonzero((s.t_cpu == cpu) & self.thread_active)]

    def pod_memory(self) -> NDArray[np.int64]:
        """Bytes per pod (rows, by pod index) and node (columns)."""
        return self._sim.memory.pod_bytes(len(self._sim.pods))

    def node_free(self) -> NDArray[np.int64]:
        return self._sim.memory.free()

    @property
    def thread_local_share(self) -> NDArray[np.float64]:
        """Share of each thread's DRAM misses served by its own node (current rates)."""
        return _ro(self._sim.r_local)

    @property
    def thread_cpu_time(self) -> NDArray[np.float64]:
        """CPU time consumed by each thread so far, ns."""
        self._sim.sync()
        return _ro(self._sim.c_cpu)


def _ro(a: NDArray) -> NDArray:
    v = a.view()
    v.setflags(write=False)
    return v


class Simulation:
    """One run of one policy on one machine with one set of pods.

    Parameters
    ----------
    machine
        The machine.
    pods
        Pod instances in arrival order (with specs and resolved profiles).
    policy
        The policy instance.
    duration_ns, warmup_ns
        Simulated time, and the start of the measurement window.
    sample_ns
        Interval of the recorded time series.
    """

    def __init__(
        self,
        machine: Machine,
        pods: list[PodInstance],
        policy: Policy,
        duration_ns: int,
        warmup_ns: int,
        sample_ns: int,
        progress: Callable[[float], None] | None = None,
    ):
        self.machine = machine
        self.pods = pods
        self.policy = policy
        self.duration_ns = int(duration_ns)
        self.warmup_ns = int(warmup_ns)
        self.sample_ns = int(sample_ns)
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
        self.t_state = np.full(nt, NEW, dtype=np.int64)
        self.t_affinity: list[frozenset[int] | None] = [None] * nt
        self.t_private = np.full(nt, -1, dtype=np.int64)
        self.t_touch_plan: list[list[list[int]]] = [[] for _ in range(nt)]  # [[rid, bytes left], ...]
        self.t_debt = np.zeros(nt)
        prof = [pods[int(pi)].profile for pi in self.t_pod]
        self.p_compute = np.array([pr.cycles_per_op / machine.frequency_ghz for pr in prof])
        self.p_misses = np.array([pr.llc_misses_per_op for pr in prof])
        self.p_mlp = np.array([pr.mlp for pr in prof])
        self.p_stall = 1.0 / self.p_mlp
        self.p_shared = np.array([pr.shared_fraction for pr in prof])
        self.p_touch = np.array([pr.touch_gbps for pr in prof])  # bytes per full-core ns
        self.p_footprint = np.array([pr.cache_footprint_mib * 2**20 for pr in prof])

        # Cumulative counters.
        self.c_ops = np.zeros(nt)
        self.c_cpu = np.zeros(nt)
        self.c_wait = np.zeros(nt)
        self.c_miss = np.zeros(nt)
        self.c_miss_local = np.zeros(nt)
        self.c_miss_node = np.zeros((nt, n))
        self.c_moves = np.zeros(nt, dtype=np.int64)
        self.c_xmoves = np.zeros(nt, dtype=np.int64)
        self.c_cpu_busy = np.zeros(machine.n_cpus)
        self.c_pages_moved = np.zeros(len(pods))

        # Rates from the last solve.
        self.r_share = np.zeros(nt)
        self.r_capacity = np.zeros(nt)
        self.r_tau = np.ones(nt)
        self.r_access = np.zeros((nt, n))
        self.r_local = np.ones(nt)
        self.r_latency = np.zeros(nt)

        self._last = 0
        self._gen = 0
        self._flows: dict[int, dict] = {}
        self._tick_wakeup = self.env.event()
        self.placements: list[tuple[int, int, int]] = []
        self.affinity_log: list[tuple[int, int, frozenset[int] | None]] = []
        self.migrations: list[tuple[int, int, int, int]] = []
        self.page_moves: list[tuple[int, int, int, int, int]] = []
        self.events: list[tuple[int, str, str]] = []
        self.n_solves = 0
        self._sample_times: list[int] = []
        self._samples: dict[str, list[NDArray]] = {}

    # ------------------------------------------------------------------ run
    def run(self) -> Trace:
        """Run to ``duration_ns`` and return the trace."""
        self.env.process(self._arrivals())
        self.env.process(self._ticker())
        self.env.process(self._sampler())
        n_events = 0
        end = self.duration_ns
        env = self.env
        while env.peek() <= end:
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
            events=self.events,
            n_events=n_events,
            n_solves=self.n_solves,
        )

    def _arrivals(self):
        for pod in sorted(self.pods, key=lambda p: (p.arrival_ns, p.index)):
            if pod.arrival_ns > self.env.now:
                yield self.env.timeout(pod.arrival_ns - self.env.now)
            self.sync()
            self._arrive(pod)
            self._recompute()
            if not self._tick_wakeup.triggered:
                self._tick_wakeup.succeed()

    def _ticker(self):
        while True:
            nxt = self.policy.next_tick(int(self.env.now))
            if nxt is None:
                self._tick_wakeup = self.env.event()
                yield self._tick_wakeup
                continue
            yield self.env.timeout(max(int(nxt) - int(self.env.now), 1))
            decisions = self.policy.tick(self.view)
            if decisions:
                self.sync()
                for d in decisions:
                    self._apply(d)
                self._recompute()

    def _sampler(self):
        times = sorted(
            set(range(0, self.duration_ns + 1, self.sample_ns)) | {self.warmup_ns, self.duration_ns}
        )
        for t in times:
            if t > self.env.now:
                yield self.env.timeout(t - self.env.now)
            self.sync()
            self._snapshot()
            if self.progress is not None:
                self.progress(t / self.duration_ns)

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
            over = adm.overhead
            self.p_compute[tid] *= 1.0 + over.cpu
            self.p_stall[tid] *= 1.0 + over.memory
        # With a single toucher, the other threads start once the memory is touched
        # (as a JVM with AlwaysPreTouch starts its workers after pre-touching the heap).
        starters = pod.tids if prof.touch == "threads" else pod.tids[:1]
        for tid in starters:
            self._start_thread(tid)

    def _start_thread(self, tid: int) -> None:
        cpu = int(self.policy.place(tid, self.view))
        self._check_place(tid, cpu, "place")
        self.t_cpu[tid] = cpu
        self.t_state[tid] = TOUCHING if self.t_touch_plan[tid] else RUNNING
        self.placements.append((self.now, tid, cpu))

    # ----------------------------------------------------------- decisions
    @property
    def now(self) -> int:
        return int(self.env.now)

    def _check_cpus(self, cpus: frozenset[int] | None, decision: object) -> None:
        if cpus is None:
            return
        if not cpus or min(cpus) < 0 or max(cpus) >= self.machine.n_cpus:
            raise PolicyError(
                self.policy.name, self.now, decision,
                f"CPU set must be non-empty and within 0-{self.machine.n_cpus - 1}",
            )

    def _check_mempolicy(self, mp: MemPolicy, decision: object) -> None:
        if any(n < 0 or n >= self.machine.n_nodes for n in mp.nodes):
            raise PolicyError(self.policy.name, self.now, decision, f"memory policy names a node outside 0-{self.machine.n_nodes - 1}")
        if mp.kind in ("bind", "interleave") and not mp.nodes:
            raise PolicyError(self.policy.name, self.now, decision, f"memory policy {mp.kind} needs nodes")

    def _check_place(self, tid: int, cpu: int, decision: object) -> None:
        if not 0 <= cpu < self.machine.n_cpus:
            raise PolicyError(self.policy.name, self.now, decision, f"CPU {cpu} does not exist")
        aff = self.t_affinity[tid]
        if aff is not None and cpu not in aff:
            raise PolicyError(
                self.policy.name, self.now, decision,
                f"thread {tid} may not run on CPU {cpu} (affinity {sorted(aff)})",
            )

    def _apply(self, d: Decision) -> None:
        if isinstance(d, Move):
            self._move(d)
        elif isinstance(d, SetAffinity):
            self._check_cpus(d.cpus, d)
            for tid in d.tids:
                self.t_affinity[tid] = d.cpus
                self.affinity_log.append((self.now, tid, d.cpus))
                if self.t_state[tid] in (TOUCHING, RUNNING) and self.t_cpu[tid] not in d.cpus:
                    cpu = int(self.policy.place(tid, self.view))
                    self._move(Move(tid, cpu))
        elif isinstance(d, MigratePages):
            if not 0 <= d.dst < self.machine.n_nodes or d.rate_gbps <= 0 or d.nbytes < 0:
                raise PolicyError(self.policy.name, self.now, d, "bad node, rate or size")
            self._start_flow(d)
        elif isinstance(d, SetMemPolicy):
            self._check_mempolicy(d.mempolicy, d)
            self.pods[d.pod].mempolicy = d.mempolicy
        else:
            raise PolicyError(self.policy.name, self.now, d, "unknown decision type")

    def _move(self, d: Move) -> None:
        tid, cpu = d.tid, int(d.cpu)
        if not 0 <= tid < len(self.t_cpu) or self.t_state[tid] not in (TOUCHING, RUNNING):
            raise PolicyError(self.policy.name, self.now, d, f"thread {tid} is not running")
        self._check_place(tid, cpu, d)
        old = int(self.t_cpu[tid])
        if old == cpu:
            return
        m = self.machine
        src, dst = int(m.cpu_node[old]), int(m.cpu_node[cpu])
        # A moved thread reloads its cache: only the private caches within a socket's
        # LLC, the whole footprint when it leaves the LLC.
        footprint = self.p_footprint[tid]
        if m.cpu_socket[old] == m.cpu_socket[cpu] and m.spec.nodes_per_socket == 1:
            footprint = min(footprint, m.spec.l2_kib * 1024)
        self.t_debt[tid] += refill_ns(footprint, float(m.latency[dst, dst]), self.p_mlp[tid])
        self.t_cpu[tid] = cpu
        self.c_moves[tid] += 1
        if src != dst:
            self.c_xmoves[tid] += 1
        self.migrations.append((self.now, tid, old, cpu))
        self.placements.append((self.now, tid, cpu))

    def _event(self, kind: str, text: str) -> None:
        self.events.append((self.now, kind, text))

    # ------------------------------------------------------- page copying
    def _start_flow(self, d: MigratePages) -> None:
        token = object()
        flow = {"token": token, "d": d, "left": int(d.nbytes), "src": np.zeros(self.machine.n_nodes)}
        self._flows[d.pod] = flow
        self.env.process(self._flow(flow))

    def _flow(self, flow: dict):
        d: MigratePages = flow["d"]
        rate = d.rate_gbps  # bytes per ns
        self._recompute()
        while flow["left"] > 0 and self._flows.get(d.pod) is flow:
            yield self.env.timeout(MIGRATION_STEP_NS)
            if self._flows.get(d.pod) is not flow:
                return
            self.sync()
            budget = int(min(flow["left"], rate * MIGRATION_STEP_NS))
            moved = self._copy_pages(d.pod, d.dst, budget)
            flow["left"] = 0 if moved == 0 else flow["left"] - moved
            if flow["left"] <= 0:
                del self._flows[d.pod]
            self._recompute()

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
                want = int(budget * row[src] / total)
                got = self.memory.migrate(r, int(src), dst, want)
                if got:
                    moved += got
                    self.page_moves.append((self.now, pod_index, int(src), dst, got))
        self.c_pages_moved[pod_index] += moved
        return moved

    # --------------------------------------------------------- integration
    def nr_running(self) -> NDArray[np.int64]:
        active = (self.t_state == TOUCHING) | (self.t_state == RUNNING)
        return np.bincount(self.t_cpu[active], minlength=self.machine.n_cpus)

    def sync(self) -> None:
        """Integrate every thread's progress up to now at the current rates."""
        now = self.now
        dt = now - self._last
        if dt <= 0:
            return
        self._last = now
        active = np.flatnonzero((self.t_state == TOUCHING) | (self.t_state == RUNNING))
        if active.size == 0:
            return
        share = self.r_share[active]
        self.c_cpu[active] += share * dt
        self.c_wait[active] += (1.0 - share) * dt
        np.add.at(self.c_cpu_busy, self.t_cpu[active], share * dt)
        work = self.r_capacity[active] * dt  # full-core ns
        pay = np.minimum(self.t_debt[active], work)
        self.t_debt[active] -= pay
        work = work - pay
        running = self.t_state[active] == RUNNING
        run = active[running]
        ops = work[running] / self.r_tau[run]
        self.c_ops[run] += ops
        miss = ops * self.p_misses[run]
        self.c_miss[run] += miss
        self.c_miss_local[run] += miss * self.r_local[run]
        self.c_miss_node[run] += miss[:, None] * self.r_access[run]
        for tid, w in zip(active[~running], work[~running]):
            self._touch(int(tid), w * self.p_touch[tid])

    def _touch(self, tid: int, nbytes: float) -> None:
        plan = self.t_touch_plan[tid]
        pod = self.pods[int(self.t_pod[tid])]
        node = int(self.machine.cpu_node[self.t_cpu[tid]])
        left = int(round(nbytes))
        while plan and left > 0:
            rid, want = plan[0]
            take = min(want, left)
            try:
                self.memory.allocate(rid, take, node, pod.mempolicy)
            except AllocationFailure as exc:
                self._kill(pod, f"out of memory: {exc}")
                return
            plan[0][1] -= take
            left -= take
            if plan[0][1] <= 0:
                plan.pop(0)

    def _finish_touch(self, tid: int) -> None:
        self.t_state[tid] = RUNNING
        pod = self.pods[int(self.t_pod[tid])]
        if pod.profile.touch == "main" and tid == pod.tids[0]:
            for other in pod.tids[1:]:
                self._start_thread(other)

    def _kill(self, pod: PodInstance, reason: str) -> None:
        pod.status = "failed"
        pod.reason = reason
        self._event("failed", f"{pod.name}: {reason}")
        for tid in pod.tids:
            if self.t_state[tid] != DEAD:
                self.t_state[tid] = DEAD
                self.t_touch_plan[tid] = []
                self.placements.append((self.now, tid, -1))
        for rid, reg in enumerate(self.memory.regions):
            if reg.pod == pod.index:
                self.memory.release(rid)
        self._flows.pop(pod.index, None)

    # ------------------------------------------------------------- rates
    def _recompute(self) -> None:
        """Recompute every thread's rate after a change, and the next internal event."""
        m = self.machine
        active = np.flatnonzero((self.t_state == TOUCHING) | (self.t_state == RUNNING))
        self.r_share[:] = 0.0
        self.r_capacity[:] = 0.0
        if active.size == 0:
            return
        cpus = self.t_cpu[active]
        nr = np.bincount(cpus, minlength=m.n_cpus)
        share = 1.0 / nr[cpus]
        # SMT: hardware threads of one core share its throughput.
        factor = np.ones(m.n_cpus)
        if m.smt:
            busy = nr > 0
            for sib in m.core_cpus:
                k = int(busy[list(sib)].sum())
                if k > 1:
                    factor[list(sib)] = m.spec.smt_yield / k
        eff = np.ones(active.size)
        shared_cpu = nr[cpus] > 1
        if shared_cpu.any():
            nodes = m.cpu_node[cpus[shared_cpu]]
            tids = active[shared_cpu]
            refill = np.minimum(self.p_footprint[tids], m.spec.l2_kib * 1024) / 64.0
            cost = m.spec.context_switch_ns + refill * m.latency[nodes, nodes] * self.p_stall[tids]
            slices = np.array([self.policy.slice_ns(int(k)) for k in nr[cpus[shared_cpu]]], dtype=float)
            eff[shared_cpu] = switch_efficiency(slices, cost)
        cap = share * factor[cpus] * eff
        self.r_share[active] = share
        self.r_capacity[active] = cap

        # Where each running thread's misses go.
        node_of = m.cpu_node[cpus]
        access = np.zeros((active.size, m.n_nodes))
        shared_cache: dict[tuple[int, int], NDArray[np.float64]] = {}
        for i, tid in enumerate(active):
            pod = self.pods[int(self.t_pod[tid])]
            node = int(node_of[i])
            key = (pod.index, node)
            if key not in shared_cache:
                shared_cache[key] = self.memory.access_fractions(pod.shared_rid, node)
            sf = self.p_shared[tid]
            access[i] = sf * shared_cache[key] + (1 - sf) * self.memory.access_fractions(
                int(self.t_private[tid]), node
            )
        touching = self.t_state[active] == TOUCHING
        extra_node = np.zeros(m.n_nodes)
        np.add.at(extra_node, node_of[touching], cap[touching] * self.p_touch[active[touching]])
        extra_link = np.zeros((m.n_nodes, m.n_nodes))
        for flow in self._flows.values():
            self._flow_traffic(flow, extra_node, extra_link)
        run = ~touching
        inp = RateInputs(
            cpu_node=node_of[run],
            capacity=cap[run],
            compute_ns=self.p_compute[active[run]],
            misses=self.p_misses[active[run]],
            stall_scale=self.p_stall[active[run]],
            access=access[run],
            extra_node=extra_node,
            extra_link=extra_link,
        )
        sol = solve_rates(inp, m.latency, m.node_bandwidth, m.link_bandwidth, m.curve)
        self.n_solves += 1
        rt = active[run]
        with np.errstate(divide="ignore"):
            self.r_tau[rt] = np.where(sol.rate > 0, cap[run] / np.maximum(sol.rate, 1e-300), np.inf)
        self.r_access[rt] = access[run]
        self.r_local[rt] = sol.local
        self.r_latency[rt] = sol.latency
        self._schedule_internal(active[touching])

    def _flow_traffic(self, flow: dict, node: NDArray, link: NDArray) -> None:
        d: MigratePages = flow["d"]
        held = self.memory.pod_bytes(len(self.pods))[d.pod].astype(float)
        held[d.dst] = 0
        if held.sum() <= 0:
            return
        src_share = held / held.sum()
        rate = d.rate_gbps
        node += rate * src_share
        node[d.dst] += rate
        link[d.dst] += rate * src_share

    def _schedule_internal(self, touching: NDArray[np.int64]) -> None:
        """Schedule the earliest touch completion under the current rates."""
        self._gen += 1
        if touching.size == 0:
            return
        cap = self.r_capacity[touching]
        left = np.array([sum(p[1] for p in self.t_touch_plan[t]) for t in touching], dtype=float)
        speed = cap * self.p_touch[touching]
        with np.errstate(divide="ignore"):
            eta = np.where(speed > 0, (left + self.t_debt[touching] * self.p_touch[touching] * 0) / speed, np.inf)
            eta = eta + np.where(cap > 0, self.t_debt[touching] / cap, np.inf)
        k = int(np.argmin(eta))
        if not np.isfinite(eta[k]):
            return
        delay = max(int(np.ceil(eta[k])), 1)
        gen = self._gen
        ev = self.env.timeout(delay)
        ev.callbacks.append(lambda _e, g=gen: self._internal(g))

    def _internal(self, gen: int) -> None:
        if gen != self._gen:
            return
        self.sync()
        changed = False
        for tid in np.flatnonzero(self.t_state == TOUCHING):
            if not self.t_touch_plan[tid]:
                self._finish_touch(int(tid))
                changed = True
            elif sum(p[1] for p in self.t_touch_plan[tid]) < 4096:
                # Rounding remainder: finish the last partial page now.
                self._touch(int(tid), 4096.0)
                if not self.t_touch_plan[tid]:
                    self._finish_touch(int(tid))
                    changed = True
        self._recompute() if changed else self._schedule_internal(
            np.flatnonzero(self.t_state == TOUCHING)
        )

    # ----------------------------------------------------------- samples
    def _snapshot(self) -> None:
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
            "cpu_busy": self.c_cpu_busy,
            "pages_moved": self.c_pages_moved,
            "pod_memory": self.memory.pod_bytes(len(self.pods)),
            "thread_cpu": self.t_cpu,
            "thread_state": self.t_state,
        }
        for k, v in snap.items():
            self._samples.setdefault(k, []).append(np.array(v, copy=True))
