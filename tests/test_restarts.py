"""Threads started anew (``restart_interval_ms``): placed as new threads, forgotten by NUMA balancing,
their memory kept (docs/model.md, Threads started anew)."""

from __future__ import annotations

import numpy as np
import pytest

import numasim
from numasim.budget import estimate
from numasim.runner import select_variants

from .conftest import run_small, simulate, small_scenario

MS = 1_000_000


def _data(restart_ms, policies, threads=4, duration="3s", **profile):
    return small_scenario(
        workloads={"w": {"base": "java-transactions", "requests": None, "pause_interval_ms": None, "touch_gbps": 8.0,
                         "restart_interval_ms": restart_ms, **profile}},
        pods=[{"name": "app", "replicas": 1, "threads": threads, "memory": "2GiB", "profile": "w"}],
        policies=policies, duration=duration, warmup="1s")


NUMAB = [{"label": "nb", "policy": "cfs", "options": {"numa_balancing": True}}]


def test_a_restart_after_the_end_of_the_run_changes_nothing():
    later = run_small(_data(10_000, NUMAB)).run("nb")
    never = run_small(_data(None, NUMAB)).run("nb")
    assert later.throughput == never.throughput and later.locality == never.locality


def test_every_working_thread_is_placed_anew_at_each_restart():
    sim = simulate(_data(1000, [{"label": "cfs", "policy": "cfs"}]))
    log = np.array(sim.placements, dtype=np.int64).reshape(-1, 3)  # (ns, thread, CPU)
    for at in (1000 * MS, 2000 * MS):
        placed = log[log[:, 0] == at]
        assert sorted(placed[:, 1].tolist()) == [0, 1, 2, 3]  # each of the pod's threads, once
        # Fork placement on a machine whose CPUs the ended threads left idle: one thread per core.
        cores = sim.machine.cpu_core[placed[:, 2]]
        assert len(set(cores.tolist())) == 4
    assert (log[:, 0] > 0).sum() >= 8


def test_pinned_threads_restart_within_their_cpus():
    sim = simulate(_data(1000, [{"label": "ts", "policy": "taskset", "options": {"cpus": ["0-3"]}}]))
    log = np.array(sim.placements, dtype=np.int64).reshape(-1, 3)
    assert set(log[:, 2].tolist()) <= {0, 1, 2, 3}
    assert (log[:, 0] == 1000 * MS).sum() == 4


def test_a_restarted_thread_is_a_new_task_to_numa_balancing():
    # task_numa_free: the old task's faults leave its group; the new one has none and no preferred node.
    sim = simulate(_data(None, NUMAB, threads=6, duration="4s", shared_fraction=1.0))
    nb = sim.policy.numab
    (proc, group), = nb.groups.items()
    tid = min(group.tasks)
    assert nb.tasks[tid].total > 0 and nb.t_pref[tid] >= 0
    faulted_last = nb.l_tid == tid
    assert faulted_last.any()
    sim.policy.restarted(tid, sim.view)
    # Its pages' last faults are an exited task's (another pid to the next one), not the new task's.
    assert (nb.l_tid[faulted_last] == nb.dead).all() and not (nb.l_tid == tid).any() and nb.t_group[nb.dead] == -1
    assert nb.t_born[tid] == sim.view.thread_cpu_time()[tid] > 0  # its scan delay counts from now
    assert tid not in group.tasks and tid not in nb.tasks and tid not in nb.t_order.tolist()
    assert nb.t_pref[tid] == -1 and not nb.t_known[tid] and nb.t_group[tid] == -1 and nb.t_total[tid] == 0
    members = [nb.tasks[t] for t in group.tasks]
    assert group.mem == pytest.approx(sum(t.mem.sum(axis=1) for t in members))  # the group's faults: its members'
    assert group.total == pytest.approx(sum(t.total for t in members))


def test_a_new_thread_reloads_its_cache_unless_it_starts_on_its_predecessors_core():
    from numasim.sim import layout
    from numasim.sim.perf import LINE

    sim = simulate(_data(None, [{"label": "cfs", "policy": "cfs"}], cache_footprint_mib=16))
    m, F = sim.machine, sim._F
    tid = 0
    cpu = int(sim.t_cpu[tid])
    same_core = [c for c in range(m.n_cpus) if m.cpu_core[c] == m.cpu_core[cpu]]
    far = next(c for c in range(m.n_cpus) if m.cpu_node[c] != m.cpu_node[cpu])
    F[layout.F_DEBT, tid] = 0.0
    sim._cold_cache(tid, same_core[-1], cpu)
    assert F[layout.F_DEBT, tid] == 0.0  # its predecessor's core: the cache is warm
    sim._cold_cache(tid, far, cpu)
    cold = (16 * 2**20 / LINE) * float(sim.r_latency[tid]) / max(F[layout.F_MLP, tid], 1.0)
    assert F[layout.F_DEBT, tid] == pytest.approx(cold)  # another node's core: the whole footprint
    sim._cold_cache(tid, far, cpu)
    assert F[layout.F_DEBT, tid] == pytest.approx(cold)  # a debt replaced, not piled up


def test_restarts_keep_a_throttled_pod_running():
    # Threads held by the pod's CPU limit at a restart are queued again (held while throttled).
    limited = [{"label": "k8s", "policy": "k8s"}]
    def ops(restart):
        data = _data(restart, limited, duration="4s")
        data["pods"][0]["cpu_limit"] = 1.5
        return run_small(data).run("k8s").throughput
    assert ops(500) == pytest.approx(ops(None), rel=0.05)
    assert ops(537.3) == pytest.approx(ops(None), rel=0.05)


def test_thinking_and_waiting_threads_restart_too():
    for requests in ({"mode": "closed", "ops": 30, "think_ms": 20}, {"mode": "open", "ops": 30, "rate_per_s": 50}):
        sim = simulate(_data(1000, [{"label": "cfs", "policy": "cfs"}], requests=requests))
        log = np.array(sim.placements, dtype=np.int64).reshape(-1, 3)
        for at in (1000 * MS, 2000 * MS):
            assert sorted(log[log[:, 0] == at, 1].tolist()) == [0, 1, 2, 3], requests
        assert np.asarray(sim.c_ops).sum() > 0


def test_the_engine_tells_the_policy_of_each_restart(monkeypatch):
    from numasim.policies.cfs import CFS

    seen = []
    monkeypatch.setattr(CFS, "restarted", lambda self, tid, sim: seen.append((sim.now, tid)))
    simulate(_data(1000, NUMAB))
    assert sorted(seen) == [(at * MS, t) for at in (1000, 2000, 3000) for t in range(4)]  # (3 s: the last instant)


def test_restarts_count_in_the_run_budget():
    def events(restart):
        sc = numasim.from_dict(_data(restart, NUMAB))
        return estimate(sc, select_variants(sc, ["nb"]), None, False).events

    assert events(0.01) > 10 * events(None)  # a hundred restarts a second: far more work, refused if too much


def test_a_list_of_intervals_restarts_at_each_in_turn_the_last_repeating():
    # A benchmark's points of different lengths (SPECjbb2005: short points below the expected peak, then long).
    sim = simulate(_data([300, 200, 1000], [{"label": "cfs", "policy": "cfs"}]))
    log = np.array(sim.placements, dtype=np.int64).reshape(-1, 3)
    at = sorted(set(log[log[:, 0] > 0, 0].tolist()))
    assert at == [300 * MS, 500 * MS, 1500 * MS, 2500 * MS]


def test_restarts_with_collector_threads_restart_only_the_workers():
    # A JVM's parallel collector threads (gc_threads) persist while its workers are started anew; a
    # restart in a stop-the-world pause places the paused workers, which wake there when the pause ends.
    data = _data(250, [{"label": "cfs", "policy": "cfs"}], gc_threads=2, pause_interval_ms=40.0, pause_ms=15.0)
    sim = simulate(data)
    log = np.array(sim.placements, dtype=np.int64).reshape(-1, 3)
    at = [t * MS for t in range(1250, 3000, 250)]
    for t in at:
        assert sorted(log[log[:, 0] == t][:, 1].tolist()) == [0, 1, 2, 3]  # the workers, never threads 4 and 5
    assert set(log[~np.isin(log[:, 0], at)][:, 1].tolist()) >= {4, 5}  # the collectors were placed once, at start
    with_restarts = run_small(data).run("cfs").throughput
    without = run_small(_data(None, [{"label": "cfs", "policy": "cfs"}], gc_threads=2, pause_interval_ms=40.0,
                              pause_ms=15.0)).run("cfs").throughput
    assert 0.8 * without < with_restarts < without  # cold caches and fresh placements cost a little
