"""How sure a result is: confidence intervals over seeds, settled rankings, steady state.

- **Confidence intervals.** A figure's 95 % confidence interval over the seeds of a
  variant is ``mean ± t(0.975, n - 1) · s / sqrt(n)`` (Student's t, ``s`` the sample
  standard deviation of the per-seed values). Reported as the half-width, in fields
  ending ``_ci``; ``None`` with one seed.
- **Rankings.** Every variant gets the same seeds (common random numbers), so two
  variants are compared seed by seed: the interval of the mean per-seed difference of
  their relative throughput. When it contains 0, the order of the two is not settled.
- **Steady state.** MSER (White 1997; MSER-5 with batches of 5 samples when there are
  at least 50) finds the truncation point that minimises the standard error of the mean
  of what is left of the throughput time series. When it falls after the warm-up, the
  measurement window still holds part of the transient.
- **Trend.** A series that drifts to the end of the run has no truncation point that
  removes the drift, so MSER cannot see it. The slope of the series' batch means (at
  least 3 samples a batch, 4 to 10 batches: successive samples of one run are
  correlated, batch means much less) is tested against 0; a slope significant at 5 %
  over all the variants of a run (Bonferroni) whose change across the samples exceeds
  the 95 % interval of their mean, the throughput's interval over seeds and 0.1 % (the
  last digit the table shows of a relative throughput) says the run ended before steady
  state (a very steady series can have a significant slope worth 0.01 %: not worth a
  warning).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["half_width", "mser_truncation", "trend"]

LEVEL = 0.95


def half_width(values: Sequence[float | None]) -> float | None:
    """Half-width of the 95 % confidence interval of the mean of ``values`` (None-free, n >= 2)."""
    xs = [float(v) for v in values if v is not None and math.isfinite(v)]
    if len(xs) < 2:
        return None
    from scipy import stats  # scipy.stats costs ~25 MB and 0.3 s to import: only when a CI is asked for

    sd = float(np.std(xs, ddof=1))
    return float(stats.t.ppf(0.5 + LEVEL / 2, len(xs) - 1) * sd / math.sqrt(len(xs)))


def mser_truncation(series: Sequence[float]) -> int:
    """MSER's truncation point: how many leading samples of ``series`` to drop.

    Batches of 5 (MSER-5) when the series has at least 50 samples, single samples
    otherwise. The point is searched in the first half of the series, as MSER's
    authors advise (a later minimum is an artefact of the few samples left).
    """
    x = np.asarray([v for v in series if v is not None and math.isfinite(v)], dtype=float)
    batch = 5 if len(x) >= 50 else 1
    n = len(x) // batch
    if n < 4:
        return 0
    y = x[: n * batch].reshape(n, batch).mean(axis=1)
    best, best_d = math.inf, 0
    for d in range(n // 2 + 1):
        rest = y[d:]
        value = float(((rest - rest.mean()) ** 2).sum()) / len(rest) ** 2
        if value < best:
            best, best_d = value, d
    return best_d * batch


def trend(times: Sequence[float], series: Sequence[float | None], start: float) -> tuple[float, float, float] | None:
    """The drift of ``series`` over its samples after ``start`` (s): its change across them as a share of
    their mean, the two-sided p-value of the slope, and the 95 % half-width of their mean as a share of it;
    over batch means (see the module's docstring). None with fewer than 12 samples or a mean of 0."""
    pts = [(t, float(x)) for t, x in zip(times, series) if t > start + 1e-9 and x is not None and math.isfinite(x)]
    if len(pts) < 12:
        return None
    n_batches = min(10, len(pts) // 3)
    size = len(pts) // n_batches
    arr = np.asarray(pts[: n_batches * size]).reshape(n_batches, size, 2).mean(axis=1)
    mean = float(arr[:, 1].mean())
    hw = half_width(arr[:, 1].tolist())
    if mean <= 0 or hw is None:
        return None
    from scipy import stats

    fit = stats.linregress(arr[:, 0], arr[:, 1])
    if not math.isfinite(fit.pvalue):  # a flat series: no slope to test
        return 0.0, 1.0, hw / mean
    return float(fit.slope) * (pts[-1][0] - pts[0][0]) / mean, float(fit.pvalue), hw / mean
