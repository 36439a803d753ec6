"""The loaded-latency fixed point, compiled: the loop of :func:`numasim.sim.perf.solve_rates`.

:mod:`numasim.sim.perf` states the equations and prepares the arrays; this module runs the
damped iteration over them with numba (``@njit``): a handful of nodes and links and up to a
few thousand threads make arrays too small for numpy's cost per call, which was most of a
solve's time (docs/performance-history.md). The chiplet links' M/D/1 waits (:func:`link_waits`) and
the locks' mean value analysis (:func:`lock_waits`) are solved here too, at each step of the
iteration. Its input of where each thread's misses go (:func:`access_rows`) is compiled here too,
without allocation (:func:`numasim.jit.kernel`). With ``NUMBA_DISABLE_JIT=1`` the same code runs
as Python.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .. import jit

jit.fresh(__file__)

__all__ = ["fixed_point", "link_waits", "lock_waits", "access_rows"]

_MAX_MULTIPLIER = 1e4
_MAX_LINK_WAIT = 1e7  # service times (a line's transfer is about 1 ns: up to 10 ms a miss)
_FULL = 1.0 - 1e-12
_LINK_STEPS = 200  # Newton or bisection steps at most (Newton takes a handful)
_LINK_TOL = 1e-10


@njit(cache=True)
def _path_multiplier(y, one_hop, r_ptr, r_idx, r_val, path_len, out):
    """Each node pair's mean link multiplier over its route (``out``, flat ``[i * n + j]``).

    Where every link carries one pair's flow (``one_hop`` not empty) a pair's multiplier is
    its link's, and 1 for pairs without a link; otherwise the route matrix (CSR, links x
    pairs) sums the multipliers of the links crossed, divided by their number."""
    if one_hop.size:
        out[:] = 1.0
        for k in range(one_hop.size):
            out[one_hop[k]] = y[k]
        return
    out[:] = 0.0
    for k in range(y.size):
        for e in range(r_ptr[k], r_ptr[k + 1]):
            out[r_idx[e]] += r_val[e] * y[k]
    for p in range(out.size):
        out[p] /= path_len[p]


@njit(cache=True)
def _worse(err, e):
    """The larger error, NaN if either is (as numpy's max): a step that went wrong never converges."""
    return e if e > err or e != e else err


@njit(cache=True)
def _tau(compute, misses, lat, stall_scale, stall, k):
    """Full-core ns per operation of thread ``k`` at latency ``lat`` (perf's ``tau``)."""
    return compute[k] + misses[k] * lat * stall_scale[k] + stall


@njit(cache=True)
def link_waits(capacity, compute, misses, stall_scale, line, lat, stall, writes, chip, chip_bw, start, wait, util, throttle):
    """The wait per miss at each chiplet link (ns, into ``wait``) and its utilisation
    (``util``), at the threads' other latencies ``lat`` and stalls ``stall``, each thread's
    rate divided by its ``throttle`` (its node's lines in flight, as the step before left them).

    A link is an M/D/1 queue: a line's transfer takes ``S = 64 B / bandwidth`` and a miss
    waits ``S q(w)``, ``q(w) = w / (2 (1 - w))``, at utilisation ``w``. Its threads' demand
    falls as the wait ``W`` grows, so ``f(W) = W - S q(w(W))`` rises with ``W`` (``f' >= 1``):
    its root is where the wait and the load it leaves agree, always below the capacity.
    Newton's method from ``start`` (the previous step's waits) finds it on all links at
    once, inside a bracket that every step narrows; where a step would leave the bracket
    (or the link is past its capacity) the bracket is bisected instead.
    """
    m = chip_bw.size
    t = chip.size
    service = np.empty(m)
    lo = np.zeros(m)
    hi = np.empty(m)
    x = np.empty(m)
    step = np.empty(m)
    w = np.zeros(m)
    dw = np.zeros(m)
    for c in range(m):
        service[c] = line / chip_bw[c]
        hi[c] = service[c] * _MAX_LINK_WAIT
        x[c] = min(max(start[c], lo[c]), hi[c])
    for _ in range(_LINK_STEPS):
        w[:] = 0.0
        dw[:] = 0.0
        for k in range(t):
            weight = capacity[k] / throttle[k] * misses[k] * line * (1.0 + writes[k])
            tau = _tau(compute, misses, lat[k] + x[chip[k]], stall_scale, stall[k], k)
            w[chip[k]] += weight / tau
            dw[chip[k]] += weight * (misses[k] * stall_scale[k]) / tau**2
        done = True
        for c in range(m):
            wc = w[c] / chip_bw[c]
            full = wc >= _FULL
            wq = min(wc, _FULL)
            f = x[c] - service[c] * (wq / (2.0 * (1.0 - wq)))
            if full or f < 0.0:
                lo[c] = x[c]  # the wait is shorter than the load it leaves makes
            else:
                hi[c] = x[c]
            s = x[c] - f / (1.0 + service[c] * (dw[c] / chip_bw[c]) / (2.0 * (1.0 - wq) ** 2))
            if full or s < lo[c] or s > hi[c]:
                s = math.sqrt(lo[c] * hi[c]) if lo[c] > 0.0 else hi[c] * 1e-3
            if not abs(s - x[c]) <= _LINK_TOL * max(x[c], service[c] * 1e-9):
                done = False
            step[c] = s
        x[:] = step
        if done:
            break
    util[:] = 0.0
    for k in range(t):
        tau = _tau(compute, misses, lat[k] + x[chip[k]], stall_scale, stall[k], k)
        util[chip[k]] += capacity[k] / throttle[k] * misses[k] * line * (1.0 + writes[k]) / tau
    for c in range(m):
        util[c] /= chip_bw[c]
        wait[c] = x[c]


@njit(cache=True)
def lock_waits(group, capacity, service, tau0, n_locks):
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

    ``group``: each thread's lock, -1 for none.
    """
    n = np.zeros(n_locks)
    bound = np.zeros(n_locks)
    for k in range(group.size):
        g = group[k]
        if g >= 0:
            if capacity[k] > 0.0:
                n[g] += 1.0
            bound[g] += capacity[k] * service[k]
    kk = np.zeros(n_locks)
    for g in range(n_locks):
        if n[g] > 1.0:
            kk[g] = 1.0 - 1.0 / max(n[g], 1.0)
    w = kk * bound  # every other thread always queued
    rhs = np.zeros(n_locks)
    slope = np.zeros(n_locks)
    for _ in range(_LINK_STEPS):
        rhs[:] = 0.0
        slope[:] = 0.0
        for k in range(group.size):
            g = group[k]
            if g >= 0:
                cs = capacity[k] * service[k]
                wt = w[g]
                rhs[g] += cs * (wt + service[k]) / (tau0[k] + wt)
                slope[g] += cs * (tau0[k] - service[k]) / (tau0[k] + wt) ** 2
        done = True
        for g in range(n_locks):
            f = w[g] - kk[g] * rhs[g]
            s = w[g] - f / max(1.0 - kk[g] * slope[g], 1e-12) if f > 0.0 else w[g]
            s = max(s, 0.0)
            if not abs(s - w[g]) <= _LINK_TOL * (1.0 + w[g]):
                done = False
            w[g] = s
        if done:
            break
    util = np.zeros(n_locks)
    for k in range(group.size):
        g = group[k]
        if g >= 0:
            util[g] += capacity[k] * service[k] / (tau0[k] + w[g])
    return w, util


@njit(cache=True)
def _add_flows(k, rate, misses, line, cpu_node, access, writes, has_writes, flow, node_load, wb_sum):
    """Thread ``k``'s reads into the flows and node loads, and its write-backs the other way."""
    per_line = rate[k] * misses[k] * line
    home = cpu_node[k]
    for j in range(access.shape[1]):
        reads = per_line * access[k, j]
        flow[home, j] += reads  # [i, j]: from node j to node i
        node_load[j] += reads
        if has_writes:
            wb = writes[k] * reads  # write-backs go the other way, to the line's home node
            flow[j, home] += wb
            wb_sum[j] += wb


@njit(cache=True)
def _share_lines(cpu_node, rate, misses, occ_lat, inflight, want, held, tot, throttle):
    """Max-min sharing of each CPU node's lines in flight (:func:`fixed_point`'s ``inflight``), in place:
    a thread that would hold more than the node's level runs at the level, ``rate`` and ``throttle``.
    ``want``, ``held`` (per thread) and ``tot`` (per node) are scratch. Returns whether any thread slowed."""
    t = cpu_node.size
    slowed = False
    tot[:] = 0.0
    for k in range(t):
        want[k] = rate[k] * misses[k] * occ_lat[k]
        throttle[k] = 1.0
        tot[cpu_node[k]] += want[k]
    for s in range(inflight.size):
        cap = inflight[s]
        if not tot[s] > cap:  # within its lines (or no limit: inf)
            continue
        m = 0
        for k in range(t):
            if cpu_node[k] == s and want[k] > 0.0:
                held[m] = want[k]
                m += 1
        d = np.sort(held[:m])
        left, level = cap, 0.0
        for i in range(m):  # water-filling: the smallest keep theirs while the rest fit
            if d[i] * (m - i) <= left:
                left -= d[i]
            else:
                level = left / (m - i)
                break
        for k in range(t):
            if cpu_node[k] == s and want[k] > level:
                f = want[k] / level
                throttle[k] = f
                rate[k] /= f
                slowed = True
    return slowed


@njit(cache=True)
def fixed_point(cpu_node, capacity, compute, misses, stall_scale, access, extra_node, extra_link, writes, coherence,
                chip, chip_bw, lock_group, lock_service, n_locks, base_latency, node_bandwidth, node_port, one_hop, r_ptr, r_idx,
                r_val, path_len, partner, link_bw, node_a, node_b, link_a, link_b, write_cost, line, tol, max_iter,
                x, y, rate, lat, node_load, flow, u, v, traffic, lmat, wait, w, lock_wait, lock_util, inflight, throttle,
                lines):
    """The damped iteration of :func:`numasim.sim.perf.solve_rates`, in place: ``x``, ``y`` (the node
    and link multipliers) start at the previous solution and end at this one, and the other
    outputs (rates, latencies, loads, utilisations, the loaded latency matrix, chiplet and
    lock waits, and each thread's ``throttle``) are those of the last step. Returns the number of steps.

    ``inflight``: per CPU node, the lines its threads' misses may hold in the memory system at once
    (inf: no limit). A miss holds one for its loaded latency (memory and interconnect, not the chiplet
    link), so a thread holds ``rate x misses x latency`` lines (Little's law). When a node's threads
    would hold more, the lines are shared max-min: threads that would hold fewer than a level keep
    theirs, the others hold that level each, the level set so that all hold ``inflight``; such a
    thread's rate falls by the ratio, its ``throttle`` (1: not throttled). ``lines`` (per node) gets the
    lines its threads would hold at the last step's unthrottled rates over its limit (0 without a limit):
    above 1 the limit binds."""
    n = node_bandwidth.size
    t = cpu_node.size
    nl = link_bw.size
    has_writes = False
    for k in range(t):
        if writes[k] > 0.0:
            has_writes = True
    ymat = np.empty(n * n)
    stall = np.empty(t)
    wb_sum = np.zeros(n)
    tx = np.empty(n)
    ty = np.empty(nl)
    prev_wait = np.zeros(chip_bw.size)
    has_pool = False
    for k in range(t):
        if inflight[cpu_node[k]] < np.inf:
            has_pool = True
    occ_lat = np.empty(t)  # each thread's latency while it holds a line in flight
    want = np.empty(t)
    held = np.empty(t)
    tot = np.empty(n)
    throttle[:] = 1.0
    copy_in = np.zeros(n)  # page copies written into each node (extra_link's rows): a port's write direction
    for j in range(n):
        node_load[j] = extra_node[j]
        u[j] = node_load[j] / node_bandwidth[j]
        for i in range(n):
            if i != j:
                copy_in[j] += extra_link[j, i]
    it = 0
    for step in range(1, max_iter + 1):
        it = step
        _path_multiplier(y, one_hop, r_ptr, r_idx, r_val, path_len, ymat)
        for i in range(n):
            for j in range(n):
                lmat[i, j] = base_latency[j, j] * x[j] + (base_latency[i, j] - base_latency[j, j]) * ymat[i * n + j]
        for k in range(t):
            acc = 0.0
            for j in range(n):
                acc += access[k, j] * lmat[cpu_node[k], j]
            lat[k] = acc
        if has_pool:
            for k in range(t):
                occ_lat[k] = lat[k]
        for k in range(t):
            stall[k] = coherence[k]
            if n_locks:
                g = lock_group[k]
                stall[k] += lock_wait[g] if g >= 0 else 0.0
        prev_lock = lock_wait.copy()
        if chip_bw.size:
            prev_wait[:] = wait
            link_waits(capacity, compute, misses, stall_scale, line, lat, stall, writes, chip, chip_bw, prev_wait,
                       wait, w, throttle)
            for k in range(t):
                lat[k] += wait[chip[k]]
        if n_locks:
            tau0 = np.empty(t)
            for k in range(t):
                tau0[k] = _tau(compute, misses, lat[k], stall_scale, coherence[k], k)
            lw, lu = lock_waits(lock_group, capacity, lock_service, tau0, n_locks)
            lock_wait[:] = lw
            lock_util[:] = lu
            for k in range(t):
                g = lock_group[k]
                stall[k] = coherence[k] + (lock_wait[g] if g >= 0 else 0.0)
        flow[:, :] = 0.0
        node_load[:] = 0.0
        wb_sum[:] = 0.0
        for k in range(t):
            rate[k] = capacity[k] / _tau(compute, misses, lat[k], stall_scale, stall[k], k)
            _add_flows(k, rate, misses, line, cpu_node, access, writes, has_writes, flow, node_load, wb_sum)
        if has_pool and _share_lines(cpu_node, rate, misses, occ_lat, inflight, want, held, tot, throttle):
            flow[:, :] = 0.0  # the flows again, at the rates the lines in flight leave
            node_load[:] = 0.0
            wb_sum[:] = 0.0
            for k in range(t):
                _add_flows(k, rate, misses, line, cpu_node, access, writes, has_writes, flow, node_load, wb_sum)
        for i in range(n):
            for j in range(n):
                flow[i, j] += extra_link[i, j]
        for j in range(n):
            demand = node_load[j] + extra_node[j]
            node_load[j] = demand + wb_sum[j]
            # Through a port, reads and copies out go one way, write-backs and copies in the other.
            port_u = max(demand - copy_in[j], wb_sum[j] + copy_in[j]) / node_port[j]  # 0 without a port (inf)
            if has_writes:
                demand += write_cost * wb_sum[j]
            u[j] = max(demand / node_bandwidth[j], port_u)
        if one_hop.size:
            for k in range(nl):
                traffic[k] = flow[one_hop[k] // n, one_hop[k] % n]
        else:
            for k in range(nl):
                acc = 0.0
                for e in range(r_ptr[k], r_ptr[k + 1]):
                    acc += r_val[e] * flow[r_idx[e] // n, r_idx[e] % n]
                traffic[k] = acc
        for k in range(nl):
            p = partner[k]
            v[k] = (traffic[k] + (traffic[p] if p >= 0 else 0.0)) / link_bw[k]
        err = 0.0
        for j in range(n):
            g = 1.0 + node_a[j] * min(max(u[j], 0.0), 1.0) ** node_b[j]
            tx[j] = min(max(g, x[j] * u[j]), _MAX_MULTIPLIER)
            err = _worse(err, abs(math.log(tx[j] / x[j])))
        for k in range(nl):
            g = 1.0 + link_a[k] * min(max(v[k], 0.0), 1.0) ** link_b[k]
            ty[k] = min(max(g, y[k] * v[k]), _MAX_MULTIPLIER)
            err = _worse(err, abs(math.log(ty[k] / y[k])))
        for c in range(chip_bw.size):
            err = _worse(err, abs(wait[c] - prev_wait[c]) / (1.0 + wait[c]))
        for g in range(n_locks):
            err = _worse(err, abs(lock_wait[g] - prev_lock[g]) / (1.0 + lock_wait[g]))
        for j in range(n):
            x[j] = math.sqrt(x[j] * tx[j])
        for k in range(nl):
            y[k] = math.sqrt(y[k] * ty[k])
        if err < tol:
            break
    for s in range(n):
        lines[s] = tot[s] / inflight[s] if has_pool and inflight[s] < np.inf else 0.0
    _path_multiplier(y, one_hop, r_ptr, r_idx, r_val, path_len, ymat)
    for i in range(n):
        for j in range(n):
            lmat[i, j] = base_latency[j, j] * x[j] + (base_latency[i, j] - base_latency[j, j]) * ymat[i * n + j]
    return it


@jit.kernel
def access_rows(tids, cpu, shared_rid, private_rid, p_shared, cpu_node, access, out):
    """Share of each thread's misses each node serves (:meth:`numasim.sim.rates.Rates._access`), into
    ``out`` (a row per thread of ``tids``): its process's shared region's and its private region's
    accesses by node (``access``: a row per region, ``Memory._access``), each as shares of its sum,
    mixed by the thread's shared fraction; a region with nothing placed yet counts as local (memory is
    allocated where it is first used). A region id of -1 reads the last region, and a CPU of -1 the last
    CPU, as numpy's indexing did."""
    n = access.shape[1]
    for k in range(tids.size):
        t = tids[k]
        c = cpu[t]
        if c < 0:
            c += cpu_node.size
        home = cpu_node[c]
        rs, rp = shared_rid[t], private_rid[t]
        if rs < 0:
            rs += access.shape[0]
        if rp < 0:
            rp += access.shape[0]
        ts, tp = _row_sum(access[rs]), _row_sum(access[rp])
        sf = p_shared[t]
        for j in range(n):
            local = 1.0 if j == home else 0.0
            sh = access[rs, j] / ts if ts > 0.0 else local
            pr = access[rp, j] / tp if tp > 0.0 else local
            out[k, j] = sf * sh + (1.0 - sf) * pr


@jit.kernel
def _row_sum(a):
    """``a.sum()`` as numpy adds a row of doubles (its pairwise summation: one by one below 8 values, else
    8 running sums combined pairwise, then the rest; exact for rows up to 128 values, machines' nodes):
    the same bits, so a solve is the same as numpy's."""
    n = a.size
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[i]
        return res
    r0, r1, r2, r3, r4, r5, r6, r7 = a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]
    i = 8
    while i + 8 <= n:
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[i]
        i += 1
    return res
