"""Kubernetes node resource managers (policy ``k8s``): CPU, Topology and Memory Managers, then CFS.

Follows the kubelet's documented behaviour (kubernetes.io, "Control CPU
Management Policies on the Node", "Control Topology Management Policies on a
node", "Utilizing the NUMA-aware Memory Manager"):

* **QoS.** A pod whose requests equal its limits (the default when only limits
  are given) is Guaranteed; otherwise Burstable.
* **CPU Manager** ``none``: every container runs in the shared pool (all CPUs).
  ``static``: a Guaranteed pod with an integer CPU request gets that many
  exclusive CPUs (never the reserved ones); everything else shares the pool of
  the remaining CPUs, whose cpusets the kubelet updates at its reconcile period.
* **Topology Manager** (scope ``container`` or ``pod``: the same for the
  single-container pods modelled here). The CPU Manager and the Memory Manager
  give NUMA-node hints (every node set that can satisfy the request; preferred
  if it is as narrow as possible); the merged best hint is the narrowest
  preferred one. ``none`` ignores hints; ``best-effort`` follows the best hint;
  ``restricted`` rejects a pod whose best hint is not preferred;
  ``single-numa-node`` rejects one that cannot fit in one node. A rejected pod
  fails admission with a TopologyAffinityError and is not rescheduled.
* **Memory Manager** ``Static``: a Guaranteed pod's memory is bound to the hint's
  nodes (the kubelet sets ``cpuset.mems``); ``None``: first touch.
* CPU limits become CFS bandwidth control (quota = limit x 100 ms per 100 ms).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, StrictInt

from ..errors import Problem
from ..model.cpulist import parse_cpulist
from ..model.spec import Duration, Size
from .api import Admission, Decision, MemPolicy, SetAffinity
from .cfs import CFS, CFSOptions

if TYPE_CHECKING:
    from .api import PodView, View

__all__ = ["K8s", "K8sOptions"]

# The kubelet's Topology Manager refuses machines with more NUMA nodes (maxAllowableNUMANodes,
# pkg/kubelet/cm/topologymanager; KEP-4622 adds an option to raise it).
MAX_ALLOWABLE_NUMA_NODES = 8
# The kubelet writes a CFS quota of at least 1 ms a 100 ms period (minQuotaPeriod,
# pkg/kubelet/kuberuntime/helpers_linux.go): a limit below 10m runs as 0.01 CPU.
MIN_QUOTA_CPUS = 0.01


def merge_hints(providers: list[dict[frozenset[int], bool]],
                nodes: Sequence[int]) -> list[tuple[frozenset[int], bool]]:
    """The Topology Manager's merge of the providers' hints (node set -> preferred), best first.

    Every combination of one hint per provider, as the kubelet iterates them, gives the hints'
    intersection, preferred if every hint of the combination is; a node set that several
    combinations give is preferred if any of them is. Best first: preferred, then fewer nodes,
    then the lowest node ids. Computed on bit masks: at most 8 nodes, so 255 x 255 combinations
    of two providers (0.27 s a pod as Python sets, about 1 ms here).
    """
    size = 1 << (max(nodes, default=0) + 1)
    bits, pref = np.full(1, size - 1, dtype=np.int64), np.ones(1, dtype=bool)
    for prov in providers:
        pb = np.asarray([sum(1 << n for n in mk) for mk in prov], dtype=np.int64)
        pp = np.asarray(list(prov.values()), dtype=bool)
        bits, pref = (bits[:, None] & pb[None, :]).ravel(), (pref[:, None] & pp[None, :]).ravel()
    seen, preferred = np.zeros(size, dtype=bool), np.zeros(size, dtype=bool)
    seen[bits] = True
    preferred[bits[pref]] = True
    merged = [(frozenset(n for n in range(size.bit_length() - 1) if b >> n & 1), bool(preferred[b]))
              for b in np.flatnonzero(seen[1:]) + 1]
    return sorted(merged, key=lambda kv: (not kv[1], len(kv[0]), sorted(kv[0])))


class K8sOptions(CFSOptions):
    """kubelet options; scheduling inside the allowed CPUs is the CFS model."""

    cpu_manager_policy: Literal["none", "static"] = Field(default="none", description="--cpu-manager-policy")
    topology_manager_policy: Literal["none", "best-effort", "restricted", "single-numa-node"] = Field(
        default="none", description="--topology-manager-policy")
    topology_manager_scope: Literal["container", "pod"] = Field(default="container", description="--topology-manager-scope")
    memory_manager_policy: Literal["None", "Static"] = Field(default="None", description="--memory-manager-policy")
    reserved_cpus: str | StrictInt | None = Field(
        default=None, description="--reserved-cpus as a cpulist ('0,1'), or a number of CPUs taken as the kubelet does (lowest ids, whole cores first)")
    reserved_memory: Size = Field(
        default=0, ge=0, description="--reserved-memory per NUMA node (the Static Memory Manager needs it > 0)")
    reconcile_period: Duration = Field(
        default="10s", ge=1_000_000, description="--cpu-manager-reconcile-period: how soon shared-pool cpusets follow allocations (at least 1 ms)")
    cfs_quota: bool = Field(default=True, description="enforce CPU limits with CFS bandwidth control (kubelet --cpu-cfs-quota)")


def _reserved(options: K8sOptions, machine) -> frozenset[int]:
    r = options.reserved_cpus
    if r is None:
        return frozenset()
    if isinstance(r, int):
        # The kubelet reserves whole physical cores, lowest CPU ids first.
        out: list[int] = []
        for core in sorted(machine.core_cpus, key=min):
            if len(out) >= r:
                break
            out += sorted(core)[: r - len(out)]
        return frozenset(out)
    return parse_cpulist(r, machine.n_cpus)


class K8s(CFS):
    """kubelet CPU, Topology and Memory Managers, then CFS."""

    name = "k8s"
    description = "Kubernetes kubelet: CPU Manager, Topology Manager and Memory Manager admission, then CFS"
    Options = K8sOptions

    def __init__(self, options: K8sOptions, machine, rng):
        super().__init__(options, machine, rng)
        self.reserved = _reserved(options, machine)
        self.exclusive: dict[int, frozenset[int]] = {}  # pod index -> its exclusive CPUs
        self.shared_tids: list[int] = []
        self.mem_assigned = np.zeros(machine.n_nodes, dtype=np.int64)
        self.allocatable = machine.node_memory - options.reserved_memory
        self._reconcile_at: int | None = None

    @classmethod
    def check(cls, options: K8sOptions, machine, pods) -> list[Problem]:
        out = []
        if options.reserved_cpus is not None and not isinstance(options.reserved_cpus, int):
            try:
                parse_cpulist(options.reserved_cpus, machine.n_cpus)
            except ValueError as exc:
                out.append(Problem("reserved_cpus", str(exc)))
        if isinstance(options.reserved_cpus, int) and not 0 <= options.reserved_cpus < machine.n_cpus:
            out.append(Problem("reserved_cpus", f"must be 0-{machine.n_cpus - 1} CPUs, got {options.reserved_cpus}"))
        if options.cpu_manager_policy == "static" and not options.reserved_cpus:
            out.append(Problem("reserved_cpus", "the static CPU Manager needs reserved CPUs > 0 (kubelet: --reserved-cpus or kube/system-reserved)"))
        nodes = machine.n_nodes  # all of them, as cadvisor lists them to the kubelet (CPU-less ones too)
        if options.topology_manager_policy != "none" and nodes > MAX_ALLOWABLE_NUMA_NODES:
            out.append(Problem("topology_manager_policy", (
                f"the machine has {nodes} NUMA nodes; the kubelet's Topology Manager refuses to start on more than "
                f"{MAX_ALLOWABLE_NUMA_NODES} (its hint merging grows as 2^nodes; the max-allowable-numa-nodes option that lifts "
                "the limit is not modelled): use 'none'")))
        if options.memory_manager_policy == "Static" and options.reserved_memory <= 0:
            out.append(Problem("reserved_memory", "the Static Memory Manager needs reserved memory > 0 on each node (--reserved-memory)"))
        return out

    # ------------------------------------------------------------- helpers
    def _guaranteed(self, pod: "PodView") -> bool:
        req = pod.spec.requests
        if req is None:
            return True
        cpu_ok = req.cpu is None or req.cpu == pod.cpus
        mem_ok = req.memory is None or req.memory == pod.memory
        return cpu_ok and mem_ok

    def _free_exclusive(self) -> frozenset[int]:
        used = set().union(*self.exclusive.values()) if self.exclusive else set()
        return frozenset(range(self.machine.n_cpus)) - used - self.reserved

    def shared_pool(self) -> frozenset[int]:
        used = set().union(*self.exclusive.values()) if self.exclusive else set()
        return frozenset(range(self.machine.n_cpus)) - used

    def _masks(self):
        """Node sets a hint can name: of nodes with CPUs (a memory-only node has no CPU to align with)."""
        nodes = self.machine.cpu_nodes
        for k in range(1, len(nodes) + 1):
            for combo in itertools.combinations(nodes, k):
                yield frozenset(combo)

    def _hints(self, need_cpus: int | None, need_mem: int | None, single: bool) -> list[tuple[frozenset[int], bool]]:
        """Merged topology hints: (node set, preferred) from the CPU and Memory Managers.

        With ``single`` (the single-numa-node policy) each manager's hints are first
        filtered to single-node ones, as the kubelet does.
        """
        m = self.machine
        free = self._free_exclusive()
        providers = []
        if need_cpus is not None:
            avail = {nd: len([c for c in m.node_cpus[nd] if int(c) in free]) for nd in range(m.n_nodes)}
            total = {nd: len([c for c in m.node_cpus[nd] if int(c) not in self.reserved]) for nd in range(m.n_nodes)}
            fits = [mk for mk in self._masks() if sum(avail[n] for n in mk) >= need_cpus]
            narrowest = min((len(mk) for mk in self._masks() if sum(total[n] for n in mk) >= need_cpus), default=None)
            providers.append({mk: len(mk) == narrowest for mk in fits})
        if need_mem is not None:
            left = self.allocatable - self.mem_assigned
            fits = [mk for mk in self._masks() if sum(int(left[n]) for n in mk) >= need_mem]
            narrowest = min((len(mk) for mk in self._masks() if sum(int(self.allocatable[n]) for n in mk) >= need_mem), default=None)
            providers.append({mk: len(mk) == narrowest for mk in fits})
        if single:
            providers = [{mk: p for mk, p in prov.items() if len(mk) == 1} for prov in providers]
        if not providers:
            return [(frozenset(m.cpu_nodes), True)]
        return merge_hints(providers, m.cpu_nodes)

    def _take_cpus(self, n: int, nodes: frozenset[int] | None) -> frozenset[int] | None:
        """Exclusive CPUs: the hint's nodes first (then the others), whole cores first, lowest ids first.

        Without a hint, the node with the fewest free CPUs that still holds the
        request comes first (the kubelet packs allocations).
        """
        m = self.machine
        free = self._free_exclusive()
        nfree = {nd: len([c for c in m.node_cpus[nd] if int(c) in free]) for nd in range(m.n_nodes)}
        packed = sorted(range(m.n_nodes), key=lambda nd: (nfree[nd] < n, nfree[nd], nd))
        order = sorted(nodes) + [nd for nd in packed if nd not in nodes] if nodes else packed
        cands = [int(c) for nd in order for c in m.node_cpus[nd] if int(c) in free]
        if len(cands) < n:
            return None
        whole = [c for c in cands if all(s in free for s in m.core_cpus[int(m.cpu_core[c])])]
        picked: list[int] = []
        for c in whole + [c for c in cands if c not in whole]:
            if c not in picked:
                picked.append(c)
            if len(picked) == n:
                break
        return frozenset(picked)

    # ------------------------------------------------------------ admit
    def admit(self, pod: "PodView", sim: "View") -> Admission:
        o = self.options
        guaranteed = self._guaranteed(pod)
        integer = float(pod.cpus).is_integer()
        exclusive = o.cpu_manager_policy == "static" and guaranteed and integer
        need_cpus = int(pod.cpus) if exclusive else None
        need_mem = pod.memory if (o.memory_manager_policy == "Static" and guaranteed) else None
        qos = "Guaranteed" if guaranteed else "Burstable"
        info: dict = {"qos": qos, "exclusive_cpus": exclusive}
        hint_nodes: frozenset[int] | None = None
        if o.topology_manager_policy != "none" and (need_cpus is not None or need_mem is not None):
            single = o.topology_manager_policy == "single-numa-node"
            hints = self._hints(need_cpus, need_mem, single)
            if not hints:
                what = " and ".join(x for x in (
                    f"{need_cpus} exclusive CPUs" if need_cpus is not None else "",
                    f"{pod.memory / 2**30:.1f} GiB" if need_mem is not None else "") if x)
                where = "no single NUMA node" if single else "no set of NUMA nodes"
                return Admission(accepted=False, reason=f"TopologyAffinityError: {where} can provide {what}", info=info)
            mask, preferred = hints[0]
            if o.topology_manager_policy == "restricted" and not preferred:
                return Admission(accepted=False, reason=f"TopologyAffinityError: best hint {sorted(mask)} is not preferred", info=info)
            if o.topology_manager_policy == "single-numa-node" and not (preferred and len(mask) == 1):
                return Admission(accepted=False, reason="TopologyAffinityError: the pod does not fit in a single NUMA node", info=info)
            hint_nodes = mask
        affinity = None
        if exclusive:
            cpus = self._take_cpus(need_cpus, hint_nodes)
            if cpus is None:
                return Admission(accepted=False, reason=f"not enough exclusive CPUs for {need_cpus}", info=info)
            self.exclusive[pod.index] = cpus
            affinity = tuple(cpus for _ in pod.tids)
            info["cpus"] = sorted(cpus)
            info["nodes"] = sorted({int(self.machine.cpu_node[c]) for c in cpus})
            self._reconcile_at = sim.now + o.reconcile_period
        elif o.cpu_manager_policy == "static":
            affinity = tuple(self.shared_pool() for _ in pod.tids)
            self.shared_tids += list(pod.tids)
        mempolicy = MemPolicy()
        if need_mem is not None:
            nodes = hint_nodes or frozenset(info.get("nodes", range(self.machine.n_nodes)))
            # cpuset.mems under the default policy: NUMA balancing still moves pages, within these nodes.
            mempolicy = MemPolicy("bind", tuple(sorted(nodes)), numa_balancing=True)
            for nd in nodes:
                self.mem_assigned[nd] += pod.memory // len(nodes)
            info["memory_nodes"] = sorted(nodes)
        quota = max(pod.cpus, MIN_QUOTA_CPUS) if o.cfs_quota else None
        return Admission(affinity=affinity, mempolicy=mempolicy, cpu_quota=quota, info=info)

    # ------------------------------------------------------------- ticks
    def next_tick(self, now: int) -> int | None:
        nxt = super().next_tick(now)
        if self._reconcile_at is not None:
            nxt = self._reconcile_at if nxt is None else min(nxt, self._reconcile_at)
        return nxt

    def tick(self, sim: "View") -> list[Decision]:
        if self._reconcile_at is not None and sim.now >= self._reconcile_at:
            # reconcileState: shared-pool containers' cpusets follow exclusive allocations.
            self._reconcile_at = None
            pool = self.shared_pool()
            alive = [t for t in self.shared_tids if sim.thread_alive[t] or sim.thread_cpu[t] < 0]
            if alive:
                # The cpuset change alone: the balancer's moves, worked out now, would use
                # the old cpusets. It runs at the next tick (1 ns later if it is due).
                return [SetAffinity(tuple(alive), pool)]
        return super().tick(sim)
