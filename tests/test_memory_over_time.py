"""Memory over time: memory that grows while threads work, and short-lived per-request buffers.

Metamorphic checks with exact expectations: a growing memory is touched at its allocation
rate where the thread runs at that moment; buffers allocated per request are local to
wherever the thread runs, or follow an explicit memory policy.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import run_small, small_scenario

GB = 1e9
LONE = {"cycles_per_op": 2000, "llc_misses_per_op": 10, "mlp": 2.0, "shared_fraction": 1.0,
        "cache_footprint_mib": 0.1}


def _one_thread(profile: dict[str, Any], policies: list[dict], memory: str = "4GiB",
                duration: str = "1s", warmup: str = "500ms") -> dict:
    data = small_scenario(
        workloads={"w": profile},
        pods=[{"name": "p", "threads": 1, "memory": memory, "profile": "w"}],
        policies=policies, duration=duration, warmup=warmup,
    )
    data["machine"]["cpu_numbering"] = "block"  # CPUs 0-3 on node 0, 4-7 on node 1
    return data


def _pod(result, label: str):
    return result.run(label).pods[0]


PIN0 = {"label": "pin0", "policy": "numactl", "options": {"cpunodebind": [[0]], "membind": None}}
# CPU affinity to node 1 from 500 ms: the thread starts where CFS puts it (node 0 on an idle
# machine: the first idlest group), and moves.
LATE1 = {"label": "late1", "policy": "taskset", "options": {"cpus": ["4-7"], "at": "500ms"}}


def test_growing_memory_is_touched_at_the_allocation_rate_while_the_thread_works():
    grow = _one_thread({**LONE, "touch": "work", "touch_gbps": 0.5}, [PIN0])
    before = _one_thread({**LONE, "touch": "threads", "touch_gbps": 0.5}, [PIN0])
    g, b = _pod(run_small(grow), "pin0"), _pod(run_small(before), "pin0")
    # 1 s of a whole core at 0.5 GB per CPU-second, in whole 2 MiB chunks; the cache refill
    # of the thread's first placement is the only CPU time that allocates nothing.
    assert sum(g.memory_per_node_bytes) == pytest.approx(0.5 * GB, rel=0.01)
    assert g.memory_per_node_bytes[1] == 0  # local: where the thread ran
    assert g.throughput > 0
    # A start-up touch of 4 GiB at 0.5 GB/s lasts 8.6 s: no work in the window.
    assert b.throughput == 0
    assert sum(b.memory_per_node_bytes) < 0.51 * GB  # (the touch's stores also wait for memory)


def test_growing_memory_lands_where_the_thread_ran_while_it_grew():
    grow = run_small(_one_thread({**LONE, "touch": "work", "touch_gbps": 1.0}, [LATE1], warmup="900ms"))
    burst = run_small(_one_thread({**LONE, "touch": "threads", "touch_gbps": 8.0}, [LATE1], memory="2GiB",
                                  warmup="900ms"))
    g, b = _pod(grow, "late1").memory_per_node_bytes, _pod(burst, "late1").memory_per_node_bytes
    # Half a second on node 0, then half a second on node 1, at 1 GB per CPU-second.
    assert g[0] == pytest.approx(0.5 * GB, rel=0.03)
    assert g[1] == pytest.approx(0.5 * GB, rel=0.03)
    # Touched in one burst before the move: all of it stays on node 0 (CFS alone never moves pages).
    assert b == [2 * 2**30, 0]
    # After the move the burst's memory is all remote; of the grown memory, the share on node 1
    # rises from 0.4/0.9 at the window's start (900 ms) to 0.5 at its end.
    assert burst.run("late1").locality == pytest.approx(0.0, abs=1e-9)
    assert 0.4 / 0.9 < grow.run("late1").locality < 0.5


@pytest.mark.parametrize("tf", [0.0, 0.3, 0.8])
def test_per_request_buffers_are_local_wherever_the_thread_moved(tf):
    data = _one_thread({**LONE, "touch_gbps": 8.0, "transient_fraction": tf}, [LATE1], memory="1GiB",
                       warmup="600ms")
    # The heap was touched on node 0 before the move; after it only the fresh buffers are local.
    assert run_small(data).run("late1").locality == pytest.approx(tf, abs=1e-6)


@pytest.mark.parametrize("options, expected", [
    ({"cpunodebind": [[0]], "membind": [[1]]}, 0.0),  # bound elsewhere: buffers too
    ({"cpunodebind": [[0]], "interleave": [[0, 1]]}, 0.5),  # interleaved: buffers too
    ({"cpunodebind": [[0]], "membind": None}, 1.0),  # local
])
def test_per_request_buffers_follow_the_memory_policy(options, expected):
    data = _one_thread({**LONE, "touch_gbps": 8.0, "transient_fraction": 0.5},
                       [{"label": "n", "policy": "numactl", "options": options}], memory="1GiB")
    assert run_small(data).run("n").locality == pytest.approx(expected, abs=1e-6)


def test_no_transient_buffers_change_nothing():
    base = small_scenario(policies=[{"label": "cfs", "policy": "cfs"}], duration="2s", warmup="1s")
    zero = small_scenario(workloads={"java": {"base": "java-transactions", "touch_gbps": 8.0,
                                              "transient_fraction": 0.0}},
                          policies=[{"label": "cfs", "policy": "cfs"}], duration="2s", warmup="1s")
    a, b = run_small(base).run("cfs"), run_small(zero).run("cfs")
    assert a.throughput == b.throughput and a.locality == b.locality


PRIVATE = {"cycles_per_op": 2000, "llc_misses_per_op": 10, "mlp": 2.0, "shared_fraction": 0.0,
           "touch_gbps": 8.0, "cache_footprint_mib": 0.1}


def _eight_threads(profile: dict[str, Any], policies: list[dict], duration: str = "1s", warmup: str = "500ms"):
    """One always-runnable pod of 8 threads on the small machine's 8 CPUs: CFS puts 4 on each node."""
    data = small_scenario(workloads={"w": profile},
                          pods=[{"name": "p", "threads": 8, "memory": "256MiB", "profile": "w"}],
                          policies=policies, duration=duration, warmup=warmup)
    return run_small(data)


def test_private_memory_touched_by_the_pods_threads_at_large_spreads_over_its_nodes():
    cfs = [{"label": "cfs", "policy": "cfs"}]
    owner = _eight_threads(PRIVATE, cfs).run("cfs")
    pod = _eight_threads({**PRIVATE, "private_touch": "pod"}, cfs).run("cfs")
    assert owner.locality == pytest.approx(1.0, abs=0.02)  # each thread touched its own data where it runs
    # 16 chunks per thread, round robin over the nodes of 8 threads, 4 on each node: half local.
    assert pod.locality == pytest.approx(0.5, abs=0.02)
    assert sum(pod.pods[0].memory_per_node_bytes) == 256 * 2**20


def test_numa_balancing_moves_collector_placed_private_data_to_its_owner():
    both = [{"label": "cfs", "policy": "cfs"},
            {"label": "numab", "policy": "cfs", "options": {"numa_balancing": True}}]
    r = _eight_threads({**PRIVATE, "private_touch": "pod"}, both, duration="8s", warmup="6s")
    assert r.run("cfs").locality == pytest.approx(0.5, abs=0.02)
    # Private faults always migrate (should_numa_migrate_memory), after the two-stage filter.
    assert r.run("numab").locality > 0.9


def test_private_access_share_sets_the_misses_not_the_bytes():
    # The main thread touches the shared half of the memory on its node; each thread its private
    # half where it runs (4 threads on each node). Threads away from the main thread's node
    # find only their private memory local: locality (1 + share of misses to private) / 2.
    half = {**PRIVATE, "shared_fraction": 0.5, "touch": "main"}
    cfs = [{"label": "cfs", "policy": "cfs"}]
    assert _eight_threads(half, cfs).run("cfs").locality == pytest.approx(0.75, abs=0.02)
    hot = _eight_threads({**half, "private_access_share": 0.9}, cfs)
    assert hot.run("cfs").locality == pytest.approx(0.95, abs=0.02)
    assert sum(hot.run("cfs").pods[0].memory_per_node_bytes) == 256 * 2**20  # the bytes did not change
