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
Schweitzer's mean value analysis of the lock as one server (``_lock_waits``), also
solved at each step. Because rates fall as latency rises, the coupled system has one fixed point, found by damped iteration.
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

__all__ = ["RateInputs", "RateSolution", "solve_rates", "LINE", "thread_latency"]

LINE = 64  # bytes per cache line
_MAX_MULTIPLIER = 1e4
_MAX_LINK_WAIT = 1e7  # service times (a line's transfer is about 1 ns: up to 10 ms a miss)
_FULL = 1.0 - 1e-12
_LINK_STEPS = 200  # Newton or bisection steps at most (Newton takes a handful)
_LINK_TOL = 1e-10


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


def solve_rates(
    inp: RateInputs,
    base_latency: NDArray[np.float64],
    node_bandwidth: NDArray[np.float64],
    interconnect: Interconnect,
    curve: LoadedLatencyCurve,
    write_cost: float = 1.0,
    node_curve: LoadedLatencyCurve | None = None,
    chiplet_bandwidth: NDArray[np.float64] | None = None,
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
    x0, y0
        A starting point (the previous solution), to converge in fewer steps.
    """
    n = len(node_bandwidth)
    t = len(inp.cpu_node)
    local_lat = np.diag(base_latency)
    hop = base_latency - local_lat[None, :]
    ncurve = curve if node_curve is None else node_curve
    route = interconnect.route
    one_hop = interconnect.one_hop  # each link carries one pair's flow: index, don't multiply
    link_bw = interconnect.bandwidth
    path_len = np.maximum(interconnect.path_len, 1).astype(float)
    onehot = np.zeros((t, n))
    onehot[np.arange(t), inp.cpu_node] = 1.0
    local_share = inp.access[np.arange(t), inp.cpu_node] if t else np.zeros(0)
    writes = np.zeros(t) if inp.writes is None else inp.writes
    has_writes = bool(np.any(writes > 0))
    coherence = 0.0 if inp.coherence_ns is None else inp.coherence_ns

    chip_bw = np.zeros(0) if chiplet_bandwidth is None or inp.chiplet is None else chiplet_bandwidth
    chip = inp.chiplet if len(chip_bw) else None
    locks = inp.lock_group is not None and inp.lock_service is not None and bool(np.any(inp.lock_group >= 0))
    n_locks = int(inp.lock_group.max()) + 1 if locks else 0
    lock_wait = np.zeros(n_locks)
    lock_util = np.zeros(n_locks)
    x = np.ones(n) if x0 is None else x0.copy()
    y = np.ones(len(link_bw)) if y0 is None else y0.copy()
    wait = np.zeros(len(chip_bw))  # ns per miss at each chiplet link
    w = np.zeros(len(chip_bw))
    rate = np.zeros(t)
    lat = np.zeros(t)
    node_load = inp.extra_node.copy()
    flow = inp.extra_link.copy()
    u = node_load / node_bandwidth
    v = np.zeros(len(link_bw))
    traffic = np.zeros(len(link_bw))
    it = 0
    def path_multiplier(y: NDArray[np.float64]) -> NDArray[np.float64]:
        if one_hop is not None:
            flat = np.ones(n * n)
            flat[one_hop] = y
            return flat.reshape(n, n)
        return (route.T @ y).reshape(n, n) / path_len

    for it in range(1, max_iter + 1):
        ymat = path_multiplier(y)
        lmat = local_lat[None, :] * x[None, :] + hop * ymat
        lat = thread_latency(inp.access, lmat, inp.cpu_node, None, None) if t else lat
        stall = coherence
        if locks:
            prev_lock = lock_wait
            stall = coherence + _per_thread(lock_wait, inp.lock_group)
        if chip is not None:
            prev = wait
            wait, w = _link_waits(inp, lat, stall, writes, chip, chip_bw, prev)
            lat = lat + wait[chip]
        if locks:
            lock_wait, lock_util = _lock_waits(inp, _tau(inp, lat, coherence), n_locks)
            stall = coherence + _per_thread(lock_wait, inp.lock_group)
        rate = inp.capacity / _tau(inp, lat, stall)
        reads = (rate * inp.misses * LINE)[:, None] * inp.access  # T x N bytes/ns
        flow = onehot.T @ reads + inp.extra_link  # [i, j]: from node j to node i
        node_load = reads.sum(axis=0) + inp.extra_node
        demand = node_load
        if has_writes:
            wb = writes[:, None] * reads  # write-backs go the other way, to the line's home node
            flow = flow + (onehot.T @ wb).T
            node_load = node_load + wb.sum(axis=0)
            demand = demand + write_cost * wb.sum(axis=0)
        u = demand / node_bandwidth
        traffic = flow.ravel()[one_hop] if one_hop is not None else route @ flow.ravel()
        v = interconnect.budget_load(traffic) / link_bw
        tx = np.minimum(np.maximum(ncurve(u), x * u), _MAX_MULTIPLIER)
        ty = np.minimum(np.maximum(curve(v), y * v), _MAX_MULTIPLIER)
        err = np.max(np.abs(np.log(tx / x)))
        if len(y):
            err = max(err, np.max(np.abs(np.log(ty / y))))
        if chip is not None:
            err = max(err, float(np.max(np.abs(wait - prev) / (1.0 + wait))))
        if locks:
            err = max(err, float(np.max(np.abs(lock_wait - prev_lock) / (1.0 + lock_wait))))
        x = np.sqrt(x * tx)
        y = np.sqrt(y * ty)
        if err < tol:
            break
    lmat = local_lat[None, :] * x[None, :] + hop * path_multiplier(y)
    return RateSolution(
        rate=rate,
        latency=lat,
        local=local_share,
        node_load=node_load,
        link_load=flow,
        node_util=u,
        iterations=it,
        x=x,
        y=y,
        lmat=lmat,
        link_util=v,
        link_traffic=traffic,
        chiplet_wait=wait,
        chiplet_util=w,
        lock_wait=lock_wait,
        lock_util=lock_util,
    )


def _tau(inp: RateInputs, lat: NDArray[np.float64], coherence) -> NDArray[np.float64]:
    """Full-core ns per operation at mean miss latencies ``lat`` (the module docstring's ``tau``)."""
    return inp.compute_ns + inp.misses * lat * inp.stall_scale + coherence


def _md1_wait(w: NDArray[np.float64]) -> NDArray[np.float64]:
    """Mean wait in an M/D/1 queue at utilisation ``w`` < 1, in service times (Pollaczek-Khinchine)."""
    return w / (2.0 * (1.0 - w))


def _link_waits(inp: RateInputs, lat: NDArray[np.float64], coherence, writes: NDArray[np.float64],
                chip: NDArray[np.int64], chip_bw: NDArray[np.float64],
                start: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The wait per miss at each chiplet link (ns) and its utilisation, at the threads' other latencies ``lat``.

    A link is an M/D/1 queue: a line's transfer takes ``S = 64 B / bandwidth`` and a miss
    waits ``S q(w)``, ``q(w) = w / (2 (1 - w))``, at utilisation ``w``. Its threads' demand
    falls as the wait ``W`` grows, so ``f(W) = W - S q(w(W))`` rises with ``W`` (``f' >= 1``):
    its root is where the wait and the load it leaves agree, always below the capacity.
    Newton's method from ``start`` (the previous step's waits) finds it on all links at
    once, inside a bracket that every step narrows; where a step would leave the bracket
    (or the link is past its capacity) the bracket is bisected instead.
    """
    n = len(chip_bw)
    service = LINE / chip_bw
    weight = inp.capacity * inp.misses * LINE * (1.0 + writes)  # bytes each op moves across, per unit of rate
    slope = inp.misses * inp.stall_scale  # d tau / d W
    lo = np.zeros(n)
    hi = service * _MAX_LINK_WAIT
    x = np.clip(start, lo, hi)
    for _ in range(_LINK_STEPS):
        tau = _tau(inp, lat + x[chip], coherence)
        w = np.bincount(chip, weights=weight / tau, minlength=n) / chip_bw
        full = w >= _FULL
        wq = np.minimum(w, _FULL)
        f = x - service * _md1_wait(wq)
        short = full | (f < 0.0)  # the wait is shorter than the load it leaves makes
        lo = np.where(short, x, lo)
        hi = np.where(short, hi, x)
        dw = np.bincount(chip, weights=weight * slope / tau**2, minlength=n) / chip_bw  # -dw/dW
        step = x - f / (1.0 + service * dw / (2.0 * (1.0 - wq) ** 2))
        ok = ~full & (step >= lo) & (step <= hi)
        step = np.where(ok, step, np.where(lo > 0.0, np.sqrt(lo * hi), hi * 1e-3))
        done = bool(np.all(np.abs(step - x) <= _LINK_TOL * np.maximum(x, service * 1e-9)))
        x = step
        if done:
            break
    tau = _tau(inp, lat + x[chip], coherence)
    return x, np.bincount(chip, weights=weight / tau, minlength=n) / chip_bw


def _per_thread(per_lock: NDArray[np.float64], group: NDArray[np.int64]) -> NDArray[np.float64]:
    """Each thread's value of its lock (0 for a thread that takes none)."""
    return np.where(group >= 0, per_lock[np.maximum(group, 0)], 0.0)


def _lock_waits(inp: RateInputs, tau0: NDArray[np.float64], n_locks: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The wait per operation at each lock (ns) and the share of the time it is held.

    A lock is one server that a closed population of threads visits once per
    operation: thread ``j`` holds it ``S_j`` ns (its critical section and the lines it
    takes over) in an operation of ``tau0_j + W`` ns at its capacity ``c_j``. By the
    arrival theorem (Schweitzer's approximate mean value analysis, all threads of a lock
    waiting alike) a thread finds the others' share of the queue ahead of it:

        W = (1 - 1/n) sum_j Q_j S_j,   Q_j = c_j (W + S_j) / (tau0_j + W)

    with ``n`` the lock's running threads. The right side rises with ``W`` and is
    concave, so ``g(W) = W - rhs`` is convex with one root; Newton's method from the
    right (from the bound ``(1 - 1/n) sum_j c_j S_j``, or the previous step's root where
    it lies right of this one) reaches it monotonically. Two threads that only pass
    the lock back and forth (``tau0 = S``) get ``W = S``: they alternate.
    """
    group = inp.lock_group
    mine = group >= 0
    g = group[mine]
    c, s, t0 = inp.capacity[mine], inp.lock_service[mine], tau0[mine]
    running = c > 0.0
    n = np.bincount(g[running], minlength=n_locks).astype(float)
    k = np.where(n > 1.0, 1.0 - 1.0 / np.maximum(n, 1.0), 0.0)
    cs = c * s
    w = k * np.bincount(g, weights=cs, minlength=n_locks)  # the bound: every other thread always queued
    for _ in range(_LINK_STEPS):
        wt = w[g]
        rhs = k * np.bincount(g, weights=cs * (wt + s) / (t0 + wt), minlength=n_locks)
        slope = k * np.bincount(g, weights=cs * (t0 - s) / (t0 + wt) ** 2, minlength=n_locks)
        f = w - rhs
        step = np.where(f > 0.0, w - f / np.maximum(1.0 - slope, 1e-12), w)
        step = np.maximum(step, 0.0)
        done = bool(np.all(np.abs(step - w) <= _LINK_TOL * (1.0 + w)))
        w = step
        if done:
            break
    util = np.bincount(g, weights=cs / (t0 + w[g]), minlength=n_locks)
    return w, util


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
