"""The performance model: pure functions from placement to progress rates.

A thread that runs on a CPU of node ``i`` and whose DRAM misses go to node
``j`` with probability ``a[j]`` needs, per operation,

    tau = compute_ns + misses * sum_j a[j] * L[i, j] * stall_scale

nanoseconds of full-core time, where ``compute_ns = cycles / f`` (stretched
by any CPU overhead) and ``stall_scale = (1 + memory overhead) / mlp``.
Its rate in operations per wall-clock nanosecond is ``capacity / tau``, with
``capacity`` the share of a core it gets (time share x SMT and switch
efficiency).

Latencies are *loaded* latencies. Memory node ``j`` serves the bytes of all
misses to it plus any page-copy traffic; its utilisation ``u_j`` raises the
latency of every access to it by the fitted loaded-latency curve ``g``.
Remote accesses also cross the interconnect from ``j`` to ``i``, whose
utilisation raises the remote part of the latency the same way:

    L[i, j] = L0[j, j] * x_j + (L0[i, j] - L0[j, j]) * y_ij

with ``x_j = g(u_j)`` and ``y_ij = g(v_ij)``. Because rates fall as latency
rises, the coupled system has one fixed point, found by damped iteration.
Beyond the measured peak (``u > 1``) the multiplier keeps rising until the
demand fits the capacity, so no resource ever carries more than it can: a
queue, not a fixed latency, absorbs the overload.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..model.machine import LoadedLatencyCurve

__all__ = ["RateInputs", "RateSolution", "solve_rates", "refill_ns", "switch_efficiency", "LINE"]

LINE = 64  # bytes per cache line
_MAX_MULTIPLIER = 1e4


@dataclass(frozen=True)
class RateInputs:
    """Per-thread inputs (length T) and per-node extra traffic (length N)."""

    cpu_node: NDArray[np.int64]
    capacity: NDArray[np.float64]
    compute_ns: NDArray[np.float64]
    misses: NDArray[np.float64]
    stall_scale: NDArray[np.float64]
    access: NDArray[np.float64]  # T x N, rows sum to 1
    extra_node: NDArray[np.float64]  # bytes/ns on each memory node
    extra_link: NDArray[np.float64]  # N x N, bytes/ns from memory node j to CPU node i at [i, j]


@dataclass(frozen=True)
class RateSolution:
    """Rates and the loads that produced them."""

    rate: NDArray[np.float64]  # ops per wall ns
    latency: NDArray[np.float64]  # mean loaded latency per thread, ns
    local: NDArray[np.float64]  # share of each thread's misses served by its own node
    node_load: NDArray[np.float64]  # bytes/ns per memory node
    link_load: NDArray[np.float64]  # bytes/ns, [i, j]: from memory j to CPU node i
    node_util: NDArray[np.float64]
    iterations: int
    x: NDArray[np.float64]  # latency multiplier per memory node
    y: NDArray[np.float64]  # latency multiplier per link (hop part)
    lmat: NDArray[np.float64]  # loaded latency matrix [CPU node, memory node], ns


def solve_rates(
    inp: RateInputs,
    base_latency: NDArray[np.float64],
    node_bandwidth: NDArray[np.float64],
    link_bandwidth: NDArray[np.float64],
    curve: LoadedLatencyCurve,
    tol: float = 1e-7,
    max_iter: int = 400,
    x0: NDArray[np.float64] | None = None,
    y0: NDArray[np.float64] | None = None,
) -> RateSolution:
    """Solve the loaded-latency fixed point for the running threads.

    Parameters
    ----------
    inp
        Per-thread inputs; threads with zero capacity get rate 0.
    base_latency
        Idle latency matrix ``L0[i, j]`` (CPU node i, memory node j), ns.
    node_bandwidth, link_bandwidth
        Capacities in bytes/ns; the link diagonal is unused.
    curve
        Loaded-latency multiplier as a function of utilisation.
    x0, y0
        A starting point (the previous solution), to converge in fewer steps.
    """
    n = len(node_bandwidth)
    t = len(inp.cpu_node)
    local_lat = np.diag(base_latency)
    hop = base_latency - local_lat[None, :]
    offdiag = ~np.eye(n, dtype=bool)
    onehot = np.zeros((t, n))
    onehot[np.arange(t), inp.cpu_node] = 1.0
    local_share = inp.access[np.arange(t), inp.cpu_node] if t else np.zeros(0)

    x = np.ones(n) if x0 is None else x0.copy()
    y = np.ones((n, n)) if y0 is None else y0.copy()
    rate = np.zeros(t)
    lat = np.zeros(t)
    node_load = inp.extra_node.copy()
    link_load = inp.extra_link.copy()
    it = 0
    for it in range(1, max_iter + 1):
        lmat = local_lat[None, :] * x[None, :] + hop * y
        lat = np.einsum("tn,tn->t", inp.access, lmat[inp.cpu_node]) if t else lat
        tau = inp.compute_ns + inp.misses * lat * inp.stall_scale
        rate = inp.capacity / tau
        traffic = (rate * inp.misses * LINE)[:, None] * inp.access  # T x N bytes/ns
        node_load = traffic.sum(axis=0) + inp.extra_node
        link_load = onehot.T @ traffic + inp.extra_link
        u = node_load / node_bandwidth
        v = np.where(offdiag, link_load / link_bandwidth, 0.0)
        tx = np.minimum(np.maximum(curve(u), x * u), _MAX_MULTIPLIER)
        ty = np.minimum(np.maximum(curve(v), y * v), _MAX_MULTIPLIER)
        err = max(np.max(np.abs(np.log(tx / x))), np.max(np.abs(np.log(ty / y))))
        x = np.sqrt(x * tx)
        y = np.sqrt(y * ty)
        if err < tol:
            break
    lmat = local_lat[None, :] * x[None, :] + hop * y
    return RateSolution(
        rate=rate,
        latency=lat,
        local=local_share,
        node_load=node_load,
        link_load=link_load,
        node_util=node_load / node_bandwidth,
        iterations=it,
        x=x,
        y=y,
        lmat=lmat,
    )


def refill_ns(nbytes: float, latency_ns: float, mlp: float) -> float:
    """Time to reload ``nbytes`` of cache contents from memory at ``latency_ns``."""
    return (nbytes / LINE) * latency_ns / max(mlp, 1.0)


def switch_efficiency(slice_ns: NDArray[np.float64], switch_ns: NDArray[np.float64]) -> NDArray[np.float64]:
    """Share of each time slice left for work after a context switch of ``switch_ns``."""
    slice_ns = np.asarray(slice_ns, dtype=float)
    return np.where(slice_ns > 0, slice_ns / np.maximum(slice_ns + switch_ns, 1e-300), 1.0)
