"""Invariants that hold for every machine, pod mix and policy (hypothesis)."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numasim

POLICIES = ["cfs", "esxi", "numactl", "taskset", "taskset-late"]


@st.composite
def scenarios(draw):
    sockets = draw(st.integers(1, 2))
    nps = draw(st.integers(1, 2))
    cores = draw(st.integers(1, 4))
    smt = draw(st.booleans())
    numbering = draw(st.sampled_from(["block", "alternate"]))
    ncpus = sockets * nps * cores * (2 if smt else 1)
    machine = {
        "preset": "skylake-8180", "sockets": sockets, "nodes_per_socket": nps, "cores_per_node": cores,
        "smt": smt, "cpu_numbering": numbering, "memory_per_node": "4GiB",
        "memory_bandwidth_gbps": draw(st.floats(2.0, 120.0)), "interconnect_gbps": draw(st.floats(1.0, 60.0)),
        "slit": [[10 if i == j else (11 if i // nps == j // nps else 21) for j in range(sockets * nps)] for i in range(sockets * nps)],
    }
    pods = []
    for i in range(draw(st.integers(1, 3))):
        threads = draw(st.integers(1, 6))
        pods.append({
            "name": f"p{i}", "replicas": draw(st.integers(1, 3)), "threads": threads,
            "cpu_limit": min(threads, ncpus), "memory": f"{draw(st.integers(64, 1500))}MiB",
            "profile": draw(st.sampled_from(["java", "stream", "cpu-bound"])),
            "start": f"{draw(st.integers(0, 500))}ms",
        })
    policy = draw(st.sampled_from(POLICIES))
    if policy.startswith("taskset"):
        cpus = [",".join(str(c) for c in sorted(draw(st.sets(st.integers(0, ncpus - 1), min_size=1, max_size=ncpus))))
                for _ in range(draw(st.integers(1, 3)))]
        variant = {"label": policy, "policy": "taskset", "options": {"cpus": cpus, "at": "700ms" if policy == "taskset-late" else "0s"}}
    else:
        variant = {"label": policy, "policy": policy}
    return {
        "name": "prop", "machine": machine, "seed": draw(st.integers(0, 2**32)),
        "workloads": {
            "java": {"base": "java-transactions", "touch_gbps": 4.0, "requests": {"mode": "closed", "ops": 40, "think_ms": 3}},
            "stream": {"base": "stream"},
            "cpu-bound": {"base": "cpu-bound"},
        },
        "pods": pods, "policies": [variant], "duration": "1500ms", "warmup": "500ms", "sample_interval": "100ms",
    }


def _run(data):
    s = numasim.from_dict(data)
    res = numasim.run(s)
    return res, res.traces[s.variants[0].label]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants(data):
    res, trace = _run(data)
    m = trace.machine
    t = trace.sample_times.astype(float)
    s = trace.samples
    # A CPU runs one thread at a time: its busy time never exceeds the elapsed time.
    assert np.all(s["cpu_busy"] <= t[:, None] * (1 + 1e-9) + 1e-6)
    # CPU time used <= capacity, per thread and in all.
    assert np.all(s["cpu"] <= t[:, None] * (1 + 1e-9) + 1e-6)
    assert np.all(s["cpu"].sum(axis=1) <= m.n_cpus * t * (1 + 1e-9) + 1e-6)
    # No memory controller or link carries more than its bandwidth.
    assert np.all(s["node_util"] <= 1.01)
    assert np.all(s["link_util"] <= 1.01)
    # Pages per node never exceed the node's memory.
    assert np.all(s["pod_memory"].sum(axis=1) <= m.node_memory[None, :])
    # 0 <= locality <= 1.
    run = res.runs[0]
    for value in [run.locality] + [p.locality for p in run.pods]:
        assert value is None or 0.0 <= value <= 1.0 + 1e-12
    assert 0.0 <= run.cpu_utilisation <= 1.0 + 1e-9
    # Pinned threads never leave their cpuset: every placement is inside the affinity in force.
    aff: dict[int, frozenset[int] | None] = {}
    events = sorted([(tm, 0, tid, cpus) for tm, tid, cpus in trace.affinity_log]
                    + [(tm, 1, tid, cpu) for tm, tid, cpu in trace.placements])
    for _tm, kind, tid, val in events:
        if kind == 0:
            aff[tid] = val
        elif val >= 0 and aff.get(tid) is not None:
            assert val in aff[tid], f"thread {tid} placed on {val} outside {sorted(aff[tid])}"
    # Threads of rejected pods never run.
    for pod in trace.pods:
        if pod.status == "rejected":
            assert s["cpu"][-1][list(pod.tids)].sum() == 0


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_same_seed_same_result(data):
    a, _ = _run(data)
    b, _ = _run(data)
    docs = [r.to_json() for r in (a, b)]
    for doc in docs:
        doc["scenario"]["provenance"].pop("created_utc")  # when it ran; everything else is the same
    assert json.dumps(docs[0], sort_keys=True) == json.dumps(docs[1], sort_keys=True)
