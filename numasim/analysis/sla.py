"""SLA scores: the highest injection rate that keeps a latency percentile under each target.

In the manner of SPECjbb's critical-jOPS: each variant first runs as the scenario
says (closed-loop requests: the saturated, highest throughput, like SPECjbb's
high-bound injection rate). Then each request-driven pod is driven open-loop, at
Poisson arrival rates that are fractions (``levels``) of the rate it reached
there, and the chosen percentile of the response time is measured at each
level. For each target, the highest rate whose percentile stays under it is
found by linear interpolation between the levels that bracket the target, on the
measured curve made non-decreasing (a finite window's p99 is noisy); the critical
throughput is the geometric mean of those rates over the targets met at some level.
"""

from __future__ import annotations

from dataclasses import replace
import numpy as np

from .metrics import Metrics
from ..model.scenario import Scenario, SlaSpec, Variant
from ..model.workload import RequestSpec

__all__ = ["SlaSpec", "ladder_variant", "score"]

PERCENTILE_KEYS = {"p50": "p50_ms", "p90": "p90_ms", "p99": "p99_ms", "p99.9": "p999_ms"}


def ladder_variant(scenario: Scenario, variant: Variant, saturated: Metrics, level: float) -> Variant | None:
    """The variant with its request-driven pods switched to open-loop arrivals at ``level`` x their rate.

    Returns None if the variant has no request-driven pods that completed requests.
    """
    profiles = dict(scenario.profiles_of(variant))
    rates: dict[str, list[float]] = {}
    for spec in scenario.pods_of(variant):
        if profiles[spec.profile].requests is None:
            continue
        names = [spec.name] if spec.replicas == 1 else [f"{spec.name}-{r}" for r in range(spec.replicas)]
        for pod in saturated.pods:
            if pod.name in names and pod.latency is not None:
                rates.setdefault(spec.profile, []).append(pod.latency["requests_per_s"])
    if not rates:
        return None
    for name, values in rates.items():
        req = profiles[name].requests
        assert req is not None
        open_req = RequestSpec(mode="open", ops=req.ops, rate_per_s=max(level * float(np.mean(values)), 1e-3))
        profiles[name] = profiles[name].model_copy(update={"requests": open_req})
    return replace(variant, profiles=profiles)


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
