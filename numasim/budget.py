"""What a run will cost, estimated before it starts, and refused above a budget.

The estimate is deliberately simple and errs high. Simulated events come from threads,
time and CPUs. A thread makes about 80-90 events per simulated second in the shipped
scenarios and the scaling benchmark (``benchmarks/bench.py``: pacific 77, 448 two-thread
pods on 8x56 cores 88), so 100 is used. The balancer's ticks add work per CPU. An event
costs 17-41 us of CPU on the benchmark machine (docs/performance.md), so 40 is used.
Memory is what a run allocates up front and keeps: the samples (one row per sample
interval) and the chunk store (24 bytes per 2 MiB of pod memory).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import Problem, ScenarioError
from .model.scenario import Scenario, Variant
from .policies.api import CHUNK

__all__ = ["Estimate", "estimate", "check_budget", "DEFAULT_MAX_WORK_S", "MAX_MEMORY_BYTES"]

EVENTS_PER_THREAD_S = 100.0
EVENTS_PER_CPU_S = 250.0  # a balancer tick per CPU every 4 ms, counted as an event
CPU_S_PER_EVENT = 40e-6
SAMPLED_PER_THREAD = 16 + 1  # counters sampled per thread, plus its row of per-node misses per node
DEFAULT_MAX_WORK_S = 4 * 3600.0  # estimated CPU time above which a run needs --max-work
MAX_MEMORY_BYTES = 8 * 2**30  # estimated memory of one simulation above which it is refused


@dataclass(frozen=True)
class Estimate:
    """The estimated cost of running some variants of a scenario."""

    runs: int
    events: float
    cpu_seconds: float
    run_memory_bytes: float  # the largest single simulation's

    def describe(self) -> str:
        plural = "s" if self.runs != 1 else ""
        return (f"{self.runs} simulation{plural}, about {self.events:,.0f} events, {_duration(self.cpu_seconds)} of CPU "
                f"in all, up to {self.run_memory_bytes / 2**20:,.0f} MiB per simulation")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:,.1f} h"


def estimate(scenario: Scenario, variants: list[Variant], duration_ns: int | None, with_sla: bool) -> Estimate:
    """Estimate the cost of running ``variants`` (replications and, if asked, the SLA search)."""
    spec = scenario.spec
    dur_s = (duration_ns if duration_ns is not None else spec.duration) / 1e9
    n_samples = dur_s / (min(spec.sample_interval, duration_ns or spec.duration) / 1e9) + 3
    levels = len(spec.sla.levels) if with_sla and spec.sla is not None else 0
    events = 0.0
    memory = 0.0
    runs = 0
    for v in variants:
        machine = scenario.machine_of(v)
        pods = scenario.pods_of(v)
        threads = sum(p.replicas * p.threads for p in pods)
        n_pods = sum(p.replicas for p in pods)
        per_run = dur_s * (threads * EVENTS_PER_THREAD_S + machine.n_cpus * EVENTS_PER_CPU_S)
        n = spec.replications + levels
        runs += n
        events += n * per_run
        n_nodes = machine.n_nodes
        row = threads * (SAMPLED_PER_THREAD + n_nodes) + n_pods * (n_nodes + 2) + machine.n_cpus + 2 * n_nodes ** 2
        chunks = sum(p.replicas * p.memory for p in pods) / CHUNK
        memory = max(memory, n_samples * row * 8.0 + chunks * 24.0)
    return Estimate(runs=runs, events=events, cpu_seconds=events * CPU_S_PER_EVENT, run_memory_bytes=memory)


def check_budget(est: Estimate, max_work_s: float | None, max_memory_bytes: float | None, source: str) -> None:
    """Refuse a run over its budget, with the estimate and the flag that lifts the limit (None: no limit)."""
    if max_work_s is not None and est.cpu_seconds > max_work_s:
        raise ScenarioError(Problem("--max-work", (
            f"this run is estimated at {est.describe()}, over the budget of {max_work_s:g} CPU seconds; "
            "shorten duration, lower replications or pods, or raise the budget with --max-work SECONDS")), source=source)
    if max_memory_bytes is not None and est.run_memory_bytes > max_memory_bytes:
        raise ScenarioError(Problem("--max-memory", (
            f"one simulation is estimated to need {est.run_memory_bytes / 2**30:,.1f} GiB, over the limit of "
            f"{max_memory_bytes / 2**30:g} GiB; use a longer sample_interval or less pod memory, "
            "or raise the limit with --max-memory GiB")), source=source)
