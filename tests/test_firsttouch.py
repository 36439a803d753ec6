"""The compiled first touch (numasim/sim/firsttouch.py) against the Python one (PageRuntime._touch).

Where the compiled code places a touch it must place it as Python would, to the last
byte, and leave everything else (fallback to another node, interleave, OOM) to Python
untouched; a whole run must not change when every touch goes through Python.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings, strategies as st

import numasim
from numasim.policies.api import CHUNK, MemPolicy
from numasim.sim import firsttouch, layout
from numasim.sim.memory import Memory
from numasim.sim.pages import PageRuntime
from numasim.sim.trace import ResponseTimes

from .conftest import small_scenario

POLICIES = [MemPolicy(), MemPolicy("preferred", (1,)), MemPolicy("bind", (1, 2)), MemPolicy("interleave", (0, 1))]


def _machine(capacity_chunks: list[int]):
    n = len(capacity_chunks)
    distance = np.array([[10 if i == j else 20 + 5 * abs(i - j) for j in range(n)] for i in range(n)])
    return SimpleNamespace(n_nodes=n, node_memory=np.array(capacity_chunks) * CHUNK, distance=distance)


def _runtime(machine, policy: MemPolicy, sizes: list[int], n_threads: int, by_pod: bool):
    """The state PageRuntime._touch and firsttouch.touch share: one pod, its threads' plans."""
    mem = Memory(machine)
    pod = SimpleNamespace(index=0, status="running", mempolicy=policy,
                          profile=SimpleNamespace(private_touch="pod" if by_pod else "owner", touch_nodes=None))
    rt = SimpleNamespace(memory=mem, pods=[pod], t_pod=[0] * n_threads, t_private=[-1] * n_threads,
                         _cpu_node=[0, 1, 2], t_cpu=[0] * n_threads, t_plan_left=[0.0] * n_threads,
                         _plan=np.zeros((n_threads, 2 * firsttouch.PLAN_ENTRIES), dtype=np.int64),
                         _pol=np.zeros((firsttouch.POL_MASK + machine.n_nodes, 1), dtype=np.int64), _dirty=False)
    shared = mem.add_region(0, -1, sizes[0], proc=0)
    for tid in range(n_threads):
        rt.t_private[tid] = mem.add_region(0, tid, sizes[1 + tid % (len(sizes) - 1)], proc=0)
        PageRuntime._set_plan(rt, tid, [(rt.t_private[tid], sizes[1 + tid % (len(sizes) - 1)]), (shared, sizes[0] // 2)])
    PageRuntime._set_touch_policy(rt, pod)
    return rt


@settings(max_examples=60, deadline=None)
@given(policy=st.sampled_from(POLICIES), by_pod=st.booleans(),
       capacity=st.lists(st.integers(1, 12), min_size=3, max_size=3),
       sizes=st.lists(st.integers(1, 9 * CHUNK), min_size=2, max_size=4),
       steps=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.floats(0.0, 3.0 * CHUNK)), max_size=25))
def test_the_compiled_touch_places_what_python_places_or_leaves_it_to_python(policy, by_pod, capacity, sizes, steps):
    machine = _machine(capacity)
    fast, slow = _runtime(machine, policy, sizes, 3, by_pod), _runtime(machine, policy, sizes, 3, by_pod)
    I = np.zeros((max(layout.I_POD, layout.I_CPU) + 1, 3), dtype=np.int64)
    CI = np.zeros((layout.CI_NODE + 1, 3), dtype=np.int64)
    CI[layout.CI_NODE] = [0, 1, 2]
    F = np.zeros((layout.F_PLAN + 1, 3))
    placed_here = 0
    for tid, cpu, nbytes in steps:
        fast.t_cpu[tid] = slow.t_cpu[tid] = I[layout.I_CPU, tid] = cpu
        F[layout.F_PLAN] = fast.t_plan_left
        M = fast.memory.arrays() + (fast._pol, fast._plan) + ResponseTimes(1, 0).arrays()
        if firsttouch.touch(M, I, CI, F, tid, nbytes):
            placed_here += 1
            fast.t_plan_left[:] = F[layout.F_PLAN].tolist()
        else:
            try:
                PageRuntime._touch(fast, tid, nbytes)
            except AttributeError:  # _oom: the model's reaction, not what is compared here
                pass
        try:
            PageRuntime._touch(slow, tid, nbytes)
        except AttributeError:
            pass
        for a, b in zip(fast.memory.arrays(), slow.memory.arrays()):
            assert np.array_equal(a, b)
        for reg in fast.memory.regions:  # touched in address order: the touched chunks come first (View's promise)
            touched = reg.node >= 0
            assert not np.any(touched[1:] & ~touched[:-1])
        # ... and the View's windows of a process's touched chunks (View.process_chunks) are those prefixes
        # laid end to end in address order
        for proc, rids in fast.memory.by_proc.items():
            regs = [fast.memory.regions[r] for r in rids]
            want = np.array([(r.rid, i, r.node[i]) for r in regs for i in range(int((r.node >= 0).sum()))],
                            dtype=np.int64).reshape(-1, 3).T
            for start, count in ((0, 10**6), (1, 3), (len(want[0]) - 1, 2), (len(want[0]), 5)):
                got, total = fast.memory.process_chunks(proc, start, count)
                assert total == want.shape[1] and np.array_equal(got, want[:, start: start + count])
        assert np.array_equal(fast._plan, slow._plan) and fast.t_plan_left == slow.t_plan_left
    if policy.kind == "interleave" or by_pod:
        assert placed_here == 0  # always Python's


def test_a_full_node_falls_back_in_python_and_a_full_bind_fails_there():
    machine = _machine([2, 8, 8])
    rt = _runtime(machine, MemPolicy(), [CHUNK, 4 * CHUNK], 1, False)
    I = np.zeros((max(layout.I_POD, layout.I_CPU) + 1, 1), dtype=np.int64)
    CI = np.zeros((layout.CI_NODE + 1, 3), dtype=np.int64)
    F = np.array([rt.t_plan_left] * (layout.F_PLAN + 1))
    M = rt.memory.arrays() + (rt._pol, rt._plan) + ResponseTimes(1, 0).arrays()
    assert firsttouch.touch(M, I, CI, F, 0, 2 * CHUNK)  # two chunks fit on node 0
    assert not firsttouch.touch(M, I, CI, F, 0, 2 * CHUNK)  # two more do not: Python falls back
    assert rt.memory.regions[1].node.tolist() == [0, 0, -1, -1]
    bound = _runtime(_machine([8, 1, 1]), MemPolicy("bind", (1, 2)), [CHUNK, 4 * CHUNK], 1, False)
    try:
        PageRuntime._touch(bound, 0, 4 * CHUNK)
    except AttributeError:  # the OOM killer is the simulation's; the allocation failed first
        assert bound.memory.regions[1].node.tolist()[:2] == [1, 2]
    else:
        raise AssertionError("a bind policy's full nodes must fail the allocation")


def test_a_run_is_the_same_when_python_places_every_touch(monkeypatch):
    # Memory that grows as threads work, start-up touch, a bound pod (numactl, k8s) and a machine
    # whose nodes fill up (the touches that fall back go through Python either way).
    data = small_scenario(
        workloads={"grow": {"base": "java-transactions", "touch": "work", "touch_gbps": 2.0},
                   "java": {"base": "java-transactions", "touch_gbps": 8.0}},
        pods=[{"name": "app", "replicas": 2, "threads": 3, "memory": "3GiB", "profile": "grow"},
              {"name": "big", "threads": 2, "memory": "7GiB", "profile": "java"}],
        policies=[{"label": "cfs", "policy": "cfs"}, {"label": "numactl", "policy": "numactl"},
                  {"label": "k8s", "policy": "k8s"}],
        duration="2s", warmup="0.5s", replications=1)
    data["machine"]["memory_per_node"] = "8GiB"
    scenario = numasim.from_dict(data)
    from numasim.runner import _simulate

    def run():
        calls = [0]
        touch = PageRuntime._touch

        def counted(self, tid, nbytes):
            calls[0] += 1
            touch(self, tid, nbytes)

        monkeypatch.setattr(PageRuntime, "_touch", counted)
        out = {}
        for v in scenario.variants:
            calls[0] = 0
            sim, metrics, trace = _simulate(scenario, v, 2, None)
            out[v.label] = dict(
                throughput=metrics.throughput, pods=[p.throughput for p in metrics.pods],
                samples={k: np.asarray(a).tolist() for k, a in trace.samples.items()},
                placements=np.asarray(trace.placements).tolist(), events=trace.events,
                memory=[r.node.tolist() for r in sim.memory.regions], python=calls[0])
        monkeypatch.setattr(PageRuntime, "_touch", touch)
        return out

    compiled = run()
    set_policy = PageRuntime._set_touch_policy

    def python_only(self, pod):
        set_policy(self, pod)
        self._pol[firsttouch.POL_KIND, pod.index] = firsttouch.FT_PYTHON

    monkeypatch.setattr(PageRuntime, "_set_touch_policy", python_only)
    python = run()
    for label, tr in compiled.items():
        assert python[label].pop("python") > 5 * tr.pop("python"), label
        assert any(n >= 0 for nodes in tr["memory"] for n in nodes), label
        for key, value in tr.items():
            assert value == python[label][key], (label, key)


def test_the_region_arrays_a_policy_holds_stay_live_when_later_pods_add_regions():
    # The View hands out each region's chunk nodes as a view; pods admitted later add regions, and the
    # memory reserved at the start means the arrays are never moved, so a view held across ticks follows.
    from numasim.runner import _simulate

    data = small_scenario(pods=[{"name": "early", "threads": 2, "memory": "1GiB", "profile": "java"},
                                {"name": "late", "threads": 3, "memory": "2GiB", "profile": "java", "start": "1s"}],
                          policies=[{"label": "cfs", "policy": "cfs"}], duration="2s", warmup="0.1s", replications=1)
    scenario = numasim.from_dict(data)
    sim, _metrics, _trace = _simulate(scenario, scenario.variants[0], 1, 500_000_000)
    held = sim.view.pod_regions(0)
    assert len(sim.memory.regions) == 3  # the late pod has none yet
    sim.advance(2_000_000_000)
    assert len(sim.memory.regions) == 7 and (sim.memory.regions[-1].node >= 0).any()
    for rid, _owner, nodes in held:
        assert np.shares_memory(nodes, sim.memory.regions[rid].node)
        assert np.array_equal(nodes, sim.memory.regions[rid].node) and (nodes >= 0).any()
