"""Compiled rules a policy can hand the runtime (part of the policies' contract, with :mod:`.api`).

A rule is a decision that runs at nearly every event, written as a numba function over
arrays: the policy builds its tables once and returns them (``Policy.wake_rule``), and the
runtime runs the rule inside its compiled event path, without a call into Python; the
policy's Python method computes the same with the same function. With
``NUMBA_DISABLE_JIT=1`` they run as Python.

The wake-up placement of CFS, ``select_task_rq_fair`` for a wakeup (kernel/sched/fair.c):
``wake_affine`` decides between the CPU the thread last ran on and its waker's, then
``select_idle_sibling`` looks for an idle CPU sharing the chosen one's last-level
cache: the target itself, the previous CPU, an idle core (with SMT), then idle CPUs
within the SIS_UTIL scan budget (docs/model.md keeps what it models).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .. import jit

jit.fresh(__file__)

__all__ = ["SCALE", "WakeTables", "check_packed", "wake_cpu", "wake_packed"]

SCALE = 1024  # SCHED_CAPACITY_SCALE: one CPU's capacity, one nice-0 task's load
_HEAD = 8  # columns of the packed tables' first row before the levels' (WakeTables.packed)


class WakeTables:
    """What the wake-up placement reads, as arrays: the wake_affine levels, the LLCs, the cores."""

    def __init__(self, levels, llc_span_of: NDArray[np.int64], llc_cpus: list[NDArray[np.int64]],
                 core_cpus: tuple[tuple[int, ...], ...], cpu_core: NDArray[np.int64], cpu_node: NDArray[np.int64],
                 distance: NDArray[np.int64]):
        affine = []
        for lvl in levels:
            if not lvl.wake_affine:
                break
            affine.append(lvl)
        n = len(llc_span_of)
        # The levels that may wake affine, lowest first, and imbalance_pct. Whether the previous CPU is
        # in the waker's domain (wake_affine's test): below the NUMA levels, where domains do not
        # overlap, both have one domain (a CPU without one there, its own number below zero); at a
        # NUMA level, the nodes are at most the level's distance apart (sd_numa_mask), whether the
        # waker keeps that domain or not (if not, its child has the same span, or spans the machine,
        # and is met first).
        self.span_of = np.zeros((len(affine), n), dtype=np.int64)
        for li, lvl in enumerate(affine):
            if lvl.numa:
                self.span_of[li] = cpu_node
            else:
                self.span_of[li] = np.where(lvl.span_of >= 0, lvl.span_of, -1 - np.arange(n))
        self.near = np.array([lvl.dist if lvl.numa else 0 for lvl in affine], dtype=np.int64)
        self.distance = np.ascontiguousarray(distance, dtype=np.int64)
        self.pct = np.array([lvl.pct for lvl in affine], dtype=np.int64)
        self.llc_span_of = np.ascontiguousarray(llc_span_of, dtype=np.int64)
        width = max(len(c) for c in llc_cpus)
        self.llc_cpus = np.full((len(llc_cpus), width), -1, dtype=np.int64)  # each LLC's CPUs, ascending
        self.llc_len = np.array([len(c) for c in llc_cpus], dtype=np.int64)
        for i, cpus in enumerate(llc_cpus):
            self.llc_cpus[i, :len(cpus)] = np.sort(cpus)
        ways = max(len(c) for c in core_cpus)
        self.core_cpus = np.full((len(core_cpus), ways), -1, dtype=np.int64)
        for i, cpus in enumerate(core_cpus):
            self.core_cpus[i, :len(cpus)] = cpus
        self.cpu_core = np.ascontiguousarray(cpu_core, dtype=np.int64)

    def packed(self, smt: bool, pct_mc: int) -> NDArray[np.int64]:
        """The tables as one array, for the runtime (:func:`wake_packed` reads it): row 0 holds the
        number of wake_affine levels, the SMT flag, imbalance_pct of the LLC level, the number
        of LLCs, the ways per core and the number of nodes, then each level's imbalance_pct from
        column 8 and then each level's distance (0: not a NUMA level); then a row per level's
        spans (at a NUMA level, nodes), the LLC spans, the CPUs' cores, the LLCs' lengths, a row
        per LLC of its CPUs, a row per core of its CPUs and a row per node of its distances."""
        levels, ncpu = self.span_of.shape
        n_llc, width = self.llc_cpus.shape
        ncores, ways = self.core_cpus.shape
        nodes = self.distance.shape[0]
        cols = max(ncpu, width, ways, n_llc, nodes, _HEAD + 2 * levels)
        out = np.full((4 + levels + n_llc + ncores + nodes, cols), -1, dtype=np.int64)
        out[0, :6] = (levels, int(smt), pct_mc, n_llc, ways, nodes)
        out[0, _HEAD:_HEAD + levels] = self.pct
        out[0, _HEAD + levels:_HEAD + 2 * levels] = self.near
        out[1:1 + levels, :ncpu] = self.span_of
        out[1 + levels, :ncpu] = self.llc_span_of
        out[2 + levels, :ncpu] = self.cpu_core
        out[3 + levels, :n_llc] = self.llc_len
        out[4 + levels:4 + levels + n_llc, :width] = self.llc_cpus
        out[4 + levels + n_llc:4 + levels + n_llc + ncores, :ways] = self.core_cpus
        out[4 + levels + n_llc + ncores:, :nodes] = self.distance
        return out


def check_packed(W: object, ncpu: int) -> str | None:
    """What is wrong with tables handed over as :meth:`WakeTables.packed` for a machine of ``ncpu``
    CPUs (the compiled code does not check its indices), or None."""
    if not isinstance(W, np.ndarray) or W.dtype != np.int64 or W.ndim != 2 or W.shape[0] < 6 or W.shape[1] < max(ncpu, _HEAD):
        return f"an int64 array of at least 6 rows and {max(ncpu, _HEAD)} columns"
    levels, smt, pct_mc, n_llc, ways, nodes = (int(v) for v in W[0, :6])
    ncores = W.shape[0] - 4 - levels - n_llc - nodes
    if not (0 <= levels and _HEAD + 2 * levels <= W.shape[1] and smt in (0, 1) and 100 <= pct_mc <= 200 and 1 <= n_llc <= W.shape[1]
            and 1 <= ways <= W.shape[1] and 1 <= nodes <= W.shape[1] and ncores >= 1):
        return ("a first row of levels (as many as the columns hold), SMT (0 or 1), imbalance_pct (100-200), LLCs, ways and nodes "
                "that fit the array")
    r = 1 + levels
    near = W[0, _HEAD + levels:_HEAD + 2 * levels]
    numa_rows = W[1:r, :ncpu][near > 0]
    llc_len = W[r + 2, :n_llc]
    cpus = W[r + 3:r + 3 + n_llc]
    ok = (np.all((W[r, :ncpu] >= 0) & (W[r, :ncpu] < n_llc)) and np.all((W[r + 1, :ncpu] >= 0) & (W[r + 1, :ncpu] < ncores))
          and np.all(near >= 0) and np.all((numa_rows >= 0) & (numa_rows < nodes))
          and np.all((llc_len >= 1) & (llc_len <= W.shape[1]))
          and all(np.all((row[:k] >= 0) & (row[:k] < ncpu)) and np.all(np.diff(row[:k]) > 0) for row, k in zip(cpus, llc_len))
          and np.all((W[r + 3 + n_llc:r + 3 + n_llc + ncores, :ways] >= -1) & (W[r + 3 + n_llc:r + 3 + n_llc + ncores, :ways] < ncpu)))
    return None if ok else "CPU, core, LLC and node numbers within the machine, each LLC's CPUs ascending"


@jit.kernel
def wake_packed(W, nr, prev, this, allowed):
    """:func:`wake_cpu` over the tables packed by :meth:`WakeTables.packed`; ``allowed``: a mask of
    the CPUs the thread may use (every CPU's entry true when it may use all)."""
    levels, smt, pct_mc, n_llc, ways, nodes = W[0, 0], W[0, 1], W[0, 2], W[0, 3], W[0, 4], W[0, 5]
    ncpu = nr.size
    width = W.shape[1]
    r = 1 + levels
    k = r + 3 + n_llc  # the cores' rows, then the nodes'
    ncores = W.shape[0] - k - nodes
    return wake_cpu(nr, prev, this, allowed, W[1:r, :ncpu], W[0, 8:8 + levels], W[0, 8 + levels:8 + 2 * levels],
                    W[k + ncores:, :nodes], W[r, :ncpu], W[r + 3:k, :width], W[r + 2, :n_llc], W[k:k + ncores, :ways],
                    W[r + 1, :ncpu], smt != 0, pct_mc)


@jit.kernel
def least_loaded(nr, allowed, core_cpus, smt):
    """The :class:`~numasim.policies.api.LeastLoaded` rule: of the CPUs ``allowed`` (a mask), the one with
    the fewest threads queued (``nr``), then with ``smt`` the fewest on the rest of its core
    (``core_cpus[c]``: the core's CPUs, -1 padded), then the lowest; -1 if none is allowed."""
    best, best_nr, best_sib = -1, 0, 0
    for c in range(nr.size):
        if not allowed[c]:
            continue
        sib = 0
        if smt:
            for s in core_cpus[c]:
                if s >= 0 and s != c:
                    sib += nr[s]
        if best < 0 or nr[c] < best_nr or (nr[c] == best_nr and sib < best_sib):
            best, best_nr, best_sib = c, nr[c], sib
    return best


@jit.kernel
def _ok(allowed, c):
    return allowed.size == 0 or allowed[c]


@jit.kernel
def wake_cpu(nr, prev, this, allowed, span_of, pct, near, distance, llc_span_of, llc_cpus, llc_len, core_cpus,
             cpu_core, smt, pct_mc):
    """The CPU a waking thread goes to, or -1 when no CPU it may use was found (the caller then
    walks the domains as a fork does).

    ``nr``: threads queued on each CPU; ``prev``: where the thread ran; ``this``: its waker's
    CPU (``prev`` when none); ``allowed``: a mask of the CPUs it may use (empty: all). The
    waker's lowest wake_affine domain that holds ``prev``: below the NUMA levels (``near``
    0) the one both CPUs have (``span_of``), at a NUMA level one whose nodes (``span_of``)
    are at most ``near`` apart (``distance``).
    """
    target = prev
    if this != prev and _ok(allowed, this):
        for li in range(span_of.shape[0]):
            a, b = span_of[li, this], span_of[li, prev]
            if a == b if near[li] == 0 else distance[a, b] <= near[li]:
                target = _wake_affine(nr, this, prev, pct[li], llc_span_of)
                break
    return _select_idle_sibling(nr, prev, target, allowed, llc_span_of, llc_cpus, llc_len, core_cpus, cpu_core,
                                smt, pct_mc)


@jit.kernel
def _wake_affine(nr, this, prev, pct, llc_span_of):
    if nr[this] == 0 and llc_span_of[this] == llc_span_of[prev]:
        return prev if nr[prev] == 0 else this
    if nr[prev] == 0:
        return prev
    # wake_affine_weight: the waking task's load moves from prev to this.
    this_eff = (nr[this] + 1) * SCALE * 100
    prev_eff = nr[prev] * SCALE * (100 + (pct - 100) // 2)
    return this if this_eff < prev_eff else prev


@jit.kernel
def _select_idle_sibling(nr, prev, target, allowed, llc_span_of, llc_cpus, llc_len, core_cpus, cpu_core, smt,
                         pct_mc):
    if nr[target] == 0 and _ok(allowed, target):
        return target
    if prev != target and llc_span_of[prev] == llc_span_of[target] and nr[prev] == 0 and _ok(allowed, prev):
        return prev
    li = llc_span_of[target]
    n = llc_len[li]
    llc = llc_cpus[li, :n]
    # SIS_UTIL: the busier the LLC, the fewer CPUs are scanned.
    busy = 0
    for c in llc:
        if nr[c] != 0:
            busy += 1
    x = SCALE * busy / n
    y = SCALE - x * x * pct_mc**2 / (10000 * SCALE)
    budget = int(n * max(y, 0.0) / SCALE)
    if budget > 0:
        start = np.searchsorted(llc, target)
        if smt:
            for i in range(n):
                c = llc[(i + start + 1) % n]
                if _ok(allowed, c):
                    idle = True
                    for s in core_cpus[cpu_core[c]]:
                        if s >= 0 and nr[s] != 0:
                            idle = False
                            break
                    if idle:
                        return c
        # select_idle_cpu scans the LLC's CPUs that the task may use (span & cpus_ptr),
        # so the budget counts allowed CPUs only.
        seen = 0
        for i in range(n):
            c = llc[(i + start + 1) % n]
            if not _ok(allowed, c):
                continue
            if seen == budget:
                break
            seen += 1
            if nr[c] == 0:
                return c
    if _ok(allowed, target):
        return target
    if _ok(allowed, prev):
        return prev
    return -1
