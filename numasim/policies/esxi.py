"""ESXi NUMA scheduler (policy ``esxi``): NUMA clients with home nodes.

Each pod runs as its own VM. A VM whose vCPUs fit in one node's cores
(physical cores unless ``prefer_ht``) is one NUMA client; a wider VM is
split into the fewest equal clients. Each client gets a home node at power-on
by CPU load, then free memory; its vCPUs run on the home node's CPUs and its
memory is allocated there (interleaved over the clients' homes for a wide
VM). Every ``rebalance_period`` the scheduler compares the nodes' CPU load
and, when they differ by more than ``mig_imbalance_threshold``, moves one
client's home (a balance migration) or swaps two; otherwise it may move a
client whose memory is mostly elsewhere to where its memory is (a locality
migration). After a home move the client's pages are copied to the new home
at the throttled ``page_migration_gbps``. Distances (SLIT) are ignored, as
ESXi does. Every vCPU pays the virtualization overhead (``cpu_overhead`` on
compute, ``memory_overhead`` on DRAM-miss time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field

from ..model.presets import policy_defaults
from ..model.spec import Duration
from .api import (
    Admission,
    Decision,
    LeastLoaded,
    MemPolicy,
    MigratePages,
    Move,
    Overhead,
    Policy,
    PolicyOptions,
    SetAffinity,
    SetMemPolicy,
)

if TYPE_CHECKING:
    from .api import PodView, View

__all__ = ["ESXi", "ESXiOptions"]

_D = policy_defaults("esxi")


class ESXiOptions(PolicyOptions):
    """Tunables of the ESXi model; defaults and sources in presets/policies/esxi.yaml."""

    rebalance_period: Duration = Field(default=_D["rebalance_period"], description="Numa.RebalancePeriod: how often home nodes are reconsidered (at least 1 ms)", ge=1_000_000)
    mig_imbalance_threshold: float = Field(default=_D["mig_imbalance_threshold"], description="Numa.MigImbalanceThreshold: node CPU-demand spread that triggers a balance migration", ge=0, le=1)
    locality_threshold: float = Field(default=_D["locality_threshold"], description="a client with less of its memory at home than this may move to its memory", ge=0, le=1)
    page_migration_gbps: float = Field(default=_D["page_migration_gbps"], description="rate of copying a client's pages after its home moves, GB/s", ge=1e-3, le=1e4)
    prefer_ht: bool = Field(default=_D["prefer_ht"], description="Numa.PreferHT: size NUMA clients in hardware threads instead of cores")
    quantum: Duration = Field(default=_D["quantum"], description="ESXi CPU scheduler time slice (sets the context-switch overhead; 100 us to 10 s)", ge=100_000, le=10_000_000_000)
    cpu_overhead: float = Field(default=_D["cpu_overhead"], description="virtualization: extra compute time, as a fraction", ge=0, le=1)
    memory_overhead: float = Field(default=_D["memory_overhead"], description="virtualization: extra DRAM-miss time (nested paging), as a fraction", ge=0, le=2)


@dataclass
class _Client:
    pod: int
    tids: tuple[int, ...]
    home: int
    wide: bool


class ESXi(Policy):
    """ESXi-like NUMA scheduling of pods as VMs."""

    name = "esxi"
    description = "ESXi NUMA scheduler: one VM per pod, NUMA clients with home nodes, 2 s rebalancing"
    Options = ESXiOptions

    def __init__(self, options: ESXiOptions, machine, rng):
        super().__init__(options, machine, rng)
        self.o = options
        self.clients: list[_Client] = []
        m = machine
        per_core = m.spec.threads_per_core if (m.smt and options.prefer_ht) else 1
        self.client_size = m.spec.cores_per_node * per_core
        # Cores per node; a memory-only node (CXL) has none and is never a home node.
        self.node_capacity = np.array([m.spec.cores_per_node if n in m.cpu_nodes else np.inf
                                       for n in range(m.n_nodes)], dtype=float)
        self._next: int | None = None
        self._last_tick = 0
        self._last_runnable: dict[int, float] = {}

    def slice_ns(self, nr_running: int) -> int:
        return int(self.o.quantum)

    # ------------------------------------------------------------ loads
    def _demand(self, sim: "View") -> dict[int, float]:
        """Each client's CPU demand over the last period: its vCPUs' runnable time / period.

        ESXi balances on CPU entitlement and consumption measured over the
        period, not on an instantaneous count, so a pause or a short sleep does
        not look like an imbalance.
        """
        runnable = sim.thread_runnable_time()
        period = max(sim.now - self._last_tick, 1)
        out = {}
        for i, c in enumerate(self.clients):
            now_t = float(sum(runnable[t] for t in c.tids))
            out[i] = (now_t - self._last_runnable.get(i, 0.0)) / period
            self._last_runnable[i] = now_t
        self._last_tick = sim.now
        return out

    def _loads(self, demand: dict[int, float]) -> np.ndarray:
        """CPU demand per node (vCPUs' demand of the clients homed there / cores)."""
        loads = np.zeros(self.machine.n_nodes)
        for i, c in enumerate(self.clients):
            loads[c.home] += demand[i]
        return loads / self.node_capacity

    def admit(self, pod: "PodView", sim: "View") -> Admission:
        m = self.machine
        vcpus = pod.threads
        k = max(1, math.ceil(vcpus / self.client_size))
        sizes = [vcpus // k + (1 if i < vcpus % k else 0) for i in range(k)]
        demand = np.zeros(m.n_nodes)
        for c in self.clients:
            demand[c.home] += len(c.tids)
        free = sim.node_free().astype(float)
        homes: list[int] = []
        tids = list(pod.tids)
        affinity: list[frozenset[int]] = []
        for size in sizes:
            cands = [n for n in m.cpu_nodes if n not in homes] or list(m.cpu_nodes)
            home = min(cands, key=lambda n: ((demand[n] + size) / self.node_capacity[n], -free[n], n))
            homes.append(home)
            demand[home] += size
            free[home] -= pod.memory / k
            part, tids = tuple(tids[:size]), tids[size:]
            self.clients.append(_Client(pod.index, part, home, k > 1))
            affinity += [m.cpus_of_nodes((home,))] * size
        mp = MemPolicy("preferred", (homes[0],)) if k == 1 else MemPolicy("interleave", tuple(sorted(homes)))
        if self._next is None:
            self._next = sim.now + self.o.rebalance_period
        return Admission(
            affinity=tuple(affinity),
            mempolicy=mp,
            overhead=Overhead(cpu=self.o.cpu_overhead, memory=self.o.memory_overhead),
            info={"homes": homes, "clients": k},
        )

    def wake_rule(self) -> LeastLoaded | None:
        """:meth:`place`, which places wake-ups too, as the compiled rule it is (unless a subclass changed either)."""
        if type(self).place is not ESXi.place or type(self).wake is not Policy.wake:
            return None
        return LeastLoaded()

    def place(self, tid: int, sim: "View") -> int:
        nr = sim.nr_running
        allowed = sim.affinity(tid)
        cands = sorted(allowed) if allowed is not None else range(self.machine.n_cpus)
        m = self.machine

        def key(c: int):
            sib_busy = sum(int(nr[s]) for s in m.siblings(c)) if m.smt else 0
            return (int(nr[c]), sib_busy, c)

        return min(cands, key=key)

    # --------------------------------------------------------- rebalance
    def next_tick(self, now: int) -> int | None:
        return self._next

    def tick(self, sim: "View") -> list[Decision]:
        self._next = sim.now + self.o.rebalance_period
        out: list[Decision] = []
        move = self._numa_rebalance(sim)
        if move is not None:
            client, dst = move
            out += self._rehome(client, dst, sim)
        out += self._balance_within_nodes(sim, out)
        return out

    def _spread(self, loads: np.ndarray) -> float:
        homes = loads[list(self.machine.cpu_nodes)]
        return float(homes.max() - homes.min())

    def _numa_rebalance(self, sim: "View") -> tuple[_Client, int] | None:
        demand = self._demand(sim)
        loads = self._loads(demand)
        spread = self._spread(loads)
        movable = [(i, c) for i, c in enumerate(self.clients) if not c.wide and demand[i] > 0]
        if spread > self.o.mig_imbalance_threshold:
            homes = self.machine.cpu_nodes  # a memory-only node is never a home
            src, dst = max(homes, key=lambda n: (loads[n], -n)), min(homes, key=lambda n: (loads[n], n))
            best = None
            mem = sim.pod_memory()
            for i, c in movable:
                if c.home != src:
                    continue
                n = demand[i]
                new = loads.copy()
                new[src] -= n / self.node_capacity[src]
                new[dst] += n / self.node_capacity[dst]
                key = (self._spread(new), int(mem[c.pod].sum()), c.pod)
                if key[0] < spread - 1e-12 and (best is None or key < best[0]):
                    best = (key, c)
            if best is not None:
                return best[1], dst
            return None
        # Locality migration: a client whose memory is mostly elsewhere goes to it,
        # if that keeps the nodes within the imbalance threshold.
        mem = sim.pod_memory()
        for i, c in movable:
            held = mem[c.pod].astype(float)
            if held.sum() <= 0:
                continue
            local = held[c.home] / held.sum()
            target = max(self.machine.cpu_nodes, key=lambda n: (held[n], -n))
            if local >= self.o.locality_threshold or target == c.home:
                continue
            n = demand[i]
            new = loads.copy()
            new[c.home] -= n / self.node_capacity[c.home]
            new[target] += n / self.node_capacity[target]
            if self._spread(new) <= self.o.mig_imbalance_threshold:
                return c, target
        return None

    def _rehome(self, c: _Client, dst: int, sim: "View") -> list[Decision]:
        c.home = dst
        held = sim.pod_memory()[c.pod]
        remote = int(held.sum() - held[dst])
        out: list[Decision] = [
            SetAffinity(c.tids, self.machine.cpus_of_nodes((dst,))),
            SetMemPolicy(c.pod, MemPolicy("preferred", (dst,))),
        ]
        if remote > 0:
            out.append(MigratePages(c.pod, dst, remote, self.o.page_migration_gbps))
        return out

    def _balance_within_nodes(self, sim: "View", pending: list[Decision]) -> list[Decision]:
        """Even out vCPUs over a node's CPUs (ESXi's CPU scheduler does so continuously)."""
        moved_tids = {t for d in pending if isinstance(d, SetAffinity) for t in d.tids}
        cpu_of = np.array(sim.thread_cpu)
        active = np.array(sim.thread_active)
        nr = np.bincount(cpu_of[active], minlength=self.machine.n_cpus)
        out: list[Decision] = []
        for cpus in self.machine.node_cpus:
            cpus = [int(c) for c in cpus]
            for _ in range(len(cpus) * 4):
                hi = max(cpus, key=lambda c: (nr[c], -c))
                lo = min(cpus, key=lambda c: (nr[c], c))
                if nr[hi] - nr[lo] < 2:
                    break
                cands = [int(t) for t in np.flatnonzero((cpu_of == hi) & active)
                         if int(t) not in moved_tids and sim.allowed(int(t), lo)]
                if not cands:
                    break
                t = cands[-1]
                cpu_of[t] = lo
                nr[hi] -= 1
                nr[lo] += 1
                out.append(Move(t, lo))
        return out
