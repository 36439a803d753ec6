"""SLA scores: the highest injection rate that keeps a latency percentile under each target.

In the manner of SPECjbb2015's critical-jOPS. Each variant first runs as the scenario
says (closed-loop requests: the saturated, highest throughput, like SPECjbb's high-bound
injection rate). Then, in the same simulation, as SPECjbb's response-time curve follows
its search for that rate in the same JVMs, each request-driven pod is driven open-loop
at Poisson arrival rates that climb through fractions (``levels``) of the rate it
reached, one step per level, and the chosen percentile of the response time is measured
in each step after it settles. For each target, the highest rate whose percentile stays
under it is found by linear interpolation between the levels that bracket the target,
on the measured curve made non-decreasing (a finite window's p99 is noisy); the critical
throughput is the geometric mean of those rates over the targets met at some level.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .metrics import PERCENTILES, Metrics
from ..model.scenario import SlaSpec
from ..sim.trace import PodInstance, ResponseTimes

__all__ = ["SlaSpec", "climb", "score"]

PERCENTILE_KEYS = {"p50": "p50_ms", "p90": "p90_ms", "p99": "p99_ms", "p99.9": "p999_ms"}


class Climbable(Protocol):
    """What the ladder needs of a simulation that has run its closed-loop part."""

    pods: list[PodInstance]

    def drive_open(self, rates_per_s: dict[int, float]) -> None: ...
    def measure(self, since_ns: int) -> ResponseTimes: ...
    def advance(self, until_ns: int) -> None: ...


def climb(sim: Climbable, saturated: Metrics, spec: SlaSpec, start_ns: int, step_ns: int) -> list[tuple[float, float, float | None]]:
    """Drive the request-driven pods of ``sim`` open-loop through ``spec.levels``, lowest first.

    ``saturated`` are the metrics of the closed-loop run that ended at ``start_ns``. Each
    pod's rate at a level is the level times the mean rate its profile's pods reached
    there. Each step lasts ``spec.settle`` plus ``step_ns``; the percentile is read over
    the requests completed in its last ``step_ns``. Returns (level, offered requests per
    second, percentile in ms or None) per level; empty if no request-driven pod completed
    a request.
    """
    done = {p.name: p.latency["requests_per_s"] for p in saturated.pods if p.latency is not None}
    groups: dict[str, list[PodInstance]] = {}
    for pod in sim.pods:
        if pod.name in done and pod.profile.requests is not None:
            groups.setdefault(pod.spec.profile, []).append(pod)
    if not groups:
        return []
    mean = {name: float(np.mean([done[p.name] for p in pods])) for name, pods in groups.items()}
    members = [p.index for pods in groups.values() for p in pods]
    reached = float(sum(done[p.name] for pods in groups.values() for p in pods))
    key = PERCENTILE_KEYS[spec.percentile]
    rungs: list[tuple[float, float, float | None]] = []
    t = start_ns
    for level in sorted(spec.levels):
        sim.drive_open({p.index: max(level * mean[name], 1e-3) for name, pods in groups.items() for p in pods})
        lat = sim.measure(t + spec.settle)
        t += spec.settle + step_ns
        sim.advance(t)
        got = lat.summary(members, {key: PERCENTILES[key]}, step_ns / 1e9)
        rungs.append((level, level * reached, None if got is None else got[key]))
    return rungs


def _monotone(values: list[float]) -> list[float]:
    """The closest non-decreasing sequence (isotonic regression, equal weights).

    A tail percentile measured in a finite window is noisy (a garbage-collection
    pause more or less moves a p99); response time cannot really fall as the
    injection rate rises, so the curve is made monotone before it is searched.
    """
    from scipy.optimize import isotonic_regression  # imported when an SLA is scored, not with numasim

    if not values:
        return []
    return [float(x) for x in isotonic_regression(values, increasing=True).x]


def score(curve: list[tuple[float, float | None]], targets_ms: list[float]) -> dict:
    """Highest rate meeting each target, and their geometric mean.

    ``curve`` holds (requests per second, percentile in ms or None). The
    percentiles are first made non-decreasing in the rate (:func:`_monotone`).
    """
    raw = [(r, p) for r, p in sorted(curve) if p is not None]
    pts = list(zip([r for r, _ in raw], _monotone([p for _, p in raw])))
    best: dict[str, float | None] = {}
    # Not np.interp: the monotone curve has flat runs where pooling averaged points,
    # and the highest rate at or under a target on a flat run is its last point.
    for target in targets_ms:
        value = None
        for i, (rate, p) in enumerate(pts):
            if p <= target:
                value = rate
                continue
            if i > 0 and pts[i - 1][1] <= target:
                r0, p0 = pts[i - 1]
                value = r0 + (rate - r0) * (target - p0) / (p - p0)
            break
        best[f"{target:g}"] = value
    met = [v for v in best.values() if v is not None and v > 0]
    from scipy.stats import gmean

    critical = float(gmean(met)) if met else None
    return {"max_rate": best, "critical": critical, "targets_met": len(met)}
