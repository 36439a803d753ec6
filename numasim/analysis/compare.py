"""Two results side by side: each shared variant's figures, their difference, and its significance."""

from __future__ import annotations

from typing import Any

import numpy as np

from .metrics import REPLICATED
from .results import RunResult

__all__ = ["compare"]

FIGURES = ("throughput", "relative_throughput", "locality", "memory_gbps")


def _seeds(result: RunResult, label: str, figure: str) -> tuple[list[float], bool]:
    """The figure's value in each seed, and whether they are per seed (False: the run's mean alone, for a
    run of one seed or a results file written before the figure was kept per seed)."""
    if figure == "relative_throughput":
        return result.relative_replicates(label), True
    run = result.run(label)
    vals = [rep.get(figure) for rep in run.replicates] if figure in REPLICATED else []
    vals = [v for v in vals if v is not None]
    if vals:
        return vals, True
    return ([getattr(run, figure)] if getattr(run, figure, None) is not None else []), False


def compare(a: RunResult, b: RunResult) -> list[dict[str, Any]]:
    """One row per variant label in both results and figure: A, B, the change B/A - 1, and Welch's t-test
    p-value over their seeds; ``None``, with ``why``, with fewer than two seeds on either side ("one seed"), the
    same value in every seed of both ("no spread": the baseline's relative throughput, 1.0), or a file written
    before the figure was kept per seed ("no per-seed values")."""
    from scipy.stats import ttest_ind

    rows = []
    labels_b = {r.label for r in b.runs}
    for run in a.runs:
        if run.label not in labels_b:
            continue
        for figure in FIGURES:
            (xa, per_a), (xb, per_b) = _seeds(a, run.label, figure), _seeds(b, run.label, figure)
            if not xa or not xb:
                continue
            ma, mb = float(np.mean(xa)), float(np.mean(xb))
            p, why = None, None
            if not (per_a and per_b) and len(a.run(run.label).seeds) > 1 and len(b.run(run.label).seeds) > 1:
                why = "no per-seed values"
            elif len(xa) < 2 or len(xb) < 2:
                why = "one seed"
            elif min(xa) < max(xa) or min(xb) < max(xb):  # (np.std of equal values can round above 0)
                p = float(ttest_ind(xa, xb, equal_var=False).pvalue)
            else:
                why = "no spread"
            rows.append({"label": run.label, "figure": figure, "a": ma, "b": mb,
                         "change_pct": 100.0 * (mb / ma - 1.0) if ma else None, "p_value": p,
                         "significant": None if p is None else p < 0.05, "why": why})
    return rows
