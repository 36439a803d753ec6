"""First touch in compiled code: the common case of :meth:`PageRuntime._touch <numasim.sim.pages.PageRuntime._touch>`.

A thread that touches new memory as it works (or at start-up) places the chunks whose
first byte it reaches on the first node its pod's memory policy names from the CPU it
runs on: its own node's nearest for ``local``, the preferred node, the nearest bound
node. When that node has room for all of them (nothing falls back to another node and
no allocation fails), :func:`touch` places them here, as the Python code would, to the
last bit (the bytes per node are integers, exact in floats too); otherwise it leaves
the touch to Python, which falls back by distance, round-robins a collector's touches
(``private_touch: pod``), interleaves, places weighted (hot) regions and calls the OOM
killer. :class:`numasim.sim.memory.Memory` keeps its numbers in the arrays this reads
(``Memory.arrays``); the runtime adds each pod's policy, as :data:`POL_*` rows
(:meth:`PageRuntime._set_touch_policy <numasim.sim.pages.PageRuntime._set_touch_policy>`),
and each thread's touch plan (``PLAN_*`` columns: the regions and the bytes still to touch
in each, in order).
"""

from __future__ import annotations

import numpy as np

from .. import jit
from ..policies.api import CHUNK
from .layout import (CI_NODE, F_PLAN, I_CPU, I_POD, M_ACCESS, M_CH, M_NODES, M_ORDER, M_PLACED, M_PLAN, M_POL,
                     M_RG)
from .memory import N_CAPACITY, N_USED, R_OFF, R_PLAIN, R_SIZE, R_TOUCHED

__all__ = ["touch", "POL_KIND", "POL_NODE", "POL_LOCAL", "POL_MASK", "FT_PYTHON", "FT_LOCAL", "FT_PREFERRED", "FT_BIND",
           "PLAN_ENTRIES"]

jit.fresh(__file__, "layout.py", "memory.py", "../policies/api.py")

# Rows of the pod policy table (a column per pod): how its first touch is placed, the preferred
# node, 1 if its policy is the default (local) one whether it runs or not (Rates._touch_target),
# then one row per node: 1 if the node is in a bind policy's nodes.
POL_KIND, POL_NODE, POL_LOCAL, POL_MASK = range(4)
FT_PYTHON, FT_LOCAL, FT_PREFERRED, FT_BIND = range(4)  # FT_PYTHON: not running, interleaved or by the pod
PLAN_ENTRIES = 2  # a thread's touch plan: its private region, then its part of the shared one


@jit.kernel
def _first_node(order, pol, pod, cpu_node):
    """The node the pod's policy tries first from ``cpu_node`` (-1: none)."""
    kind = pol[POL_KIND, pod]
    if kind == FT_LOCAL:
        return order[cpu_node, 0]
    if kind == FT_PREFERRED:
        return pol[POL_NODE, pod]
    for j in range(order.shape[1]):
        c = order[cpu_node, j]
        if pol[POL_MASK + c, pod]:
            return c
    return -1


@jit.kernel
def _span(rg, rid, take):
    """Region ``rid`` touched ``take`` bytes further: its new end and the bytes of the chunks
    whose first byte lies in the new part, with the first and last of them."""
    touched, size = rg[R_TOUCHED, rid], rg[R_SIZE, rid]
    end = min(size, touched + take)
    first = -(-touched // CHUNK)
    last = -(-end // CHUNK)
    nbytes = min(size, last * CHUNK) - first * CHUNK if last > first else 0
    return end, first, last, nbytes


@jit.kernel
def touch(M, I, CI, F, tid, amount):
    """Thread ``tid`` first-touches ``amount`` bytes (rounded half to even, as Python's ``round``);
    True if placed here, False if left to Python (nothing changed)."""
    if not np.isfinite(amount):
        return False  # Python's round() refuses it, as it should
    ch, rg, placed, access, nodes, order = M[M_CH], M[M_RG], M[M_PLACED], M[M_ACCESS], M[M_NODES], M[M_ORDER]
    pol, plan = M[M_POL], M[M_PLAN]
    pod = I[I_POD, tid]
    if pol[POL_KIND, pod] == FT_PYTHON:
        return False
    node = _first_node(order, pol, pod, CI[CI_NODE, I[I_CPU, tid]])
    if node < 0:
        return False
    left = np.int64(np.rint(amount))
    need = 0
    rest = left
    for j in range(PLAN_ENTRIES):
        rid, want = plan[tid, 2 * j], plan[tid, 2 * j + 1]
        if want <= 0 or rest <= 0:
            continue
        if rg[R_PLAIN, rid] == 0:
            return False
        take = min(want, rest)
        need += _span(rg, rid, take)[3]
        rest -= take
    if need > nodes[N_CAPACITY, node] - nodes[N_USED, node]:
        return False
    rest = left
    for j in range(PLAN_ENTRIES):
        rid, want = plan[tid, 2 * j], plan[tid, 2 * j + 1]
        if want <= 0 or rest <= 0:
            continue
        take = min(want, rest)
        end, first, last, nbytes = _span(rg, rid, take)
        if nbytes:
            off = rg[R_OFF, rid]
            ch[off + first: off + last] = node
            placed[rid, node] += nbytes
            access[rid, node] += nbytes
            nodes[N_USED, node] += nbytes
        rg[R_TOUCHED, rid] = end
        plan[tid, 2 * j + 1] = want - take
        F[F_PLAN, tid] -= take
        rest -= take
    return True
