"""Calibration to the user's measurements: fit scenario fields so that predictions match measured figures.

``calibrate(scenario, fit={PATH: (lo, hi)}, targets=[(label, metric, value)])``
runs the scenario with candidate values of the fitted fields (applied like
``--set``) and minimises the sum of squared relative errors of the targets: with
one field and one target, by Brent's method on the bracket when the error changes
sign across it, otherwise by a bounded scalar search; with several fields, by
Powell's method within the bounds. Every evaluation uses the same seeds (common
random numbers), so the objective is deterministic. The result says what was fitted
on what: a fitted value must not be judged on the targets it was fitted to
(docs/validation.md).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .errors import NumasimError, Problem, ScenarioError

__all__ = ["calibrate", "Calibration", "METRICS"]

METRICS = ("relative_throughput", "throughput", "locality", "memory_gbps", "p99_ms", "cpu_utilisation")


@dataclass
class Calibration:
    """What calibrate found."""

    fitted: dict[str, float]
    targets: list[dict[str, Any]]  # label, metric, measured, predicted, error_pct
    evaluations: int
    history: list[dict[str, Any]] = field(default_factory=list)

    def overrides(self) -> list[str]:
        """The fitted values as ``--set`` overrides."""
        return [f"{path}={value:.6g}" for path, value in self.fitted.items()]


def _value(result, label: str, metric: str) -> float:
    if metric == "relative_throughput":
        v = result.relative(label)
    elif metric == "p99_ms":
        v = (result.run(label).latency or {}).get("p99_ms")
    else:
        v = getattr(result.run(label), metric)
    if v is None:
        raise NumasimError(f"calibration target {label}:{metric} is undefined in this scenario "
                           "(no baseline, no DRAM misses or no requests)")
    return float(v)


def calibrate(scenario: str | os.PathLike[str] | dict[str, Any], fit: dict[str, tuple[float, float]],
              targets: list[tuple[str, str, float]], sets: list[str] | tuple[str, ...] = (),
              replications: int | None = None, workers: int = 0, max_evaluations: int = 40,
              on_evaluation: Callable[[dict[str, float], float], None] | None = None) -> Calibration:
    """Fit ``fit``'s fields (paths with bounds) so that the scenario's ``targets`` match the measured values.

    ``targets`` are ``(variant label, metric, measured value)`` with metric one of
    :data:`METRICS`.
    """
    import numpy as np
    from scipy.optimize import brentq, minimize, minimize_scalar

    from .model.scenario import apply_overrides, from_dict, set_path
    from .model.yamlfile import read_yaml
    from .runner import run

    if isinstance(scenario, (str, os.PathLike)):
        source, base = str(scenario), read_yaml(Path(scenario))
    else:
        source, base = "<calibration scenario>", copy.deepcopy(scenario)
    if sets:
        base = apply_overrides(base, list(sets))
    if not fit:
        raise ScenarioError(Problem("--fit", "give at least one PATH=LO..HI to fit"))
    if not targets:
        raise ScenarioError(Problem("--target", "give at least one LABEL:METRIC=VALUE to fit to"))
    for path, (lo, hi) in fit.items():
        if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
            raise ScenarioError(Problem(f"--fit {path}", f"needs finite LO < HI, got {lo}..{hi}"))
    checked = from_dict(base, source=source)
    labels = {v.label for v in checked.variants}
    for label, metric, value in targets:
        if label not in labels:
            raise ScenarioError(Problem(f"--target {label}:{metric}", f"no variant {label!r}; variants: {', '.join(sorted(labels))}"))
        if metric not in METRICS:
            raise ScenarioError(Problem(f"--target {label}:{metric}", f"unknown metric; one of {', '.join(METRICS)}"))
        if not np.isfinite(value) or (metric != "relative_throughput" and value < 0):
            raise ScenarioError(Problem(f"--target {label}:{metric}", f"measured value must be a finite number, got {value}"))
    for path, (lo, hi) in fit.items():  # both ends must give a valid scenario
        for end in (lo, hi):
            data = copy.deepcopy(base)
            set_path(data, path, end, "--fit")
            from_dict(data, source=f"{source} with {path}={end:g}")
    wanted = sorted({t[0] for t in targets} | {checked.baseline})
    paths = list(fit)
    history: list[dict[str, Any]] = []
    cache: dict[tuple, list[float]] = {}

    def predict(x: list[float]) -> list[float]:
        key = tuple(round(v, 12) for v in x)
        if key in cache:
            return cache[key]
        if len(history) >= max_evaluations:
            raise _Budget()
        data = copy.deepcopy(base)
        for path, v in zip(paths, x):
            set_path(data, path, float(v), "--fit")
        result = run(from_dict(data, source=source), policies=wanted, replications=replications,
                     workers=workers, with_sla=False, quiet=True)
        preds = [_value(result, label, metric) for label, metric, _ in targets]
        cache[key] = preds
        err = float(sum(((p - t[2]) / (abs(t[2]) or 1.0)) ** 2 for p, t in zip(preds, targets)))
        history.append({"values": dict(zip(paths, map(float, x))), "predicted": preds, "error": err})
        if on_evaluation is not None:
            on_evaluation(dict(zip(paths, map(float, x))), err)
        return preds

    def error(x) -> float:
        preds = predict(list(np.atleast_1d(x)))
        return float(sum(((p - t[2]) / (abs(t[2]) or 1.0)) ** 2 for p, t in zip(preds, targets)))

    try:
        if len(paths) == 1 and len(targets) == 1:
            lo, hi = fit[paths[0]]
            (measured,) = [t[2] for t in targets]
            f_lo, f_hi = predict([lo])[0] - measured, predict([hi])[0] - measured
            if f_lo * f_hi < 0:
                brentq(lambda v: predict([v])[0] - measured, lo, hi, xtol=1e-4 * (hi - lo), rtol=1e-6)
            else:
                minimize_scalar(error, bounds=(lo, hi), method="bounded",
                                options={"xatol": 1e-4 * (hi - lo), "maxiter": max_evaluations})
        elif len(paths) == 1:
            lo, hi = fit[paths[0]]
            minimize_scalar(error, bounds=(lo, hi), method="bounded",
                            options={"xatol": 1e-4 * (hi - lo), "maxiter": max_evaluations})
        else:
            x0 = [(lo + hi) / 2 for lo, hi in fit.values()]
            minimize(error, x0, method="Powell", bounds=list(fit.values()),
                     options={"xtol": 1e-3, "ftol": 1e-6, "maxfev": max_evaluations})
    except _Budget:
        pass  # the best point so far stands, and the result says how many runs it took
    best = min(history, key=lambda h: h["error"])
    rows = [{"label": t[0], "metric": t[1], "measured": t[2], "predicted": p,
             "error_pct": 100.0 * (p - t[2]) / (abs(t[2]) or 1.0)} for t, p in zip(targets, best["predicted"])]
    return Calibration(fitted=best["values"], targets=rows, evaluations=len(history), history=history)


class _Budget(Exception):
    """The evaluation budget is spent."""
