"""The performance model: pure functions from placement to progress rates.

A thread that runs on a CPU of node ``i`` and whose DRAM misses go to node
``j`` with probability ``a[j]`` needs, per operation,

    tau = compute_ns + misses * sum_j a[j] * L[i, j] * stall_scale + coherence_ns

nanoseconds of full-core time, where ``compute_ns = cycles / f`` (stretched
by any CPU overhead), ``stall_scale = (1 + memory overhead) * (d + (1 - d) / mlp)``
with ``d`` the share of misses that depend on the previous one (pointer chasing)
and ``mlp`` the misses the others overlap (capped by what the core keeps in
flight), and ``coherence_ns`` the cache-to-cache transfers of shared written
lines (see :mod:`numasim.sim.rates`). Its rate in operations per wall-clock
nanosecond is ``capacity / tau``, with ``capacity`` the share of a core it gets
(time share x SMT and switch efficiency).

Latencies are *loaded* latencies. Memory node ``j`` serves the lines read by
all misses to it, the dirty lines written back to it (each costing
``write_cost`` reads of its bandwidth) and any page-copy traffic; its
utilisation ``u_j`` raises the latency of every access to it by the fitted
loaded-latency curve ``g``. Traffic between nodes crosses the interconnect's
links on its route (reads from ``j`` to ``i``, write-backs from ``i`` to ``j``);
each link's utilisation ``v_l`` raises the hop part of the latency of the flows
that cross it:

    L[i, j] = L0[j, j] * x_j + (L0[i, j] - L0[j, j]) * mean_{l on route i<-j} y_l

with ``x_j = g(u_j)`` and ``y_l = g(v_l)``. On a machine with chiplet links
(AMD's CCD-to-I/O-die link), every line a thread reads or writes back also
crosses its chiplet's link, an M/D/1 queue: each miss waits
``S w / (2 (1 - w))`` with ``S = 64 B / bandwidth`` and ``w`` the link's
utilisation, solved at each step by a safeguarded Newton method. Threads that take a
process-wide lock once per operation also wait there: ``W`` per operation, from
Schweitzer's mean value analysis of the lock as one server (:func:`numasim.sim.fixed_point.lock_waits`), also
solved at each step. Because rates fall as latency rises, the coupled system has one fixed point, found by damped iteration
(compiled, :mod:`numasim.sim.fixed_point`).
Beyond the measured peak (``u > 1``) the multiplier keeps rising until the
demand fits the capacity, so no resource ever carries more than it can: a
queue, not a fixed latency, absorbs the overload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..model.interconnect import Interconnect
from ..model.curve import LoadedLatencyCurve
from .fixed_point import fixed_point

__all__ = ["RateInputs", "RateSolution", "solve_rates", "LINE", "thread_latency"]

LINE = 64  # bytes per cache line


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
    writes: NDArray[np.float64] | None = None  # dirty write-backs per miss (default none)
    coherence_ns: NDArray[np.float64] | None = None  # cache-to-cache stall per operation (default none)
    chiplet: NDArray[np.int64] | None = None  # the chiplet link each thread's misses cross (default none)
    lock_group: NDArray[np.int64] | None = None  # the lock each thread takes once per op, -1 none (default none)
    lock_service: NDArray[np.float64] | None = None  # ns each thread holds its lock per op, handoff included


@dataclass(frozen=True)
class RateSolution:
    """Rates and the loads that produced them."""

    rate: NDArray[np.float64]  # ops per wall ns
    latency: NDArray[np.float64]  # mean loaded latency per thread, ns
    local: NDArray[np.float64]  # share of each thread's misses served by its own node
    node_load: NDArray[np.float64]  # bytes/ns read from and written to each memory node
    link_load: NDArray[np.float64]  # bytes/ns, [i, j]: flowing from node j to node i
    node_util: NDArray[np.float64]
    iterations: int
    x: NDArray[np.float64]  # latency multiplier per memory node
    y: NDArray[np.float64]  # latency multiplier per interconnect link (hop part)
    lmat: NDArray[np.float64]  # loaded latency matrix [CPU node, memory node], ns
    link_util: NDArray[np.float64]  # per interconnect link
    link_traffic: NDArray[np.float64]  # per interconnect link, bytes/ns in its direction
    chiplet_wait: NDArray[np.float64]  # per chiplet link: the wait per miss, ns
    chiplet_util: NDArray[np.float64]  # per chiplet link
    lock_wait: NDArray[np.float64]  # per lock: ns an op waits for it
    lock_util: NDArray[np.float64]  # per lock: share of the time it is held
    throttle: NDArray[np.float64]  # per thread: how much its node's lines in flight slow it (1: not at all)
    lines_demand: NDArray[np.float64]  # per node: lines its threads would hold unthrottled / its limit (0: none)


def solve_rates(
    inp: RateInputs,
    base_latency: NDArray[np.float64],
    node_bandwidth: NDArray[np.float64],
    interconnect: Interconnect,
    curve: LoadedLatencyCurve,
    write_cost: float = 1.0,
    node_curve: LoadedLatencyCurve | None = None,
    chiplet_bandwidth: NDArray[np.float64] | None = None,
    node_port: NDArray[np.float64] | None = None,
    inflight: NDArray[np.float64] | None = None,
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
    node_bandwidth
        Read bandwidth of each memory node, bytes/ns.
    interconnect
        The links, their bandwidth (bytes/ns per direction, or for both directions
        together where a link's two directions share one budget) and every flow's route.
    curve
        Loaded-latency multiplier as a function of utilisation (the links', and the
        memory nodes' unless ``node_curve`` gives one per node).
    write_cost
        Memory bandwidth a write-back uses, in reads.
    chiplet_bandwidth
        Bytes/ns each chiplet's link to the memory controllers carries, reads and
        write-backs together (with ``inp.chiplet``; default: no such links).
    node_port
        Bytes/ns each memory node's port carries in each direction (a CXL device's link:
        reads and copies one way, write-backs the other; inf or default: no port).
    inflight
        Lines each CPU node's threads may hold in flight in the memory system (inf or default: no
        limit); past it the node's threads share them max-min (``RateSolution.throttle``).
    x0, y0
        A starting point (the previous solution), to converge in fewer steps.
    """
    n = len(node_bandwidth)
    t = len(inp.cpu_node)
    ncurve = curve if node_curve is None else node_curve
    one_hop, r_ptr, r_idx, r_val, path_len, partner, link_bw = interconnect.arrays
    nl = len(link_bw)
    chip_bw = np.zeros(0) if chiplet_bandwidth is None or inp.chiplet is None else np.asarray(chiplet_bandwidth, dtype=float)
    locks = inp.lock_group is not None and inp.lock_service is not None and bool(np.any(inp.lock_group >= 0))
    n_locks = int(inp.lock_group.max()) + 1 if locks else 0
    zeros = np.zeros(t)
    coherence = zeros if inp.coherence_ns is None else np.broadcast_to(np.asarray(inp.coherence_ns, dtype=float), (t,))
    x = np.ones(n) if x0 is None else np.array(x0, dtype=float)
    y = np.ones(nl) if y0 is None else np.array(y0, dtype=float)
    rate, lat = np.zeros(t), np.zeros(t)
    node_load, flow, u = np.zeros(n), np.array(inp.extra_link, dtype=float), np.zeros(n)
    v, traffic, lmat = np.zeros(nl), np.zeros(nl), np.zeros((n, n))
    wait, w = np.zeros(len(chip_bw)), np.zeros(len(chip_bw))
    lock_wait, lock_util = np.zeros(n_locks), np.zeros(n_locks)
    throttle = np.ones(t)
    lines = np.zeros(n)
    it = fixed_point(
        np.asarray(inp.cpu_node, dtype=np.int64), _f(inp.capacity), _f(inp.compute_ns), _f(inp.misses),
        _f(inp.stall_scale), np.ascontiguousarray(inp.access, dtype=float).reshape(t, n), _f(inp.extra_node),
        np.ascontiguousarray(inp.extra_link, dtype=float), zeros if inp.writes is None else _f(inp.writes),
        np.ascontiguousarray(coherence), _ints(inp.chiplet if len(chip_bw) else None, t), chip_bw,
        _ints(inp.lock_group if locks else None, t), zeros if not locks else _f(inp.lock_service), n_locks,
        np.ascontiguousarray(base_latency, dtype=float), _f(node_bandwidth),
        np.full(n, np.inf) if node_port is None else _f(node_port),
        one_hop, r_ptr, r_idx, r_val, path_len, partner, link_bw,
        _per(ncurve.a, n), _per(ncurve.b, n),
        _per(curve.a, nl), _per(curve.b, nl), float(write_cost), float(LINE), float(tol),
        int(max_iter), x, y, rate, lat, node_load, flow, u, v, traffic, lmat, wait, w, lock_wait, lock_util,
        np.full(n, np.inf) if inflight is None else _f(inflight), throttle, lines)
    return RateSolution(
        rate=rate,
        latency=lat,
        local=inp.access[np.arange(t), inp.cpu_node] if t else np.zeros(0),
        node_load=node_load,
        link_load=flow,
        node_util=u,
        iterations=int(it),
        x=x,
        y=y,
        lmat=lmat,
        link_util=v,
        link_traffic=traffic,
        chiplet_wait=wait,
        chiplet_util=w,
        lock_wait=lock_wait,
        lock_util=lock_util,
        throttle=throttle,
        lines_demand=lines,
    )


def _f(values) -> NDArray[np.float64]:
    return np.ascontiguousarray(values, dtype=float)


def _per(value, size: int) -> NDArray[np.float64]:
    """A curve's parameter for each of ``size`` nodes or links (one value for all, or one each)."""
    return np.full(size, value, dtype=float) if np.ndim(value) == 0 else np.ascontiguousarray(value, dtype=float)


def _ints(values, size: int) -> NDArray[np.int64]:
    """An index per element as int64, or -1 for every one when there is none."""
    return np.full(size, -1, dtype=np.int64) if values is None else np.ascontiguousarray(values, dtype=np.int64)


def thread_latency(
    access: NDArray[np.float64],
    lmat: NDArray[np.float64],
    cpu_node: NDArray[np.int64],
    wait: NDArray[np.float64] | None,
    chiplet: NDArray[np.int64] | None,
) -> NDArray[np.float64]:
    """Mean loaded latency of each thread's misses: its access row over the loaded latency
    matrix, plus the wait at its chiplet's link (``wait`` per chiplet, ns; every miss crosses it)."""
    lat = np.einsum("tn,tn->t", access, lmat[cpu_node])
    if chiplet is not None and wait is not None:
        lat = lat + wait[chiplet]
    return lat


def lines_in_flight(mlp: float, thread_mlp: float, core_mlp: float, k: int) -> float:
    """Independent misses one thread overlaps with ``k`` busy hardware threads on its core.

    Alone it keeps what its workload allows, at most what one hardware thread keeps
    (``thread_mlp``) and what its core keeps (``core_mlp``). With ``k`` busy siblings the
    core's lines are shared: each keeps at most ``core_mlp / k``. Where the machine does
    not give ``core_mlp`` (infinite), the siblings split what one thread keeps alone (the
    v1 rule: Hyper-Threading halves each thread's reorder and load buffers). Never fewer
    than one.
    """
    alone = max(1.0, min(mlp, thread_mlp, core_mlp))
    if k <= 1:
        return alone
    if math.isinf(core_mlp):
        return max(1.0, alone / k)
    return max(1.0, min(mlp, thread_mlp, core_mlp / k))
