"""CFS's wake-up placement, compiled: ``select_task_rq_fair`` for a wakeup (kernel/sched/fair.c).

``wake_affine`` decides between the CPU the thread last ran on and its waker's, then
``select_idle_sibling`` looks for an idle CPU sharing the chosen one's last-level
cache: the target itself, the previous CPU, an idle core (with SMT), then idle CPUs
within the SIS_UTIL scan budget. This runs on every wake-up, so it is a numba function
over arrays that :class:`~numasim.policies.cfs.CFS` builds once (docs/model.md keeps what
it models); with ``NUMBA_DISABLE_JIT=1`` it runs as Python.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from .. import jit

from .balance_pass import SCALE

jit.fresh(__file__, "balance_pass.py")

__all__ = ["WakeTables", "wake_cpu"]


class WakeTables:
    """What the wake-up placement reads, as arrays: the wake_affine levels, the LLCs, the cores."""

    def __init__(self, levels, llc_span_of: NDArray[np.int64], llc_cpus: list[NDArray[np.int64]],
                 core_cpus: tuple[tuple[int, ...], ...], cpu_core: NDArray[np.int64]):
        affine = []
        for lvl in levels:
            if not lvl.wake_affine:
                break
            affine.append(lvl)
        n = len(llc_span_of)
        # The levels that may wake affine, lowest first: the span of each CPU and imbalance_pct.
        self.span_of = np.array([lvl.span_of for lvl in affine], dtype=np.int64).reshape(len(affine), n)
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


@njit(cache=True)
def _ok(allowed, c):
    return allowed.size == 0 or allowed[c]


@njit(cache=True)
def wake_cpu(nr, prev, this, allowed, span_of, pct, llc_span_of, llc_cpus, llc_len, core_cpus, cpu_core,
             smt, pct_mc):
    """The CPU a waking thread goes to, or -1 when no CPU it may use was found (the caller then
    walks the domains as a fork does).

    ``nr``: threads queued on each CPU; ``prev``: where the thread ran; ``this``: its waker's
    CPU (``prev`` when none); ``allowed``: a mask of the CPUs it may use (empty: all).
    """
    target = prev
    if this != prev and _ok(allowed, this):
        for li in range(span_of.shape[0]):
            if span_of[li, this] == span_of[li, prev]:
                target = _wake_affine(nr, this, prev, pct[li], llc_span_of)
                break
    return _select_idle_sibling(nr, prev, target, allowed, llc_span_of, llc_cpus, llc_len, core_cpus, cpu_core,
                                smt, pct_mc)


@njit(cache=True)
def _wake_affine(nr, this, prev, pct, llc_span_of):
    if nr[this] == 0 and llc_span_of[this] == llc_span_of[prev]:
        return prev if nr[prev] == 0 else this
    if nr[prev] == 0:
        return prev
    # wake_affine_weight: the waking task's load moves from prev to this.
    this_eff = (nr[this] + 1) * SCALE * 100
    prev_eff = nr[prev] * SCALE * (100 + (pct - 100) // 2)
    return this if this_eff < prev_eff else prev


@njit(cache=True)
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
