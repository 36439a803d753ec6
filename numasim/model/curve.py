"""The loaded-latency curve: how much longer a memory access or a link crossing takes under load."""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["LoadedLatencyCurve"]


@dataclass(frozen=True)
class LoadedLatencyCurve:
    """Latency multiplier as a function of bandwidth utilisation.

    ``g(u) = 1 + a * u**b`` for utilisation ``u`` in [0, 1], fitted (least
    squares, scipy) to measured loaded-latency points normalised by their idle
    latency and peak bandwidth. At ``u = 1`` the multiplier is ``1 + a``.
    """

    a: float | NDArray[np.float64]  # arrays: one curve per memory node
    b: float | NDArray[np.float64]

    def __call__(self, u: NDArray[np.float64]) -> NDArray[np.float64]:
        return 1.0 + self.a * np.clip(u, 0.0, 1.0) ** self.b

    @staticmethod
    @functools.lru_cache(maxsize=64)
    def fit(points: tuple[tuple[float, float], ...], peak_gbps: float) -> "LoadedLatencyCurve":
        bw = np.array([p[0] for p in points]) / peak_gbps
        ratio = np.array([p[1] for p in points]) / points[0][1]

        def g(u: NDArray[np.float64], a: float, b: float) -> NDArray[np.float64]:
            return 1.0 + a * u**b

        from scipy.optimize import OptimizeWarning, curve_fit  # 0.5 s to import: only where a curve is fitted

        with warnings.catch_warnings():
            # Two points fit both parameters exactly, and the covariance scipy warns about is not used.
            warnings.simplefilter("ignore", OptimizeWarning)
            (a, b), _ = curve_fit(g, bw, ratio, p0=(2.0, 4.0), bounds=([0.0, 1.0], [20.0, 40.0]))
        return LoadedLatencyCurve(float(a), float(b))
