"""Metamorphic relations: change an input in a known direction, check the output moves that way."""

from __future__ import annotations

import pytest

from .conftest import OVERCOMMITTED, run_small, small_scenario

def test_one_socket_means_all_memory_is_local():
    data = small_scenario()
    data["machine"].update(sockets=1, cores_per_node=8)
    res = run_small(data)
    for run in res.runs:
        assert run.locality == pytest.approx(1.0), run.label
        assert run.cross_node_migrations == 0


@pytest.mark.parametrize("profile", ["cpu-bound"])
def test_without_memory_traffic_policies_tie(profile):
    data = small_scenario(**{**OVERCOMMITTED, "policies": small_scenario()["policies"]})
    data["pods"][0]["profile"] = profile
    res = run_small(data)
    for run in res.runs:
        assert res.relative(run.label) == pytest.approx(1.0, abs=0.02), run.label
        assert run.locality is None  # no DRAM traffic, no locality to speak of


def _gain(**machine) -> float:
    data = small_scenario(**OVERCOMMITTED)
    data["machine"].update(machine)
    res = run_small(data)
    assert res.run("cfs").locality < 0.9  # CFS spreads the pods over both nodes
    return res.relative("numactl")


def test_higher_remote_latency_raises_the_numactl_gain():
    low, high = _gain(remote_latency_ns=110.0), _gain(remote_latency_ns=220.0)
    assert high > low + 0.02


def test_more_memory_intensity_raises_the_numactl_gain():
    gains = []
    for misses in (500, 3000):
        data = small_scenario(**OVERCOMMITTED)
        data["workloads"]["java"]["llc_misses_per_op"] = misses
        gains.append(run_small(data).relative("numactl"))
    assert gains[1] > gains[0] + 0.02


def test_a_smaller_interconnect_hurts_cfs_not_numactl():
    wide, narrow = (run_small({**small_scenario(**OVERCOMMITTED), "machine": {**small_scenario()["machine"], "interconnect_gbps": g}})
                    for g in (30.3, 0.5))
    assert narrow.run("cfs").throughput < wide.run("cfs").throughput * 0.99
    assert narrow.run("numactl").throughput == pytest.approx(wide.run("numactl").throughput, rel=0.005)


def test_two_hyperthreads_share_one_core():
    def run(cpus):
        data = small_scenario(
            pods=[{"name": "calc", "threads": 2, "memory": "64MiB", "profile": "cpu-bound"}],
            policies=[{"label": "ts", "policy": "taskset", "options": {"cpus": [cpus]}}],
        )
        data["machine"].update(smt=True, cpu_numbering="block")
        return run_small(data).run("ts").throughput

    # Block numbering with SMT: CPUs 0-3 are node 0's cores, 8-11 their second threads.
    siblings, cores = run("0,8"), run("0,1")
    assert siblings / cores == pytest.approx(1.25 / 2, rel=0.01)  # smt_yield of the preset
