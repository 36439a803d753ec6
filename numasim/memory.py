"""Page placement per pod and node: first touch, bind, preferred, interleave, migration.

Memory is tracked in bytes per *region* and node. A pod has one shared region
(used by all its threads) and one private region per thread. Allocation
follows the region's memory policy at the moment of the first touch; node
capacity is never exceeded (the kernel falls back to the nearest node with
free memory for ``local`` and ``preferred``, and fails for ``bind``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .machine import Machine
from .policies.base import MemPolicy

__all__ = ["Memory", "AllocationFailure", "PAGE"]

PAGE = 4096


class AllocationFailure(Exception):
    """A bound allocation found its nodes full (the kernel would OOM-kill)."""

    def __init__(self, region: int, nodes: tuple[int, ...], nbytes: int):
        self.region = region
        self.nodes = nodes
        self.nbytes = nbytes
        super().__init__(f"no free memory on bound nodes {list(nodes)} for {nbytes} bytes")


@dataclass
class Region:
    pod: int
    owner: int  # thread id, or -1 for the pod's shared region
    size: int


class Memory:
    """Bytes placed per region and node, with per-node capacity.

    Parameters
    ----------
    machine
        Supplies node capacities and the distance order for fallback.
    """

    def __init__(self, machine: Machine):
        self.machine = machine
        self.capacity = machine.node_memory.astype(np.int64)
        self.used = np.zeros(machine.n_nodes, dtype=np.int64)
        self.regions: list[Region] = []
        self._placed = np.zeros((0, machine.n_nodes), dtype=np.int64)  # regions x nodes
        # Nodes in order of distance from each node (the kernel's zonelist order).
        self._by_distance = [
            [int(j) for j in np.lexsort((np.arange(machine.n_nodes), machine.distance[i]))]
            for i in range(machine.n_nodes)
        ]

    def add_region(self, pod: int, owner: int, size: int) -> int:
        self.regions.append(Region(pod, owner, int(size)))
        self._placed = np.vstack([self._placed, np.zeros((1, self.machine.n_nodes), dtype=np.int64)])
        self._region_pod = np.array([r.pod for r in self.regions], dtype=np.int64)
        return len(self.regions) - 1

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

    def distributions(self) -> NDArray[np.float64]:
        """Share of each region's placed bytes on each node (rows of zeros for empty regions)."""
        total = self._placed.sum(axis=1, keepdims=True)
        return np.divide(self._placed, total, out=np.zeros(self._placed.shape), where=total > 0)

    def access_fractions(self, rid: int, cpu_node: int) -> NDArray[np.float64]:
        """Share of accesses to region ``rid`` served by each node.

        Accesses are spread over the region's placed pages in proportion to
        bytes; memory not yet touched is allocated locally when first used,
        so an empty region counts as local.
        """
        placed = self._placed[rid]
        total = placed.sum()
        if total <= 0:
            out = np.zeros(self.machine.n_nodes)
            out[cpu_node] = 1.0
            return out
        return placed / total

    def _put(self, rid: int, node: int, nbytes: int) -> int:
        take = int(min(nbytes, self.capacity[node] - self.used[node]))
        if take > 0:
            self._placed[rid][node] += take
            self.used[node] += take
        return max(take, 0)

    def allocate(self, rid: int, nbytes: int, cpu_node: int, policy: MemPolicy) -> NDArray[np.int64]:
        """First-touch ``nbytes`` of region ``rid`` from a thread on ``cpu_node``.

        Returns the bytes placed per node.

        Raises
        ------
        AllocationFailure
            When a ``bind`` policy's nodes are full, or the whole machine is.
        """
        before = self._placed[rid].copy()
        left = int(nbytes)
        if policy.kind == "interleave" and policy.nodes:
            nodes = list(policy.nodes)
            share = left // len(nodes)
            for i, node in enumerate(nodes):
                want = share + (1 if i < left - share * len(nodes) else 0)
                left -= self._put(rid, node, want)
            order = [n for n in self._by_distance[cpu_node]]
        elif policy.kind == "bind":
            order = [n for n in self._by_distance[cpu_node] if n in policy.nodes]
        elif policy.kind == "preferred" and policy.nodes:
            first = policy.nodes[0]
            order = [first] + [n for n in self._by_distance[first] if n != first]
        else:
            order = self._by_distance[cpu_node]
        for node in order:
            if left <= 0:
                break
            left -= self._put(rid, node, left)
        if left > 0:
            raise AllocationFailure(rid, tuple(order), left)
        return self._placed[rid] - before

    def migrate(self, rid: int, src: int, dst: int, nbytes: int) -> int:
        """Move up to ``nbytes`` of region ``rid`` from ``src`` to ``dst``; return bytes moved."""
        if src == dst:
            return 0
        amount = int(min(nbytes, self._placed[rid][src], self.capacity[dst] - self.used[dst]))
        if amount <= 0:
            return 0
        self._placed[rid][src] -= amount
        self._placed[rid][dst] += amount
        self.used[src] -= amount
        self.used[dst] += amount
        return amount

    def release(self, rid: int) -> None:
        """Free all of region ``rid`` (its pod ended or was killed)."""
        self.used -= self._placed[rid]
        self._placed[rid, :] = 0
