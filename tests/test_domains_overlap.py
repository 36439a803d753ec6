"""Scheduling domains where the SLIT is not hierarchical: each CPU's domains and groups as the kernel builds them.

The reference here is a second, plain reading of kernel/sched/topology.c, written for this test at
the granularity of CPUs (``build_sched_domains``' per-CPU chains, ``build_sched_groups``,
``build_overlap_sched_groups`` with ``find_descended_sibling``), against which
:func:`numasim.policies.domains.build_levels` (which works on node sets and shares what it can) is
compared CPU by CPU on every preset, in block and alternate numbering; and the kernel's own
worked example (the comment above ``build_overlap_sched_groups``: a line of 4 nodes).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from numasim.model.machine import Machine, MachineSpec
from numasim.model.presets import load_preset, preset_names
from numasim.policies.cfs import CFS, CFSOptions
from numasim.policies.domains import build_levels


def _kernel(m: Machine) -> dict[str, dict[int, tuple[frozenset, list[frozenset]]]]:
    """Per level name, per CPU with a domain there that is not degenerate: (span, groups in the CPU's order)."""
    ncpu = m.n_cpus
    cpus_of = lambda mask: frozenset(np.flatnonzero(mask).tolist())  # noqa: E731
    tl = []
    if m.smt:
        tl.append(("SMT", False, [cpus_of(m.cpu_core == m.cpu_core[c]) for c in range(ncpu)]))
    tl.append(("MC", False, [cpus_of(m.cpu_llc == m.cpu_llc[c]) for c in range(ncpu)]))
    tl.append(("PKG", False, [cpus_of(m.cpu_node == m.cpu_node[c]) for c in range(ncpu)]))
    nodes = list(m.cpu_nodes)
    for d in sorted(set(m.distance[np.ix_(nodes, nodes)].ravel().tolist()) - {10}):
        near = [cpus_of(np.isin(m.cpu_node, np.flatnonzero(m.distance[m.cpu_node[c]] <= d))) for c in range(ncpu)]
        tl.append((f"NUMA-{int(d)}", True, near))
    chains = []
    for c in range(ncpu):
        chain = []
        for _, _, spans in tl:
            chain.append(spans[c] | (chain[-1] if chain else frozenset()))
            if len(chain[-1]) == ncpu:
                break
        chains.append(chain)

    def groups(li: int, cpu: int, overlap: bool) -> list[frozenset]:
        span = chains[cpu][li]
        order = sorted(span)
        k = order.index(cpu)
        covered, out = set(), []
        for i in order[k:] + order[:k]:
            if i in covered:
                continue
            if overlap:
                if li >= len(chains[i]):
                    continue
                sib = li
                if not chains[i][li - 1] <= span:
                    while sib > 0 and not chains[i][sib - 1] <= span:
                        sib -= 1
                    while sib > 0 and chains[i][sib - 1] == chains[i][sib]:
                        sib -= 1
                g = chains[i][sib - 1] if sib > 0 else frozenset([i])
            else:
                g = chains[i][li - 1] if li > 0 else frozenset([i])
            out.append(g)
            covered |= g
        return out

    out: dict[str, dict[int, tuple[frozenset, list[frozenset]]]] = {}
    for li, (name, numa, _) in enumerate(tl):
        for c in range(ncpu):
            if li >= len(chains[c]) or len(chains[c][li]) == 1 or (li > 0 and chains[c][li] == chains[c][li - 1]):
                continue
            out.setdefault(name, {})[c] = (chains[c][li], groups(li, c, numa))
    return out


def _model(m: Machine) -> dict[str, dict[int, tuple[frozenset, list[frozenset]]]]:
    out: dict[str, dict[int, tuple[frozenset, list[frozenset]]]] = {}
    for lvl in build_levels(m, CFSOptions().model_dump()):
        for c in range(m.n_cpus):
            si = int(lvl.span_of[c])
            if si < 0:
                continue
            gs = [frozenset(g.tolist()) for g in lvl.groups[si]]
            out.setdefault(lvl.name, {})[c] = (frozenset(lvl.spans[si].tolist()), [gs[g] for g in lvl.order(si, c)])
    return out


def _machines():
    for name in preset_names("machines"):
        data = load_preset("machines", name)
        data.pop("sources", None)
        for numbering in ("block", "alternate"):
            yield pytest.param(name, numbering, id=f"{name}-{numbering}")


@pytest.mark.parametrize("name,numbering", list(_machines()))
def test_every_cpus_domains_and_groups_are_the_kernels(name, numbering):
    data = load_preset("machines", name)
    data.pop("sources", None)
    data["cpu_numbering"] = numbering
    m = Machine.from_spec(MachineSpec(**data))
    assert _model(m) == _kernel(m)


def _line() -> Machine:
    """The kernel's smallest diameter-3 topology: nodes 0 - 1 - 2 - 3 in a line (4 sockets of 2 cores)."""
    data = load_preset("machines", "skylake-8180-4s")
    data.pop("sources", None)
    data.pop("links", None)
    data.update(cores_per_node=2, smt=False, slit=[[10, 20, 30, 40], [20, 10, 20, 30], [30, 20, 10, 20], [40, 30, 20, 10]])
    return Machine.from_spec(MachineSpec(**data))


def _by_node(m: Machine, spans) -> list[list[int]]:
    return [sorted(set(m.cpu_node[sorted(s)].tolist())) for s in spans]


def test_the_kernels_diameter_3_example():
    # kernel/sched/topology.c, above build_overlap_sched_groups: NUMA-1 (distance 20) domains 0-1, 0-2,
    # 1-3, 2-3 with groups {0},{1} / {1},{2},{0} / {2},{3},{1} / {3},{2}; NUMA-2 (distance 30) domains
    # 0-2, 0-3, 0-3, 1-3 with groups {0-1},{1-3} / {0-2},{2-3} / {1-3},{0-1} / {2-3},{0-2}, where the
    # comment calls nodes 0's and 3's "obviously buggered" (they spill out of the domain):
    # find_descended_sibling (585b6d2723dc) builds them from the child of node 2's (node 1's) NUMA-1
    # domain instead, {2} ({1}); NUMA-3: 0-3 for nodes 0 and 3 only, groups {0-2},{1-3} / {1-3},{0-2}.
    m = _line()
    got = _model(m)
    first = {n: int(np.flatnonzero(m.cpu_node == n)[0]) for n in range(4)}
    n1 = {n: (_by_node(m, [got["NUMA-20"][c][0]])[0], _by_node(m, got["NUMA-20"][c][1])) for n, c in first.items()}
    assert n1 == {0: ([0, 1], [[0], [1]]), 1: ([0, 1, 2], [[1], [2], [0]]), 2: ([1, 2, 3], [[2], [3], [1]]),
                  3: ([2, 3], [[3], [2]])}
    n2 = {n: (_by_node(m, [got["NUMA-30"][c][0]])[0], _by_node(m, got["NUMA-30"][c][1])) for n, c in first.items()}
    assert n2 == {0: ([0, 1, 2], [[0, 1], [2]]), 1: ([0, 1, 2, 3], [[0, 1, 2], [2, 3]]),
                  2: ([0, 1, 2, 3], [[1, 2, 3], [0, 1]]), 3: ([1, 2, 3], [[2, 3], [1]])}
    # NUMA-3: nodes 1 and 2 spanned the machine at NUMA-2, so their chains stopped there.
    n3 = {n: (_by_node(m, [v[0]])[0], _by_node(m, v[1])) for n, c in first.items() if (v := got["NUMA-40"].get(c))}
    assert n3 == {0: ([0, 1, 2, 3], [[0, 1, 2], [1, 2, 3]]), 3: ([0, 1, 2, 3], [[1, 2, 3], [0, 1, 2]])}
    assert got == _kernel(m)


def test_kunpeng_nodes_1_and_2_meet_at_distance_25_and_node_1_wakes_affine_there():
    # Kunpeng 920-6426's SLIT: 10 16 32 33 / 16 10 25 32 / 32 25 10 16 / 33 32 16 10 (not hierarchical).
    data = load_preset("machines", "kunpeng920-6426")
    data.pop("sources", None)
    m = Machine.from_spec(MachineSpec(**data))
    lv = next(lv for lv in build_levels(m, CFSOptions().model_dump()) if lv.name == "NUMA-25")
    cpu = {n: int(np.flatnonzero(m.cpu_node == n)[0]) for n in range(4)}
    assert lv.span_of[cpu[0]] == -1 and lv.span_of[cpu[3]] == -1  # their domain here equals their NUMA-16 one
    assert _by_node(m, [lv.spans[lv.span_of[cpu[1]]]]) == [[0, 1, 2]]
    assert _by_node(m, [lv.spans[lv.span_of[cpu[2]]]]) == [[1, 2, 3]]
    # wake_affine: the waker's lowest wake_affine domain holding the previous CPU. A node-2 thread woken
    # from node 1 meets it at NUMA-25 (imbalance_pct 125 there): on an empty machine it stays on node 2
    # (prev idle); with node 2's CPU busy and the waker's idle and alone, wake_affine_weight takes node 1.
    pol = CFS(CFSOptions(), m, np.random.default_rng(0))
    nr = np.zeros(m.n_cpus, dtype=np.int64)
    assert pol.wake(0, cpu[1], _View(nr, {0: cpu[2]})) == cpu[2]
    nr[np.flatnonzero(m.cpu_node == 2)] = 1
    assert int(m.cpu_node[pol.wake(0, cpu[1], _View(nr, {0: cpu[2]}))]) == 1
    # From node 0 (distance 32 > node_reclaim_distance 30: no wake_affine level holds node 2) it stays
    # in node 2's LLC, on an idle CPU there if any (none: it stays on its own).
    assert int(m.cpu_node[pol.wake(0, cpu[0], _View(nr, {0: cpu[2]}))]) == 2


class _View:
    def __init__(self, nr, where):
        self.nr_running = nr
        self.thread_cpu = where

    def affinity(self, tid):
        return None


def test_a_fork_that_moves_goes_on_from_the_new_cpus_highest_domain_smaller_than_the_one_it_chose_in():
    # sched_balance_find_dst_cpu: after moving to new_cpu it takes new_cpu's highest domain whose weight is
    # below the one it chose in. On the line of 4 nodes a fork on node 1 (nodes 0-2 busy, node 3 idle)
    # chooses node 3's CPU in its all-node NUMA-30 domain; node 3's own NUMA-30 domain (nodes 1-3) is
    # smaller, so the walk looks there next, before node 3's NUMA-20 domain (not one level down).
    m = _line()
    pol = CFS(CFSOptions(), m, np.random.default_rng(0))
    seen: list[tuple[str, list[int]]] = []
    find = pol._find_dst_group

    def spy(li, si, cpu, *args, **kw):
        seen.append((pol.levels[li].name, _by_node(m, [pol.levels[li].spans[si]])[0]))
        return find(li, si, cpu, *args, **kw)

    pol._find_dst_group = spy
    nr = np.where(m.cpu_node == 3, 0, 2).astype(np.int64)
    start = int(np.flatnonzero(m.cpu_node == 1)[0])
    dst = pol.find_dst_cpu(start, nr, None)
    assert int(m.cpu_node[dst]) == 3
    assert seen[:3] == [("NUMA-30", [0, 1, 2, 3]), ("NUMA-30", [1, 2, 3]), ("NUMA-20", [2, 3])]


@st.composite
def _slits(draw):
    n = draw(st.integers(2, 6))
    d = [[10] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            d[i][j] = d[j][i] = draw(st.sampled_from([12, 16, 20, 21, 25, 30, 31, 32, 40]))
    smt = draw(st.booleans())
    numbering = draw(st.sampled_from(["block", "alternate", "list"]))
    if numbering == "list":  # each CPU's node, in any order
        numbering = draw(st.permutations([k for k in range(n) for _ in range(2 * (2 if smt else 1))]))
    return n, d, smt, numbering


@settings(max_examples=150, deadline=None)
@given(_slits())
@example((6, [[10, 12, 20, 12, 20, 12], [12, 10, 16, 12, 16, 12], [20, 16, 10, 16, 12, 12], [12, 12, 16, 10, 16, 12],
              [20, 16, 12, 16, 10, 12], [12, 12, 12, 12, 12, 10]], False, "block"))  # nodes 2 and 4 list alike
def test_random_slits_give_the_kernels_domains_and_groups(case):
    # Any symmetric SLIT, hierarchical or not, any CPU numbering: every CPU's domains and ordered groups
    # are the reference's. (The example: CPUs of nodes 2 and 4 share a domain and their own group at
    # distance 16 but meet the other groups in different orders.)
    n, slit, smt, numbering = case
    data = load_preset("machines", "skylake-8180-4s")
    for k in ("sources", "links", "latency_ns", "remote_latency_ns"):
        data.pop(k, None)
    data.update(sockets=n, cores_per_node=2, smt=smt, slit=slit, cpu_numbering=numbering)
    m = Machine.from_spec(MachineSpec(**data))
    assert _model(m) == _kernel(m)


class _Queues:
    """What a balancing pass reads of the runtime: queues, run counts, each task's CPUs, the time."""

    def __init__(self, queues, allowed, now):
        self.queues, self.allowed_cpus, self.now = queues, allowed, now
        self.nr_running = np.array([len(q) for q in queues], dtype=np.int64)

    def runqueue(self, cpu):
        return list(self.queues[cpu])

    def affinity(self, t):
        return self.allowed_cpus.get(t)

    def allowed(self, t, cpu):
        a = self.allowed_cpus.get(t)
        return a is None or cpu in a


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_overlapping_groups_never_move_a_task_to_its_own_cpu_or_from_the_balancing_cpu(data):
    # On the line of 4 nodes the NUMA-40 domain's groups overlap (nodes 0-2 and 1-3), so the busiest group can
    # hold the balancing CPU and a task's own CPU can be in the local group. Every task move the periodic
    # balancer makes goes to another CPU the task may use (Yicong Yang's fix, v6.5: never to the task's current CPU).
    m = _line()
    pol = CFS(CFSOptions(), m, np.random.default_rng(data.draw(st.integers(0, 9))))
    counts = data.draw(st.lists(st.integers(0, 3), min_size=m.n_cpus, max_size=m.n_cpus))
    queues, allowed, t = [], {}, 0
    for cpu, k in enumerate(counts):
        queues.append(list(range(t, t + k)))
        for tid in queues[-1]:
            if data.draw(st.booleans()):  # pinned to its CPU and one other
                allowed[tid] = frozenset({cpu, data.draw(st.integers(0, m.n_cpus - 1))})
        t += k
    for e in pol.entities:
        e.last = 0
    moves = []
    do_move = pol._do_move

    def record(tid, src, dst, p):
        moves.append((tid, src, dst))
        do_move(tid, src, dst, p)

    pol._do_move = record
    pol._periodic(_Queues(queues, allowed, 10_000 * pol.jiffy))
    for tid, src, dst in moves:
        assert src != dst
        assert tid not in allowed or dst in allowed[tid]


def test_kunpeng_node_1s_distance_25_domain_is_balanced_only_when_its_group_balance_cpu_is_on_node_1():
    # Node 1's NUMA-25 domain (nodes 0-2) has own group nodes {0,1}; its balance mask (group_balance_mask:
    # the group's CPUs whose distance-16 domain is that group) holds nodes 0 and 1, and node 0's CPUs have no
    # NUMA-25 domain. should_we_balance picks the mask's first idle CPU, else its first: the domain is
    # balanced only when that CPU is node 1's (node 0 busy, node 1 with an idle CPU).
    data = load_preset("machines", "kunpeng920-6426")
    data.pop("sources", None)
    m = Machine.from_spec(MachineSpec(**data))
    pol = CFS(CFSOptions(), m, np.random.default_rng(0))
    e = next(e for e in pol.entities if e.members is not None and int(m.cpu_node[min(e.members)]) == 1)
    assert pol.levels[e.level].name == "NUMA-25"
    assert {int(m.cpu_node[c]) for c in e.cpus} == {0, 1}
    calls = []
    pol._balance = lambda e, dst, busy, p, newidle=False: calls.append(dst) or (False, 0)
    for node0_busy, want in ((False, 0), (True, 1)):
        nr = [1] * m.n_cpus
        if not node0_busy:
            nr[int(np.flatnonzero(m.cpu_node == 0)[3])] = 0
        nr[int(np.flatnonzero(m.cpu_node == 1)[5])] = 0
        e.last = -10**12
        calls.clear()
        pol._visit(e, nr, None, 0)
        assert len(calls) == want and all(int(m.cpu_node[c]) == 1 for c in calls)


def test_numa_balancing_takes_imb_numa_nr_from_each_source_nodes_lowest_numa_domain():
    """task_numa_migrate reads ``imb_numa_nr`` from ``sd_numa`` of the source CPU: its lowest NUMA domain
    after degenerate ones go. Nodes 0 and 1 are 12 apart, node 2 is 20 from both: node 2's distance-12
    domain is itself (degenerate), so its lowest NUMA domain is the machine, whose ``imb_numa_nr`` is the
    node's 16 >> 3 = 2 times 48 / 16 CPUs = 6, where nodes 0 and 1 keep 2."""
    data = load_preset("machines", "skylake-8180-4s")
    data.pop("sources", None)
    data.pop("links", None)
    data.update(sockets=3, cores_per_node=16, smt=False, slit=[[10, 12, 20], [12, 10, 20], [20, 20, 10]])
    m = Machine.from_spec(MachineSpec(**data))
    pol = CFS(CFSOptions(numa_balancing=True, numa_balancing_kernel="6.1"), m, np.random.default_rng(1))
    assert pol.numab is not None
    assert pol.numab.imb_numa_nr == [2, 2, 6]
    # A move to an idle CPU of a node with spare capacity: 5 tasks on the source, 4 on the destination;
    # after it 5 against 4, an imbalance of 1 that a destination running 5 tolerates only under 6.
    assert pol.numab._move_allowed(2, 0, 5, 4, 16, 16)
    assert not pol.numab._move_allowed(0, 2, 5, 4, 16, 16)
