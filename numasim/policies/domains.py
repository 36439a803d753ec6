"""Linux scheduling domains built from a :class:`~numasim.model.machine.Machine`.

Follows kernel/sched/topology.c: levels SMT -> MC (the LLC) -> PKG -> one
NUMA level per distinct SLIT distance; a level whose span equals its child's
is degenerate and dropped; building stops at the first level that spans the
machine. Each domain's groups are its child domains' spans (single CPUs at
the lowest level). ``imb_numa_nr``, the number of tasks of NUMA imbalance the
balancer tolerates, follows ``build_sched_domains`` (v5.18+; a one-LLC node allowed a quarter of
itself in v5.18-v5.19, an eighth from v6.0).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from ..model.machine import Machine

__all__ = ["Level", "build_levels"]


@dataclass
class Level:
    """One domain level: its spans (one per distinct domain) and their groups."""

    name: str
    pct: int
    nice_tries: int
    numa: bool
    share_llc: bool
    fork: bool  # SD_BALANCE_FORK / SD_BALANCE_EXEC
    wake_affine: bool
    prefer_sibling: bool  # the groups' flag (inherited from the child level)
    imb_numa_nr: int
    spans: list[NDArray[np.int64]] = field(default_factory=list)
    span_of: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    groups: list[list[NDArray[np.int64]]] = field(default_factory=list)
    group_of: list[dict[int, int]] = field(default_factory=list)  # per span: cpu -> group index

    @property
    def weight(self) -> int:
        return len(self.spans[0])


def _spans(labels: NDArray[np.int64]) -> tuple[list[NDArray[np.int64]], NDArray[np.int64]]:
    keys = sorted(set(int(x) for x in labels))
    spans = [np.flatnonzero(labels == k) for k in keys]
    index = {k: i for i, k in enumerate(keys)}
    return spans, np.array([index[int(x)] for x in labels], dtype=np.int64)


def build_levels(machine: Machine, opts: dict) -> list[Level]:
    """Scheduling-domain levels of ``machine`` under CFS options ``opts``."""
    m = machine
    ncpu = m.n_cpus
    cand: list[tuple[str, list[frozenset[int]], dict]] = []

    def spans_by(key_of_cpu) -> list[frozenset[int]]:
        """Each CPU's span: the CPUs with its key. CPUs with one key share one set (memory O(CPUs))."""
        shared: dict[int, frozenset[int]] = {}
        for k in np.unique(key_of_cpu).tolist():
            shared[k] = frozenset(np.flatnonzero(key_of_cpu == k).tolist())
        return [shared[k] for k in np.asarray(key_of_cpu).tolist()]

    if m.smt:
        cand.append(("SMT", spans_by(m.cpu_core), dict(pct=opts["imbalance_pct_smt"], tries=0, numa=False, llc=True)))
    # MC: the CPUs sharing a last-level cache (cpu_coregroup_mask), never wider than a node;
    # PKG: cpu_cpu_mask, which is the node (include/linux/topology.h), so no level without
    # SD_NUMA spans two nodes, whether a socket holds one node or several (SNC, NPS2/4).
    cand.append(("MC", spans_by(m.cpu_llc), dict(pct=opts["imbalance_pct_mc"], tries=opts["cache_nice_tries_mc"], numa=False, llc=True)))
    cand.append(("PKG", spans_by(m.cpu_node), dict(pct=opts["imbalance_pct_mc"], tries=1, numa=False, llc=False)))
    # Levels from the distances between nodes with CPUs (sched_init_numa skips CPU-less nodes).
    with_cpus = list(m.cpu_nodes)
    dists = sorted(set(int(d) for d in np.unique(m.distance[np.ix_(with_cpus, with_cpus)])) - {10})
    for d in dists:
        near = m.distance <= d
        by_node = [frozenset(np.flatnonzero(near[n][m.cpu_node]).tolist()) for n in range(m.n_nodes)]
        spans = [by_node[n] for n in m.cpu_node.tolist()]
        cand.append((f"NUMA-{d}", spans, dict(pct=opts["imbalance_pct_numa"], tries=opts["cache_nice_tries_numa"], numa=True, llc=False, dist=d)))

    # imb_numa_nr: at the first level above the LLC (PKG, the node), its LLC count, or for one LLC
    # 1/8 of it (026b98a93bbd, v6.0; a quarter in v5.18-v5.19, e496132ebedd).
    llc_w = len(cand[1 if m.smt else 0][1][0])
    pkg_w = len(cand[2 if m.smt else 1][1][0])
    nr_llcs = pkg_w // llc_w
    if opts.get("numa_imbalance_kernel") == "5.18":
        imb_base = (pkg_w >> 2) if nr_llcs == 1 else nr_llcs  # no floor of 1 before v6.0
    else:
        imb_base = max(1, (pkg_w >> 3) if nr_llcs == 1 else nr_llcs)
    first_numa = next((c for c in cand if c[2]["numa"]), None)
    imb_span = len(first_numa[1][0]) if first_numa else pkg_w

    reclaim = opts.get("node_reclaim_distance")
    if reclaim is None:
        reclaim = m.spec.node_reclaim_distance  # the kernel's default for this CPU
    levels: list[Level] = []
    child: list[frozenset[int]] | None = None
    child_numa = False
    for name, spans, info in cand:
        if child is not None and all(spans[c] is child[c] or spans[c] == child[c] for c in range(ncpu)):
            continue  # degenerate: same span as the child
        if all(len(s) == 1 for s in spans):
            continue
        numa = info["numa"]
        far = numa and info.get("dist", 0) > reclaim
        span_w = len(spans[0])
        lvl = Level(
            name=name,
            pct=int(info["pct"]),
            nice_tries=int(info["tries"]),
            numa=numa,
            share_llc=bool(info["llc"]),
            fork=not far,
            wake_affine=not far,
            prefer_sibling=child is not None and not child_numa,
            imb_numa_nr=imb_base * max(1, span_w // imb_span) if numa else imb_base,
        )
        first = {id(sp): min(sp) for sp in {id(sp): sp for sp in spans}.values()}  # one min per distinct span
        keys = np.array([first[id(spans[c])] * (ncpu + 1) + len(spans[c]) for c in range(ncpu)])
        lvl.spans, lvl.span_of = _spans(keys)
        for span in lvl.spans:
            if child is None:
                groups = [np.array([c]) for c in span]
            else:
                seen = list(dict.fromkeys(child[c] for c in span.tolist()))  # child spans in order, once each
                groups = [np.array(sorted(g), dtype=np.int64) for g in seen]
            lvl.groups.append(groups)
            lookup: dict[int, int] = {}
            for gi, g in enumerate(groups):
                for c in g:
                    lookup.setdefault(int(c), gi)
            lvl.group_of.append(lookup)
        levels.append(lvl)
        child = spans
        child_numa = numa
        if span_w == ncpu:
            break
    return levels
