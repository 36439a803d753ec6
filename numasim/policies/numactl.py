"""numactl (policy ``numactl``): CPU and memory binding per pod, then CFS.

``--cpunodebind`` restricts a pod's threads to the CPUs of some nodes, or
``--physcpubind`` to a list of OS CPU ids (``"0-7"``, as taskset's);
``--membind`` allocates only from some nodes (failing when they are full),
``--preferred`` tries one node first, ``--interleave`` spreads pages
round-robin (numactl(8)). Nodes are given per pod (lists cycled over the
pods in arrival order) or chosen by the ``auto`` packing rule: the fewest
nodes whose cores and memory hold the pod, least committed first (committed
CPUs per core, then most free memory, then lowest node id); with
``--physcpubind``, ``auto`` means the nodes of the pod's CPUs, and with
``--cpunodebind`` nodes given, those nodes. Scheduling
inside the allowed CPUs is CFS.
"""

from __future__ import annotations

import math
from typing import Annotated, TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, StrictInt, model_validator

from ..errors import Problem
from .api import Admission, MemPolicy
from .cfs import CFS, CFSOptions
from .kernels import version
from .taskset import check_cpulists, cpusets

if TYPE_CHECKING:
    from .api import PodView, View

__all__ = ["Numactl", "NumactlOptions", "NodePacker"]

NodeLists = list[list[StrictInt]]


class NumactlOptions(CFSOptions):
    """Which nodes each pod is bound to; see the module docstring."""

    cpunodebind: Literal["auto"] | NodeLists | None = Field(
        default="auto", description="--cpunodebind: 'auto', or node lists cycled over the pods ([[0], [1]]); null: none")
    physcpubind: list[str | StrictInt | list[StrictInt]] | None = Field(
        default=None, min_length=1,
        description="--physcpubind (-C): cpulists of OS CPU ids ('0-7', '0-42:2'), cycled over the pods, instead of "
                    "cpunodebind (giving it turns cpunodebind's default off); null: none")
    membind: Literal["auto"] | NodeLists | None = Field(
        default="auto", description="--membind: 'auto' (the cpunodebind nodes, or those of the physcpubind CPUs), "
                                    "or node lists; null: none. Unlike the numactl command, the default binds memory "
                                    "too; NUMA balancing (Linux 3.13+) neither scans nor moves memory placed by "
                                    "membind, preferred or interleave, unless balancing is set")
    preferred: Literal["auto"] | list[StrictInt] | None = Field(
        default=None, description="--preferred: 'auto' (the first of the pod's nodes) or a node per pod, cycled")
    interleave: Literal["all", "auto"] | NodeLists | None = Field(
        default=None, description="--interleave: 'all', 'auto' or node lists")
    interleave_weights: dict[StrictInt, Annotated[int, Field(ge=1, le=255)]] | None = Field(
        default=None,
        description="with interleave: --weighted-interleave, pages per round for each node "
                    "(/sys/kernel/mm/mempolicy/weighted_interleave/nodeN, Linux 6.9+; unlisted nodes 1)")

    balancing: bool = Field(
        default=False,
        description="--balancing: with membind, NUMA balancing (numa_balancing: true) may move the memory within the "
                    "bound nodes toward the CPUs that use it (MPOL_F_NUMA_BALANCING, Linux 5.12+); without it an "
                    "explicit memory policy's pages never move")

    @model_validator(mode="before")
    @classmethod
    def _one_memory_policy(cls, data: Any) -> Any:
        if isinstance(data, dict) and ("preferred" in data or "interleave" in data) and "membind" not in data:
            data = {**data, "membind": None}
        if isinstance(data, dict) and data.get("physcpubind") is not None and "cpunodebind" not in data:
            data = {**data, "cpunodebind": None}
        return data

    @model_validator(mode="after")
    def _check(self) -> "NumactlOptions":
        if self.interleave_weights is not None and self.interleave is None:
            raise ValueError("interleave_weights needs interleave (the nodes to interleave over)")
        given = [k for k in ("membind", "preferred", "interleave") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of membind, preferred and interleave, got {', '.join(given)}")
        if self.balancing and self.membind is None:
            raise ValueError("balancing needs membind (numactl --balancing applies to --membind only)")
        if self.balancing and self.kernel is not None and version(self.kernel) < (5, 12, 0):
            raise ValueError(f"balancing (numactl --balancing, MPOL_F_NUMA_BALANCING) needs Linux 5.12 or later; "
                             f"kernel is {self.kernel}")
        for key in ("cpunodebind", "membind", "interleave"):
            val = getattr(self, key)
            if isinstance(val, list) and (not val or any(not nodes for nodes in val)):
                raise ValueError(f"{key}: every entry must be a non-empty list of node ids")
        if self.physcpubind is not None and self.cpunodebind is not None:
            raise ValueError("give cpunodebind or physcpubind, not both (numactl binds a process's CPUs one way)")
        if self.preferred == []:
            raise ValueError("preferred: give at least one node id (a node per pod, cycled), or 'auto'")
        return self


class NodePacker:
    """The ``auto`` rule: choose the least committed nodes that hold a pod."""

    def __init__(self, machine):
        self.machine = machine
        self.committed = np.zeros(machine.n_nodes)
        self.memory = np.zeros(machine.n_nodes)

    def choose(self, cpus: float, memory: int) -> tuple[int, ...]:
        """Nodes with CPUs only: a CPU-less memory node is never chosen automatically."""
        m = self.machine
        nodes_with_cpus = m.cpu_nodes
        first_node = nodes_with_cpus[0]
        per_node_cpus = len(m.node_cpus[first_node])
        k = max(math.ceil(cpus / per_node_cpus), math.ceil(memory / int(m.node_memory[first_node])), 1)
        k = min(k, len(nodes_with_cpus))
        load = self.committed / np.array([max(len(c), 1) for c in m.node_cpus])
        free = m.node_memory - self.memory
        order = sorted(nodes_with_cpus, key=lambda n: (round(load[n], 9), -free[n], n))
        first = order[0]
        if k == 1:
            nodes = (first,)
        else:
            near = sorted(nodes_with_cpus, key=lambda n: (m.distance[first, n], round(load[n], 9), n))
            nodes = tuple(sorted(near[:k]))
        for n in nodes:
            self.committed[n] += cpus / len(nodes)
            self.memory[n] += memory / len(nodes)
        return nodes


def _check_nodes(value: Any, key: str, machine) -> list[Problem]:
    out: list[Problem] = []
    n_nodes = machine.n_nodes
    if isinstance(value, list):
        for i, item in enumerate(value):
            for j, node in enumerate(item if isinstance(item, list) else [item]):
                path = f"{key}[{i}]" + (f"[{j}]" if isinstance(item, list) else "")
                if not 0 <= node < n_nodes:
                    out.append(Problem(path, f"node {node} does not exist; nodes are 0-{n_nodes - 1}"))
                elif key == "cpunodebind" and node not in machine.cpu_nodes:
                    out.append(Problem(path, f"node {node} has no CPUs (a memory-only node); nodes with CPUs are "
                                             f"{', '.join(map(str, machine.cpu_nodes))}"))
    return out


class Numactl(CFS):
    """numactl --cpunodebind or --physcpubind, and --membind (or --preferred/--interleave), then CFS."""

    name = "numactl"
    description = "numactl binding of each pod's CPUs (to nodes or to a cpulist) and memory (to nodes), then CFS"
    Options = NumactlOptions

    def __init__(self, options: NumactlOptions, machine, rng):
        super().__init__(options, machine, rng)
        self.packer = NodePacker(machine)
        self._count = 0
        self.cpusets = cpusets(options.physcpubind, machine.n_cpus) if options.physcpubind is not None else None

    @classmethod
    def check(cls, options, machine, pods) -> list[Problem]:
        out: list[Problem] = []
        for key in ("cpunodebind", "membind", "preferred", "interleave"):
            out += _check_nodes(getattr(options, key), key, machine)
        if options.physcpubind is not None:
            out += check_cpulists(options.physcpubind, machine.n_cpus, "physcpubind")
        for node in options.interleave_weights or {}:
            if not 0 <= node < machine.n_nodes:
                out.append(Problem(f"interleave_weights.{node}", f"node {node} does not exist; nodes are 0-{machine.n_nodes - 1}"))
        return out

    def admit(self, pod: "PodView", sim: "View") -> Admission:
        o = self.options
        k = self._count
        self._count += 1
        def listed(value):  # this pod's entry of a list cycled over the pods
            item = value[k % len(value)]
            return tuple(item) if isinstance(item, list) else (item,)

        cpus = None
        if self.cpusets is not None:  # --physcpubind: 'auto' is the nodes of the pod's CPUs
            cpus = self.cpusets[k % len(self.cpusets)]
            auto = tuple(sorted({int(self.machine.cpu_node[c]) for c in cpus}))
        elif isinstance(o.cpunodebind, list):  # nodes given: 'auto' memory is on them
            auto = listed(o.cpunodebind)
        elif "auto" in (o.cpunodebind, o.membind, o.preferred, o.interleave):
            auto = self.packer.choose(pod.cpus, pod.memory)
        else:
            auto = ()

        def pick(value):
            if value == "auto":
                return auto
            if value == "all":  # every node with memory, CPU-less ones included, as numactl --interleave=all
                return tuple(range(self.machine.n_nodes))
            return listed(value) if isinstance(value, list) else None

        cpu_nodes = auto if cpus is not None else pick(o.cpunodebind)
        if cpus is None and cpu_nodes:
            cpus = self.machine.cpus_of_nodes(cpu_nodes)
        affinity = tuple(cpus for _ in pod.tids) if cpus else None
        if o.membind is not None:
            mp = MemPolicy("bind", pick(o.membind), numa_balancing=o.balancing)
        elif o.preferred is not None:
            mp = MemPolicy("preferred", pick(o.preferred)[:1])
        elif o.interleave is not None:
            nodes = pick(o.interleave)
            weights = tuple(o.interleave_weights.get(n, 1) for n in nodes) if o.interleave_weights else ()
            mp = MemPolicy("interleave", nodes, weights)
        else:
            mp = MemPolicy()
        info = {"nodes": list(cpu_nodes or ())}
        if self.cpusets is not None:
            info["cpus"] = sorted(cpus)
        return Admission(affinity=affinity, mempolicy=mp, info=info)
