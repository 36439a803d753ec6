"""Pods made of several processes (containers): each its own address space, coherence domain,
stop-the-world pauses and NUMA-balancing group; the pod's CPU limit and placement shared."""

from __future__ import annotations

import pytest

import numasim

from .conftest import run_small, simulate, small_scenario

PRIVATE = {"cycles_per_op": 2000, "llc_misses_per_op": 10, "mlp": 2.0, "shared_fraction": 0.0,
           "touch_gbps": 8.0, "cache_footprint_mib": 0.1, "requests": {"mode": "closed", "ops": 200, "think_ms": 0.2}}


def _pod(profile: dict, processes: int, policies: list[dict] | None = None, threads: int = 6, **over) -> dict:
    return small_scenario(
        workloads={"w": profile},
        pods=[{"name": "p", "threads": threads, "processes": processes, "memory": "1536MiB", "profile": "w"}],
        policies=policies or [{"label": "cfs", "policy": "cfs"}], duration="2s", warmup="1s", **over)


def test_threads_with_only_private_memory_run_alike_in_one_process_or_several():
    one, three = run_small(_pod(PRIVATE, 1)).run("cfs"), run_small(_pod(PRIVATE, 3)).run("cfs")
    assert one.throughput == three.throughput and one.locality == three.locality


def test_coherence_stays_within_a_process():
    writer = {**PRIVATE, "shared_fraction": 0.5, "coherence_misses_per_op": 20.0}
    quiet = {**writer, "coherence_misses_per_op": 0.0}
    # One process per thread: no other thread shares its written lines, so it pays nothing.
    alone = run_small(_pod(writer, 6)).run("cfs").throughput
    assert alone == pytest.approx(run_small(_pod(quiet, 6)).run("cfs").throughput, rel=1e-9)
    # One process of six threads pays cache-to-cache transfers.
    assert run_small(_pod(writer, 1)).run("cfs").throughput < 0.95 * alone


def test_each_process_has_its_own_address_space():
    sim = simulate(_pod({**PRIVATE, "shared_fraction": 0.5, "pause_interval_ms": 50, "pause_ms": 5}, 2))
    view = sim.view
    assert view.processes == ((0, (0, 1, 2)), (0, (3, 4, 5)))
    assert list(view.thread_process) == [0, 0, 0, 1, 1, 1]
    for proc, (_pod_index, members) in enumerate(view.processes):
        regions = view.process_regions(proc)
        assert sorted(owner for _rid, owner, _nodes in regions) == [-1, *members]  # its shared heap, its threads' own
        assert view.process_memory(proc) == 768 * 2**20  # half the pod's memory each


def test_numa_balancing_groups_threads_by_process():
    data = _pod({**PRIVATE, "shared_fraction": 1.0, "requests": None}, 2, threads=8,
                policies=[{"label": "nb", "policy": "cfs", "options": {"numa_balancing": True}}])
    data["duration"], data["warmup"] = "4s", "3s"
    sim = simulate(data)
    groups = sim.policy.numab.groups
    assert set(groups) <= {0, 1} and groups  # one group per process that shared pages
    for proc, g in groups.items():
        assert g.tasks <= set(sim.proc_tids[proc])  # never a thread of the other process


def test_more_processes_than_threads_is_refused():
    with pytest.raises(numasim.ScenarioError, match="processes"):
        numasim.from_dict(_pod(PRIVATE, 7))


def test_each_process_is_execd_by_the_pods_first_and_its_threads_fork_from_its_own_first(monkeypatch):
    # sched_balance_find_dst_cpu: another process of the pod is exec'd (SD_BALANCE_EXEC) from the CPU of
    # the pod's first thread, which started it; a thread is cloned (a fork) from its own process's main thread.
    from numasim.policies.cfs import CFS

    calls = []
    real = CFS.find_dst_cpu

    def spy(self, cpu, nr, allowed, fork=True):
        out = real(self, cpu, nr, allowed, fork)
        calls.append((cpu, fork, out))
        return out

    monkeypatch.setattr(CFS, "find_dst_cpu", spy)
    data = _pod({**PRIVATE, "requests": None}, 2, threads=4, policies=[{"label": "cfs", "policy": "cfs"}])
    data["duration"], data["warmup"] = "200ms", "0s"
    sim = simulate(data)
    assert sim.view.processes == ((0, (0, 1)), (0, (2, 3)))
    (s0, f0, c0), (s1, f1, c1), (s2, f2, c2), (s3, f3, c3) = calls[:4]  # threads 0-3, in the order they start
    assert not f0  # the pod's first: exec'd from the runtime's CPU
    assert (s1, f1) == (c0, True)  # its process's second: forked from it
    assert (s2, f2) == (c0, False)  # the second process's first: exec'd from the pod's first thread's CPU
    assert (s3, f3) == (c2, True)  # and its second thread: forked from its own process's first
