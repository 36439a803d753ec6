"""Unit tests of the policies' mechanisms, against what the kernel / ESXi do."""

import numpy as np
import pytest

import numasim
from numasim.policies.registry import available_policies, get_policy
from numasim.policies.cfs import CFS, CFSOptions
from numasim.policies.domains import build_levels
from numasim.policies.numactl import NodePacker
from numasim.model.presets import machine_preset

from .conftest import run_small, small_scenario

PACIFIC = machine_preset("pacific-broadwell")
SKYLAKE = machine_preset("skylake-8180")


def test_registry_lists_builtins_and_rejects_unknown():
    assert {"cfs", "esxi", "numactl", "taskset"} <= set(available_policies())
    with pytest.raises(numasim.ScenarioError, match="known policies: .*cfs"):
        get_policy("nope")


def test_pacific_domains_follow_topology_c():
    levels = build_levels(PACIFIC, CFSOptions().model_dump())
    assert [lv.name for lv in levels] == ["MC", "NUMA-21"]
    mc, numa = levels
    assert len(mc.spans[0]) == 22 and mc.share_llc and not mc.numa
    assert len(numa.spans[0]) == 44 and numa.numa and numa.fork and numa.wake_affine
    # build_sched_domains: one LLC per socket -> PKG imb = 22 >> 3 = 2, carried to the NUMA level.
    assert numa.imb_numa_nr == [2]
    assert len(numa.groups[0]) == 2 and sorted(numa.groups[0][0]) == sorted(PACIFIC.node_cpus[0])


def test_smt_adds_a_level_and_far_numa_loses_fork_balancing():
    levels = build_levels(SKYLAKE, CFSOptions().model_dump())
    assert [lv.name for lv in levels][:2] == ["SMT", "MC"]
    far = build_levels(SKYLAKE, CFSOptions(node_reclaim_distance=10).model_dump())
    assert not far[-1].fork and not far[-1].wake_affine


def _view(nr):
    class V:
        nr_running = np.asarray(nr)
    return V()


def test_fork_spreads_over_idle_nodes():
    cfs = CFS(CFSOptions(), PACIFIC, np.random.default_rng(0))
    nr = np.zeros(PACIFIC.n_cpus, dtype=int)
    nodes = []
    parent = 0
    for _ in range(8):
        cpu = cfs.find_dst_cpu(parent, nr, None)
        nr[cpu] += 1
        nodes.append(int(PACIFIC.cpu_node[cpu]))
    # Each new thread takes an idle CPU, and the nodes stay within the allowed imbalance.
    assert nr.max() == 1
    assert abs(nodes.count(0) - nodes.count(1)) <= 2


def test_fork_stays_local_when_loaded_within_imbalance_pct():
    cfs = CFS(CFSOptions(), PACIFIC, np.random.default_rng(0))
    nr = np.full(PACIFIC.n_cpus, 2)
    nr[PACIFIC.node_cpus[0][0]] = 3  # node 0 slightly busier: 45 vs 44 tasks
    cpu = cfs.find_dst_cpu(int(PACIFIC.node_cpus[0][1]), nr, None)
    assert PACIFIC.cpu_node[cpu] == 0


class _PinnedView:
    """A SimView with one thread per CPU, except the given extra threads; ``pins`` maps tid -> cpus."""

    def __init__(self, machine, extra: dict[int, int], pins: dict[int, set[int]]):
        cpus = list(range(machine.n_cpus)) + [c for c, k in extra.items() for _ in range(k)]
        self.thread_cpu = np.array(cpus)
        self.thread_active = np.ones(len(cpus), dtype=bool)
        self.nr_running = np.bincount(self.thread_cpu, minlength=machine.n_cpus)
        # Every thread is pinned to its own CPU unless listed in pins.
        self._aff = {t: frozenset(pins.get(t, {c})) for t, c in enumerate(cpus)}

    def affinity(self, tid):
        return self._aff[tid]

    def allowed(self, tid, cpu):
        return cpu in self._aff[tid]

    def runqueue(self, cpu):
        return [int(t) for t in np.flatnonzero(self.thread_cpu == cpu)]

    def pullable(self, cpu):
        return [c for c in range(len(self.nr_running))
                if self.nr_running[c] >= 2 and any(self.allowed(t, cpu) for t in self.runqueue(c))]


def test_newidle_pull_skips_a_busiest_cpu_whose_tasks_are_all_pinned():
    # sched_balance_rq: LBF_ALL_PINNED masks the busiest CPU out and redoes the search.
    node0 = [int(c) for c in PACIFIC.node_cpus[0]]
    idle, pinned, movable = node0[0], node0[1], node0[2]
    n = PACIFIC.n_cpus
    # The idle CPU's own thread is asleep; 3 more threads pinned to `pinned`; 1 free on `movable`.
    view = _PinnedView(PACIFIC, {pinned: 3, movable: 1}, {n + 3: set(range(n))})
    view.thread_active[idle] = False
    view.nr_running[idle] = 0
    cfs = CFS(CFSOptions(), PACIFIC, np.random.default_rng(0))
    cfs._started = True
    moves = cfs.idle(idle, view)
    assert [(d.tid, d.cpu) for d in moves] == [(n + 3, idle)]


def test_all_pinned_redo_masks_busy_pinned_cpus_but_never_an_idle_one():
    # After LBF_ALL_PINNED the kernel drops the CPUs it tried from env->cpus; it never tries an
    # idle CPU (never the busiest), so an idle CPU keeps counting as idle in its group's statistics.
    node0 = [int(c) for c in PACIFIC.node_cpus[0]]
    idle, pinned, movable, idle_far = node0[0], node0[1], node0[2], node0[3]
    n = PACIFIC.n_cpus
    # 3 extra threads pinned to `pinned`, 1 extra free thread on `movable`, and `idle_far` idle.
    view = _PinnedView(PACIFIC, {pinned: 3, movable: 1}, {n + 3: set(range(n))})
    for c in (idle, idle_far):
        view.thread_active[c] = False
        view.nr_running[c] = 0
    view.runqueue = lambda cpu: [int(t) for t in np.flatnonzero((view.thread_cpu == cpu) & view.thread_active)]
    cfs = CFS(CFSOptions(), PACIFIC, np.random.default_rng(0))
    cfs._started = True
    masks = []
    once = cfs._balance_once

    def record(e, dst, busy, p, newidle, masked):
        masks.append(set(masked))
        return once(e, dst, busy, p, newidle, masked)

    cfs._balance_once = record
    moves = cfs.idle(idle, view)
    redo = [m for m in masks if m]
    assert redo, "the search met an all-pinned CPU and searched again"
    assert pinned in redo[0] and idle_far not in redo[0] and movable not in redo[0]
    assert [(d.tid, d.cpu) for d in moves] == [(n + 3, idle)]


def test_cfs_slices_scale_with_cpus():
    cfs = CFS(CFSOptions(), PACIFIC, np.random.default_rng(0))
    # 6 ms x (1 + ilog2(8)) = 24 ms shared by 2 tasks; min granularity 3 ms beyond 8 tasks.
    assert cfs.slice_ns(2) == 12_000_000
    assert cfs.slice_ns(16) == 3_000_000


def test_numactl_auto_packing_alternates_nodes():
    packer = NodePacker(PACIFIC)
    chosen = [packer.choose(8, 42 * 10**9) for _ in range(10)]
    assert [c[0] for c in chosen] == [0, 1] * 5


def test_numactl_auto_packing_takes_two_nodes_for_a_wide_pod():
    packer = NodePacker(PACIFIC)
    assert packer.choose(30, 10**9) == (0, 1)


def test_taskset_cpulists_resolve_through_numbering():
    data = small_scenario(policies=[{"label": "ts", "policy": "taskset", "options": {"cpus": ["0-3"]}}])
    data["machine"]["cpu_numbering"] = "alternate"
    res = run_small(data)
    assert res.run("ts").pods[0].placement["nodes"] == [0, 1]
    data["machine"]["cpu_numbering"] = "block"
    res = run_small(data)
    assert res.run("ts").pods[0].placement["nodes"] == [0]


def test_numactl_physcpubind_pins_each_pod_to_its_cpulist_and_binds_memory_to_their_nodes():
    # Block numbering: CPUs 0-3 are node 0, 4-7 node 1. Pod 0 gets "5-6" (node 1), pod 1 "0,2" (node 0).
    data = small_scenario(policies=[{"label": "c", "policy": "numactl", "options": {"physcpubind": ["5-6", "0,2"]}}])
    data["machine"]["cpu_numbering"] = "block"
    run = run_small(data).run("c")
    assert [p.placement["cpus"] for p in run.pods] == [[5, 6], [0, 2]]
    assert [p.placement["nodes"] for p in run.pods] == [[1], [0]]
    # membind 'auto' binds each pod's memory to the nodes of its CPUs: all of it there, all local
    assert [np.flatnonzero(p.memory_per_node_bytes).tolist() for p in run.pods] == [[1], [0]]
    assert all(p.locality == pytest.approx(1.0) for p in run.pods)
    assert all(p.cross_node_migrations == 0 for p in run.pods)


def test_numactl_physcpubind_with_memory_bound_elsewhere_is_all_remote():
    data = small_scenario(policies=[{"label": "c", "policy": "numactl",
                                     "options": {"physcpubind": ["0-3"], "membind": [[1]]}}])
    data["machine"]["cpu_numbering"] = "block"
    run = run_small(data).run("c")
    assert all(p.placement["nodes"] == [0] for p in run.pods)
    assert all(np.flatnonzero(p.memory_per_node_bytes).tolist() == [1] for p in run.pods)
    assert all(p.locality == pytest.approx(0.0, abs=1e-9) for p in run.pods)


def test_numactl_physcpubind_of_a_nodes_cpus_is_cpunodebind_of_that_node():
    # Metamorphic: binding to node 1's CPUs one by one, or to node 1, is the same binding.
    data = small_scenario(policies=[
        {"label": "cpus", "policy": "numactl", "options": {"physcpubind": ["4-7"]}},
        {"label": "node", "policy": "numactl", "options": {"cpunodebind": [[1]]}}])
    data["machine"]["cpu_numbering"] = "block"
    res = run_small(data)
    a, b = res.run("cpus"), res.run("node")
    assert a.throughput == b.throughput and a.locality == b.locality
    assert [p.memory_per_node_bytes for p in a.pods] == [p.memory_per_node_bytes for p in b.pods]


def test_numactl_takes_cpunodebind_or_physcpubind_not_both():
    from numasim.policies.numactl import NumactlOptions

    assert NumactlOptions(physcpubind=["0-3"]).cpunodebind is None  # giving physcpubind turns the default off
    assert NumactlOptions().cpunodebind == "auto" and NumactlOptions().physcpubind is None
    with pytest.raises(ValueError, match="cpunodebind or physcpubind, not both"):
        NumactlOptions(physcpubind=["0-3"], cpunodebind=[[0]])


def test_esxi_splits_a_wide_vm_and_interleaves_its_memory():
    data = small_scenario(
        pods=[{"name": "wide", "threads": 6, "memory": "2GiB", "profile": "java"}],
        policies=[{"label": "esxi", "policy": "esxi"}],
    )
    res = run_small(data)
    pod = res.run("esxi").pods[0]
    assert pod.placement["clients"] == 2 and sorted(pod.placement["homes"]) == [0, 1]
    mem = pod.memory_per_node_bytes
    assert mem[0] == pytest.approx(mem[1], rel=0.01)


def test_esxi_keeps_each_pod_on_its_home_node():
    res = run_small(small_scenario(policies=[{"label": "esxi", "policy": "esxi"}]))
    run = res.run("esxi")
    assert run.cross_node_migrations == 0
    assert [p.placement["homes"] for p in run.pods] == [[0], [1]]
    assert all(p.locality == pytest.approx(1.0) for p in run.pods)
