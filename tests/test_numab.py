"""Automatic NUMA balancing: it helps where it should, costs little where it cannot help."""

from __future__ import annotations

import numpy as np

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
