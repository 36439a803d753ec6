"""Calibration to the user's measurements: fit scenario fields so that predictions match measured figures.

``calibrate(scenario, fit={PATH: (lo, hi)}, targets=[(label, metric, value)])``
runs the scenario with candidate values of the fitted fields (applied like
``--set``) and minimises the sum of squared relative errors of the targets: with
one field and one target, by Brent's method on the bracket when the error changes
sign across it, otherwise by a bounded scalar search; with several fields, by
bounded least squares (scipy.optimize.least_squares, trust region reflective, finite
differences over 5 % of each value) with a 95 % confidence interval per field from the
Jacobian when there are more targets than fields. Every evaluation uses the same seeds (common
random numbers), so the objective is deterministic. The result says what was fitted
on what: a fitted value must not be judged on the targets it was fitted to
(docs/validation.md).
"""

from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from .budget import DEFAULT_MAX_WORK_S, MAX_MEMORY_BYTES
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
    ci: dict[str, float | None] = field(default_factory=dict)  # 95 % half-widths; None when not estimable
    error_before_pct: float | None = None  # RMS relative error of the targets before the fit
    error_after_pct: float | None = None
    leave_one_out: list[dict[str, Any]] = field(default_factory=list)  # each target predicted by a fit without it
    ci_note: str | None = None  # why there is no interval, when there is none

    def to_json(self) -> dict[str, Any]:
        return {"fitted": self.fitted, "ci": self.ci, "targets": self.targets, "evaluations": self.evaluations,
                "error_before_pct": self.error_before_pct, "error_after_pct": self.error_after_pct,
                "leave_one_out": self.leave_one_out, "overrides": self.overrides(), "ci_note": self.ci_note}

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


MAX_EVALUATIONS = 10_000  # runs of one fit (--max-evaluations)

# What each metric can be: (lowest, highest, whether the lowest is allowed).
_MAX = 1e18  # above any figure a run reports (the results files' bound, analysis/results.py MAX_FIGURE)
_RANGES = {"relative_throughput": (0.0, _MAX, False), "throughput": (0.0, _MAX, True),
           "locality": (0.0, 1.0, True), "memory_gbps": (0.0, _MAX, True), "p99_ms": (0.0, _MAX, False),
           "cpu_utilisation": (0.0, 1.0, True)}


def check_targets(targets: list[tuple[str, str, float]], labels: set[str],
                  origins: list[tuple[str | None, str]] | None = None) -> None:
    """Refuse a target naming no variant or metric, a value its metric cannot take, or one given twice."""
    origins = origins or [(None, f"--target {label}:{metric}") for label, metric, _ in targets]
    if len(origins) != len(targets):
        raise ScenarioError(Problem("origins", f"{len(targets)} targets but {len(origins)} origins: one (file, place) "
                                               "a target"))
    seen: dict[tuple[str, str], str] = {}
    for (label, metric, value), (source, where) in zip(targets, origins):
        def bad(message: str) -> ScenarioError:
            return ScenarioError(Problem(where, message), source=source)

        if label not in labels:
            raise bad(f"no variant {label!r}; variants: {', '.join(sorted(labels))}")
        if metric not in METRICS:
            raise bad(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")
        lo, hi, closed = _RANGES[metric]
        if not (math.isfinite(value) and (value >= lo if closed else value > lo) and value <= hi):
            span = f"{'at least' if closed else 'above'} {lo:g} and at most {hi:g}"
            raise bad(f"the measured {metric} must be a finite number {span}, got {value}")
        if (label, metric) in seen:
            raise bad(f"{label}:{metric} is measured twice (also at {seen[label, metric]}); give one value")
        seen[label, metric] = f"{source}, {where}" if source else where


def _check_call(fit, targets, sets, replications, workers, max_evaluations, origins):
    """calibrate()'s arguments as the command line would let them through (numasim.calls)."""
    import numbers

    from .calls import span_map, text_list, whole
    from .model.scenario import MAX_REPLICATIONS
    from .runner import MAX_WORKERS

    fit = span_map(fit, "--fit") or {}
    if not isinstance(targets, (list, tuple)) or not all(
            isinstance(t, (list, tuple)) and len(t) == 3 and isinstance(t[0], str) and isinstance(t[1], str)
            and isinstance(t[2], numbers.Real) and not isinstance(t[2], bool) for t in targets):
        raise ScenarioError(Problem("--target", f"expected a list of (label, metric, measured value), got "
                                                f"{repr(targets)[:80]}"))
    targets = [(t[0], t[1], float(t[2])) for t in targets]
    if origins is not None and (not isinstance(origins, (list, tuple)) or not all(
            isinstance(o, (list, tuple)) and len(o) == 2 and isinstance(o[1], str) for o in origins)):
        raise ScenarioError(Problem("origins", f"expected a list of (file or None, place), got {repr(origins)[:80]}"))
    sets = text_list(sets, "--set", "PATH=VALUE overrides")
    if replications is not None:
        replications = whole(replications, "--replications", 1, MAX_REPLICATIONS)
    return (fit, targets, sets, replications, whole(workers, "--workers", 0, MAX_WORKERS),
            whole(max_evaluations, "--max-evaluations", 1, MAX_EVALUATIONS))


def calibrate(scenario: str | os.PathLike[str] | dict[str, Any], fit: dict[str, tuple[float, float]],
              targets: list[tuple[str, str, float]], sets: list[str] | tuple[str, ...] = (),
              replications: int | None = None, workers: int = 0, max_evaluations: int = 40,
              on_evaluation: Callable[[dict[str, float], float], None] | None = None,
              leave_one_out: bool = False, origins: list[tuple[str | None, str]] | None = None,
              max_work_s: float | None = DEFAULT_MAX_WORK_S,
              max_memory_bytes: float | None = MAX_MEMORY_BYTES) -> Calibration:
    """Fit ``fit``'s fields (paths with bounds) so that the scenario's ``targets`` match the measured values.

    ``targets`` are ``(variant label, metric, measured value)`` with metric one of
    :data:`METRICS`; ``origins`` say where each came from, as (file, place) for errors
    (default: ``--target LABEL:METRIC``). ``max_evaluations`` bounds the runs of the fit,
    its confidence interval included; ``leave_one_out`` adds a fit, with the same bound,
    and a check run for each target. ``max_work_s`` and ``max_memory_bytes`` refuse, before
    anything runs, a calibration whose runs (each costed as the costliest end of any
    bound) are estimated over them (None: no limit).
    """
    import numpy as np
    from scipy.optimize import brentq, least_squares, minimize_scalar

    from .budget import check_budget, combine, estimate
    from .calls import callback, flag
    from .model.overrides import fraction_inside, scenario_data, set_path
    from .model.scenario import from_dict
    from .runner import run, select_variants

    fit, targets, sets, replications, workers, max_evaluations = _check_call(
        fit, targets, sets, replications, workers, max_evaluations, origins)
    on_evaluation, leave_one_out = callback(on_evaluation, "on_evaluation"), flag(leave_one_out, "leave_one_out")
    source, base = scenario_data(scenario, sets, "<calibration scenario>")
    if not fit:
        raise ScenarioError(Problem("--fit", "give at least one PATH=LO..HI to fit"))
    if not targets:
        raise ScenarioError(Problem("--target", "give at least one LABEL:METRIC=VALUE to fit to"))
    for path, (lo, hi) in fit.items():
        if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
            raise ScenarioError(Problem(f"--fit {path}", f"needs finite LO < HI, got {lo}..{hi}"))
    checked = from_dict(base, source=source)
    labels = {v.label for v in checked.variants}
    check_targets(targets, labels, origins)
    wanted = sorted({t[0] for t in targets} | {checked.baseline})
    runs = max_evaluations + (len(targets) * (max_evaluations + 1) if leave_one_out and len(targets) > 1 else 0)
    def cost(scenario) -> Any:
        return estimate(scenario, select_variants(scenario, wanted), None, False)

    costs = [cost(checked)]
    costlier: dict[str, float] = {}  # each field's costlier end
    for path, (lo, hi) in fit.items():  # both ends must give a valid scenario
        ends = []
        for end in (lo, hi):
            data = copy.deepcopy(base)
            set_path(data, path, end, "--fit")
            ends.append(cost(from_dict(data, source=f"{source} with {path}={end:g}")))
        costs += ends
        costlier[path] = hi if ends[1].cpu_seconds >= ends[0].cpu_seconds else lo
        # and so must a value between them that is not a whole number: the fit tries any real value
        mid = fraction_inside(lo, hi)
        data = copy.deepcopy(base)
        set_path(data, path, mid, "--fit")
        try:
            from_dict(data, source=f"{source} with {path}={mid:g}")
        except ScenarioError as exc:
            raise ScenarioError(Problem(f"--fit {path}", f"needs a real-valued field, and {path}={mid:g} is refused: "
                                                         f"{exc.problems[0]}")) from None
    if len(fit) > 1:  # the fields' costlier ends together (a corner may cost more than each alone)
        data = copy.deepcopy(base)
        for path, end in costlier.items():
            set_path(data, path, end, "--fit")
        try:
            costs.append(cost(from_dict(data, source=source)))
        except ScenarioError:
            pass  # a corner the fields cannot take together; the fit meets it only if the scenario allows it
    costliest = max(costs, key=lambda e: e.cpu_seconds)
    per_seed = (replications or checked.spec.replications) / checked.spec.replications  # --replications
    check_budget(combine([costliest], runs * per_seed), max_work_s, max_memory_bytes, source,
                 what=f"this calibration's {runs:,} runs at most are", fewer="lower --max-evaluations, shorten duration")
    paths = list(fit)
    m, n = len(targets), len(paths)
    # The interval's Jacobian (n runs, with more targets than fields) comes out of the same budget.
    # (Only when the fit keeps two runs or more: one run is the start alone, with nothing fitted.)
    limit = max_evaluations - (n if m > n and max_evaluations >= n + 2 else 0)
    history: list[dict[str, Any]] = []
    cache: dict[tuple, list[float]] = {}

    def predict(x: list[float]) -> list[float]:
        key = tuple(round(v, 12) for v in x)
        if key in cache:
            return cache[key]
        if len(history) >= limit:
            raise _Budget()
        data = copy.deepcopy(base)
        for path, v in zip(paths, x):
            set_path(data, path, float(v), "--fit")
        result = run(from_dict(data, source=source), policies=wanted, replications=replications,
                     workers=workers, with_sla=False, quiet=True, max_work_s=None, max_memory_bytes=None)
        preds = [_value(result, label, metric) for label, metric, _ in targets]
        cache[key] = preds
        err = float(sum(((p - t[2]) / (abs(t[2]) or 1.0)) ** 2 for p, t in zip(preds, targets)))
        history.append({"values": dict(zip(paths, map(float, x))), "predicted": preds, "error": err})
        if on_evaluation is not None:
            on_evaluation(dict(zip(paths, map(float, x))), err)
        return preds

    scale = np.array([abs(t[2]) or 1.0 for t in targets])
    measured_v = np.array([t[2] for t in targets])

    def residuals(x) -> np.ndarray:
        return (np.asarray(predict(list(np.atleast_1d(x)))) - measured_v) / scale

    def error(x) -> float:
        return float(np.sum(residuals(x) ** 2))

    def rms(preds) -> float:
        return float(100.0 * np.sqrt(np.mean(((np.asarray(preds) - measured_v) / scale) ** 2)))

    # Before: the scenario's own values, as it resolves them (a preset's or a workload base's too), else the
    # middle of the bounds.
    resolved = _resolved(checked)
    start = [_current(resolved, p, (lo + hi) / 2) for p, (lo, hi) in fit.items()]
    start = [min(max(v, lo), hi) for v, (lo, hi) in zip(start, fit.values())]
    ci: dict[str, float | None] = {p: None for p in paths}
    try:
        before = rms(predict(start))
        if len(paths) == 1 and len(targets) == 1:
            lo, hi = fit[paths[0]]
            measured = measured_v[0]
            f_lo, f_hi = predict([lo])[0] - measured, predict([hi])[0] - measured
            if f_lo * f_hi < 0:
                brentq(lambda v: predict([v])[0] - measured, lo, hi, xtol=1e-4 * (hi - lo), rtol=1e-6)
            else:
                minimize_scalar(error, bounds=(lo, hi), method="bounded",
                                options={"xatol": 1e-4 * (hi - lo), "maxiter": limit})
        else:
            least_squares(residuals, start, bounds=([b[0] for b in fit.values()], [b[1] for b in fit.values()]),
                          method="trf", diff_step=0.05, max_nfev=limit, x_scale="jac")
    except _Budget:
        before = before if "before" in locals() else None
    best = min(history, key=lambda h: h["error"])
    limit = max_evaluations
    ci_note: str | None = "no more targets than fitted fields"
    if m > n:
        # 95 % intervals from the Jacobian at the best point (forward differences over 5 % of each
        # value, inside the bounds; the n runs kept for them) and the residual variance.
        x = np.array([best["values"][p] for p in paths])
        r0 = (np.asarray(best["predicted"]) - measured_v) / scale
        jac = np.zeros((m, n))
        for i, (lo, hi) in enumerate(fit.values()):
            h = 0.05 * (abs(x[i]) or (hi - lo))
            step = h if x[i] + h <= hi else -h
            xs = x.copy()
            xs[i] += step
            cache.pop(tuple(round(v, 12) for v in xs), None)
            try:
                jac[:, i] = ((np.asarray(predict(list(xs))) - measured_v) / scale - r0) / step
            except _Budget:
                ci_note = "--max-evaluations left no runs for it"
                break
        else:
            s2 = float(np.sum(r0 ** 2)) / (m - n)
            try:
                cov = np.linalg.inv(jac.T @ jac) * s2
                ci = {p: float(1.96 * np.sqrt(max(cov[i, i], 0.0))) for i, p in enumerate(paths)}
                ci_note = None
            except np.linalg.LinAlgError:
                ci_note = "the fields are not separately identifiable from these targets"
        best = min(history, key=lambda h: h["error"])
    rows = [{"label": t[0], "metric": t[1], "measured": t[2], "predicted": p,
             "error_pct": 100.0 * (p - t[2]) / (abs(t[2]) or 1.0)} for t, p in zip(targets, best["predicted"])]
    loo: list[dict[str, Any]] = []
    if leave_one_out and len(targets) > 1:
        for i, t in enumerate(targets):
            others = [x for j, x in enumerate(targets) if j != i]
            sub = calibrate(base, fit, others, replications=replications, workers=workers,
                            max_evaluations=max_evaluations, max_work_s=None, max_memory_bytes=None)  # costed above
            check = calibrate_predict(base, sub.fitted, [t], replications, workers)
            loo.append({"left_out": f"{t[0]}:{t[1]}", "fitted": sub.fitted, "measured": t[2], "predicted": check[0],
                        "error_pct": 100.0 * (check[0] - t[2]) / (abs(t[2]) or 1.0)})
    return Calibration(fitted=best["values"], targets=rows, evaluations=len(history), history=history, ci=ci,
                       error_before_pct=before, error_after_pct=rms(best["predicted"]), leave_one_out=loo,
                       ci_note=ci_note)


def _resolved(scenario) -> dict[str, Any]:
    """The scenario's values as it runs them, in the scenario file's shape: its machine's, workloads' and
    policies' options' fields written out (those a preset, a ``base:`` or a default gives too)."""
    data = scenario.spec.model_dump()
    data["machine"] = scenario.machine.spec.model_dump()
    data["workloads"] = {name: profile.model_dump() for name, profile in scenario.profiles.items()}
    for entry, variant in zip(data["policies"], scenario.variants):  # (one variant per entry, in order)
        entry["options"] = variant.options.model_dump()
    return data


def _current(data: dict[str, Any], path: str, default: float) -> float:
    """The value at ``path`` in the scenario data when it is a number there, else ``default``."""
    node: Any = data
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and (part.isascii() and part.isdigit()) and int(part) < len(node):
            node = node[int(part)]
        else:
            return default
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else default


def calibrate_predict(data: dict[str, Any], values: dict[str, float], targets, replications=None, workers=0) -> list[float]:
    """The targets' predicted values with ``values`` set in the scenario data."""
    from .model.overrides import set_path
    from .model.scenario import from_dict
    from .runner import run

    data = copy.deepcopy(data)
    for path, v in values.items():
        set_path(data, path, float(v), "--fit")
    scenario = from_dict(data)
    labels = sorted({t[0] for t in targets} | {scenario.baseline})
    result = run(scenario, policies=labels, replications=replications, workers=workers, with_sla=False, quiet=True,
                 max_work_s=None, max_memory_bytes=None)  # within the calibration's budget
    return [_value(result, t[0], t[1]) for t in targets]


class _Budget(Exception):
    """The evaluation budget is spent."""
