"""Page placement per pod and node: first touch, bind, preferred, interleave, migration.

Memory is tracked in chunks of ``CHUNK`` bytes (2 MiB, a transparent huge page)
per *region*: a pod has one shared region (used by all its threads) and one
private region per thread. A chunk gets its node when it is first touched,
according to the region's memory policy at that moment; node capacity is never
exceeded (the kernel falls back to the nearest node with free memory for
``local`` and ``preferred``, and fails for ``bind``). Chunks keep what NUMA
balancing needs: the thread and node of the last hinting fault on them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .. import jit
from ..model.machine import Machine
from ..policies.api import CHUNK, PAGE, MemPolicy

__all__ = ["Memory", "AllocationFailure", "CHUNK", "PAGE"]

jit.fresh(__file__, "../policies/api.py")



class AllocationFailure(Exception):
    """A bound allocation found its nodes full (the kernel would OOM-kill)."""

    def __init__(self, region: int, nodes: tuple[int, ...], nbytes: int):
        self.region = region
        self.nodes = nodes
        self.nbytes = nbytes
        super().__init__(f"no free memory on bound nodes {list(nodes)} for {nbytes} bytes")


# Rows of Memory.rg, one column per region; Memory.nodes, one column per node.
R_OFF, R_SIZE, R_TOUCHED, R_PLAIN, R_POD, R_PROC = range(6)  # first chunk in Memory.ch, bytes, bytes touched,
# 1 if every chunk alike, pod, process
N_CAPACITY, N_USED = range(2)


@dataclass
class Region:
    """A pod's shared memory or one thread's private memory, in chunks.

    Its numbers live in its :class:`Memory`'s arrays (which the compiled first touch,
    :mod:`numasim.sim.firsttouch`, updates too): ``node`` is a view of them.
    """

    pod: int
    owner: int  # thread id, or -1 for a process's shared region
    size: int
    weight: NDArray[np.float64] | None  # accesses per byte of each chunk, relative to the region's mean; None: 1
    proc: int  # the process whose address space it is in
    rid: int
    mem: "Memory"
    node: NDArray[np.int64]  # each chunk's node, -1 while untouched: a view of Memory.ch (see Memory.reserve)

    @property
    def touched(self) -> int:
        """Bytes first-touched so far (chunks fill in order)."""
        return int(self.mem.rg[R_TOUCHED, self.rid])

    @touched.setter
    def touched(self, value: int) -> None:
        self.mem.rg[R_TOUCHED, self.rid] = value

    @property
    def n_chunks(self) -> int:
        return -(-self.size // CHUNK)

    def chunk_bytes(self, i: int) -> int:
        return min(CHUNK, self.size - i * CHUNK)


class Memory:
    """Chunks placed per region and node, with per-node capacity.

    The numbers are arrays the compiled first touch shares (:meth:`arrays`): every
    region's chunk nodes end to end (``ch``), a column per region (``rg``: ``R_*``
    rows), bytes and weighted bytes per region and node, and per node its capacity
    and use (``nodes``: ``N_*`` rows). They grow by doubling as regions are added;
    :meth:`arrays` gives the current ones.

    Parameters
    ----------
    machine
        Supplies node capacities and the distance order for fallback.
    """

    def __init__(self, machine: Machine):
        self.machine = machine
        n = machine.n_nodes
        self.nodes = np.zeros((2, n), dtype=np.int64)
        self.nodes[N_CAPACITY] = machine.node_memory.astype(np.int64)
        self.capacity, self.used = self.nodes[N_CAPACITY], self.nodes[N_USED]
        self.regions: list[Region] = []
        self.ch = np.zeros(0, dtype=np.int64)
        self.rg = np.zeros((6, 0), dtype=np.int64)
        self._placed_all = np.zeros((0, n), dtype=np.int64)  # bytes, regions x nodes (room to grow)
        self._access_all = np.zeros((0, n))  # bytes x access weight, regions x nodes
        self._n_ch = 0
        self.by_proc: dict[int, list[int]] = {}  # each process's regions, in address order
        self.by_pod: dict[int, list[int]] = {}  # each pod's regions
        self._proc_rids: dict[int, NDArray[np.int64]] = {}  # by_proc's lists as arrays, made when first asked
        self._resize(0)
        # Nodes in order of distance from each node (the kernel's zonelist order).
        self.order = np.array([np.lexsort((np.arange(n), machine.distance[i])) for i in range(n)], dtype=np.int64)
        self._by_distance = [[int(j) for j in row] for row in self.order]

    def _resize(self, n_regions: int) -> None:
        """The per-region views for ``n_regions`` regions, growing the arrays (doubling) when full."""
        if n_regions > self.rg.shape[1]:
            cap = max(8, 2 * n_regions)
            self.rg = np.concatenate([self.rg, np.zeros((6, cap - self.rg.shape[1]), dtype=np.int64)], axis=1)
            grow = cap - self._placed_all.shape[0]
            self._placed_all = np.vstack([self._placed_all, np.zeros((grow, self.machine.n_nodes), dtype=np.int64)])
            self._access_all = np.vstack([self._access_all, np.zeros((grow, self.machine.n_nodes))])
        self._placed = self._placed_all[:n_regions]
        self._access = self._access_all[:n_regions]
        self._region_pod = self.rg[R_POD, :n_regions]
        self._region_proc = self.rg[R_PROC, :n_regions]

    def reserve(self, chunks: int) -> None:
        """Room for ``chunks`` chunks in all, so that ``Memory.ch`` is never reallocated while they are added:
        each region's ``node`` (which the View hands to policies) stays a live view for the whole run."""
        if chunks > self.ch.size:
            self._grow_chunks(chunks)

    def arrays(self) -> tuple:
        """What the compiled first touch reads and updates: chunk nodes, region columns, bytes and weighted
        bytes per region and node, node capacity and use, each node's nodes by distance."""
        return self.ch, self.rg, self._placed_all, self._access_all, self.nodes, self.order

    def add_region(self, pod: int, owner: int, size: int, hot: tuple[float, float] | None = None, proc: int = -1) -> int:
        """A region of ``size`` bytes of process ``proc`` of pod ``pod``; ``hot = (fraction, share)``: that
        fraction of its chunks, spread evenly through it, gets that share of its accesses."""
        n = -(-int(size) // CHUNK)
        rid = len(self.regions)
        weight = _weights(n, hot) if hot is not None and n > 1 else None
        if self._n_ch + n > self.ch.size:
            self._grow_chunks(max(self._n_ch + n, 2 * self.ch.size))
        self.regions.append(Region(pod, owner, int(size), weight, proc, rid, self, self.ch[self._n_ch: self._n_ch + n]))
        self._resize(rid + 1)
        self.rg[:, rid] = (self._n_ch, int(size), 0, 1 if weight is None else 0, pod, proc)
        self.by_proc.setdefault(proc, []).append(rid)
        self._proc_rids.pop(proc, None)
        self.by_pod.setdefault(pod, []).append(rid)
        self._n_ch += n
        return rid

    def _grow_chunks(self, chunks: int) -> None:
        """Room for ``chunks`` chunks in ``ch``; the regions' ``node`` views move to the new array."""
        self.ch = np.concatenate([self.ch, np.full(chunks - self.ch.size, -1, dtype=np.int64)])
        for reg in self.regions:
            off = int(self.rg[R_OFF, reg.rid])
            reg.node = self.ch[off: off + reg.n_chunks]

    def weighted_bytes(self) -> NDArray[np.float64]:
        """Each region's bytes on each node times their access weight, regions x nodes (a view)."""
        return self._access

    def process_chunks(self, proc: int, start: int, count: int) -> tuple[NDArray[np.int64], int]:
        """Process ``proc``'s touched chunks (a region's first ones: chunks fill in address order; none of a
        released region) laid end to end in address order, from the ``start``-th, at most ``count``: rows
        region, chunk index, node; and how many touched chunks it has in all."""
        rids = self._proc_rids.get(proc)
        if rids is None:
            rids = self._proc_rids[proc] = np.array(self.by_proc.get(proc, ()), dtype=np.int64)
        out = np.empty((3, max(count, 0)), dtype=np.int64)
        n, total = chunk_window(rids, self.ch, self.rg, self._placed_all, start, out)
        return out[:, :n], total

    def placed(self, rid: int) -> NDArray[np.int64]:
        """Bytes of region ``rid`` on each node (a copy)."""
        return self._placed[rid].copy()

    def free(self) -> NDArray[np.int64]:
        return self.capacity - self.used

    def pod_bytes(self, n_pods: int) -> NDArray[np.int64]:
        """Matrix pods x nodes of placed bytes."""
        out = np.zeros((n_pods, self.machine.n_nodes), dtype=np.int64)
        if self.regions:
            np.add.at(out, self._region_pod, self._placed)
        return out

    def process_bytes(self, proc: int) -> int:
        """Bytes of process ``proc``'s regions placed so far."""
        return int(self._placed[self._region_proc == proc].sum())

    def distributions(self, rids: NDArray[np.int64]) -> NDArray[np.float64]:
        """Share of the accesses to regions ``rids`` that each node serves: of their placed bytes, each
        weighted by how hot its chunk is (rows of zeros for empty regions)."""
        placed = self._access[rids]
        total = placed.sum(axis=1, keepdims=True)
        return np.divide(placed, total, out=np.zeros(placed.shape), where=total > 0)

    def distribution(self, rid: int) -> list[float] | None:
        """One row of :meth:`distributions`, as plain floats (the same sum and divisions); None for an empty region."""
        placed = self._access[rid]
        total = float(placed.sum())
        return [x / total for x in placed.tolist()] if total > 0 else None

    def _order(self, policy: MemPolicy, cpu_node: int, index: int) -> list[int]:
        """Nodes to try, in order, for chunk ``index`` touched from ``cpu_node``."""
        if policy.kind == "interleave" and policy.nodes:
            cycle = _interleave_cycle(policy)
            first = cycle[index % len(cycle)]
            return [first] + [n for n in self._by_distance[first] if n != first]
        if policy.kind == "bind":
            return [n for n in self._by_distance[cpu_node] if n in policy.nodes]
        if policy.kind == "preferred" and policy.nodes:
            first = policy.nodes[0]
            return [first] + [n for n in self._by_distance[first] if n != first]
        return self._by_distance[cpu_node]

    def _set_node(self, rid: int, i: int, node: int) -> None:
        reg = self.regions[rid]
        size = reg.chunk_bytes(i)
        old = int(reg.node[i])
        w = size * (1.0 if reg.weight is None else float(reg.weight[i]))
        if old >= 0:
            self._placed[rid, old] -= size
            self._access[rid, old] -= w
            self.used[old] -= size
        reg.node[i] = node
        self._placed[rid, node] += size
        self._access[rid, node] += w
        self.used[node] += size

    def _set_nodes(self, rid: int, start: int, stop: int, node: int) -> None:
        """Place chunks ``start`` to ``stop - 1`` of region ``rid``, all untouched, on ``node``."""
        reg = self.regions[rid]
        size = min(reg.size, stop * CHUNK) - start * CHUNK
        reg.node[start:stop] = node
        self._placed[rid, node] += size
        if reg.weight is None:
            self._access[rid, node] += size
        else:
            sizes = np.full(stop - start, float(CHUNK))
            sizes[-1] = size - CHUNK * (stop - start - 1)
            self._access[rid, node] += float(np.dot(sizes, reg.weight[start:stop]))
        self.used[node] += size

    def allocate(self, rid: int, nbytes: int, cpu_node: int, policy: MemPolicy) -> int:
        """First-touch the next ``nbytes`` of region ``rid`` from a thread on ``cpu_node``.

        A chunk is placed when its first byte is touched. Returns the bytes of the
        region touched so far.

        Raises
        ------
        AllocationFailure
            When a ``bind`` policy's nodes are full, or the whole machine is.
        """
        reg = self.regions[rid]
        end = min(reg.size, reg.touched + int(nbytes))
        first = -(-reg.touched // CHUNK)  # chunks whose first byte lies in (touched, end]
        last = -(-end // CHUNK)
        i = first
        while i < last:
            size = reg.chunk_bytes(i)
            order = self._order(policy, cpu_node, i)
            for node in order:
                if self.capacity[node] - self.used[node] >= size:
                    break
            else:
                reg.touched = max(reg.touched, i * CHUNK)  # the chunks before this one are placed
                raise AllocationFailure(rid, tuple(order), size)
            n = 1
            if policy.kind != "interleave":
                # Every chunk tries the nodes in the same order, so the following ones
                # that fit where this one does go there too, in one step.
                room = int(self.capacity[node] - self.used[node]) - size
                n = 1 + min(room // CHUNK, last - i - 1)
            self._set_nodes(rid, i, i + n, node)
            i += n
        reg.touched = end
        return end

    def migrate(self, rid: int, src: int, dst: int, nbytes: int) -> int:
        """Move up to ``nbytes`` of region ``rid`` from ``src`` to ``dst``, whole chunks in order; return bytes moved."""
        if src == dst or nbytes <= 0:
            return 0
        reg = self.regions[rid]
        moved = 0
        for i in np.flatnonzero(reg.node == src):
            size = reg.chunk_bytes(int(i))
            if moved + size > nbytes and moved > 0:
                break
            if self.capacity[dst] - self.used[dst] < size:
                break
            self._set_node(rid, int(i), dst)
            moved += size
        return moved

    def move_chunks(self, rid: int, idx: NDArray[np.int64], dst: int) -> tuple[NDArray[np.int64], NDArray[np.int64], int] | None:
        """Move chunks ``idx`` of region ``rid`` to ``dst``, in that order, each if it is placed, not on
        ``dst`` already, and there is room for it; returns each chunk's node before, the bytes moved of each
        (0: it stayed) and in all; None if an index is not one of the region's chunks.

        Where the region's bytes all weigh the same and no chunk is named twice, the move is compiled
        (:func:`move_plain`: the bytes per node updated once for all the chunks, whole numbers, so the
        sums come out as one chunk at a time would leave them); otherwise it goes one chunk at a time."""
        reg = self.regions[rid]
        node = reg.node
        src = np.empty(idx.size, dtype=np.int64)
        got = np.zeros(idx.size, dtype=np.int64)
        if reg.weight is None and len(set(idx.tolist())) == idx.size:
            per = np.zeros(len(self.used), dtype=np.int64)
            moved = move_plain(node, idx, dst, reg.size, self.capacity, self.used, self._placed_all[rid],
                               self._access_all[rid], src, got, per)
            return (src, got, moved) if moved >= 0 else None
        if idx.size and not (0 <= idx.min() and idx.max() < node.size):
            return None
        src[:] = node[idx]
        for k, i in enumerate(idx.tolist()):
            size = reg.chunk_bytes(i)
            if node[i] != dst and node[i] >= 0 and self.capacity[dst] - self.used[dst] >= size:
                src[k] = node[i]
                got[k] = size
                self._set_node(rid, i, dst)
        return src, got, int(got.sum())

    def release(self, rid: int) -> None:
        """Free all of region ``rid`` (its pod ended or was killed)."""
        self.used -= self._placed[rid]
        self._placed[rid, :] = 0
        self._access[rid, :] = 0.0
        self.regions[rid].node[:] = -1


@jit.kernel
def chunk_window(rids, ch, rg, placed, start, out):
    """:meth:`Memory.process_chunks`: the touched chunks of regions ``rids`` (a released one has none) from
    the ``start``-th into ``out``'s columns; returns how many were written and the touched chunks in all."""
    total = 0
    n = 0
    stop = start + out.shape[1]
    for rid in rids:
        k = 0
        for b in placed[rid]:
            if b > 0:
                k = (rg[R_TOUCHED, rid] + CHUNK - 1) // CHUNK
                break
        first = rg[R_OFF, rid]
        for i in range(max(start - total, 0), min(stop - total, k)):
            out[0, n] = rid
            out[1, n] = i
            out[2, n] = ch[first + i]
            n += 1
        total += k
    return n, total


@jit.kernel
def move_plain(node, idx, dst, size, capacity, used, placed, access, src, got, per):
    """:meth:`Memory.move_chunks` for a region of ``size`` bytes whose chunks weigh alike, ``idx`` without
    repeats: ``node`` its chunks' nodes, ``placed`` and ``access`` its bytes and weighted bytes per node,
    ``per`` zeros (scratch, per node). Returns the bytes moved; -1, with nothing changed, if an index is
    out of range."""
    for i in idx:
        if i < 0 or i >= node.size:
            return -1
    room = capacity[dst] - used[dst]
    for k in range(idx.size):
        i = idx[k]
        old = node[i]
        src[k] = old
        b = min(CHUNK, size - i * CHUNK)
        if old == dst or old < 0 or room < b:
            continue
        room -= b
        per[old] += b
        got[k] = b
        node[i] = dst
    total = 0
    for j in range(per.size):
        total += per[j]
    per[dst] -= total
    for j in range(per.size):
        placed[j] -= per[j]
        access[j] -= per[j]
        used[j] -= per[j]
    return total


def _interleave_cycle(policy: MemPolicy) -> tuple[int, ...]:
    """One round of an interleave policy: each node once, or ``weights[k]`` times (weighted interleave)."""
    if not policy.weights:
        return policy.nodes
    return tuple(n for n, w in zip(policy.nodes, policy.weights) for _ in range(w))


def _weights(n: int, hot: tuple[float, float]) -> NDArray[np.float64]:
    """Access weight per chunk for ``n`` chunks: ``fraction`` of them hot, spread evenly, with ``share``
    of the accesses; the mean weight is 1 (so the region's accesses per byte stay what they were)."""
    fraction, share = hot
    idx = np.arange(n)
    is_hot = np.floor((idx + 1) * fraction) > np.floor(idx * fraction)
    k = int(is_hot.sum())
    if k in (0, n):
        return np.ones(n)
    return np.where(is_hot, share * n / k, (1.0 - share) * n / (n - k))

