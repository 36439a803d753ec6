"""NUMA balancing's hinting faults compiled: the common case of :meth:`NumaBalancing._fault
<numasim.policies.numab.NumaBalancing._fault>` over one scan's marked chunks.

A scan marks about a hundred chunks; each is faulted by one thread, whose fault updates
the chunk's last fault (thread, node), the thread's fault statistics and, through the
migration filter (``should_numa_migrate_memory``), says whether the chunk moves.
:func:`faults` does that for the chunks ``j, j+1, ...`` as the Python method would, to
the last bit, and stops at the first chunk that needs Python: a thread's first fault, one that joins two
threads into a numa group (``task_numa_group``), the first fault of a thread in a new
scan pass (``task_numa_placement``), a chunk on a slow memory tier (promotion). The
caller does that one in Python and calls again from the next.

The state is :class:`NumaBalancing`'s arrays: per thread its faults of this pass by
memory and CPU node (``[node * 2 + private]``), its locality counts (remote, local,
failed), the scan pass it last folded, its preferred node and its group (the process,
-1: none); per group its faults by memory and CPU node and, for the v4.4 era, its active
nodes; per chunk its last fault.
"""

from __future__ import annotations


from .. import jit
from .api import CHUNK

__all__ = ["faults", "who_faults", "scan_prep", "pick_faulters", "take_counts", "compact_moves", "due_tasks", "ERA_38", "ERA_313", "ERA_44", "ERA_61", "ACTIVE_NODE_FRACTION"]

jit.fresh(__file__, "api.py")

ERA_313, ERA_44, ERA_61, ERA_38 = range(4)
ACTIVE_NODE_FRACTION = 3


@jit.kernel
def who_faults(c_owner, alive, tids, cdf, u, c_tid, counts, order):
    """Which thread faults each marked chunk (``c_tid``; -1: none): its owner ``c_owner`` for private
    memory, none if the owner died; for shared memory (owner -1), with draws ``u`` (one per shared
    chunk, in order), the thread of ``tids`` whose span of the cumulative weights ``cdf`` (ending at 1)
    holds the draw: numpy's ``choice`` with those draws (``cdf.searchsorted(u, side="right")``); with no
    draws, none. Counts each thread's faults in ``counts`` (zeros on entry; the caller clears them) and
    returns how many threads fault, their ids in ``order[:m]`` in the order of their first fault."""
    k = 0
    m = 0
    for j in range(c_owner.size):
        t = c_owner[j]
        if t < 0:
            if u.size:
                x = u[k]
                k += 1
                i = 0
                while i < cdf.size - 1 and cdf[i] <= x:
                    i += 1
                t = tids[i]
        elif not alive[t]:
            t = -1
        c_tid[j] = t
        if t >= 0:
            if counts[t] == 0:
                order[m] = t
                m += 1
            counts[t] += 1
    return m


@jit.kernel
def scan_prep(c_rid, c_i, r_owner, r_last, tids, miss, alive, thread_cpu, cpu_node, c_owner, c_off, weights, cpu_nid):
    """A scan's marked chunks (region ``c_rid``, index ``c_i``): each one's owner (``c_owner``, -1:
    shared) and last-fault slot (``c_off``); each of the process's threads ``tids``: its weight for
    shared faults, its DRAM miss rate if alive (``weights``), and its node (``cpu_nid``). Returns how
    many chunks are shared."""
    n_shared = 0
    for j in range(c_rid.size):
        r = c_rid[j]
        c_owner[j] = r_owner[r]
        c_off[j] = r_last[r] + c_i[j]
        if c_owner[j] < 0:
            n_shared += 1
    for k in range(tids.size):
        t = tids[k]
        weights[k] = miss[t] * (1.0 if alive[t] else 0.0)
        cpu_nid[t] = cpu_node[thread_cpu[t]]
    return n_shared


@jit.kernel
def pick_faulters(c_owner, alive, tids, weights, wsum, u, cdf, c_tid, counts, order, dst):
    """:func:`who_faults` with the cumulative weights made here (``weights / wsum`` summed in order,
    then divided by the last, as numpy's ``cumsum`` and ``/=`` do; into ``cdf``), and ``dst`` cleared
    (-1) for :func:`faults`."""
    if u.size:
        acc = 0.0
        for k in range(weights.size):
            acc += weights[k] / wsum
            cdf[k] = acc
        last = cdf[weights.size - 1]
        for k in range(weights.size):
            cdf[k] /= last
    for j in range(dst.size):
        dst[j] = -1
    return who_faults(c_owner, alive, tids, cdf, u, c_tid, counts, order)


@jit.kernel
def take_counts(order, m, counts, out):
    """The counts of threads ``order[:m]`` into ``out[:m]``, cleared in ``counts``."""
    for i in range(m):
        out[i] = counts[order[i]]
        counts[order[i]] = 0


@jit.kernel
def compact_moves(c_rid, dst, c_tid, c_i, out):
    """The chunks that move (``dst >= 0``), in order, as columns of ``out``: region, node, thread,
    chunk index. Returns how many."""
    k = 0
    for j in range(dst.size):
        if dst[j] >= 0:
            out[0, k] = c_rid[j]
            out[1, k] = dst[j]
            out[2, k] = c_tid[j]
            out[3, k] = c_i[j]
            k += 1
    return k


@jit.kernel
def due_tasks(order, t_pref, active, t_retry, t_period, thread_cpu, cpu_node, now, out):
    """The tasks of ``order`` due to try to move to their preferred node (they have one, are on a
    runqueue and their retry time has come), in that order: each gets its next retry time
    (min(1 s, period/16) on: numa_migrate_preferred's ``numa_migrate_retry``), and those off their
    preferred node go into ``out``; returns how many."""
    m = 0
    for t in order:
        if t_pref[t] >= 0 and active[t] and t_retry[t] <= now:
            t_retry[t] = now + int(min(1000.0, t_period[t] / 16) * 1_000_000)
            if cpu_node[thread_cpu[t]] != t_pref[t]:
                out[m] = t
                m += 1
    return m


@jit.kernel
def shared_migrate(era, g_mem, g_cpu, g_active, g, dst, src):
    """should_numa_migrate_memory for a shared page of group ``g`` that passed the two-stage filter."""
    if era == ERA_313:
        return True  # the two-stage filter alone
    if era == ERA_44:
        # Pseudo-interleaving (v3.15-v4.18): only into an active node; out of an inactive
        # one always; between active nodes from the busier to the less used (1/4 hysteresis).
        if not g_active[g, dst]:
            return False
        if not g_active[g, src]:
            return True
        return g_mem[g, dst] < g_mem[g, src] * 3 / 4
    if g_cpu[g, dst] > g_cpu[g, src] * ACTIVE_NODE_FRACTION:
        return True
    return g_cpu[g, dst] * g_mem[g, src] * 3 > g_cpu[g, src] * g_mem[g, dst] * 4


@jit.kernel
def within_rate_limit(rate, node, window, limit):
    """Kernels 3.8-4.18 let at most ``limit`` bytes per 100 ms window migrate into a node (``limit < 0``:
    no limit); ``rate``: per node, the window last counted and the bytes moved in it."""
    if limit < 0:
        return True
    used = rate[1, node] if rate[0, node] == window else 0
    rate[0, node] = window
    if used + CHUNK > limit:
        rate[1, node] = used
        return False
    rate[1, node] = used + CHUNK
    return True


@jit.kernel
def faults(j, c_tid, c_off, c_nid, dst_out, cpu_nid, may, free, slow, l_tid, l_nid, known,
           membuf, cpubuf, loc, seq, pref, group, g_mem, g_cpu, g_active,
           proc, mm_seq, era, rate, window, limit):
    """Fault the marked chunks from ``j`` on (thread ``c_tid``, -1: none; its last-fault slot ``c_off``;
    its node ``c_nid``), writing the node each moves to (``dst_out``, -1: stays); returns the first
    chunk left to Python, or the number of chunks. ``cpu_nid``, ``may``: each thread's node and
    whether its memory policy lets its pages move there; ``free``: each node's free bytes, as the
    tick's migrations so far leave them (updated by each one decided here); ``known``:
    whether a thread has statistics yet (its first fault creates them, in Python)."""
    n = c_tid.size
    while j < n:
        tid = c_tid[j]
        if tid < 0:
            dst_out[j] = -1
            j += 1
            continue
        mem_nid = c_nid[j]
        if slow[mem_nid]:
            return j
        off = c_off[j]
        prev = l_tid[off]
        priv = 1 if prev < 0 or prev == tid else 0
        if not known[tid] or (priv == 0 and era != ERA_38 and (group[tid] != proc or group[prev] != proc)) \
                or seq[tid] != mm_seq:
            return j
        prev_nid = l_nid[off]
        nid = cpu_nid[tid]
        l_tid[off] = tid
        l_nid[off] = nid
        local = mem_nid == nid
        migrate = False
        if not local and may[tid]:
            if era == ERA_38:
                migrate = prev >= 0 and prev_nid == nid  # the two-stage filter alone; a first fault never
            elif (pref[tid] < 0 or seq[tid] <= 4) and priv:
                migrate = True
            elif prev >= 0 and prev_nid != nid:
                migrate = False
            elif prev == tid or group[tid] < 0:
                migrate = True
            else:
                migrate = shared_migrate(era, g_mem, g_cpu, g_active, group[tid], nid, mem_nid)
        dst = -1
        if migrate:
            if free[nid] >= CHUNK and within_rate_limit(rate, nid, window, limit):
                dst = nid
                free[nid] -= CHUNK  # (the tick's one account: a later fault sees the room this one took)
                free[mem_nid] += CHUNK
                mem_nid = nid
            else:
                loc[tid, 2] += 1.0  # MIGRATE_FAIL: the scan period will double
        membuf[tid, 2 * mem_nid + priv] += 1.0
        cpubuf[tid, 2 * nid + priv] += 1.0
        loc[tid, 1 if local else 0] += 1.0
        dst_out[j] = dst
        j += 1
    return n
