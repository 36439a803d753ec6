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
    sim.policy.restarted(tid, sim.view)
    assert tid not in group.tasks and tid not in nb.tasks and tid not in nb.t_order.tolist()
    assert nb.t_pref[tid] == -1 and not nb.t_known[tid] and nb.t_group[tid] == -1 and nb.t_total[tid] == 0
    members = [nb.tasks[t] for t in group.tasks]
    assert group.mem == pytest.approx(sum(t.mem.sum(axis=1) for t in members))  # the group's faults: its members'
    assert group.total == pytest.approx(sum(t.total for t in members))


def test_a_restart_costs_a_cold_cache():
    # Restarts every 200 ms on a pinned, compute-bound pod: nothing moves but the caches start cold.
    pinned = [{"label": "ts", "policy": "taskset", "options": {"cpus": ["0-3"]}}]
    cold = run_small(_data(200, pinned, cache_footprint_mib=16)).run("ts").throughput
    warm = run_small(_data(None, pinned, cache_footprint_mib=16)).run("ts").throughput
    small = run_small(_data(200, pinned, cache_footprint_mib=0)).run("ts").throughput
    assert cold < 0.99 * warm and small == pytest.approx(warm, rel=1e-6)  # (rounding of the re-queueing)


def test_restarts_count_in_the_run_budget():
    def events(restart):
        sc = numasim.from_dict(_data(restart, NUMAB))
        return estimate(sc, select_variants(sc, ["nb"]), None, False).events

    assert events(0.01) > 10 * events(None)  # a hundred restarts a second: far more work, refused if too much
