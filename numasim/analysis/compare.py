"""Two results side by side: each shared variant's figures, their difference, and its significance."""

from __future__ import annotations

from typing import Any

import numpy as np

from .metrics import REPLICATED
from .results import RunResult

__all__ = ["compare"]

FIGURES = ("throughput", "relative_throughput", "locality", "memory_gbps")


def _seeds(result: RunResult, label: str, figure: str) -> list[float]:
    if figure == "relative_throughput":
        return result.relative_replicates(label)
    run = result.run(label)
    vals = [rep.get(figure) for rep in run.replicates] if figure in REPLICATED else []
    vals = [v for v in vals if v is not None]
    return vals or ([getattr(run, figure)] if getattr(run, figure, None) is not None else [])


def compare(a: RunResult, b: RunResult) -> list[dict[str, Any]]:
    """One row per variant label in both results and figure: A, B, the change B/A - 1, and Welch's t-test
    p-value over their seeds; ``None``, with ``why`` ("one seed" or "no spread"), with fewer than two seeds
    on either side or the same value in every seed of both (the baseline's relative throughput, 1.0)."""
    from scipy.stats import ttest_ind

    rows = []
    labels_b = {r.label for r in b.runs}
    for run in a.runs:
        if run.label not in labels_b:
            continue
        for figure in FIGURES:
            xa, xb = _seeds(a, run.label, figure), _seeds(b, run.label, figure)
            if not xa or not xb:
                continue
            ma, mb = float(np.mean(xa)), float(np.mean(xb))
            p, why = None, None
            if len(xa) < 2 or len(xb) < 2:
                why = "one seed"
            elif np.std(xa) > 0 or np.std(xb) > 0:
                p = float(ttest_ind(xa, xb, equal_var=False).pvalue)
            else:
                why = "no spread"
            rows.append({"label": run.label, "figure": figure, "a": ma, "b": mb,
                         "change_pct": 100.0 * (mb / ma - 1.0) if ma else None, "p_value": p,
                         "significant": None if p is None else p < 0.05, "why": why})
    return rows
