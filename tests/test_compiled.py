"""The engine's compiled functions (numasim.sim.core, numasim.sim.events) give what the same code gives run as Python.

numba compiles them; ``NUMBA_DISABLE_JIT=1`` makes them plain Python functions over the
same numpy arrays. A scenario that goes through most stops of the compiled path (SMT
speeds, first touch at start-up and while working, CFS quotas (k8s enforces the CPU
limit), open- and closed-mode requests, wake-ups placed by each policy, idle balancing and
its moves, moves across nodes, NUMA balancing) is run both ways in separate processes,
and every figure of the results must be the same to the last bit; so must an overcommitted
machine's, whose runqueues grow longer than any before (the policy's slice for them asked
for: NEEDS_SLICES). Not reached: the logs filling up between two events (NEEDS_FLUSH),
and a time per op unknown at a re-share inside the compiled events (NEEDS_TAU; Python's
re-shares reach it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import OVERCOMMITTED, small_scenario

SCRIPT = """
import json, sys
import numasim
data = json.loads(sys.argv[1])
res = numasim.run(numasim.from_dict(data), workers=1, with_sla=False)
print(json.dumps(res.to_json()["runs"], sort_keys=True))
"""


def _scenario() -> dict:
    return small_scenario(
        machine={"preset": "pacific-broadwell", "cores_per_node": 2, "memory_per_node": "16GiB", "smt": True},
        workloads={
            "java": {"base": "java-transactions", "touch_gbps": 8.0},
            "grow": {"base": "java-transactions", "touch": "work", "touch_gbps": 4.0},
            "open": {"base": "java-transactions", "requests": {"mode": "open", "ops": 30, "rate_per_s": 400}},
        },
        pods=[
            {"name": "app", "replicas": 2, "threads": 3, "memory": "2GiB", "profile": "java", "cpu_limit": 2},
            {"name": "grower", "threads": 2, "memory": "1GiB", "profile": "grow"},
            {"name": "server", "threads": 2, "memory": "1GiB", "profile": "open"},
        ],
        duration="2s",
        warmup="500ms",
        policies=[
            {"label": "cfs", "policy": "cfs"},
            {"label": "cfs+numab", "policy": "cfs", "options": {"numa_balancing": True}},
            {"label": "esxi", "policy": "esxi"},
            {"label": "k8s", "policy": "k8s"},  # the one that enforces CPU limits: CFS quotas
        ],
    )


def _overcommitted() -> dict:
    """16 threads on 8 CPUs, and 8 more from 1 s on: runqueues longer than any before (the
    policy's slice asked for then: NEEDS_SLICES), moves across nodes from wake-ups."""
    return small_scenario(**{**OVERCOMMITTED, "duration": "2s", "warmup": "500ms", "replications": 1,
        "pods": [{"name": "app", "replicas": 4, "threads": 4, "memory": "2GiB", "profile": "java"},
                 {"name": "burst", "threads": 8, "memory": "1GiB", "profile": "java", "start": "1s"}],
        "policies": [{"label": "cfs", "policy": "cfs"}, {"label": "esxi", "policy": "esxi"},
                     {"label": "numactl", "policy": "numactl"}]})


def _run(jit: bool, scenario: dict) -> list:
    env = dict(os.environ)
    env.pop("NUMBA_DISABLE_JIT", None)
    if not jit:
        env["NUMBA_DISABLE_JIT"] = "1"
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(scenario)], env=env, cwd=root,
                         capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout)


def test_compiled_and_python_runs_are_identical():
    compiled, python = _run(True, _scenario()), _run(False, _scenario())
    assert [r["label"] for r in compiled] == ["cfs", "cfs+numab", "esxi", "k8s"]
    assert compiled == python
    # The scenario reaches what it is meant to: work was done, and every pod ran.
    for run in compiled:
        assert run["throughput"] > 0
    assert compiled[-1]["throttled_seconds"] > 0  # the quota bound


def test_compiled_and_python_runs_are_identical_when_overcommitted():
    compiled, python = _run(True, _overcommitted()), _run(False, _overcommitted())
    assert compiled == python
    assert [r["label"] for r in compiled] == ["cfs", "esxi", "numactl"]
    assert all(r["throughput"] > 0 and r["migrations"] > 0 for r in compiled)


def test_the_event_path_is_compiled_without_reference_counting():
    """Every compiled function of the event path goes through ``numasim.jit.kernel`` (no reference counting
    of its arrays: docs/architecture.md), where numba has the option; the rate solve's fixed point, which
    allocates, stays plain."""
    import importlib

    from numba.core.registry import CPUDispatcher

    from numasim import jit

    if not jit._has_nrt_option():
        pytest.skip("this numba has no _nrt option: kernel is plain njit")
    names = ["numasim.sim.core", "numasim.sim.events", "numasim.sim.firsttouch", "numasim.sim.arrivals",
             "numasim.sim.memory", "numasim.policies.rules", "numasim.policies.numab_faults", "numasim.policies.balance"]
    seen = 0
    for name in names:
        module = importlib.import_module(name)
        for attr, f in vars(module).items():
            if isinstance(f, CPUDispatcher) and f.py_func.__module__ == name:
                assert f.targetoptions.get("_nrt") is False, f"{name}.{attr}"
                seen += 1
    assert seen >= 45
    from numasim.sim.fixed_point import fixed_point
    assert fixed_point.targetoptions.get("_nrt") is None
