"""What a run will cost, estimated before it starts, and refused above a budget.

The estimate is deliberately simple and errs high. Simulated events come from threads and time. A
thread that blocks (its work comes in requests, or it waits for a lock) makes about 80-90 events per
simulated second in the shipped scenarios and the scaling benchmark (``benchmarks/bench.py``:
pacific 77, 448 two-thread pods on 8x56 cores 88), so 100 is used. A thread that never blocks makes
almost none of its own: it runs at a rate until a balancer moves it (session 38: 0.2-10 events a
thread-second over every validation case and 80 runs of 6 to 64 such threads on 16 CPUs, with CFS,
NUMA balancing, ESXi every 1 ms, taskset, numactl and CPU quotas, nearly all of them the machine's
ticks, counted apart), so 10 is used, unless a CPU limit below its threads may throttle its pod
(each throttle and unthrottle is an event: 10-18 a second measured for a pod of one such thread
limited to 1m, session 38's review), where it counts as a blocking thread. Its first touch is an
event each 64 MiB (``TOUCH_STEP``), counted by the pods' memory. The scheduler's tick (``hz`` a
second; a policy from outside numasim the 10,000 a second it may ask for at most), the rate solve's
refresh (every 25 ms) and each sample are an event too. An event costs 17-41 us of CPU on the
benchmark machine (docs/performance-history.md), so 40 is used. The periodic balancer's work grows
with the machine's CPUs and domain levels, busy or idle: 0.004-0.082 ms of CPU a simulated second
per CPU and level over the shipped scenarios (session 22; the most on the 112-CPU k8s host, then
cxl-tiering's 224 CPUs), 0.45 ms with two threads pinned to each of half the cores of a 2 x 28-core
SMT machine, so 0.5 ms is used. Where every CPU stays busy (numasim's CFS without NUMA balancing, at
least as many threads as CPUs, none ever blocking or restarting, all there from the start:
:func:`_always_busy`), each balances at its busy interval, ``busy_factor`` (16, or 32 for kernels
before 5.10) times its idle one, so that figure is divided by it: 0.0044 ms measured (all of the
run's CPU) on the Milan case so counted and about 0.005 ms on 384 CPUs (session 38). NUMA
balancing's task moves and restarts leave CPUs idle for a while (0.13 ms and 1.2-5 ms measured on
384 CPUs), so neither is divided. A policy that rebalances every ``rebalance_period`` (ESXi) does
work at each of its ticks: 2.8-6.6 us per CPU measured at a 1 ms period on 16- and 32-CPU machines,
so 10 us is used. Measured against every shipped scenario and validation case by
``benchmarks/bench_budget.py`` (docs/performance.md, "The run budget's estimate").

Workloads can ask for more: a request costs about two events (pacific: 128,180 events for 61,749
requests, everything included), at most as many per second as a thread can finish (its think time
plus the request's operations at idle memory latency and its share of the CPUs); an open pod's
arrivals are events whatever its threads can take, and queue when they cannot; a stop-the-world
pause blocks and wakes every thread of its pod. Each sample costs about 0.4 ms plus 0.5 us per
sampled value (measured: 2 threads on 44 CPUs 0.4 ms, 80 threads on 112 CPUs 1.0 ms, 1,700 values).

Memory is what a run allocates and keeps: the samples (the sampled values, plus about 4 KiB each for
the time series built from them: measured 4.3 and 16.5 KiB a sample on the same two scenarios),
queued requests, the chunk store (24 bytes per 2 MiB of pod memory), and per pod its response-time
histograms (16 KiB per measurement window) and the random numbers drawn ahead for its arrivals (16
KiB). The samples are at most the scenario's ``sample_memory`` (:mod:`numasim.sim.sampling`), so a
long run costs fewer of them than its ``sample_interval`` asks. The calling process keeps every
variant's first-seed series in the result, and an output built from them takes more
(``OUTPUT_COPIES``): that is checked against the memory limit too; the report takes about 2.7 ms of
CPU per pod and variant (session 31: 2,500 one-thread pods, two variants, 13.7 s), so 3 ms is used.

The scheduling domains (every policy is counted as building them) keep each node's span at each NUMA
level: 64 bytes for each CPU of each (node, level) span (2.1 GB measured for 32 million on 2,048
CPUs, 128 nodes and 245 distances, session 25), and the compiled wake-up placement's tables a few
numbers per CPU and level and the distances between nodes. Building them costs each run 20 us per
CPU and level and 2 us per CPU of a span (measured: up to 10 and 1, session 30).

A pod whose CPU limit is below its threads can be throttled (CFS bandwidth control): every change of
a CPU's load then recomputes when each limited pod sharing it runs out of quota, measured (session
28, 250 and 1,000 one-thread pods of 1m on 8 CPUs) at about 60 us a reshare plus 0.5 us per limited
thread on the CPU, about 3 reshares a simulated event; the estimate's events are already several
times a run's (7x here), so 60 us plus 0.5 us per limited thread a CPU is added to each (estimated
6.3 and 34 s for those runs' 5.2 and 19 s), for variants that can set a quota: the kubelet's with
``cfs_quota`` on, and policies from outside numasim.

Every pod's arrival costs about 1 ms whatever the duration (admission, memory regions: 0.9 ms
measured at 2,500 one-thread pods) and each of its threads about 0.5 ms more (placing it: 0.14-0.39
ms measured on 112 and 384 CPUs, 250 pods of 40 threads and 2,500 of 4, session 38), plus 4 us for
each thread per CPU of the machine: placing a thread re-solves its CPU's runqueue, which on an SMT
machine walks every thread queued there (on a 2 x 28-core SMT machine 0.35 ms a thread at 4 threads
a CPU, 0.54 ms at 89, 1.0 ms at 357: 1.9 us more for each). A thread started anew
(``restart_interval_ms``) is placed again: 0.10-0.14 ms measured on the same machines, so 0.2 ms is
used besides its two events, plus the same 4 us per thread a CPU. And pods arriving at distinct
times (a ``stagger``) each re-solve the rates of the threads already running: about 1 us a thread
(session 29: 2,500 and 5,000 pods 1 ns apart cost 2.2 and 11 s more than at once), so a staggered
group adds replicas x half the threads x 1 us.

NUMA balancing scans each process at most every tick (10 ms) and at most every shortest scan period
(``scan_period_min_ms`` over the process's scan windows, never under ``scan_size_mb`` at 2,560
MB/s): about 150 us of CPU a scan (session 31: 4,096 one-thread processes scanned every tick,
360,811 scans in 62 s). With memory tiering, each chunk of a scan on a slow node is a fault in
Python (about 30 us), and a tick that must make room demotes after walking every chunk on that node
(160 ns a chunk measured, 200 ns used; once per CPU node and tick with a scan). All three are
counted at their most (every process at its shortest period, every scanned chunk slow, a walk in
each tick with a scan): NUMA balancing's scans as measured, tiering several times high (56 pods
bound to one node of the Sapphire Rapids + CXL preset: 59 s estimated for 4.7 s, session 31's
review; its slow-tier chunks are a tenth of those scanned).
"""

from __future__ import annotations

import numpy as np

from .budget_limits import DEFAULT_MAX_WORK_S, MAX_MEMORY_BYTES, PARTS, Estimate, check_budget, combine
from .model.machine import Machine
from .model.scenario import Scenario, Variant
from .model.workload import WorkloadProfile
from .policies.api import CHUNK, MAX_TICKS_PER_S
from .policies.numab_period import MAX_SCAN_WINDOW_MB_S
from .sim.cpu import TOUCH_STEP
from .sim.rates import REFRESH_NS
from .sim.sampling import MIN_SAMPLES

__all__ = ["Estimate", "estimate", "combine", "check_budget", "PARTS", "DEFAULT_MAX_WORK_S", "MAX_MEMORY_BYTES"]

EVENTS_PER_THREAD_S = 100.0  # a thread that blocks (requests, a lock)
EVENTS_PER_RUNNING_THREAD_S = 10.0  # a thread that never blocks
DEFAULT_TICKS_PER_S = 1000.0  # a policy's ticks a second when its options say neither hz nor a rebalance period
NUMAB_TICKS_PER_S = 100.0  # NUMA balancing's own tick (every 10 ms), apart from the scheduler's
REFRESHES_PER_S = 1e9 / REFRESH_NS  # the rate solve's refresh, an event each
# Building the scheduling domains and wake-up tables, once a run (session 30): 2.0 s on 64 x 1,024 CPUs
# (3 levels, 4.2 M span CPUs), 0.07 s on 16 x 256, 14 s on 1,024 CPUs in 128 nodes with 244 distances
# (16 M span CPUs): up to 10 us per CPU and level and 1 us per span CPU, so 20 us and 2 us.
DOMAINS_CPU_S_PER_CPU_LEVEL = 2e-5
DOMAINS_CPU_S_PER_SPAN = 2e-6
REPORT_CPU_S_PER_POD = 3e-3  # --report's figures, per pod and variant
NUMAB_SCAN_CPU_S = 1.5e-4  # a NUMA balancing scan of one process
TIER_FAULT_CPU_S = 3e-5  # a hinting fault on a slow-tier chunk (promotion, in Python)
DEMOTE_CPU_S_PER_CHUNK = 2e-7  # the coldest-first walk of a node's chunks before a demotion
BALANCER_CPU_S_PER_CPU_LEVEL_S = 5e-4  # the periodic balancer's work per simulated second, per CPU and domain level
REBALANCE_CPU_S_PER_CPU = 1e-5  # a rebalance_period policy's (ESXi's) work at each tick, per CPU of the machine
CPU_S_PER_EVENT = 40e-6
EVENTS_PER_REQUEST = 2.0
SAMPLE_CPU_S = 4e-4  # per sample, plus SAMPLE_CPU_S_PER_VALUE per sampled value
QUOTA_CPU_S_PER_EVENT = 6e-5  # with a binding CPU limit: its quota bookkeeping, per event
QUOTA_CPU_S_PER_LIMITED_THREAD = 5e-7  # and per event, per limited thread a CPU
SAMPLE_CPU_S_PER_VALUE = 5e-7
# A pod's arrival (admission, regions, plans, placing its threads): 0.9 ms each measured at 2,500
# one-thread pods. Arrivals at distinct times (a stagger) each re-solve the rates of the threads
# already there: 0.7-1.1 us a thread measured at 2,500 and 5,000 pods 1 ns apart.
ARRIVAL_CPU_S = 1e-3
ARRIVAL_CPU_S_PER_THREAD = 5e-4  # placing each of its threads
PLACE_CPU_S_PER_QUEUED = 4e-6  # and for each thread a CPU (the runqueue each placement re-solves)
RESTART_CPU_S_PER_THREAD = 2e-4  # placing a thread started anew, besides its two events
ARRIVAL_SOLVE_CPU_S_PER_THREAD = 1e-6
SAMPLE_BYTES_PER_VALUE = 8 * 1.25  # the arrays, and the series built from them
SAMPLE_BYTES = 4096  # per sample, whatever its size
# What building an output from the kept time series takes, in copies of them (session 30, one run of
# 256 MiB of samples: --trace +363 MB, --json +107 MB, --report +103 MB; CSV holds no series).
OUTPUT_COPIES = {"trace": 2.0, "json": 1.0, "report": 1.0}
QUEUED_REQUEST_BYTES = 40  # an arrival time waiting in an open pod's queue
DOMAIN_BYTES_PER_CPU = 64  # a CPU of one node's span at one NUMA level (policies/domains.py), all copies
# Per pod: its response-time histogram (N_BINS 4-byte counts, one per measurement window: the run's and
# each SLA level's) and its two rows of random numbers drawn ahead for arrivals (2 x 1,024 floats).
HISTOGRAM_BYTES = 4096 * 4
POD_DRAW_BYTES = 2 * 1024 * 8
# A CPU id in a cpuset (a frozenset of ints) a policy keeps: 96 bytes measured (tracemalloc, 50 sets of 2,048
# ids above 256, so each int is an object of its own; smaller ids are shared, so this errs high).
CPUSET_BYTES_PER_ID = 96.0
SAMPLED_PER_THREAD = 16 + 1  # counters sampled per thread, plus its row of per-node misses per node
def estimate(scenario: Scenario, variants: list[Variant], duration_ns: int | None, with_sla: bool,
             outputs: tuple[str, ...] = ()) -> Estimate:
    """Estimate the cost of running ``variants`` (replications and, if asked, the SLA search), and of
    building ``outputs`` ("json", "csv", "report", "trace") from the result."""
    spec = scenario.spec
    dur_s = (duration_ns if duration_ns is not None else spec.duration) / 1e9
    n_samples = dur_s / (min(spec.sample_interval, duration_ns or spec.duration) / 1e9) + 3
    # The SLA ladder goes on from the first seed's run: a step per level (settle, then measure).
    ladder_s = 0.0
    overload_s = 0.0  # seconds x excess rate over what the threads reached: requests left in queues
    if with_sla and spec.sla is not None:
        step_s = (spec.sla.step_ns((duration_ns or spec.duration) - spec.warmup) + spec.sla.settle) / 1e9
        ladder_s = sum(max(1.0, lv) for lv in spec.sla.levels) * step_s  # arrivals scale with the level
        overload_s = sum(max(0.0, lv - 1.0) for lv in spec.sla.levels) * step_s
    events = 0.0
    memory = 0.0
    runs = 0
    parts = dict.fromkeys(PARTS, 0.0)  # CPU seconds by part, but the events' (counted at the end)
    kept = 0.0
    copies = 1.0 + sum(OUTPUT_COPIES.get(o, 0.0) for o in outputs)
    for v in variants:
        machine = scenario.machine_of(v)
        pods = scenario.pods_of(v)
        profiles = scenario.profiles_of(v)
        # Every thread of a pod: its workers and its processes' collector threads (gc_threads).
        pod_threads = [p.threads + (profiles[p.profile].gc_threads or 0) * p.processes for p in pods]
        # Pods a CPU quota may throttle: a limit below their threads, under a policy that can set one.
        throttled = [_may_throttle(v) and p.cpus < k for p, k in zip(pods, pod_threads)]
        threads = sum(p.replicas * k for p, k in zip(pods, pod_threads))
        n_pods = sum(p.replicas for p in pods)
        share = min(1.0, machine.n_cpus / max(threads, 1))  # of a CPU, at most, for each thread
        per_s = (_ticks_per_s(v.options) if _ours(v) else MAX_TICKS_PER_S) + REFRESHES_PER_S
        queued = 0.0
        restarts_s = 0.0  # CPU seconds a simulated second of placing restarted threads
        place_s = PLACE_CPU_S_PER_QUEUED * threads / machine.n_cpus  # placing one thread, beyond its fixed cost
        for p, k, limited in zip(pods, pod_threads, throttled):
            pr = profiles[p.profile]
            per_s += p.replicas * _pod_events_per_s(pr, k, machine, share, limited)
            if pr.restart_interval_ms is not None:
                per_restart = RESTART_CPU_S_PER_THREAD + place_s
                restarts_s += p.replicas * p.threads / (_shortest_restart_ms(pr) / 1e3) * per_restart
            if pr.requests is not None and pr.requests.mode == "open":
                queued += p.replicas * pr.requests.rate_per_s * dur_s
            # Levels above 1 offer more than the threads reached: the queue grows by the excess.
            queued += overload_s * p.replicas * p.threads * _closed_requests_per_s(pr, machine, share)
        n = spec.replications
        runs += n
        events += (n * dur_s + ladder_s) * per_s + n * sum(p.replicas * p.memory for p in pods) / TOUCH_STEP
        limited = sum(p.replicas * k for p, k, lim in zip(pods, pod_threads, throttled) if lim)
        if limited:
            parts["quota"] += (n * dur_s + ladder_s) * per_s * (
                QUOTA_CPU_S_PER_EVENT + QUOTA_CPU_S_PER_LIMITED_THREAD * limited / machine.n_cpus)
        # Pods arriving together share one solve; a staggered group arrives at as many times as replicas.
        solves = sum(p.replicas if p.stagger > 0 else 1 for p in pods)
        parts["arrivals"] += n * (n_pods * ARRIVAL_CPU_S + threads * (ARRIVAL_CPU_S_PER_THREAD + place_s)
                          + solves * threads / 2 * ARRIVAL_SOLVE_CPU_S_PER_THREAD)
        parts["restarts"] += (n * dur_s + ladder_s) * restarts_s
        if "report" in outputs:
            parts["report"] += n_pods * REPORT_CPU_S_PER_POD  # (the report shows each variant's first seed)
        parts["domains"] += n * _domains_cpu_s(machine)  # built by each run
        parts["balancer"] += ((n * dur_s + ladder_s) * machine.n_cpus * _levels(machine) * BALANCER_CPU_S_PER_CPU_LEVEL_S
                       / (v.options.busy_factor if _always_busy(v, pods, profiles, machine) else 1))
        parts["rebalance"] += (n * dur_s + ladder_s) * _rebalances_per_s(v.options) * machine.n_cpus * REBALANCE_CPU_S_PER_CPU
        if _ours(v):
            parts["numab"] += (n * dur_s + ladder_s) * _numab_cpu_s_per_s(v.options, pods, machine)
        n_nodes = machine.n_nodes
        row = threads * (SAMPLED_PER_THREAD + n_nodes) + n_pods * (n_nodes + 2) + machine.n_cpus + 2 * n_nodes ** 2
        # A run keeps at most sample_memory of samples (8 bytes a value), sampling less often beyond it.
        rows = min(n_samples, max(MIN_SAMPLES, spec.sample_memory // (8 * row)))
        parts["samples"] += n * rows * (SAMPLE_CPU_S + row * SAMPLE_CPU_S_PER_VALUE)
        events += n * rows
        chunks = sum(p.replicas * p.memory for p in pods) / CHUNK
        windows = 1 + (len(spec.sla.levels) if with_sla and spec.sla is not None else 0)
        kept += copies * rows * (row * SAMPLE_BYTES_PER_VALUE + SAMPLE_BYTES)  # its first seed's, in the result
        memory = max(memory, rows * (row * SAMPLE_BYTES_PER_VALUE + SAMPLE_BYTES) + chunks * 24.0 + _domain_bytes(machine)
                     + queued * QUEUED_REQUEST_BYTES + n_pods * (windows * HISTOGRAM_BYTES + POD_DRAW_BYTES)
                     + _cpuset_ids(v.options, machine.n_cpus) * CPUSET_BYTES_PER_ID)
    parts["events"] = events * CPU_S_PER_EVENT
    return Estimate(runs=runs, events=events, cpu_seconds=sum(parts.values()), run_memory_bytes=memory, kept_bytes=kept,
                    parts=tuple(parts.items()))


def _cpuset_ids(options, n_cpus: int) -> int:
    """CPU ids in the distinct cpulists of a policy's ``cpus`` option (taskset's) or ``physcpubind``
    (numactl's), each a set every simulation keeps (a list written twice is one set); 0 for a policy
    without one."""
    from .model.cpulist import distinct_cpulists

    cpus = getattr(options, "cpus", None)
    if not isinstance(cpus, list):
        cpus = getattr(options, "physcpubind", None)
    if not isinstance(cpus, list):
        return 0
    try:
        return sum(map(len, distinct_cpulists(cpus, n_cpus).values()))
    except ValueError:
        return 0  # (a malformed list: the policy's check refuses the scenario)


def _ours(v: Variant) -> bool:
    """Whether a variant's policy is one of numasim's (a plug-in's ticks and quotas are not known ahead)."""
    return v.policy.__module__.startswith("numasim.")


def _blocks(pr: WorkloadProfile) -> bool:
    """Whether a profile's threads block: their work comes in requests, or they wait for a lock."""
    return pr.requests is not None or pr.lock_cycles_per_op > 0


def _always_busy(v: Variant, pods: list, profiles: dict, machine: Machine) -> bool:
    """Whether every CPU stays busy, so that each balances at its busy interval (``busy_factor`` times
    its idle one): numasim's CFS (no affinity, no quota) without NUMA balancing (whose task moves leave
    CPUs idle for a while), with at least as many threads as CPUs, every one there from the start and
    never blocking (no requests, locks, pauses, restarts, nor a main thread's touch to wait for), and
    memory that fits the machine (no OOM kill leaves CPUs idle)."""
    o = v.options
    if not _ours(v) or v.policy.name != "cfs" or any(p.start > 0 or p.stagger > 0 for p in pods):
        return False
    if getattr(o, "numa_balancing", False) is True or getattr(o, "numa_balancing_tiering", False) is True:
        return False
    if any(_blocks(pr) or pr.pause_interval_ms is not None or pr.restart_interval_ms is not None or pr.touch == "main"
           for pr in (profiles[p.profile] for p in pods)):
        return False
    if sum(p.replicas * p.memory for p in pods) > int(machine.node_memory.sum()):
        return False
    return sum(p.replicas * p.threads for p in pods) >= machine.n_cpus


def _may_throttle(v: Variant) -> bool:
    """Whether a variant can give its pods a CFS quota: the kubelet's with ``cfs_quota`` on, or any
    policy from outside numasim (a plug-in may); numasim's others never do."""
    return not _ours(v) or getattr(v.options, "cfs_quota", False) is True


def _ticks_per_s(options: object) -> float:
    """A policy's tick events per simulated second, at most: its ``hz`` (CFS and the policies built on it:
    the balancer ticks only when a domain is due, at most once a jiffy), or one per ``rebalance_period``
    (ESXi), else 1,000; plus NUMA balancing's own 10 ms tick where it is on."""
    hz = getattr(options, "hz", None)
    rates = [float(hz)] if isinstance(hz, (int, float)) and hz > 0 else []
    rebalances = _rebalances_per_s(options)
    if rebalances:
        rates.append(rebalances)
    ticks = max(rates) if rates else DEFAULT_TICKS_PER_S
    if getattr(options, "numa_balancing", False) is True or getattr(options, "numa_balancing_tiering", False) is True:
        ticks += NUMAB_TICKS_PER_S
    return ticks


def _numab_cpu_s_per_s(options: object, pods: list, machine: Machine) -> float:
    """NUMA balancing's scans, memory tiering's faults and demotions: CPU a simulated second, at most."""
    tiering = getattr(options, "numa_balancing_tiering", False) is True and machine.n_nodes > len(machine.cpu_nodes)
    if not (getattr(options, "numa_balancing", False) is True or tiering):
        return 0.0
    size_mb = float(options.scan_size_mb)
    floor_ms = 1000.0 * size_mb / MAX_SCAN_WINDOW_MB_S
    budget = max(1.0, size_mb * 2**20 // CHUNK)
    cpu_s = scans_s = 0.0
    for p in pods:
        rss = p.memory / p.processes
        windows = max(1.0, np.ceil(rss / (size_mb * 2**20)))
        scans = min(NUMAB_TICKS_PER_S, 1000.0 / max(floor_ms, float(options.scan_period_min_ms) / windows))
        per_scan = NUMAB_SCAN_CPU_S + (min(budget, rss / CHUNK) * TIER_FAULT_CPU_S if tiering else 0.0)
        cpu_s += p.replicas * p.processes * scans * per_scan
        scans_s += p.replicas * p.processes * scans
    if tiering and getattr(options, "demotion_enabled", False) is True:
        # A walk per CPU node in each tick with a scan.
        chunks = sum(p.replicas * p.memory for p in pods) / CHUNK
        cpu_s += min(NUMAB_TICKS_PER_S, scans_s) * len(machine.cpu_nodes) * chunks * DEMOTE_CPU_S_PER_CHUNK
    return cpu_s


def _rebalances_per_s(options: object) -> float:
    """Rebalances a second of a policy that rebalances every ``rebalance_period`` (ESXi); 0 for others."""
    period = getattr(options, "rebalance_period", None)
    return 1e9 / period if isinstance(period, (int, float)) and period > 0 else 0.0


def _levels(machine: Machine) -> int:
    """The scheduling-domain levels a machine can have (:mod:`numasim.policies.domains`): SMT, the LLC,
    the node, one per distance between nodes with CPUs."""
    cpus = list(machine.cpu_nodes)
    distances = set(np.unique(machine.distance[np.ix_(cpus, cpus)]).tolist()) - {10}
    return (1 if machine.smt else 0) + 2 + len(distances)


def _spans(machine: Machine) -> float:
    """The CPUs of every node's span at every NUMA level, summed: what the domains hold and their building walks."""
    cpus = list(machine.cpu_nodes)
    d = machine.distance[np.ix_(cpus, cpus)]
    per_node = np.array([int(np.count_nonzero(machine.cpu_node == n)) for n in cpus], dtype=np.float64)
    levels = sorted(set(np.unique(d).tolist()) - {10})
    return sum(float(((d <= lv) @ per_node).sum()) for lv in levels)


def _domains_cpu_s(machine: Machine) -> float:
    """CPU time to build the scheduling domains and the wake-up tables on ``machine``, once a run."""
    return machine.n_cpus * _levels(machine) * DOMAINS_CPU_S_PER_CPU_LEVEL + _spans(machine) * DOMAINS_CPU_S_PER_SPAN


def _domain_bytes(machine: Machine) -> float:
    """Memory of the scheduling domains and the wake-up tables built on ``machine`` (module docstring)."""
    wake = (_levels(machine) + 4) * machine.n_cpus + machine.n_nodes ** 2  # rows of the CPUs, the distances
    return _spans(machine) * DOMAIN_BYTES_PER_CPU + 8.0 * wake


def _pod_events_per_s(pr: WorkloadProfile, threads: int, machine: Machine, share: float, limited: bool) -> float:
    """Events per simulated second of one pod: its threads' slices and wake-ups, its requests, its pauses
    (``limited``: a CPU quota below its threads may throttle it, and each throttle is an event)."""
    req = pr.requests
    per_thread = max(EVENTS_PER_THREAD_S if _blocks(pr) or limited else EVENTS_PER_RUNNING_THREAD_S,
                     EVENTS_PER_REQUEST * _closed_requests_per_s(pr, machine, share))
    per_s = threads * per_thread
    if req is not None and req.mode == "open":
        per_s += EVENTS_PER_REQUEST * req.rate_per_s  # arrivals, whether or not the threads keep up
    if pr.pause_interval_ms is not None:
        per_s += 2.0 * (threads + 1) / max(pr.pause_interval_ms / 1e3, 1e-9)  # every thread blocks and wakes
    if pr.restart_interval_ms is not None:
        per_s += 2.0 * threads / (_shortest_restart_ms(pr) / 1e3)  # every worker ends and starts anew, at the shortest interval
    return per_s


def _shortest_restart_ms(pr: WorkloadProfile) -> float:
    """A profile's shortest interval between restarts (its field may list several), at least a
    simulated nanosecond."""
    given = pr.restart_interval_ms
    return max(min(given) if isinstance(given, list) else given, 1e-6)


def _closed_requests_per_s(pr: WorkloadProfile, machine: Machine, share: float) -> float:
    """The most requests per second a thread of a closed-loop profile can finish (0 for others).

    The fastest a thread can go: its share of a CPU, memory at idle latency.
    """
    req = pr.requests
    if req is None or req.mode != "closed":
        return 0.0
    mlp = machine.stream_mlp if pr.mlp == "hardware" else min(float(pr.mlp), machine.thread_mlp)
    stall = pr.dependent_fraction + (1.0 - pr.dependent_fraction) / max(mlp, 1.0)
    op_s = (pr.cycles_per_op / machine.spec.frequency_ghz
            + pr.llc_misses_per_op * machine.spec.local_latency_ns * stall) / 1e9
    # At most one a simulated nanosecond (the clock's step), whatever tiny values the fields take.
    return 1.0 / max(req.think_ms / 1e3 + req.ops * op_s / share, 1e-9)
