"""A process's collector threads (``gc_threads``): asleep between stop-the-world pauses, running
during them while the workers wait; their CPU counts, their work is no operation."""

from __future__ import annotations

import pytest

from .conftest import run_small, simulate, small_scenario


# Compute-bound threads that never block on requests and pause 10 ms every 100 ms.
BUSY = {"cycles_per_op": 2000, "llc_misses_per_op": 0, "shared_fraction": 1.0, "touch_gbps": 8.0,
        "cache_footprint_mib": 0.1, "requests": None, "pause_interval_ms": 100, "pause_ms": 10}


def _one_pod(profile: dict, threads: int = 2, processes: int = 1, policies=None, **pod) -> dict:
    return small_scenario(
        workloads={"w": profile},
        pods=[{"name": "p", "threads": threads, "processes": processes, "memory": "512MiB", "profile": "w", **pod}],
        policies=policies or [{"label": "cfs", "policy": "cfs"}], duration="6s", warmup="1s")


def test_collector_threads_that_never_wake_change_nothing():
    # The first pause comes after the run: the collector's threads exist, placed and asleep,
    # and every figure is the run without them, to the last bit.
    late = {**BUSY, "pause_interval_ms": 1e7}
    pol = [{"label": "cfs", "policy": "cfs"}, {"label": "nb", "policy": "cfs", "options": {"numa_balancing": True}}]
    for label in ("cfs", "nb"):
        none = run_small(_one_pod(late, threads=6, policies=pol)).run(label)
        asleep = run_small(_one_pod({**late, "gc_threads": 4}, threads=6, policies=pol)).run(label)
        assert (none.throughput, none.cpu_utilisation, none.migrations) == \
               (asleep.throughput, asleep.cpu_utilisation, asleep.migrations)


def test_collector_threads_run_only_in_pauses_and_do_no_operations():
    # 2 workers on an 8-CPU machine: the collector's 4 threads find idle CPUs, so the workers'
    # throughput is what it was, and the CPU used grows by the collector's share of the pauses.
    base = run_small(_one_pod(BUSY)).run("cfs")
    gc = run_small(_one_pod({**BUSY, "gc_threads": 4})).run("cfs")
    assert gc.throughput == pytest.approx(base.throughput, rel=1e-9)
    busy_base, busy_gc = base.cpu_utilisation * 8, gc.cpu_utilisation * 8  # CPUs busy on average
    pause_share = 1.0 - busy_base / 2  # the workers' CPUs idle while they wait
    assert 0.05 < pause_share < 0.15  # 10 ms in every 110 ms or so
    assert busy_gc - busy_base == pytest.approx(4 * pause_share, rel=0.15)


def test_collector_threads_sleep_between_pauses():
    sim = simulate(_one_pod({**BUSY, "gc_threads": 3}))
    helpers = sim.proc_helpers[0]
    assert helpers == (2, 3, 4) and sim.pods[0].tids == (0, 1)  # numbered after every pod's workers
    assert sim.view.processes == ((0, (0, 1, 2, 3, 4)),)
    # At the run's end: a collector thread runs only while its process's workers are paused.
    for h in helpers:
        assert sim.t_active[h] == all(sim.t_paused[w] for w in sim.pods[0].tids)
    cpu = [sim.c_cpu[t] for t in range(5)]
    assert all(c > 0 for c in cpu)
    assert max(cpu[2:]) < 0.2 * min(cpu[:2])  # about a tenth of the workers' time


def test_collector_threads_count_against_the_cpu_quota():
    # A container's 2-CPU limit (the kubelet's CFS quota): 2 workers fit; 6 collector threads
    # running at once in each pause do not.
    pol = [{"label": "k8s", "policy": "k8s"}]
    calm = run_small(_one_pod(BUSY, policies=pol, cpu_limit=2)).run("k8s")
    burst = run_small(_one_pod({**BUSY, "gc_threads": 6}, policies=pol, cpu_limit=2)).run("k8s")
    assert calm.throttled_seconds == 0
    assert burst.throttled_seconds > 0
    assert burst.cpu_utilisation * 8 <= 2.0 + 1e-6  # never more than the quota on average
    assert burst.throughput < calm.throughput  # the workers lose the periods the collector used up


def test_collector_threads_follow_their_workers_cpus():
    # taskset applied late: the workers' new CPUs carry the collector along.
    pol = [{"label": "late", "policy": "taskset", "options": {"cpus": ["0-3"], "at": "2s"}}]
    sim = simulate(_one_pod({**BUSY, "gc_threads": 2}, policies=pol))
    for h in sim.proc_helpers[0]:
        assert sim.t_affinity[h] == frozenset(range(4))
        assert sim.t_cpu[h] in range(4)
    # numactl from the start: the collector starts in the bound nodes' CPUs.
    pol = [{"label": "bound", "policy": "numactl", "options": {"cpunodebind": [[1]], "membind": [[1]]}}]
    sim = simulate(_one_pod({**BUSY, "gc_threads": 2}, policies=pol))
    node1 = frozenset(c for c in range(8) if sim.machine.cpu_node[c] == 1)
    for h in sim.proc_helpers[0]:
        assert sim.t_affinity[h] == node1 and sim.t_cpu[h] in node1


def test_gc_threads_need_pauses():
    from numasim.errors import ScenarioError

    import numasim
    with pytest.raises(ScenarioError, match="gc_threads needs pause_interval_ms"):
        numasim.from_dict(_one_pod({**BUSY, "pause_interval_ms": None, "gc_threads": 2}))


def test_the_run_estimate_counts_collector_threads_and_bounds_the_run():
    import numasim
    from numasim.budget import estimate
    from numasim.runner import run

    data = _one_pod({**BUSY, "gc_threads": 8})
    s0, s8 = numasim.from_dict(_one_pod(BUSY)), numasim.from_dict(data)
    e0, e8 = (estimate(s, list(s.variants), None, False) for s in (s0, s8))
    assert e8.events > e0.events and e8.run_memory_bytes > e0.run_memory_bytes
    made = run(s8, workers=1, with_sla=False, quiet=True).run("cfs").sim_events
    assert made <= e8.events  # the estimate errs high, collector threads included


def test_pod_and_time_series_throughput_are_the_workers_only():
    # Two processes, two pods: per-pod and per-interval throughput leave the collector's work out.
    data = _one_pod({**BUSY, "gc_threads": 3}, threads=4, processes=2)
    data["pods"][0]["replicas"] = 2
    res = run_small(data).run("cfs")
    assert sum(p.throughput for p in res.pods) == pytest.approx(res.throughput, rel=1e-9)
    ts = res.timeseries["throughput"]
    per_pod = res.timeseries["pod_throughput"]
    assert all(abs(t - sum(row)) <= 1e-6 * max(t, 1.0) for t, row in zip(ts, per_pod))


def test_a_failed_pod_takes_its_collector_threads_with_it():
    # Bound to node 0 with more memory than the node has: the pod is killed; its collector dies too.
    pol = [{"label": "bound", "policy": "numactl", "options": {"cpunodebind": [[0]], "membind": [[0]]}}]
    data = _one_pod({**BUSY, "gc_threads": 2, "touch": "work", "touch_gbps": 40.0}, policies=pol)
    data["pods"][0]["memory"] = "24GiB"  # node 0 has 16
    sim = simulate(data)
    assert sim.pods[0].status == "failed"
    from numasim.sim.state import DEAD
    assert all(not sim.t_active[t] and sim.t_phase[t] == DEAD for t in sim.pods[0].all_tids)
