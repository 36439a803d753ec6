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
     "p_req_ops", "p_think", "p_mlp", "p_interarrival", "c_ops", "c_cpu", "c_wait", "c_miss", "c_miss_local", "miss_pending",
     "c_kernel_ns", "r_share", "r_cap", "r_tau", "r_cshare", "r_ishare", "local", "t_plan_left"),
    ("t_pod", "t_cpu", "t_phase", "t_private", "t_req_arrival", "t_last", "t_gen", "t_shared_rid", "t_proc",
     "p_req_mode", "c_moves", "c_xmoves", "c_wakeups", "c_faults", "c_numa_moves", "rq_next", "rq_prev", "t_wgen",
     "t_mask"),
    ("t_active", "t_waiting", "t_paused", "t_held", "p_waker_pod"),
)
CPU_FIELDS = (("c_cpu_busy", "lat_local"), ("nr", "rq_head", "rq_tail", "_cpu_node", "_cpu_llc", "_pull_span"), ())

_F = {name: k for k, name in enumerate(THREAD_FIELDS[0])}
_I = {name: k for k, name in enumerate(THREAD_FIELDS[1])}
F_DEBT, F_REQ_LEFT, F_MISSES, F_STALL, F_GROW = _F["t_debt"], _F["t_req_left"], _F["p_misses"], _F["p_stall"], _F["p_grow"]
F_REFILL, F_OPS, F_CPU, F_WAIT, F_MISS = _F["refill_lines"], _F["c_ops"], _F["c_cpu"], _F["c_wait"], _F["c_miss"]
F_MISS_LOCAL, F_PENDING, F_SHARE, F_CAP, F_TAU = (_F["c_miss_local"], _F["miss_pending"], _F["r_share"],
                                                   _F["r_cap"], _F["r_tau"])
F_LOCAL, F_PLAN, F_FOOT, F_MLP = _F["local"], _F["t_plan_left"], _F["p_footprint"], _F["p_mlp"]
F_CSHARE, F_ISHARE, F_SHARED_FRACTION = _F["r_cshare"], _F["r_ishare"], _F["p_shared"]
F_REQ_OPS, F_THINK, F_INTERARRIVAL = _F["p_req_ops"], _F["p_think"], _F["p_interarrival"]
I_CPU, I_PHASE, I_LAST, I_GEN, I_NEXT, I_PREV = (_I["t_cpu"], _I["t_phase"], _I["t_last"], _I["t_gen"],
                                                 _I["rq_next"], _I["rq_prev"])
I_POD, I_ARRIVAL, I_MODE = _I["t_pod"], _I["t_req_arrival"], _I["p_req_mode"]
I_WGEN, I_MOVES, I_XMOVES, I_WAKEUPS = _I["t_wgen"], _I["c_moves"], _I["c_xmoves"], _I["c_wakeups"]
I_SHARED_RID, I_PRIVATE = _I["t_shared_rid"], _I["t_private"]
I_MASK = _I["t_mask"]  # the row of the CPU masks (Simulation._A) of the CPUs the thread may use: 0 for all
B_ACTIVE, B_WAITING, B_PAUSED, B_HELD, B_WAKER = (THREAD_FIELDS[2].index(name) for name in (
    "t_active", "t_waiting", "t_paused", "t_held", "p_waker_pod"))
CF_BUSY, CF_LAT = 0, 1  # a CPU's busy time; the loaded local latency of its node
CI_NR, CI_HEAD, CI_TAIL, CI_NODE, CI_LLC, CI_PULL_SPAN = (CPU_FIELDS[1].index(name) for name in (
    "nr", "rq_head", "rq_tail", "_cpu_node", "_cpu_llc", "_pull_span"))
# The runtime's tables the compiled code updates besides the buffers (Simulation._M, the last of the
# core arguments): the memory's arrays (Memory.arrays: chunk nodes, regions, bytes and weighted bytes
# per region and node, node capacity and use, nodes by distance), the first-touch tables (pod policies,
# thread plans: numasim.sim.firsttouch), the response-time histograms (ResponseTimes.arrays).
M_CH, M_RG, M_PLACED, M_ACCESS, M_NODES, M_ORDER, M_POL, M_PLAN, M_HIST, M_COUNT, M_TOTAL, M_SINCE = range(12)
# Rows of the pod table: first thread (a pod's are numbered in a row), throttled, its open-mode
# queue of request arrival times (a ring in Simulation._Q, a row per pod): first entry, length;
# whether its arrivals go on (open mode, running), and the next unused of its random numbers
# for arrivals (Scratch.draws rows arrival_rows(p): the times between arrivals, the picks).
P_FIRST, P_THROTTLED, P_QHEAD, P_QLEN, P_OPEN, P_ARR_E, P_ARR_U = range(7)

# Scratch rows (Scratch.s, ints; Scratch.sf, floats) and control slots (Scratch.ctl).
S_IN, S_TIDS, S_NEED, S_TOUCH, S_ARM, S_MV_TID, S_WORK, S_MV_CPU, S_MV_NOW, S_PICK = range(10)
SF_EFF, SF_TOUCH, SF_FACT = range(3)
(N_IN, N_TIDS, N_NEED, N_TOUCH, N_ARM, NOW, INTEGRATED, SMT, TIMER_AT, HEAP_N, TID, PENDING,
 STAGE, QUOTA, CPU, LOG_CAP, U_AT, E_AT, N_MV, WAKER, SINGLE, PREV, IDLE_RULE, PULL_RULE, PULL_AT, PULL_TID,
 PULL_CPU, HORIZON, TIMER_PRE, N_AHEAD, WAKE_RULE, DIRTY) = range(32)
# ctl[HORIZON]: the latest instant events.fire may run thread events at without a simpy timeout
# of their own (no simpy event is due before it; -1: none, stop at the next instant);
# ctl[TIMER_PRE]: ctl[TIMER_AT] before the first timer logged since Python last emptied the
# log (what dropping the log restores); ctl[N_AHEAD]: instants run that way.
# ctl[DIRTY]: 1 once compiled code placed memory (the access rows need a solve: Rates._dirty).
# ctl[WAKE_RULE]: who places a waking thread (Policy.wake_rule): the policy's wake(), the WakeAffine
# tables (Simulation._W), the LeastLoaded rule
WAKE_PYTHON, WAKE_AFFINE, WAKE_LEAST_LOADED = range(3)
# ctl[IDLE_RULE]: when a CPU that falls idle is handed to the policy's idle() (Policy.idle_when)
IDLE_NEVER, IDLE_OVERLOADED, IDLE_ALWAYS = range(3)
K_SWITCH, K_TOUCH_STEP, K_L2 = range(3)  # float constants (Scratch.kf)
DRAW_U, DRAW_E, DRAW_PULL = range(3)  # rows of Scratch.draws; then two per pod (arrival_rows)
ARRIVAL_ROWS = DRAW_PULL + 1  # the first of those
DRAWS = 1024  # random numbers drawn per batch
# The engine's named random streams (Drivers._stream): a process's pauses, a pod's times between
# arrivals, the idle pull's, a pod's picks of the idle worker an arrival wakes.
STREAM_PAUSES, STREAM_ARRIVALS, STREAM_PULL, STREAM_PICKS = 1, 2, 3, 4
# What a function needs from the caller before it can go on (its return value; 0: done), and
# what a thread's event needs (fire).
(NEEDS_TOUCH, NEEDS_TAU, NEEDS_SMT, EV_TOUCH, NEEDS_QUOTA, NEEDS_IDLE, NEEDS_FLUSH, NEEDS_DRAWS, NEEDS_PLACE,
 NEEDS_XMOVE, NEEDS_SLICES, NEEDS_QUEUE) = range(1, 13)
WAKE_BEGIN = 100  # ctl[PENDING] that makes fire wake thread ctl[TID] up (and only that, with ctl[SINGLE])
MOVE_BEGIN = 200  # ... that makes fire move thread ctl[TID] to CPU ctl[CPU]
# What fire keeps in ctl while it waits for the caller (saved around a nested call).
FIRE_STATE = (PENDING, TID, CPU, PREV, WAKER, SINGLE, PULL_TID, PULL_CPU)


def arrival_rows(pod: int) -> tuple[int, int]:
    """The rows of Scratch.draws that hold pod ``pod``'s random numbers for arrivals: standard
    exponential (the times between them, times the mean) and uniform (the idle worker each wakes)."""
    return ARRIVAL_ROWS + 2 * pod, ARRIVAL_ROWS + 1 + 2 * pod


class Scratch:
    """Preallocated arrays the compiled functions take their requests from and write answers to,
    and the heap of thread events (rows: time, thread, generation; a think time's wake-up has
    generation ``-1 - wgen``; a pod's next open-mode arrival has thread ``-1 - pod``)."""

    def __init__(self, n_threads: int, n_cpus: int, smt: bool, switch_ns: float, touch_step: float, l2_bytes: float,
                 n_pods: int = 0):
        size = max(n_threads, n_cpus) + 1
        self.s = np.zeros((10, 4 * size + 64), dtype=np.int64)
        self.sf = np.zeros((3, 4 * size + 64))
        self.ctl = np.zeros(DIRTY + 1, dtype=np.int64)
        self.ctl[LOG_CAP] = 2 * size  # logs longer than this are handed to Python before the next event
        self.ctl[SMT] = int(smt)
        self.ctl[TIMER_AT] = self.ctl[HORIZON] = -1
        # Each thread has at most two live entries (a burst end, a wake-up), each pod one (its next arrival).
        self.heap = np.zeros((3, 2 * n_threads + n_pods + 64), dtype=np.int64)
        self.kf = np.array([switch_ns, touch_step, l2_bytes])
        # Random numbers of the wake-up path, drawn in batches (rows DRAW_U: uniform, DRAW_E:
        # standard exponential) and of the idle pull (DRAW_PULL: uniform, two a pull);
        # ctl[U_AT], ctl[E_AT], ctl[PULL_AT]: the next unused of each.
        self.draws = np.zeros((3 + 2 * n_pods, DRAWS))
        self.ctl[U_AT] = self.ctl[E_AT] = self.ctl[PULL_AT] = DRAWS
        self.ctl[PULL_TID] = -1  # a thread the idle pull chose, to move once the current event is done
