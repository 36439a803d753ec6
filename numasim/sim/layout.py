"""Where the runtime keeps its numbers: the fields of the typed buffers, and the compiled code's scratch.

Every per-thread and per-CPU number is a row of a :class:`~numasim.sim.store.Store`
buffer (floats, ints, flags), in the order of :data:`THREAD_FIELDS` and
:data:`CPU_FIELDS`; the ``F_``, ``I_``, ``B_``, ``CF_`` and ``CI_`` constants are rows the
compiled functions of :mod:`numasim.sim.core` read. :class:`Scratch` holds what those
functions take requests from and write answers to, and the ``N_``/``S_``/``SF_`` slots and
the codes they return (``NEEDS_*``, ``EV_*``) are shared with the Python side that calls
them (docs/architecture.md, "The fast path").
"""

from __future__ import annotations

import numpy as np

__all__ = ["THREAD_FIELDS", "CPU_FIELDS", "Scratch"]

# The numbers kept per thread and per CPU, by type: floats, ints, flags. A field's row is its place.
THREAD_FIELDS = (
    ("t_debt", "t_req_left", "p_cycles", "p_misses", "p_stall", "p_ind", "p_pipe", "p_writes", "p_coherence",
     "p_lock_cycles", "p_lock_lines", "p_shared", "p_touch", "p_grow", "p_transient", "p_footprint", "refill_lines",
     "p_req_ops", "p_think", "p_mlp", "c_ops", "c_cpu", "c_wait", "c_miss", "c_miss_local", "miss_pending",
     "c_kernel_ns", "r_share", "r_cap", "r_tau", "r_cshare", "r_ishare", "local", "t_plan_left"),
    ("t_pod", "t_cpu", "t_phase", "t_private", "t_req_arrival", "t_last", "t_gen", "t_shared_rid", "t_proc",
     "p_req_mode", "c_moves", "c_xmoves", "c_wakeups", "c_faults", "c_numa_moves", "rq_next", "rq_prev"),
    ("t_active", "t_waiting", "t_paused", "t_held", "p_waker_pod"),
)
CPU_FIELDS = (("c_cpu_busy", "lat_local"), ("nr", "rq_head", "rq_tail"), ())

_F = {name: k for k, name in enumerate(THREAD_FIELDS[0])}
_I = {name: k for k, name in enumerate(THREAD_FIELDS[1])}
F_DEBT, F_REQ_LEFT, F_MISSES, F_STALL, F_GROW = _F["t_debt"], _F["t_req_left"], _F["p_misses"], _F["p_stall"], _F["p_grow"]
F_REFILL, F_OPS, F_CPU, F_WAIT, F_MISS = _F["refill_lines"], _F["c_ops"], _F["c_cpu"], _F["c_wait"], _F["c_miss"]
F_MISS_LOCAL, F_PENDING, F_SHARE, F_CAP, F_TAU = (_F["c_miss_local"], _F["miss_pending"], _F["r_share"],
                                                   _F["r_cap"], _F["r_tau"])
F_LOCAL, F_PLAN = _F["local"], _F["t_plan_left"]
I_CPU, I_PHASE, I_LAST, I_GEN, I_NEXT, I_PREV = (_I["t_cpu"], _I["t_phase"], _I["t_last"], _I["t_gen"],
                                                 _I["rq_next"], _I["rq_prev"])
I_POD, I_ARRIVAL, I_MODE = _I["t_pod"], _I["t_req_arrival"], _I["p_req_mode"]
B_ACTIVE, B_WAITING = THREAD_FIELDS[2].index("t_active"), THREAD_FIELDS[2].index("t_waiting")
CF_BUSY, CF_LAT = 0, 1  # a CPU's busy time; the loaded local latency of its node
CI_NR, CI_HEAD, CI_TAIL = 0, 1, 2

# Scratch rows (Scratch.s, ints; Scratch.sf, floats) and control slots (Scratch.ctl).
S_IN, S_TIDS, S_NEED, S_TOUCH, S_ARM, S_ARM_KIND, S_WORK, S_LAT_POD, S_LAT_NOW, S_LAT_NS = range(10)
SF_EFF, SF_TOUCH, SF_FACT = range(3)
(N_IN, N_TIDS, N_NEED, N_TOUCH, N_ARM, NOW, INTEGRATED, SMT, TIMER_AT, HEAP_N, TID, PENDING,
 STAGE, N_LAT, QUOTA, CPU, LOG_CAP) = range(17)
K_SWITCH, K_TOUCH_STEP = range(2)  # float constants (Scratch.kf)
# What a function needs from the caller before it can go on (its return value; 0: done), and
# what a thread's event needs (fire).
NEEDS_TOUCH, NEEDS_TAU, NEEDS_SMT, EV_TOUCH, EV_COMPLETE, NEEDS_QUOTA, NEEDS_IDLE, NEEDS_FLUSH = range(1, 9)


class Scratch:
    """Preallocated arrays the compiled functions take their requests from and write answers to,
    and the heap of thread events (rows time, thread, generation)."""

    def __init__(self, n_threads: int, n_cpus: int, smt: bool, switch_ns: float, touch_step: float):
        size = max(n_threads, n_cpus) + 1
        self.s = np.zeros((10, 4 * size + 64), dtype=np.int64)
        self.sf = np.zeros((3, 4 * size + 64))
        self.ctl = np.zeros(17, dtype=np.int64)
        self.ctl[LOG_CAP] = 2 * size  # logs longer than this are handed to Python before the next event
        self.ctl[SMT] = int(smt)
        self.ctl[TIMER_AT] = -1
        self.heap = np.zeros((3, 2 * n_threads + 64), dtype=np.int64)
        self.kf = np.array([switch_ns, touch_step])
