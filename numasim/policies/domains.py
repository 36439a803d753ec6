"""Linux scheduling domains built from a :class:`~numasim.model.machine.Machine`.

Follows kernel/sched/topology.c (``build_sched_domains``):

* Each CPU gets a chain of domains, one per topology level: SMT -> MC (the LLC) -> PKG -> one
  NUMA level per distinct SLIT distance, each span holding its child's; a CPU's chain stops at
  the first level that spans the machine, so chains differ in length where the SLIT is not
  hierarchical.
* A CPU's domain whose span equals its child's, or holds one CPU, is degenerate and dropped
  for that CPU (``cpu_attach_domain``); a level no CPU keeps is dropped.
* Groups (``sched_group``) are built on the chains before the degenerate domains go. Below the
  NUMA levels, the child domains' spans met by ``for_each_cpu_wrap(i, span, cpu)``
  (``build_sched_groups``; single CPUs at the lowest level). At NUMA levels,
  ``build_overlap_sched_groups``: for each CPU met and not yet covered, its own child
  domain's span, or where that spills out of the domain, the child of the sibling's proper
  descendant (``find_descended_sibling``). Where the SLIT is hierarchical the two agree;
  where it is not (Kunpeng 920's 4 nodes, a twisted 8-socket cube), groups overlap and two
  CPUs with one span can have different groups.
* ``imb_numa_nr``, the number of tasks of NUMA imbalance the balancer tolerates, per domain
  (v5.18+; a one-LLC node allowed a quarter of itself in v5.18-v5.19, an eighth from v6.0).

A level's domains are the distinct ones among its CPUs' (same span, groups and flags), so CPUs
that share a span share one domain wherever domains do not overlap.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from ..model.machine import Machine

__all__ = ["Level", "build_levels"]

Span = frozenset[int]


@dataclass
class Level:
    """One domain level: its domains (by index), each CPU's domain, and each domain's groups."""

    name: str
    pct: int
    nice_tries: int
    numa: bool
    dist: int  # a NUMA level's SLIT distance: its domains hold the nodes this near (0: not a NUMA level)
    share_llc: bool
    fork: bool  # SD_BALANCE_FORK / SD_BALANCE_EXEC
    wake_affine: bool
    spans: list[NDArray[np.int64]] = field(default_factory=list)  # per domain: its CPUs, ascending
    span_of: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # per CPU: its domain, -1 none
    groups: list[list[NDArray[np.int64]]] = field(default_factory=list)  # per domain, as its first CPU links them
    group_of: list[dict[int, int]] = field(default_factory=list)  # per domain: each CPU whose domain it is -> its own group
    prefer_sibling: list[bool] = field(default_factory=list)  # per domain: the child domain prefers siblings
    imb_numa_nr: list[int] = field(default_factory=list)  # per domain
    # Each CPU's order of its domain's groups (Level.order): a domain's CPUs in ascending order fall in
    # runs that list the groups alike: per domain, the first CPU of each run and each run's group (below
    # the NUMA levels; at NUMA levels each run is a node's CPUs and its order is built at once).
    starts: list[list[int]] = field(default_factory=list)
    runs: list[list[int]] = field(default_factory=list)
    orders: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)  # (domain, run) -> order
    periods: dict[int, int] = field(default_factory=dict)  # NUMA domain -> the period of its node runs
    # (domain, own group) -> the group's balance mask where groups may overlap (group_balance_mask: the
    # CPUs of the group whose child domain at this level is the group, whether or not they keep a domain here)
    masks: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)

    def order(self, si: int, cpu: int) -> tuple[int, ...]:
        """The order in which ``cpu`` lists its domain ``si``'s groups (``sd->groups`` and on): the
        groups as ``for_each_cpu_wrap`` meets them from the CPU, its own first. The balancer and
        ``find_idlest_group`` keep the first of equal groups, so this order breaks their ties."""
        r = bisect_right(self.starts[si], cpu) - 1
        if si in self.periods:
            r %= self.periods[si]
        hit = self.orders.get((si, r))
        if hit is None:  # below the NUMA levels: each CPU of the span is in one group
            runs = self.runs[si]
            if len(runs) == len(self.groups[si]) and runs[r] == r:  # each group one run, in order
                return _ring(len(runs), r)
            hit = self.orders[(si, r)] = tuple(dict.fromkeys(runs[r:] + runs[:r]))
        return hit


@lru_cache(maxsize=4096)
def _ring(n: int, first: int) -> tuple[int, ...]:
    return tuple(range(first, n)) + tuple(range(first))


class _Tree:
    """Each CPU's chain of domain spans, one per topology level, before degenerate domains go.

    Levels: SMT, MC (the LLC), PKG, then one NUMA level per distance. Below PKG a CPU's spans are
    its core's and its LLC's; from PKG on they are unions of nodes, so they are kept as node sets
    (``nodes``: per node with CPUs, its chain from PKG up), shared by the node's CPUs."""

    def __init__(self, machine: Machine):
        m = machine
        self.ncpu = m.n_cpus
        self.levels: list[tuple[str, dict]] = []
        low: list[list[Span]] = []  # per level below PKG: each CPU's span

        def spans_by(key_of_cpu) -> list[Span]:
            """Each CPU's span: the CPUs with its key. CPUs with one key share one set (memory O(CPUs))."""
            shared: dict[int, Span] = {}
            for k in np.unique(key_of_cpu).tolist():
                shared[k] = frozenset(np.flatnonzero(key_of_cpu == k).tolist())
            return [shared[k] for k in np.asarray(key_of_cpu).tolist()]

        if m.smt:
            self.levels.append(("SMT", dict(numa=False, llc=True)))
            low.append(spans_by(m.cpu_core))
        # MC: the CPUs sharing a last-level cache (cpu_coregroup_mask), never wider than a node;
        # PKG: cpu_cpu_mask, which is the node (include/linux/topology.h), so no level without
        # SD_NUMA spans two nodes, whether a socket holds one node or several (SNC, NPS2/4).
        self.levels.append(("MC", dict(numa=False, llc=True)))
        low.append(spans_by(m.cpu_llc))
        self.levels.append(("PKG", dict(numa=False, llc=False)))
        self.pkg = len(low)
        # NUMA levels from the distances between nodes with CPUs (sched_init_numa skips CPU-less
        # nodes); node n's domain holds the nodes at most d from it, by n's row (sd_numa_mask).
        with_cpus = list(m.cpu_nodes)
        dists = sorted(set(int(x) for x in np.unique(m.distance[np.ix_(with_cpus, with_cpus)])) - {10})
        self.levels += [(f"NUMA-{d}", dict(numa=True, llc=False, dist=d)) for d in dists]
        self.low = low
        self.cpu_node = m.cpu_node.tolist()
        everyone = frozenset(with_cpus)
        self.nodes: dict[int, list[frozenset[int]]] = {}
        for n in with_cpus:
            chain = [frozenset((n,))]
            for d in dists:
                if len(chain[-1]) == len(everyone):
                    break  # build_sched_domains: this chain stops at the machine
                near = frozenset(k for k in with_cpus if m.distance[n, k] <= d)
                chain.append(near | chain[-1])  # build_sched_domain: a child never spans out of its parent
            self.nodes[n] = chain
        self._cpus: dict[frozenset[int], Span] = {}
        self._cpus_of_node = {n: frozenset(np.flatnonzero(m.cpu_node == n).tolist()) for n in with_cpus}
        # Below PKG: a span never wider than the one above (the same fix), and chains that stop early
        # (one node, or one LLC, holding the machine).
        self.low_end = [len(self.levels)] * self.ncpu  # the first level past each CPU's chain, if that is below PKG
        fixed: dict[tuple[int, ...], list[Span]] = {}
        for cpu in range(self.ncpu):
            key = tuple(id(low[li][cpu]) for li in range(len(low)))
            hit = fixed.get(key)
            if hit is None:
                hit = []
                for li in range(len(low)):
                    s = low[li][cpu]
                    if hit and not hit[-1] <= s:
                        s = s | hit[-1]
                    hit.append(s)
                fixed[key] = hit
            for li, s in enumerate(hit):
                low[li][cpu] = s
                if len(s) == self.ncpu:
                    self.low_end[cpu] = li + 1
                    break

    def cpus(self, nodes: frozenset[int]) -> Span:
        """The CPUs of a set of nodes (one shared set per node set)."""
        hit = self._cpus.get(nodes)
        if hit is None:
            hit = self._cpus[nodes] = frozenset().union(*(self._cpus_of_node[n] for n in nodes))
        return hit

    def span(self, cpu: int, li: int) -> Span | None:
        """``cpu``'s span at level ``li``, None where its chain has stopped below."""
        if li < self.pkg:
            return self.low[li][cpu] if li < self.low_end[cpu] else None
        if self.low_end[cpu] <= self.pkg:
            return None
        chain = self.nodes[self.cpu_node[cpu]]
        return self.cpus(chain[li - self.pkg]) if li - self.pkg < len(chain) else None

    def node_span(self, node: int, li: int) -> frozenset[int] | None:
        """Node ``node``'s span at NUMA or PKG level ``li`` as nodes, None where its chain has stopped."""
        chain = self.nodes[node]
        return chain[li - self.pkg] if li - self.pkg < len(chain) else None


def _partition_groups(tree: _Tree, li: int, span: Span) -> list[Span]:
    """``build_sched_groups`` from the span's first CPU: the child domains' spans (single CPUs at the
    lowest level) in the order ``for_each_cpu_wrap`` meets them."""
    out: dict[Span, None] = {}
    for i in sorted(span):
        if li == 0:
            out[frozenset((i,))] = None
        else:
            child = tree.span(i, li - 1)
            assert child is not None
            out[child] = None
    return list(out)


def _runs(cpus: list[int], key_of: list[int] | dict[int, int]) -> tuple[list[int], list[int]]:
    """The runs of ``cpus`` (ascending) that share a key: each run's key and its first CPU."""
    at = [k for k in range(len(cpus)) if k == 0 or key_of[cpus[k]] != key_of[cpus[k - 1]]]
    return [key_of[cpus[k]] for k in at], [cpus[k] for k in at]


def _period(seq: list[int]) -> int:
    """The smallest p dividing len(seq) such that seq repeats every p items (its runs from position r and
    from r + p then meet the same nodes in the same order)."""
    n = len(seq)
    fail = [0] * n  # prefix function
    for i in range(1, n):
        k = fail[i - 1]
        while k and seq[i] != seq[k]:
            k = fail[k - 1]
        fail[i] = k + (seq[i] == seq[k])
    p = n - fail[-1]
    return p if n % p == 0 else n


def _overlap_groups(tree: _Tree, li: int, runs: list[int], start: int) -> list[frozenset[int]]:
    """``build_overlap_sched_groups`` at NUMA level ``li``, as node sets: ``runs`` are the nodes in the
    order the domain's CPUs come in ascending CPU order (runs of one node once each), ``start`` the run
    of the CPU that builds them. For each node met and not yet covered whose chain reaches this level:
    its child domain's span, or where that spills out of the domain, the child of its proper descendant
    (``find_descended_sibling``: the first domain down whose child fits; that one's span spills out,
    so it is never equal to its child, and the function's second walk, past degenerate domains,
    has nothing to skip here)."""
    span = tree.node_span(runs[start], li)
    assert span is not None
    covered: set[int] = set()
    seen: set[int] = set()
    out: list[frozenset[int]] = []
    k = len(runs)
    for i in range(start, start + k):
        if len(seen) == len(span):
            break  # every node met: the rest of the walk meets only covered ones
        n = runs[i % k]
        seen.add(n)
        if n in covered or tree.node_span(n, li) is None:
            continue  # covered, or n's chain stopped below: its domain here is empty
        sib = li
        while not tree.node_span(n, sib - 1) <= span:  # type: ignore[operator]
            sib -= 1
        g = tree.node_span(n, sib - 1)
        assert g is not None
        out.append(g)
        covered |= g
    return out


class _Key(NamedTuple):
    """One CPU's domain at a level. CPUs whose first four fields agree share one domain."""

    span: Span
    groups: frozenset[Span]
    prefer: bool  # prefer_sibling
    imb: int  # imb_numa_nr
    gkey: tuple  # the key of its groups in link order (_Keys.built)
    overlap: bool  # built by build_overlap_sched_groups' walk (its groups may overlap)


@dataclass
class _Keys:
    """One level's per-CPU pass (:func:`_cpu_keys`): what :func:`_assemble` makes domains of."""

    keys: list[_Key | None]  # per CPU, None: no domain
    built: dict[tuple, tuple[list[Span], frozenset[Span]]]  # group key -> the groups in link order, and as a set
    runs_of: dict[Span, tuple[list[int], list[int], int]]  # an overlapping span: its node runs, their starts, period
    first_of: dict[int, int]  # a span's first CPU, by identity


def _imb_numa_nr(tree: _Tree, era_518: bool):
    """``imb_numa_nr`` per CPU on its chain before degenerate domains go: at PKG (the first level above the
    LLC) its LLC count, or for one LLC 1/8 of it (026b98a93bbd, v6.0; a quarter in v5.18-v5.19, e496132ebedd);
    above, that times the domain's weight over the CPU's first NUMA domain's. Returns cpu -> (imb, that weight)."""
    i_mc, i_pkg = tree.pkg - 1, tree.pkg
    memo: dict[tuple[int, int], tuple[int, int]] = {}

    def imb_of(cpu: int) -> tuple[int, int]:
        key = (tree.cpu_node[cpu], len(tree.low[i_mc][cpu]))
        hit = memo.get(key)
        if hit is None:
            pkg_w = len(tree.cpus(frozenset((key[0],))))
            nr_llcs = pkg_w // key[1]
            if era_518:
                imb = (pkg_w >> 2) if nr_llcs == 1 else nr_llcs  # no floor of 1 before v6.0
            else:
                imb = max(1, (pkg_w >> 3) if nr_llcs == 1 else nr_llcs)
            first = tree.node_span(key[0], i_pkg + 1) if len(tree.levels) > i_pkg + 1 else None
            hit = memo[key] = (imb, len(tree.cpus(first)) if first is not None else pkg_w)
        return hit
    return imb_of


def _cpu_keys(tree: _Tree, li: int, numa: bool, imb_of, child_numa: list[bool | None]) -> _Keys | None:
    """Each CPU's domain at level ``li`` (None: none, or a degenerate one), its groups and flags; None when
    no CPU keeps a domain here."""
    built: dict[tuple, tuple[list[Span], frozenset[Span]]] = {}
    same: dict[tuple[int, int], bool] = {}  # spans compared, by identity (they are shared objects)
    first_of: dict[int, int] = {}
    runs_of: dict[Span, tuple[list[int], list[int], int]] = {}
    tree_like: dict[int, bool] = {}  # a NUMA span (by identity) whose domains form a tree here (below)
    keys: list[_Key | None] = []
    for cpu in range(tree.ncpu):
        span = tree.span(cpu, li)
        below = tree.span(cpu, li - 1) if li > 0 else None
        if span is None or len(span) == 1:
            keys.append(None)
            continue
        pair = (id(span), id(below))
        if pair not in same:
            same[pair] = span == below
        if same[pair]:
            keys.append(None)
            continue
        if numa and id(span) not in tree_like:
            # Every node of the span has it as its domain, and their child domains fit in it without
            # overlapping: the groups are the child domains, as below the NUMA levels, whichever CPU
            # builds them (build_overlap_sched_groups then builds what build_sched_groups would).
            nodes = tree.node_span(tree.cpu_node[cpu], li)
            kids = {tree.node_span(n, li - 1) for n in nodes}  # type: ignore[union-attr]
            tree_like[id(span)] = (all(tree.node_span(n, li) == nodes for n in nodes)  # type: ignore[union-attr]
                                   and all(k <= nodes for k in kids) and sum(map(len, kids)) == len(nodes))  # type: ignore[arg-type,operator]
        if numa and not tree_like[id(span)]:
            hit = runs_of.get(span)
            if hit is None:
                runs, starts = _runs(sorted(span), tree.cpu_node)
                hit = runs_of[span] = (runs, starts, _period(runs))
            runs, starts, period = hit
            run = bisect_right(starts, cpu) - 1
            gkey = (span, run % period)  # runs a whole number of periods apart walk alike
            if gkey not in built:
                groups = [tree.cpus(g) for g in _overlap_groups(tree, li, runs, run % period)]
                built[gkey] = (groups, frozenset(groups))
        else:
            gkey = (span, 0)
            if gkey not in built:
                groups = _partition_groups(tree, li, span)
                built[gkey] = (groups, frozenset(groups))
        imb, imb_span = imb_of(cpu)
        nr = imb * max(1, len(span) // imb_span) if numa else imb
        prefer = child_numa[cpu] is False
        keys.append(_Key(span, built[gkey][1], prefer, nr, gkey, numa and not tree_like[id(span)]))
        if id(span) not in first_of:
            first_of[id(span)] = min(span)
    if all(k is None for k in keys):
        return None
    return _Keys(keys, built, runs_of, first_of)


def _assemble(tree: _Tree, li: int, lvl: Level, k: _Keys) -> None:
    """``lvl``'s domains from its CPUs' keys: the distinct ones by their first CPU (then size), each with the
    groups its first CPU links; each CPU's domain and own group; each CPU's order of the groups; balance masks."""
    keys, built = k.keys, k.built
    index: dict[tuple, int] = {}
    firsts = sorted(((k.first_of[id(key.span)], len(key.span), cpu) for cpu, key in enumerate(keys) if key is not None))
    at_of: list[dict[Span, int]] = []  # per domain: group -> its index
    overlap: list[bool] = []  # per domain: built by build_overlap_sched_groups' walk (its groups may overlap)
    span_of = np.full(len(keys), -1, dtype=np.int64)
    for _, _, cpu in firsts:
        key = keys[cpu]
        assert key is not None
        dkey = key[:4]  # span, groups, prefer_sibling, imb_numa_nr: one domain
        si = index.get(dkey)
        if si is None:
            si = index[dkey] = len(lvl.spans)
            lvl.spans.append(np.array(sorted(key.span), dtype=np.int64))
            lvl.groups.append([np.array(sorted(g), dtype=np.int64) for g in built[key.gkey][0]])
            at_of.append({g: gi for gi, g in enumerate(built[key.gkey][0])})
            lvl.group_of.append({})
            lvl.prefer_sibling.append(key.prefer)
            lvl.imb_numa_nr.append(key.imb)
            overlap.append(key.overlap)
        span_of[cpu] = si
        if key.overlap:  # its own group: its child domain's span
            lvl.group_of[si][cpu] = at_of[si][tree.span(cpu, li - 1)]  # type: ignore[index]
    lvl.span_of = span_of
    for si, own_of in enumerate(lvl.group_of):
        if overlap[si]:  # each node run's order, as a CPU of the run links the groups
            span = keys[next(iter(own_of))].span  # type: ignore[union-attr]
            lvl.starts.append(k.runs_of[span][1])
            lvl.runs.append([])
            lvl.periods[si] = k.runs_of[span][2]
            for cpu in own_of:
                gkey = keys[cpu].gkey  # type: ignore[union-attr]
                if (si, gkey[1]) not in lvl.orders:
                    lvl.orders[(si, gkey[1])] = tuple(at_of[si][g] for g in built[gkey][0])
            for gi in set(own_of.values()):
                g = lvl.groups[si][gi].tolist()
                # by node: from PKG up a CPU's chain is its node's
                gnodes = {tree.cpu_node[c] for c in g}
                ok = {n for n in gnodes if tree.node_span(n, li) is not None and tree.node_span(n, li - 1) == gnodes}
                lvl.masks[(si, gi)] = tuple(c for c in g if tree.cpu_node[c] in ok)
        else:  # the groups do not overlap: each CPU's own group is the one holding it
            for gi, g in enumerate(lvl.groups[si]):
                for c in g.tolist():
                    own_of[c] = gi
            runs, starts = _runs(lvl.spans[si].tolist(), own_of)
            lvl.starts.append(starts)
            lvl.runs.append(runs)


def build_levels(machine: Machine, opts: dict) -> list[Level]:
    """Scheduling-domain levels of ``machine`` under CFS options ``opts``: per level, each CPU's domain
    (:func:`_cpu_keys`), then the level's domains from them (:func:`_assemble`)."""
    tree = _Tree(machine)
    imb_of = _imb_numa_nr(tree, opts.get("numa_imbalance_kernel") == "5.18")
    reclaim = opts.get("node_reclaim_distance")
    if reclaim is None:
        reclaim = machine.spec.node_reclaim_distance  # the kernel's default for this CPU
    pcts = {"SMT": (opts["imbalance_pct_smt"], 0), "MC": (opts["imbalance_pct_mc"], opts["cache_nice_tries_mc"]),
            "PKG": (opts["imbalance_pct_mc"], 1)}
    levels: list[Level] = []
    child_numa: list[bool | None] = [None] * machine.n_cpus  # whether each CPU's kept domain below is NUMA
    for li, (name, info) in enumerate(tree.levels):
        numa = info["numa"]
        far = numa and info.get("dist", 0) > reclaim
        pct, tries = pcts.get(name, (opts["imbalance_pct_numa"], opts["cache_nice_tries_numa"]))
        lvl = Level(name=name, pct=int(pct), nice_tries=int(tries), numa=numa, dist=int(info.get("dist", 0)),
                    share_llc=bool(info["llc"]), fork=not far, wake_affine=not far)
        keys = _cpu_keys(tree, li, numa, imb_of, child_numa)
        if keys is None:
            continue
        _assemble(tree, li, lvl, keys)
        levels.append(lvl)
        for cpu in np.flatnonzero(lvl.span_of >= 0).tolist():
            child_numa[cpu] = numa
    return levels
