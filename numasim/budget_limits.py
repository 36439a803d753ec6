"""A run's estimated cost (:class:`Estimate`, by part: :data:`PARTS`), summed over runs (:func:`combine`),
and the budget that refuses it (:func:`check_budget`). :mod:`numasim.budget` makes the estimate."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from .errors import Problem, ScenarioError

__all__ = ["Estimate", "PARTS", "combine", "check_budget", "DEFAULT_MAX_WORK_S", "MAX_MEMORY_BYTES"]

DEFAULT_MAX_WORK_S = 4 * 3600.0  # estimated CPU time above which a run needs --max-work
MAX_MEMORY_BYTES = 8 * 2**30  # estimated memory of one simulation above which it is refused


# What each part of the CPU estimate is, and what makes it smaller (the largest is named when a run is refused).
PARTS = {
    "events": ("the simulated events (threads, requests, ticks)", "shorten duration, lower replications or pods"),
    "balancer": ("the periodic load balancer's work on every CPU, counted at its worst case unless every CPU stays busy",
                 "shorten duration or lower replications"),
    "numab": ("NUMA balancing's scans (and memory tiering's faults), counted at the shortest scan period",
              "raise scan_period_min_ms or shorten duration"),
    "samples": ("taking the samples", "use a longer sample_interval"),
    "quota": ("the CPU quota's bookkeeping for pods whose cpu_limit is below their threads",
              "shorten duration or give the pods fewer threads than their cpu_limit"),
    "arrivals": ("the pods' arrivals and their threads' placement", "lower the pods or their threads"),
    "restarts": ("placing the threads started anew (restart_interval_ms)", "use a longer restart_interval_ms"),
    "rebalance": ("the policy's rebalancing every rebalance_period", "use a longer rebalance_period"),
    "domains": ("building the scheduling domains", "lower replications or use a smaller machine"),
    "report": ("building the report", "leave out --report"),
}


@dataclass(frozen=True)
class Estimate:
    """The estimated cost of running some variants of a scenario."""

    runs: int
    events: float
    cpu_seconds: float
    run_memory_bytes: float  # the largest single simulation's
    kept_bytes: float = 0.0  # what the calling process keeps: every variant's first-seed time series, and outputs
    parts: tuple[tuple[str, float], ...] = ()  # cpu_seconds by part (PARTS' keys)

    def describe(self) -> str:
        plural = "s" if self.runs != 1 else ""
        return (f"{self.runs} simulation{plural}, about {_count(self.events)} events, {_duration(self.cpu_seconds)} of CPU "
                f"in all, up to {_bytes(self.run_memory_bytes)} per simulation")

    def largest(self) -> tuple[str, float]:
        """The part of the CPU estimate that weighs most, and its share of the whole (("", 0.0) if none)."""
        if not self.parts or self.cpu_seconds <= 0:
            return "", 0.0
        name, seconds = max(self.parts, key=lambda kv: kv[1])
        return name, seconds / self.cpu_seconds


def _count(n: float) -> str:
    return f"{n:,.0f}" if n < 1e12 else f"{n:.1e}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 3.6e6:
        return f"{seconds / 3600:,.1f} h"
    years = seconds / (365.25 * 86400)
    return f"{years:,.1f} years" if years < 100 else f"{years:,.0f} years" if years < 1e6 else "over a million years"


def _bytes(n: float) -> str:
    mib = n / 2**20
    return f"{mib:,.0f} MiB" if mib < 2**20 else f"{mib / 2**20:,.0f} TiB" if mib < 2**40 else "over a million TiB"


def combine(estimates: list[Estimate], times: float = 1.0) -> Estimate:
    """The cost of running every estimate's simulations (``times`` over): summed, the memory the largest one's."""
    parts: dict[str, float] = {}
    for e in estimates:
        for name, seconds in e.parts:
            parts[name] = parts.get(name, 0.0) + times * seconds
    return Estimate(runs=int(times * sum(e.runs for e in estimates)), events=times * sum(e.events for e in estimates),
                    cpu_seconds=times * sum(e.cpu_seconds for e in estimates),
                    run_memory_bytes=max((e.run_memory_bytes for e in estimates), default=0.0),
                    kept_bytes=max((e.kept_bytes for e in estimates), default=0.0), parts=tuple(parts.items()))


def check_budget(est: Estimate, max_work_s: float | None, max_memory_bytes: float | None, source: str,
                 what: str = "this run is", fewer: str = "shorten duration, lower replications or pods") -> None:
    """Refuse a run over its budget, with the estimate and the flag that lifts the limit (None: no limit).

    ``what`` names the work estimated, with its verb and ``fewer`` says how to make it smaller (a sweep: fewer points).
    """
    for flag, limit in (("--max-work", max_work_s), ("--max-memory", max_memory_bytes)):
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, numbers.Real)
                                  or math.isnan(limit) or limit <= 0):
            raise ScenarioError(Problem(flag, f"the limit must be a positive number, or None (or inf) for no limit; "
                                              f"got {repr(limit)[:40]}"), source=source)
    if max_work_s is not None and est.cpu_seconds > max_work_s:
        name, share = est.largest()
        most = ""
        if name:
            part, smaller = PARTS[name]
            most = f"; {share:.0%} of it is {part}" if math.isfinite(share) else f"; most of it is {part}"
            if smaller != fewer:
                fewer = f"{smaller}; or {fewer}"
        raise ScenarioError(Problem("--max-work", (
            f"{what} estimated at {est.describe()}, over the budget of {max_work_s:g} CPU seconds{most}; "
            f"{fewer}, or raise the budget with --max-work SECONDS")), source=source)
    if max_memory_bytes is not None and est.run_memory_bytes > max_memory_bytes:
        raise ScenarioError(Problem("--max-memory", (
            f"one simulation is estimated to need {est.run_memory_bytes / 2**30:,.1f} GiB, over the limit of "
            f"{max_memory_bytes / 2**30:g} GiB; use a longer sample_interval or less pod memory, "
            "or raise the limit with --max-memory GiB")), source=source)
    if max_memory_bytes is not None and est.kept_bytes > max_memory_bytes:
        raise ScenarioError(Problem("--max-memory", (
            f"the results kept in this process (every variant's time series, and the outputs built from them) "
            f"are estimated to need {est.kept_bytes / 2**30:,.1f} GiB, over the limit of "
            f"{max_memory_bytes / 2**30:g} GiB; use a longer sample_interval or a smaller sample_memory, fewer "
            "variants or outputs, or raise the limit with --max-memory GiB")), source=source)
