"""Metrics derived from a run's trace over the measurement window (pure).

Throughput is operations per second in the window ``[warmup, duration]``;
locality is the share of last-level-cache misses served by the DRAM of the
node the thread ran on at the time, weighted by misses (what PMU counters and
esxtop N%L report; not numastat's allocation counts).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..sim.perf import LINE
from .confidence import half_width
from ..sim.trace import Trace

__all__ = ["PodMetrics", "Metrics", "summarize", "combine"]


@dataclass(frozen=True)
class PodMetrics:
    """One pod's results over the window."""

    name: str
    group: str
    status: str
    reason: str
    throughput: float
    locality: float | None
    cpu_seconds: float
    runqueue_wait: float | None
    migrations: int
    cross_node_migrations: int
    pages_migrated_bytes: int
    throttled_seconds: float
    latency: dict[str, float] | None
    memory_per_node_bytes: list[int]
    placement: dict = field(default_factory=dict)
    throughput_ci: float | None = None  # half-width of the 95 % interval over seeds


@dataclass(frozen=True)
class Metrics:
    """A policy variant's results over the window, with per-pod rows and time series."""

    label: str
    policy: str
    throughput: float
    locality: float | None
    cpu_utilisation: float
    memory_gbps: float
    runqueue_wait: float | None
    migrations: int
    cross_node_migrations: int
    pages_migrated_bytes: int
    hinting_faults: int
    numa_task_moves: int
    kernel_cpu_seconds: float
    throttled_seconds: float
    latency: dict[str, float] | None
    pods: list[PodMetrics]
    timeseries: dict[str, list]
    events: list[tuple[float, str, str]]
    window_s: tuple[float, float]
    sim_events: int
    rate_solves: int
    seeds: list[int] = field(default_factory=list)
    replicates: list[dict[str, float | None]] = field(default_factory=list)
    links: list[str] = field(default_factory=list)  # the interconnect links, in the order of timeseries' link_gbps
    pages_promoted_bytes: int = 0  # memory tiering: moved from CPU-less nodes to CPU nodes in the window
    pages_demoted_bytes: int = 0  # and from CPU nodes to CPU-less nodes


PERCENTILES = {"p50_ms": 50.0, "p90_ms": 90.0, "p99_ms": 99.0, "p999_ms": 99.9}


def _mean_latency(items: list[dict | None]) -> dict[str, float] | None:
    rows = [x for x in items if x is not None]
    if not rows:
        return None
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}


def _mean(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def combine(runs: list[Metrics], seeds: list[int]) -> Metrics:
    """Average replications of one variant (different seeds) into one :class:`Metrics`.

    Scalars and per-pod values are means over the replications; ``replicates``
    keeps each seed's throughput and locality, from which the spread is derived.
    """
    first = runs[0]
    pods = []
    for i, pod in enumerate(first.pods):
        rows = [r.pods[i] for r in runs]
        pods.append(PodMetrics(
            name=pod.name, group=pod.group,
            status=pod.status if all(p.status == pod.status for p in rows) else "mixed",
            reason=pod.reason,
            throughput=float(np.mean([p.throughput for p in rows])),
            locality=_mean([p.locality for p in rows]),
            cpu_seconds=float(np.mean([p.cpu_seconds for p in rows])),
            runqueue_wait=_mean([p.runqueue_wait for p in rows]),
            migrations=int(round(np.mean([p.migrations for p in rows]))),
            cross_node_migrations=int(round(np.mean([p.cross_node_migrations for p in rows]))),
            pages_migrated_bytes=int(round(np.mean([p.pages_migrated_bytes for p in rows]))),
            throttled_seconds=float(np.mean([p.throttled_seconds for p in rows])),
            latency=_mean_latency([p.latency for p in rows]),
            memory_per_node_bytes=pod.memory_per_node_bytes,
            placement=pod.placement,
            throughput_ci=half_width([p.throughput for p in rows]),
        ))
    series = {}
    for key, values in first.timeseries.items():
        if key == "time_s":
            series[key] = values
        else:
            cols = list(zip(*[r.timeseries[key] for r in runs]))
            if cols and isinstance(cols[0][0], list):  # per node: the mean of each node's values
                series[key] = [[round(float(np.mean(v)), 3) for v in zip(*c)] for c in cols]
            else:
                series[key] = [_mean(list(c)) for c in cols]
    return Metrics(
        label=first.label, policy=first.policy,
        throughput=float(np.mean([r.throughput for r in runs])),
        locality=_mean([r.locality for r in runs]),
        cpu_utilisation=float(np.mean([r.cpu_utilisation for r in runs])),
        memory_gbps=float(np.mean([r.memory_gbps for r in runs])),
        runqueue_wait=_mean([r.runqueue_wait for r in runs]),
        migrations=int(round(np.mean([r.migrations for r in runs]))),
        cross_node_migrations=int(round(np.mean([r.cross_node_migrations for r in runs]))),
        pages_migrated_bytes=int(round(np.mean([r.pages_migrated_bytes for r in runs]))),
        hinting_faults=int(round(np.mean([r.hinting_faults for r in runs]))),
        numa_task_moves=int(round(np.mean([r.numa_task_moves for r in runs]))),
        kernel_cpu_seconds=float(np.mean([r.kernel_cpu_seconds for r in runs])),
        throttled_seconds=float(np.mean([r.throttled_seconds for r in runs])),
        latency=_mean_latency([r.latency for r in runs]),
        pods=pods, timeseries=series, events=first.events, window_s=first.window_s, links=first.links,
        pages_promoted_bytes=int(round(np.mean([r.pages_promoted_bytes for r in runs]))),
        pages_demoted_bytes=int(round(np.mean([r.pages_demoted_bytes for r in runs]))),
        sim_events=int(sum(r.sim_events for r in runs)), rate_solves=int(sum(r.rate_solves for r in runs)),
        seeds=list(seeds),
        replicates=[{"seed": sd, **{f: _figure(r, f) for f in REPLICATED}} for sd, r in zip(seeds, runs)],
    )


REPLICATED = ("throughput", "locality", "cpu_utilisation", "memory_gbps", "p99_ms", "migrations",
              "cross_node_migrations")
"""The figures kept per seed (``Metrics.replicates``), from which their confidence intervals come."""


def _figure(m: Metrics, name: str) -> float | None:
    return (m.latency or {}).get(name) if name.endswith("_ms") else getattr(m, name)


def _ratio(num: float, den: float) -> float | None:
    return float(num / den) if den > 0 else None


def summarize(trace: Trace, label: str) -> Metrics:
    """Derive :class:`Metrics` from ``trace`` over its measurement window."""
    t = trace.sample_times
    s = trace.samples
    i0 = int(np.searchsorted(t, trace.warmup_ns))
    i1 = int(np.searchsorted(t, trace.duration_ns))
    win_s = (t[i1] - t[i0]) / 1e9

    def delta(key: str) -> np.ndarray:
        return s[key][i1] - s[key][i0]

    ops, cpu, wait = delta("ops"), delta("cpu"), delta("wait")
    miss, miss_local = delta("miss"), delta("miss_local")
    moves, xmoves = delta("moves"), delta("xmoves")
    pages = delta("pages_moved")
    throttled = delta("throttled")
    lat = trace.latencies  # requests completed in the window (the warm-up's are not kept)
    busy = delta("cpu_busy")
    # DRAM traffic: each miss reads a line; write_fraction of them also write one back.
    line_bytes = np.zeros(len(miss))
    for pod in trace.pods:
        line_bytes[list(pod.all_tids)] = LINE * (1.0 + pod.profile.write_fraction)
    # Operations are the workers' (a collector thread's work is no operation); everything else
    # counts every thread of the pod, collector threads included, as hardware counters would.
    workers = np.array(sorted(t for pod in trace.pods for t in pod.tids), dtype=np.int64)
    pod_mem = s["pod_memory"][i1]
    pods: list[PodMetrics] = []
    for pod in trace.pods:
        tids = list(pod.all_tids)
        adm = pod.admission
        pods.append(PodMetrics(
            name=pod.name,
            group=pod.group,
            status=pod.status,
            reason=pod.reason,
            throughput=float(ops[list(pod.tids)].sum() / win_s) if pod.tids else 0.0,
            locality=_ratio(miss_local[tids].sum(), miss[tids].sum()) if tids else None,
            cpu_seconds=float(cpu[tids].sum() / 1e9) if tids else 0.0,
            runqueue_wait=_ratio(wait[tids].sum(), wait[tids].sum() + cpu[tids].sum()) if tids else None,
            migrations=int(moves[tids].sum()) if tids else 0,
            cross_node_migrations=int(xmoves[tids].sum()) if tids else 0,
            pages_migrated_bytes=int(pages[pod.index]),
            throttled_seconds=float(throttled[pod.index] / 1e9),
            latency=lat.summary([pod.index], PERCENTILES, win_s),
            memory_per_node_bytes=[int(x) for x in pod_mem[pod.index]],
            placement=dict(adm.info) if adm is not None else {},
        ))
    # Time series over every sample interval (the whole run, warm-up included).
    dt = np.diff(t) / 1e9
    d_ops = np.diff(s["ops"], axis=0)
    pod_thr = np.zeros((len(dt), len(trace.pods)))
    for j, pod in enumerate(trace.pods):
        if pod.tids:
            with np.errstate(divide="ignore", invalid="ignore"):
                pod_thr[:, j] = d_ops[:, list(pod.tids)].sum(axis=1) / dt
    d_miss = np.diff(s["miss"], axis=0)
    d_local = np.diff(s["miss_local"], axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        thr = d_ops[:, workers].sum(axis=1) / dt
        loc = np.where(d_miss.sum(axis=1) > 0, d_local.sum(axis=1) / d_miss.sum(axis=1), np.nan)
    timeseries = {
        "time_s": [float(x) for x in t[1:] / 1e9],
        "throughput": [float(x) for x in thr],
        "locality": [None if np.isnan(x) else float(x) for x in loc],
        "cross_node_migrations": [int(x) for x in np.diff(s["xmoves"].sum(axis=1))],
        "pages_migrated_bytes": [int(x) for x in np.diff(s["pages_moved"].sum(axis=1))],
        "hinting_faults": [int(x) for x in np.diff(s["faults"].sum(axis=1))],
        "numa_task_moves": [int(x) for x in np.diff(s["numa_moves"].sum(axis=1))],
        # At each interval's end (the solver's loads then): DRAM traffic per node (reads and
        # write-backs), the busiest interconnect link's utilisation, mean loaded latencies.
        "node_gbps": [[round(float(x), 3) for x in row] for row in s["node_load"][1:]],
        "link_util_max": [float(row.max()) if row.size else 0.0 for row in s["link_util"][1:]],
        # The busiest memory node's utilisation: its memory's, or a CPU-less node's port's if higher.
        "node_util_max": [float(row.max()) if row.size else 0.0 for row in s["node_util"][1:]],
        # The busiest chiplet link's utilisation (0 on machines without chiplet links).
        "chiplet_util_max": [float(row.max()) if row.size else 0.0 for row in s["chiplet_util"][1:]],
        # The lines the busiest CPU node's threads would keep in flight unthrottled, over its limit
        # (Machine.inflight_lines): above 1 the limit binds and throttles them.
        "lines_demand_max": [float(row.max()) if row.size else 0.0 for row in s["lines_demand"][1:]],
        # The busiest process-wide lock's share of the time held (0 without locks).
        "lock_util_max": [float(row.max()) if row.size else 0.0 for row in s["lock_util"][1:]],
        # Each interconnect link's traffic in its direction (GB/s), in the order of ``links``.
        "link_gbps": [[round(float(x), 3) for x in row] for row in s["link_traffic"][1:]],
        # Each pod's operations per second (the order of ``pods``).
        "pod_throughput": [[round(float(x), 3) for x in row] for row in pod_thr],
        "latency_local_ns": [float(x) for x in s["lat_local"][1:]],
        "latency_remote_ns": [None if np.isnan(x) else float(x) for x in s["lat_remote"][1:]],
    }
    ncpu = trace.machine.n_cpus
    return Metrics(
        label=label,
        policy=trace.policy,
        throughput=float(ops[workers].sum() / win_s),
        locality=_ratio(miss_local.sum(), miss.sum()),
        cpu_utilisation=float(busy.sum() / (ncpu * win_s * 1e9)),
        memory_gbps=float((miss * line_bytes).sum() / win_s / 1e9),
        runqueue_wait=_ratio(wait.sum(), wait.sum() + cpu.sum()),
        migrations=int(moves.sum()),
        cross_node_migrations=int(xmoves.sum()),
        pages_migrated_bytes=int(pages.sum()),
        hinting_faults=int(delta("faults").sum()),
        numa_task_moves=int(delta("numa_moves").sum()),
        kernel_cpu_seconds=float(delta("kernel").sum() / 1e9),
        throttled_seconds=float(throttled.sum() / 1e9),
        latency=lat.summary([p.index for p in trace.pods], PERCENTILES, win_s),
        pods=pods,
        timeseries=timeseries,
        events=[(e[0] / 1e9, e[1], e[2]) for e in trace.events],
        window_s=(float(t[i0] / 1e9), float(t[i1] / 1e9)),
        links=trace.machine.interconnect.names,
        pages_promoted_bytes=int(delta("promoted").sum()),
        pages_demoted_bytes=int(delta("demoted").sum()),
        sim_events=trace.n_events,
        rate_solves=trace.n_solves,
    )
