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
_HEAD = 16  # the packed tables' header (WakeTables.packed)


class WakeTables:
    """What the wake-up placement reads, as flat arrays (memory in proportion to the CPUs): the
    wake_affine levels, the LLCs, the cores, the distances between nodes."""

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
        # and is met first). One row of the CPUs per level, laid end to end.
        span_of = np.zeros((len(affine), n), dtype=np.int64)
        for li, lvl in enumerate(affine):
            if lvl.numa:
                span_of[li] = cpu_node
            else:
                span_of[li] = np.where(lvl.span_of >= 0, lvl.span_of, -1 - np.arange(n))
        self.span_of = span_of.ravel()
        self.near = np.array([lvl.dist if lvl.numa else 0 for lvl in affine], dtype=np.int64)
        self.nodes = int(np.asarray(distance).shape[0])
        self.distance = np.ascontiguousarray(distance, dtype=np.int64).ravel()  # row by row
        self.pct = np.array([lvl.pct for lvl in affine], dtype=np.int64)
        self.llc_span_of = np.ascontiguousarray(llc_span_of, dtype=np.int64)
        # Each LLC's CPUs, ascending, laid end to end, and where each LLC's start.
        self.llc_len = np.array([len(c) for c in llc_cpus], dtype=np.int64)
        self.llc_start = np.concatenate(([0], np.cumsum(self.llc_len)[:-1])).astype(np.int64)
        self.llc_cpus = np.concatenate([np.sort(np.asarray(c, dtype=np.int64)) for c in llc_cpus]).astype(np.int64)
        self.ways = max(len(c) for c in core_cpus)
        core = np.full((len(core_cpus), self.ways), -1, dtype=np.int64)  # each core's CPUs, -1 padded
        for i, cpus in enumerate(core_cpus):
            core[i, :len(cpus)] = cpus
        self.ncores = len(core_cpus)
        self.core_cpus = core.ravel()
        self.cpu_core = np.ascontiguousarray(cpu_core, dtype=np.int64)

    def packed(self, smt: bool, pct_mc: int) -> NDArray[np.int64]:
        """The tables as one flat array, for the runtime (:func:`wake_packed` reads it): a header of
        the number of wake_affine levels, the SMT flag, imbalance_pct of the LLC level, the numbers of
        LLCs, ways per core, nodes, CPUs and cores, then the sections :func:`_sections` lays out."""
        levels, ncpu, n_llc = len(self.pct), len(self.cpu_core), len(self.llc_len)
        head = (levels, int(smt), pct_mc, n_llc, self.ways, self.nodes, ncpu, self.ncores)
        parts = (self.pct, self.near, self.span_of, self.llc_span_of, self.cpu_core, self.llc_len, self.llc_start,
                 self.llc_cpus, self.core_cpus, self.distance)
        out = np.zeros(_HEAD + sum(len(x) for x in parts), dtype=np.int64)
        out[:8] = head
        at = _sections(*head)
        for x, (lo, hi) in zip(parts, zip(at[:-1], at[1:])):
            out[lo:hi] = x
        return out


@jit.kernel
def _sections(levels, smt, pct_mc, n_llc, ways, nodes, ncpu, ncores):
    """Where each section of the packed tables starts (and the end): imbalance_pct and distance per
    level; a row of CPUs per level (at a NUMA level, their nodes); each CPU's LLC, each CPU's core;
    each LLC's length and start in the next section, the LLCs' CPUs; each core's CPUs (``ways`` each,
    -1 padded); the distances between nodes, row by row."""
    a = _HEAD
    b = a + levels
    c = b + levels
    d = c + levels * ncpu
    e = d + ncpu
    f = e + ncpu
    g = f + n_llc
    h = g + n_llc
    i = h + ncpu
    j = i + ncores * ways
    return a, b, c, d, e, f, g, h, i, j, j + nodes * nodes


def check_packed(W: object, ncpu: int) -> str | None:
    """What is wrong with tables handed over as :meth:`WakeTables.packed` for a machine of ``ncpu``
    CPUs (the compiled code does not check its indices), or None."""
    if not isinstance(W, np.ndarray) or W.dtype != np.int64 or W.ndim != 1 or W.size < _HEAD:
        return f"a one-dimensional int64 array of at least {_HEAD} numbers"
    levels, smt, pct_mc, n_llc, ways, nodes, n, ncores = (int(v) for v in W[:8])
    if not (0 <= levels <= 256 and smt in (0, 1) and 100 <= pct_mc <= 200 and n == ncpu and 1 <= n_llc <= ncpu
            and 1 <= ways <= 64 and 1 <= nodes <= 4096 and 1 <= ncores <= ncpu):
        return ("a header of levels (0-256), SMT (0 or 1), imbalance_pct (100-200), LLCs, ways, nodes, the machine's "
                "CPUs and cores")
    at = _sections(levels, smt, pct_mc, n_llc, ways, nodes, ncpu, ncores)
    if W.size != at[-1]:
        return f"{at[-1]} numbers for its header's sizes, got {W.size}"
    pct, near, span, llc_of, core_of, llc_len, llc_start, llc_cpus, core, _ = (
        W[lo:hi] for lo, hi in zip(at[:-1], at[1:]))
    numa_rows = span.reshape(levels, ncpu)[near > 0]
    ends = llc_start + llc_len
    ok = (np.all((llc_of >= 0) & (llc_of < n_llc)) and np.all((core_of >= 0) & (core_of < ncores))
          and np.all(near >= 0) and np.all((numa_rows >= 0) & (numa_rows < nodes))
          and np.all(llc_len >= 1) and np.all(llc_start >= 0) and np.all(ends <= ncpu)
          and np.all((llc_cpus >= 0) & (llc_cpus < ncpu))
          and all(np.all(np.diff(llc_cpus[lo:hi]) > 0) for lo, hi in zip(llc_start, ends))
          and np.all((core >= -1) & (core < ncpu)))
    return None if ok else "CPU, core, LLC and node numbers within the machine, each LLC's CPUs ascending"


@jit.kernel
def wake_packed(W, nr, prev, this, allowed):
    """:func:`wake_cpu` over the tables packed by :meth:`WakeTables.packed`; ``allowed``: a mask of
    the CPUs the thread may use (every CPU's entry true when it may use all)."""
    levels, smt, pct_mc, n_llc, ways, nodes, ncpu, ncores = W[0], W[1], W[2], W[3], W[4], W[5], W[6], W[7]
    a, b, c, d, e, f, g, h, i, j, k = _sections(levels, smt, pct_mc, n_llc, ways, nodes, ncpu, ncores)
    return wake_cpu(nr, prev, this, allowed, W[c:d], W[a:b], W[b:c], W[j:k], nodes, W[d:e], W[h:i], W[g:h],
                    W[f:g], W[i:j], ways, W[e:f], smt != 0, pct_mc)


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
def wake_cpu(nr, prev, this, allowed, span_of, pct, near, distance, nodes, llc_span_of, llc_cpus, llc_start, llc_len,
             core_cpus, ways, cpu_core, smt, pct_mc):
    """The CPU a waking thread goes to, or -1 when no CPU it may use was found (the caller then
    walks the domains as a fork does).

    ``nr``: threads queued on each CPU; ``prev``: where the thread ran; ``this``: its waker's
    CPU (``prev`` when none); ``allowed``: a mask of the CPUs it may use (empty: all). The
    waker's lowest wake_affine domain that holds ``prev``: below the NUMA levels (``near``
    0) the one both CPUs have (``span_of``, a row of the CPUs per level), at a NUMA level one
    whose nodes (``span_of``) are at most ``near`` apart (``distance``, ``nodes`` by
    ``nodes``). The LLCs' CPUs and the cores' (``ways`` each) are laid end to end.
    """
    target = prev
    ncpu = nr.size
    if this != prev and _ok(allowed, this):
        for li in range(pct.size):
            a, b = span_of[li * ncpu + this], span_of[li * ncpu + prev]
            if a == b if near[li] == 0 else distance[a * nodes + b] <= near[li]:
                target = _wake_affine(nr, this, prev, pct[li], llc_span_of)
                break
    return _select_idle_sibling(nr, prev, target, allowed, llc_span_of, llc_cpus, llc_start, llc_len, core_cpus, ways,
                                cpu_core, smt, pct_mc)


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
def _select_idle_sibling(nr, prev, target, allowed, llc_span_of, llc_cpus, llc_start, llc_len, core_cpus, ways,
                         cpu_core, smt, pct_mc):
    if nr[target] == 0 and _ok(allowed, target):
        return target
    if prev != target and llc_span_of[prev] == llc_span_of[target] and nr[prev] == 0 and _ok(allowed, prev):
        return prev
    li = llc_span_of[target]
    n = llc_len[li]
    llc = llc_cpus[llc_start[li]:llc_start[li] + n]
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
                    base = cpu_core[c] * ways
                    for k in range(ways):
                        s = core_cpus[base + k]
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
