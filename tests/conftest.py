"""Shared helpers for the tests: small scenarios built as plain data."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

import numasim

SMALL_MACHINE: dict[str, Any] = {
    "preset": "pacific-broadwell",
    "cores_per_node": 4,
    "memory_per_node": "16GiB",
}


def small_scenario(**over: Any) -> dict[str, Any]:
    """A quick scenario: 2 nodes x 4 cores, two pods of 3 Java threads, 3 s simulated."""
    data: dict[str, Any] = {
        "name": "small",
        "machine": copy.deepcopy(SMALL_MACHINE),
        "workloads": {"java": {"base": "java-transactions", "touch_gbps": 8.0}},
        "pods": [{"name": "app", "replicas": 2, "threads": 3, "memory": "2GiB", "profile": "java"}],
        "duration": "3s",
        "warmup": "1s",
        "sample_interval": "250ms",
        "policies": [
            {"label": "cfs", "policy": "cfs"},
            {"label": "numactl", "policy": "numactl"},
            {"label": "esxi", "policy": "esxi"},
            {"label": "taskset", "policy": "taskset", "options": {"cpus": ["0-7:2", "1-7:2"]}},
        ],
    }
    data.update(copy.deepcopy(over))
    return data


@pytest.fixture
def small() -> dict[str, Any]:
    return small_scenario()


# 16 Java threads on the small machine's 8 CPUs (2 nodes x 4 cores): CPU overcommit; cfs and numactl only.
OVERCOMMITTED = dict(
    pods=[{"name": "app", "replicas": 4, "threads": 4, "memory": "2GiB", "profile": "java"}],
    duration="8s",
    warmup="3s",
    policies=[{"label": "cfs", "policy": "cfs"}, {"label": "numactl", "policy": "numactl"}],
)


def run_small(data: dict[str, Any], **kw: Any) -> numasim.RunResult:
    return numasim.run(numasim.from_dict(data), **kw)


def simulate(data: dict[str, Any], variant: int = 0):
    """The simulation of a scenario's variant (the first by default), run, for a look at its state."""
    from numasim.runner import build_pods
    from numasim.sim.kernel import Simulation

    sc = numasim.from_dict(data)
    v = sc.variants[variant]
    sim = Simulation(sc.machine_of(v), build_pods(sc, v), v.policy(v.options, sc.machine_of(v), np.random.default_rng(1)),
                     sc.spec.duration, sc.spec.warmup, sc.spec.sample_interval, rng=np.random.default_rng(2))
    sim.run()
    return sim
