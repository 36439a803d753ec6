"""Automatic NUMA balancing: it helps where it should, costs little where it cannot help."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import run_small, small_scenario


def test_numa_balancing_on_a_cpu_only_workload_costs_under_one_percent():
    data = small_scenario(
        pods=[{"name": "calc", "replicas": 2, "threads": 4, "memory": "2GiB", "profile": "cpu-bound"}],
        policies=[{"label": "cfs", "policy": "cfs"}, {"label": "numab", "policy": "cfs", "options": {"numa_balancing": True}}],
        duration="12s",
        warmup="2s",
    )
    res = run_small(data)
    assert res.run("numab").hinting_faults > 0  # it does scan and fault
    assert res.relative("numab") > 0.99


def test_numa_balancing_gathers_a_process_on_its_memory():
    # One process whose heap its main thread touched on one node; its workers spread.
    data = small_scenario(
        workloads={"pre": {"base": "java-transactions", "touch": "main", "requests": None,
                           "pause_interval_ms": None, "touch_gbps": 8.0}},
        pods=[{"name": "jvm", "replicas": 2, "threads": 4, "memory": "4GiB", "profile": "pre"}],
        policies=[{"label": "cfs", "policy": "cfs"}, {"label": "numab", "policy": "cfs", "options": {"numa_balancing": True}}],
        duration="40s",
        warmup="5s",
        sample_interval="1s",
    )
    res = run_small(data)
    cfs, nb = res.run("cfs"), res.run("numab")
    series = [x for x in nb.timeseries["locality"] if x is not None]
    assert series[-1] > series[0] + 0.1 and series[-1] > 0.95  # locality rises over time
    assert nb.locality > cfs.locality + 0.1
    assert nb.numa_task_moves > 0 or nb.pages_migrated_bytes > 0
    assert res.relative("numab") > 1.0


def test_the_old_kernels_migration_rate_limit_slows_page_migration():
    base = dict(
        workloads={"pre": {"base": "java-transactions", "touch": "main", "requests": None,
                           "pause_interval_ms": None, "touch_gbps": 8.0}},
        pods=[{"name": "jvm", "replicas": 2, "threads": 4, "memory": "4GiB", "profile": "pre"}],
        duration="10s", warmup="2s",
    )
    free = run_small(small_scenario(**base, policies=[{"label": "nb", "policy": "cfs", "options": {"numa_balancing": True}}]))
    slow = run_small(small_scenario(**base, policies=[{"label": "nb", "policy": "cfs",
                                                       "options": {"numa_balancing": True, "migrate_rate_limit_mbps": 20}}]))
    moved_free = free.run("nb").pages_migrated_bytes
    moved_slow = slow.run("nb").pages_migrated_bytes
    assert moved_slow < moved_free
    assert moved_slow <= 20e6 * 2 * 8 * 1.2  # at most the limit into each of 2 nodes over the 8 s window
    assert np.isfinite(moved_slow)


def test_swap_rules_by_kernel_version():
    from numasim.model.presets import machine_preset
    from numasim.policies.cfs import CFSOptions
    from numasim.policies.numab import NumaBalancing
    from numasim.policies.numab_moves import SMALLIMP

    def rule(kernel: str) -> NumaBalancing:
        opts = CFSOptions(numa_balancing=True, numa_balancing_kernel=kernel)
        return NumaBalancing(machine_preset("pacific-broadwell"), opts, np.random.default_rng(1), [2, 2], 117)

    old, mid, new = rule("3.13"), rule("4.4"), rule("6.1")
    # A tie (improvement 0, nothing better yet): 3.13 swaps, 3.14-4.18 do not, nor does 4.19 on.
    assert old._swap_ok(0.0, None) and not mid._swap_ok(0.0, None) and not new._swap_ok(0.0, None)
    assert mid._swap_ok(1.0, None) and not new._swap_ok(SMALLIMP - 1, None) and new._swap_ok(SMALLIMP, None)
    # Against a candidate already found: 4.19 on must beat it by SMALLIMP / 2.
    assert mid._swap_ok(41.0, 40.0) and not new._swap_ok(50.0, 40.0) and new._swap_ok(56.0, 40.0)
    # 3.13 weighed group faults x1.2.
    assert old.o.numa_balancing_kernel == "3.13"


def test_a_move_to_an_idle_cpu_by_kernel_version():
    from numasim.model.presets import machine_preset
    from numasim.policies.cfs import CFSOptions
    from numasim.policies.numab import NumaBalancing

    m = machine_preset("pacific-broadwell")  # 2 x 22 cores, HT off here: task capacity 22 a node

    def rule(kernel: str, pct: int = 125) -> NumaBalancing:
        opts = CFSOptions(numa_balancing=True, numa_balancing_kernel=kernel)
        return NumaBalancing(m, opts, np.random.default_rng(1), [2] * m.n_nodes, pct)

    old, mid = rule("3.13"), rule("4.4")
    assert mid.pct == 112 and mid.task_capacity == [22, 22]
    # "Is there capacity at our destination?": a source within its capacity never moves a task onto a full node.
    assert not mid._may_move_old(0, 1, 22, 22, 22, 22)
    # Overloaded source, full destination: the loads after the move, 23 against 21, are within 12 %.
    assert mid._may_move_old(0, 1, 24, 22, 22, 22)
    # Outside 12 % (20 against 24), but no worse than before (18 against 26): v3.15-v4.18 move, v3.13 does not.
    assert mid._may_move_old(0, 1, 25, 19, 22, 22) and not old._may_move_old(0, 1, 25, 19, 22, 22)
    # Further apart than before: neither.
    assert not mid._may_move_old(0, 1, 10, 14, 22, 22) and not old._may_move_old(0, 1, 10, 14, 22, 22)
    # A spare destination within 12 % after the move: 10 against 11 moves under both (6.1 would hold it back:
    # imb_numa_nr 2 < 11 tasks on the destination).
    assert mid._may_move_old(0, 1, 11, 10, 22, 22) and old._may_move_old(0, 1, 11, 10, 22, 22)
    # numa_has_capacity (v4.2-v4.18): a node is searched only if it is not busier than the source beyond 12 %.
    nr = np.zeros(m.n_cpus, dtype=int)
    nr[m.node_cpus[0][:20]] = 1
    nr[m.node_cpus[1][:22]] = 1
    assert not mid._has_capacity(0, 1, nr)  # the source has free capacity, the destination none
    nr[m.node_cpus[0][:2]] = 3  # 24 tasks on node 0
    assert mid._has_capacity(0, 1, nr)
    nr[m.node_cpus[1][:4]] = 3  # 30 on node 1: beyond 24 x 1.12
    assert not mid._has_capacity(0, 1, nr)


def test_v4_19_to_v5_6_move_only_what_keeps_the_node_loads_as_even():
    # task_numa_find_cpu of v4.19-v5.6: maymove = !load_too_imbalanced(src - 1, dst + 1) for every move;
    # v5.7 (fb86f5b21192) let a destination with spare capacity take the load balancer's NUMA allowance.
    from numasim.model.presets import machine_preset
    from numasim.policies.cfs import CFSOptions
    from numasim.policies.numab import NumaBalancing

    m = machine_preset("pacific-broadwell")  # 22 CPUs a node

    def rule(kernel: str, lb: str = "6.1") -> NumaBalancing:
        opts = CFSOptions(numa_balancing=True, numa_balancing_kernel=kernel, numa_imbalance_kernel=lb)
        return NumaBalancing(m, opts, np.random.default_rng(1), [2, 2], 117)

    v56, v61 = rule("5.6"), rule("6.1")
    # 3 tasks against 1: 2 against 2 after the move, more even: both move.
    assert v56._move_allowed(0, 1, 3, 1, 22, 22) and v61._move_allowed(0, 1, 3, 1, 22, 22)
    # 2 against 1: 1 against 2 after, as uneven as before: load_too_imbalanced allows it ("no worse").
    assert v56._move_allowed(0, 1, 2, 1, 22, 22)
    # 1 against 2: 0 against 3, worse. 5.6 holds the task back; 6.1 lets a spare destination take an
    # imbalance of at most NUMA_IMBALANCE_MIN (2) while it runs at most imb_numa_nr (2): 3 is more, held back too.
    assert not v56._move_allowed(0, 1, 1, 2, 22, 22) and not v61._move_allowed(0, 1, 1, 2, 22, 22)
    # 1 against 0: 0 against 1, as uneven: 5.6 moves; 6.1 moves too (1 task, within the allowance).
    assert v56._move_allowed(0, 1, 1, 0, 22, 22) and v61._move_allowed(0, 1, 1, 0, 22, 22)
    # 2 against 3: 1 against 4, worse: 5.6 refuses; so does 6.1 under the 5.10 balancer (any imbalance while
    # the destination would run at most 2 tasks: 4 > 2). 1 against 1: 0 against 2, worse for 5.6, but within
    # 5.10's allowance.
    assert not v56._move_allowed(0, 1, 2, 3, 22, 22)
    assert not rule("6.1", "5.10")._move_allowed(0, 1, 2, 3, 22, 22)
    assert rule("6.1", "5.10")._move_allowed(0, 1, 1, 1, 22, 22) and v56._move_allowed(0, 1, 1, 1, 22, 22) is False
    # A full destination: every era from 4.19 uses load_too_imbalanced.
    assert v56._move_allowed(0, 1, 30, 22, 22, 22) == v61._move_allowed(0, 1, 30, 22, 22, 22) is True


def test_the_load_balancer_resists_moves_off_the_preferred_node_after_3_13_only():
    from numasim.model.presets import machine_preset
    from numasim.policies.cfs import CFSOptions
    from numasim.policies.numab import NumaBalancing

    m = machine_preset("pacific-broadwell")
    node0, node1 = (int(np.flatnonzero(m.cpu_node == n)[0]) for n in (0, 1))
    for kernel, resists in [("3.13", False), ("4.4", True), ("6.1", True)]:
        nb = NumaBalancing(m, CFSOptions(numa_balancing=True, numa_balancing_kernel=kernel),
                           np.random.default_rng(1), [2, 2], 117)
        nb._alloc(16, 1)
        nb._task(7)
        nb.t_pref[7] = 0
        # NUMA_RESIST_LOWER was off by default in 3.13; the v4 series made leaving the preferred node degrade.
        assert nb.degrades_locality(7, node0, node1, idle=False) is resists
        # Toward the preferred node, or for a task without one, nothing resists.
        assert not nb.degrades_locality(7, node1, node0, idle=False)
        assert not nb.degrades_locality(8, node0, node1, idle=False)


def test_the_kernel_rule_is_an_option_of_the_scenario():
    data = small_scenario(policies=[{"label": "old", "policy": "cfs",
                                     "options": {"numa_balancing": True, "numa_balancing_kernel": "3.13"}}],
                          duration="2s")
    assert run_small(data).run("old").hinting_faults > 0
    bad = small_scenario(policies=[{"label": "x", "policy": "cfs", "options": {"numa_balancing_kernel": "5.0"}}])
    import numasim
    import pytest

    with pytest.raises(numasim.ScenarioError, match="numa_balancing_kernel"):
        numasim.from_dict(bad)
    # --set reads 4.4 as a number; it means the version.
    ok = small_scenario(policies=[{"label": "x", "policy": "cfs"}])
    s = numasim.from_dict(ok, overrides=["policies.0.options.numa_balancing_kernel=4.4"])
    assert s.variants[0].options.numa_balancing_kernel == "4.4"


def _batch_jvms(threads: int, kernel: str, **machine) -> dict:
    """Two processes whose workers first-touch their own share of the heap (a symmetric start)."""
    data = small_scenario(
        workloads={"batch": {"base": "java-transactions", "touch": "threads", "requests": None,
                             "pause_interval_ms": None, "touch_gbps": 8.0}},
        pods=[{"name": "jvm", "replicas": 2, "threads": threads, "memory": "4GiB", "profile": "batch"}],
        policies=[{"label": "cfs", "policy": "cfs"},
                  {"label": "numab", "policy": "cfs", "options": {"numa_balancing": True, "numa_balancing_kernel": kernel}},
                  {"label": "bound", "policy": "numactl",
                   "options": {"cpunodebind": "auto", "numa_balancing": True, "numa_balancing_kernel": kernel}}],
        duration="40s", warmup="5s", sample_interval="1s")
    data["machine"].update(machine)
    return data


def test_a_symmetric_start_converges_when_no_cpu_is_overcommitted():
    # 6 threads on 8 CPUs, each heap split by where its workers first ran: task placement
    # at each task's own fault (per-task statistics folded at different times) breaks the tie.
    res = run_small(_batch_jvms(3, "6.1"))
    cfs, nb = res.run("cfs"), res.run("numab")
    series = [x for x in nb.timeseries["locality"] if x is not None]
    assert series[-1] > 0.95 and nb.locality > cfs.locality + 0.2
    assert res.relative("numab") > 1.05
    assert cfs.numa_task_moves == 0  # balancing off: no NUMA task moves
    assert res.run("bound").cross_node_migrations == 0  # bound tasks never leave their node


def test_pseudo_interleaving_gathers_each_group_on_its_active_nodes():
    # v3.15-v4.18 rules on 4 nodes, 16 threads on 16 CPUs: each group settles on the nodes it
    # uses most and spreads its memory over them, about as well as binding each to two nodes.
    res = run_small(_batch_jvms(8, "4.4", sockets=4, slit=None))
    cfs, nb, bound = res.run("cfs"), res.run("numab"), res.run("bound")
    assert nb.locality > cfs.locality + 0.15
    assert nb.locality > 0.85 * bound.locality
    assert res.relative("numab") > 1.03


_SPREAD = {"cycles_per_op": 2000, "llc_misses_per_op": 10, "mlp": 2.0, "shared_fraction": 0.0,
           "private_touch": "pod", "touch_gbps": 8.0, "cache_footprint_mib": 0.1}


def _bound(options: dict, threads: int = 8) -> dict:
    return small_scenario(workloads={"w": _SPREAD},
                          pods=[{"name": "p", "threads": threads, "memory": "256MiB", "profile": "w"}],
                          policies=[{"label": "n", "policy": "numactl", "options": {"numa_balancing": True, **options}}],
                          duration="6s", warmup="1s")


def test_numa_balancing_leaves_an_explicit_memory_policy_alone():
    # Only memory whose policy has MPOL_F_MOF is balanced: from 3.13 task_numa_work does not even
    # scan a policy set with set_mempolicy/mbind (vma_policy_mof), so it takes no hinting faults.
    pref = run_small(_bound({"cpunodebind": [[0]], "preferred": [1]}, threads=4)).run("n")
    assert pref.locality == 0.0 and pref.pages_migrated_bytes == 0 and pref.hinting_faults == 0
    inter = run_small(_bound({"cpunodebind": [[0]], "interleave": [[0, 1]]}, threads=4)).run("n")
    assert inter.locality == pytest.approx(0.5, abs=0.02) and inter.pages_migrated_bytes == 0
    assert inter.hinting_faults == 0
    # 3.8-3.12 scanned it (here the threads run on both nodes, so the 3.8 delay until a process runs
    # on a second node is past): the faults were taken, and cost, but mpol_misplaced moved nothing.
    for kernel, scanned in (("3.8", True), ("3.12", True), ("3.13", False)):
        old = run_small(_bound({"cpunodebind": [[0, 1]], "preferred": [1], "kernel": kernel}, threads=4)).run("n")
        assert old.pages_migrated_bytes == 0 and (old.hinting_faults > 0) == scanned, kernel


def test_a_cgroup_cpuset_keeps_numa_balancing_scanning():
    # The Kubernetes Memory Manager's cpuset.mems leaves the task on the default policy (MPOL_F_MOF):
    # its memory is still scanned, unlike numactl --membind's.
    data = small_scenario(workloads={"w": _SPREAD},
                          pods=[{"name": "p", "threads": 3, "memory": "256MiB", "profile": "w", "cpu_limit": 3}],
                          policies=[{"label": "k", "policy": "k8s", "options": {
                              "numa_balancing": True, "cpu_manager_policy": "static",
                              "topology_manager_policy": "single-numa-node", "memory_manager_policy": "Static",
                              "reserved_cpus": 1, "reserved_memory": "256MiB"}}],
                          duration="6s", warmup="1s")
    run = run_small(data).run("k")
    assert run.hinting_faults > 0


def test_memory_bound_explicitly_gives_no_task_placement_toward_it():
    # The threads may run anywhere, their memory is bound to node 1: without hinting faults (no
    # MPOL_F_MOF) NUMA balancing learns no preferred node and moves no task toward node 1, where
    # with MPOL_F_NUMA_BALANCING (numactl --balancing) its faults do.
    # (The 3.15-4.18 placement rules, which move a task to an idle CPU of its preferred node; the rules
    # of 5.7 on keep the node loads even in this small case.)
    free = {"cpunodebind": None, "membind": [[1]], "numa_balancing_kernel": "4.4"}
    plain = run_small(_bound(free, threads=3)).run("n")
    assert plain.hinting_faults == 0 and plain.numa_task_moves == 0
    opted = run_small(_bound({**free, "balancing": True}, threads=3)).run("n")
    assert opted.hinting_faults > 0 and opted.numa_task_moves > 0 and opted.locality > plain.locality + 0.1


def test_a_run_says_when_numa_balancing_scans_nothing():
    res = run_small(_bound({"cpunodebind": None, "membind": [[1]]}, threads=2))
    assert any("NUMA balancing is on but took no hinting fault" in w for w in res.warnings())
    res = run_small(_bound({"cpunodebind": None, "membind": [[1]], "balancing": True}, threads=2))
    assert not any("took no hinting fault" in w for w in res.warnings())


def test_numactl_balancing_needs_a_kernel_that_has_it():
    import numasim

    with pytest.raises(numasim.ScenarioError, match="needs Linux 5.12 or later"):
        numasim.from_dict(_bound({"membind": [[0, 1]], "balancing": True, "kernel": "4.18"}))
    numasim.from_dict(_bound({"membind": [[0, 1]], "balancing": True, "kernel": "5.12"}))


def test_a_bind_policy_opts_in_with_numactl_balancing():
    both = {"cpunodebind": [[0, 1]], "membind": [[0, 1]]}
    plain = run_small(_bound(both)).run("n")
    opted = run_small(_bound({**both, "balancing": True})).run("n")
    # Each thread's data starts spread over both nodes (a collector's threads placed it).
    assert plain.pages_migrated_bytes == 0 and plain.locality < 0.6
    assert opted.pages_migrated_bytes > 0 and opted.locality > 0.9


def test_numactl_balancing_needs_membind():
    import numasim

    with pytest.raises(numasim.ScenarioError, match="balancing needs membind"):
        numasim.from_dict(_bound({"cpunodebind": [[0]], "preferred": [1], "balancing": True}))


def _eras_scenario():
    """Every kernel era (its migration filter), a migration rate limit, shared and private memory,
    a CPU limit's throttling and pinned memory, on the small machine."""
    import numasim

    on = {"numa_balancing": True, "scan_delay_ms": 200, "scan_period_min_ms": 100}
    data = small_scenario(
        workloads={"pre": {"base": "java-transactions", "touch": "main", "touch_gbps": 8.0},
                   "java": {"base": "java-transactions", "touch_gbps": 8.0}},
        pods=[{"name": "jvm", "replicas": 2, "threads": 4, "memory": "1GiB", "profile": "pre"},
              {"name": "app", "threads": 3, "memory": "512MiB", "profile": "java"}],
        policies=[{"label": "v313", "policy": "cfs", "options": {**on, "numa_balancing_kernel": "3.13"}},
                  {"label": "v44", "policy": "cfs", "options": {**on, "numa_balancing_kernel": "4.4",
                                                                 "migrate_rate_limit_mbps": 64}},
                  {"label": "v61", "policy": "cfs", "options": on}],
        duration="6s", warmup="1s", replications=1)
    return numasim.from_dict(data)


def _traces(scenario) -> dict:
    """Each variant's run at seed 2, as plain values to compare."""
    from numasim.runner import _simulate

    out = {}
    for v in scenario.variants:
        sim, metrics, trace = _simulate(scenario, v, 2, None)
        out[v.label] = dict(
            throughput=metrics.throughput, faults=metrics.hinting_faults, moved=metrics.pages_migrated_bytes,
            samples={k: np.asarray(a).tolist() for k, a in trace.samples.items()},
            placements=np.asarray(trace.placements).tolist(),
            memory=[r.node.tolist() for r in sim.memory.regions], charged=list(sim.c_kernel_ns))
    return out


def _same(a: dict, b: dict) -> None:
    for label, tr in a.items():
        assert tr["faults"] > 100 and tr["moved"] > 0, label  # it scanned, faulted and moved pages
        for key, value in tr.items():
            assert value == b[label][key], (label, key)


def test_the_compiled_faults_decide_what_the_python_faults_decide(monkeypatch):
    # The whole trace is the same when every fault goes through NumaBalancing._fault (the compiled
    # loop handing each chunk back at once).
    from numasim.policies import numab

    scenario = _eras_scenario()
    compiled = _traces(scenario)
    monkeypatch.setattr(numab, "faults", lambda j, *args: j)  # every chunk to Python
    _same(compiled, _traces(scenario))


def test_the_shortcuts_of_the_tick_change_nothing(monkeypatch):
    """The periodic balancer's due entities found on arrays and the charges integrated in one call are
    shortcuts: with the balancer walking every domain at every tick and each charge applied on its own,
    the runs of every era are the same to the last bit."""
    from numasim.policies import balance
    from numasim.sim.kernel import Simulation

    from .test_periodic import _plain_periodic

    scenario = _eras_scenario()
    fast = _traces(scenario)
    monkeypatch.setattr(balance.LoadBalancer, "_periodic", _plain_periodic)  # walk every domain at every tick

    def one_by_one(self, decisions):
        for d in decisions:
            self._apply(d)

    monkeypatch.setattr(Simulation, "_apply_all", one_by_one)
    _same(fast, _traces(scenario))


def test_who_faults_is_the_owner_or_numpys_choice_with_the_same_draws():
    """The scan's choice of who faults each chunk: the owner of a private chunk (none if it died); for a
    shared chunk what ``Generator.choice`` gives with the threads' weights, leaving the generator where
    choice leaves it (so the rest of the run sees the same numbers); each thread's faults counted in the
    order of its first one."""
    from hypothesis import given, settings, strategies as st

    from numasim.policies.numab_faults import pick_faulters, who_faults

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.floats(0.0, 1e6), min_size=1, max_size=12).filter(lambda w: sum(w) > 0),
           st.lists(st.integers(-1, 11), max_size=200), st.lists(st.booleans(), min_size=12, max_size=12),
           st.integers(0, 2**32 - 1))
    def check(weights, owners, alive, seed):
        tids = np.arange(len(weights), dtype=np.int64)[::-1].copy()  # thread ids in another order than 0..
        w = np.array(weights)
        c_owner = np.array([o if o < len(weights) else -1 for o in owners], dtype=np.int64)
        shared = c_owner < 0
        a, b = np.random.default_rng(seed), np.random.default_rng(seed)
        cdf = np.cumsum(w / w.sum())  # the scan's steps
        cdf /= cdf[-1]
        u = a.random(int(shared.sum()))
        c_tid, counts, order = np.empty(c_owner.size, dtype=np.int64), np.zeros(12, dtype=np.int64), np.zeros(12, dtype=np.int64)
        m = who_faults(c_owner, np.array(alive), tids, cdf, u, c_tid, counts, order)
        # The scan's compiled form makes the cumulative weights itself: the same numbers, the same choice.
        mine, dst = np.zeros(len(weights)), np.zeros(c_owner.size, dtype=np.int64)
        c_tid2, counts2, order2 = np.empty_like(c_tid), np.zeros(12, dtype=np.int64), np.zeros(12, dtype=np.int64)
        assert pick_faulters(c_owner, np.array(alive), tids, w, float(w.sum()), u, mine, c_tid2, counts2, order2, dst) == m
        assert (not u.size or mine.tolist() == cdf.tolist()) and (dst == -1).all()  # (made only for draws)
        assert c_tid2.tolist() == c_tid.tolist() and order2.tolist() == order.tolist() and counts2.tolist() == counts.tolist()
        want = np.where((c_owner >= 0) & np.array(alive)[np.maximum(c_owner, 0)], c_owner, -1)
        want[shared] = tids[b.choice(len(w), size=int(shared.sum()), p=w / w.sum())]
        assert np.array_equal(c_tid, want)
        assert a.random() == b.random()
        valid = want[want >= 0].tolist()
        assert order[:m].tolist() == list(dict.fromkeys(valid))
        assert counts.tolist() == np.bincount(np.array(valid, dtype=np.int64), minlength=12).tolist()

    check()


def test_a_scans_migrations_take_free_memory_as_they_are_decided():
    """Three private chunks on node 0 faulted from node 1, with room on node 1 for one: the first moves,
    the other two fail (MIGRATE_FAIL, which doubles the scan period) instead of being decided and then
    refused when the tick's moves apply; the account shows the chunk gone from node 0."""
    from numasim.policies.api import CHUNK
    from numasim.policies.numab_faults import ERA_61, faults

    n = 3
    c_tid, c_off, c_nid = np.zeros(n, np.int64), np.arange(n, dtype=np.int64), np.zeros(n, np.int64)
    dst = np.empty(n, np.int64)
    free = np.array([10 * CHUNK, CHUNK], dtype=np.int64)
    loc = np.zeros((1, 3))
    rate = np.full((2, 2), -1, dtype=np.int64)
    rate[1] = 0
    j = faults(0, c_tid, c_off, c_nid, dst, np.array([1]), np.array([True]), free, np.zeros(2, np.bool_),
               np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.array([True]), np.zeros((1, 4)), np.zeros((1, 4)),
               loc, np.zeros(1, np.int64), np.full(1, -1, np.int64), np.full(1, -1, np.int64), np.zeros((1, 2)),
               np.zeros((1, 2)), np.zeros((1, 2), np.bool_), 0, 0, ERA_61, rate, 0, -1.0)
    assert j == n
    assert dst.tolist() == [1, -1, -1]
    assert free.tolist() == [11 * CHUNK, 0]
    assert loc[0].tolist() == [3.0, 0.0, 2.0]  # three remote faults, two failed migrations


# ---------------------------------------------------------------- v3.8: pages only (balancenuma)

def _numa02(**policy_options) -> dict:
    """autonumabench's numa02 in small: the main thread zeroes one buffer, then each worker rewrites its own
    slice of it, unbound and always runnable (8 threads on 8 CPUs)."""
    return small_scenario(
        workloads={"slices": {"base": "stream", "cycles_per_op": 2, "write_fraction": 1.0, "touch": "main",
                              "private_touch": "main", "touch_gbps": 4.0}},
        pods=[{"name": "numa02", "threads": 8, "memory": "256MiB", "profile": "slices"}],
        policies=[{"label": "none", "policy": "cfs", "options": {"kernel": "3.7"}},
                  {"label": "numab", "policy": "cfs", "options": {"kernel": "3.8", "numa_balancing": True,
                                                                  **policy_options}}],
        duration="8s", warmup="0s", sample_interval="1s")


def test_a_buffer_the_main_thread_zeroed_lies_on_its_node_and_3_8_moves_each_slice_to_its_thread():
    res = run_small(_numa02())
    none, nb = res.run("none"), res.run("numab")
    on = [pod.memory_per_node_bytes for pod in none.pods][0]
    assert sorted(on) == [0, 256 * 2**20]  # private_touch main: every slice where the main thread ran
    assert none.locality == pytest.approx(0.5, abs=0.05)  # the workers spread over both nodes
    series = [x for x in nb.timeseries["locality"] if x is not None]
    assert series[-1] > 0.97  # each slice followed its thread
    assert 0.4 * 2**27 < nb.pages_migrated_bytes < 1.2 * 2**27  # about the half that was remote, once
    assert nb.numa_task_moves == 0  # 3.8 had no task placement
    assert res.relative("numab") > 1.2  # one node's controllers against two


def test_3_8_moves_a_page_only_at_the_second_fault_in_a_row_from_one_node():
    # With a scan of the whole buffer only every 5 s (the period's maximum), a page's first fault
    # cannot move it, so no page has moved 4 s after the scans began; the later eras move a private
    # page at its first fault while the task is new.
    slow = {"scan_period_min_ms": 5000.0, "scan_size_mb": 256, "scan_delay_ms": 1000.0}
    res = run_small(small_scenario(**{**_numa02(**slow), "duration": "5s"}))
    assert res.run("numab").hinting_faults > 0 and res.run("numab").pages_migrated_bytes == 0
    later = _numa02(**slow, numa_balancing_kernel="3.13")
    later["duration"] = "5s"
    assert run_small(later).run("numab").pages_migrated_bytes > 0


def test_3_8_makes_no_task_moves_where_later_kernels_do():
    # Two processes whose threads share one heap, split over both nodes: from 3.13 a few task moves
    # gather each process with its heap; 3.8 moves no task, and pages that both nodes' threads fault
    # seldom pass its filter, so it gathers much less.
    runs = {}
    for kernel in ("3.8", "3.13"):
        data = _batch_jvms(3, kernel)
        data["warmup"] = "0s"
        runs[kernel] = run_small(data).run("numab")
    assert runs["3.8"].numa_task_moves == 0 and runs["3.8"].hinting_faults > 0
    assert runs["3.13"].numa_task_moves > 0
    assert runs["3.13"].locality > runs["3.8"].locality + 0.2


def test_a_first_touch_bound_to_one_node_lands_there_and_balancing_moves_it_afterwards():
    # autonumabench's numa01: set_mempolicy(MPOL_BIND) around the clearing, MPOL_DEFAULT after it.
    data = _numa02()
    data["workloads"]["slices"].update({"private_touch": "owner", "touch": "threads", "touch_nodes": [1]})
    res = run_small(data)
    none, nb = res.run("none"), res.run("numab")
    assert none.pods[0].memory_per_node_bytes == [0, 256 * 2**20]  # wherever the toucher ran
    assert none.locality == pytest.approx(0.5, abs=0.05)
    assert nb.pages_migrated_bytes > 0 and nb.locality > none.locality + 0.3  # the default policy after it


def test_a_first_touch_bound_to_a_node_the_machine_lacks_is_refused_with_the_nodes_it_has():
    import numasim

    data = _numa02()
    data["workloads"]["slices"]["touch_nodes"] = [2]
    with pytest.raises(numasim.ScenarioError, match=r"node 2, which does not exist on this machine \(nodes 0-1\)"):
        numasim.from_dict(data)


def test_a_first_touch_bound_under_a_cgroup_or_numactl_policy_keeps_that_policy():
    # The program's own bind cannot escape a cpuset's mems or numactl's membind: the pod's policy places.
    data = _numa02()
    data["workloads"]["slices"].update({"private_touch": "owner", "touch": "threads", "touch_nodes": [1]})
    data["policies"] = [{"label": "bound", "policy": "numactl", "options": {"cpunodebind": [[0]], "membind": [[0]]}}]
    res = run_small(data)
    assert res.run("bound").pods[0].memory_per_node_bytes == [256 * 2**20, 0]


def _bare_38(hz: int = 250):
    """A 3.8-era NumaBalancing on the small machine, its per-thread arrays allocated for 2 threads."""
    import numasim
    from numasim.policies.cfs import CFSOptions
    from numasim.policies.numab import NumaBalancing

    machine = numasim.from_dict(small_scenario()).machine
    nb = NumaBalancing(machine, CFSOptions(kernel="3.8", numa_balancing=True, hz=hz), np.random.default_rng(0),
                       [0] * machine.n_nodes, 125)
    nb._alloc(2, 1)
    return nb


def test_3_8_moves_a_page_only_after_two_faults_in_a_row_from_the_faulting_node():
    from numasim.policies.numab_faults import ERA_38, faults

    nb = _bare_38()
    nb.l_tid, nb.l_nid = np.full(1, -1, dtype=np.int64), np.full(1, -1, dtype=np.int64)
    nb.t_known[:] = True
    nb._may[:] = True
    free = np.full(nb.n, 2**40, dtype=np.int64)

    def fault(tid: int, cpu_node: int) -> int:
        """Thread ``tid`` on ``cpu_node`` faults the one chunk (on node 0); the node it moves to, or -1."""
        nb._cpu_nid[tid] = cpu_node
        dst = np.full(1, -2, dtype=np.int64)
        faults(0, np.array([tid]), np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64), dst, nb._cpu_nid,
               nb._may, free, np.zeros(nb.n, dtype=np.bool_), nb.l_tid, nb.l_nid, nb.t_known, nb.t_membuf,
               nb.t_cpubuf, nb.t_loc, nb.t_seq, nb.t_pref, nb.t_group, nb.g_mem, nb.g_cpu, nb.g_active,
               0, 0, ERA_38, nb.rate, 0, -1.0)
        return int(dst[0])

    assert fault(0, 1) == -1  # a first fault never moves the page
    assert fault(1, 0) == -1  # local
    assert fault(0, 1) == -1  # the previous fault came from node 0
    assert fault(0, 1) == 1   # the second in a row from node 1 moves it there


def test_3_8_period_grows_ten_jiffies_a_fault_that_moves_nothing_up_to_its_maximum():
    nb = _bare_38(hz=250)  # 10 jiffies = 40 ms
    nb.t_period[:] = [100.0, 4990.0]
    nb._order[:2] = [0, 1]
    nb._counts[:2] = [3, 2]
    nb._moves_buf = np.array([[7], [1], [0], [0]], dtype=np.int64)  # one chunk of thread 0 moved
    nb._period_38(2, 1, 1)
    assert nb.t_period.tolist() == [100.0 + 2 * 40.0, 5000.0]
    nb._period_38(1, 0, 512)  # without THP each 4 KiB page of a chunk is a fault
    assert nb.t_period[0] == 5000.0


def test_3_8_period_goes_back_to_its_minimum_each_60_s():
    # A process whose pages are all local faults without moving anything, so its threads' periods
    # grow to seconds (one 256 MB scan, 128 faults, every 2-5 s by 40-60 s); the reset at 60 s brings
    # the scanning task's back to 100 ms, so a second scan follows within the same second.
    data = _numa02()
    data["workloads"]["slices"].update({"private_touch": "owner", "touch": "threads"})
    data.update(duration="75s", sample_interval="1s")
    data["policies"] = [data["policies"][1]]
    res = run_small(data)
    faults = res.run("numab").timeseries["hinting_faults"]
    assert max(faults[40:59]) == 128 and sum(faults[40:59]) <= 128 * 8
    assert max(faults[59:63]) >= 256


def test_a_first_touch_bound_to_a_remote_node_takes_longer_than_a_local_one():
    # What the touch costs follows where its pages go: four threads on node 0 clearing 4 GiB bound to
    # node 1 write across the link, at the remote latency, and start their work later.
    def work_starts(nodes: list[int]) -> int:
        data = small_scenario(
            workloads={"w": {"base": "stream", "touch": "threads", "touch_gbps": 8.0, "touch_nodes": nodes}},
            pods=[{"name": "p", "threads": 4, "memory": "4GiB", "profile": "w"}],
            policies=[{"label": "n0", "policy": "numactl", "options": {"cpunodebind": [[0]], "membind": None}}],
            duration="1s", warmup="0s", sample_interval="10ms")
        run = run_small(data).run("n0")
        assert run.pods[0].memory_per_node_bytes[nodes[0]] == 4 * 2**30
        return next(i for i, x in enumerate(run.timeseries["throughput"]) if x)

    assert work_starts([1]) > 1.1 * work_starts([0])


def test_a_thread_moved_away_from_its_memory_refills_its_cache_at_the_remote_latency():
    # One compute-bound thread (no DRAM misses, so only the refill after its move differs) with a
    # large cache footprint, its memory first touched on node 0 or node 1, moved to node 1 at 1 s:
    # refilling from node 0 (remote) costs more of the window than refilling from node 1.
    def run(node: int) -> float:
        data = small_scenario(
            workloads={"w": {"base": "cpu-bound", "cycles_per_op": 1000, "cache_footprint_mib": 512.0,
                             "touch_gbps": 50.0, "touch_nodes": [node]}},
            pods=[{"name": "p", "threads": 1, "memory": "64MiB", "profile": "w"}],
            policies=[{"label": "t", "policy": "taskset", "options": {"cpus": ["4"], "at": "1s"}}],
            duration="3s", warmup="500ms")
        data["machine"]["cpu_numbering"] = "block"
        run = run_small(data).run("t")
        assert run.cross_node_migrations == 1
        return run.throughput

    away, toward = run(0), run(1)
    assert away < toward * 0.995
