"""Kubernetes node managers and CFS bandwidth control."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numasim

from .conftest import run_small, small_scenario


@st.composite
def k8s_scenarios(draw):
    pods = []
    for i in range(draw(st.integers(1, 4))):
        threads = draw(st.integers(1, 6))
        limit = draw(st.sampled_from([float(threads), max(0.5, threads - 0.5), 1.0, 2.0]))
        pod = {"name": f"p{i}", "replicas": draw(st.integers(1, 3)), "threads": threads, "cpu_limit": limit,
               "memory": f"{draw(st.integers(64, 6000))}MiB", "profile": draw(st.sampled_from(["java", "cpu-bound"]))}
        if draw(st.booleans()):
            pod["requests"] = {"cpu": min(limit, draw(st.sampled_from([0.5, 1.0, 2.0])))}
        pods.append(pod)
    options = {
        "cpu_manager_policy": draw(st.sampled_from(["none", "static"])),
        "topology_manager_policy": draw(st.sampled_from(["none", "best-effort", "restricted", "single-numa-node"])),
        "topology_manager_scope": draw(st.sampled_from(["container", "pod"])),
        "reserved_cpus": draw(st.integers(1, 2)),
        "reconcile_period": "300ms",
    }
    if draw(st.booleans()):
        options.update(memory_manager_policy="Static", reserved_memory="256MiB")
    data = small_scenario(pods=pods, policies=[{"label": "k8s", "policy": "k8s", "options": options}])
    data["duration"], data["warmup"], data["sample_interval"] = "1500ms", "500ms", "100ms"
    data["seed"] = draw(st.integers(0, 1000))
    return data


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k8s_scenarios())
def test_kubelet_invariants(data):
    s = numasim.from_dict(data)
    res = numasim.run(s)
    trace = res.traces["k8s"]
    pods = trace.pods
    exclusive = {p.index: frozenset(p.admission.info["cpus"]) for p in pods
                 if p.status == "running" and p.admission.info.get("exclusive_cpus")}
    reserved = frozenset(s.variants[0].policy(s.variants[0].options, s.machine, np.random.default_rng(0)).reserved)
    # Exclusive CPUs are never shared, and never reserved.
    seen: set[int] = set()
    for cpus in exclusive.values():
        assert not (cpus & seen) and not (cpus & reserved)
        seen |= cpus
    # A pod with exclusive CPUs runs only there; after the reconcile period no other pod runs there.
    reconciled = 300_000_000 + max((p.arrival_ns for p in pods), default=0)
    owner = {c: i for i, cpus in exclusive.items() for c in cpus}
    for time, tid, cpu in trace.placements:
        if cpu < 0:
            continue
        pod = int(trace.thread_pod[tid])
        if pod in exclusive:
            assert cpu in exclusive[pod]
        elif time > reconciled and cpu in owner:
            assert owner[cpu] == pod, f"shared thread {tid} on exclusive CPU {cpu} at {time}"
    # A rejected pod never runs.
    cpu = trace.samples["cpu"][-1]
    for p in pods:
        if p.status == "rejected":
            assert cpu[list(p.tids)].sum() == 0 and p.reason.startswith(("TopologyAffinityError", "not enough"))
    # Admission is deterministic.
    again = numasim.run(numasim.from_dict(data)).traces["k8s"].pods
    assert [p.status for p in again] == [p.status for p in pods]


def test_a_throttled_pod_never_exceeds_its_quota():
    data = small_scenario(
        pods=[{"name": "capped", "threads": 4, "cpu_limit": 1.5, "memory": "256MiB", "profile": "cpu-bound"}],
        policies=[{"label": "k8s", "policy": "k8s"}],
    )
    res = run_small(data)
    trace = res.traces["k8s"]
    assert trace.quota_log, "the limit should be enforced"
    for _start, _pod, used in trace.quota_log:
        assert used <= 1.5 * 100e6 * (1 + 1e-9) + 1.0
    full = [u for _s, _p, u in trace.quota_log[2:]]
    assert np.mean(full) == pytest.approx(1.5 * 100e6, rel=0.02)  # it does use its quota
    pod = res.run("k8s").pods[0]
    assert pod.throttled_seconds > 0
    assert pod.cpu_seconds == pytest.approx(1.5 * 2.0, rel=0.03)  # 1.5 CPUs over the 2 s window


def _quota_timers(monkeypatch, pods: int) -> tuple[int, list]:
    from numasim.sim.quota import Bandwidth

    fired = []
    timer = Bandwidth._quota_timer
    monkeypatch.setattr(Bandwidth, "_quota_timer", lambda self, gen: (fired.append(gen), timer(self, gen))[1])
    data = small_scenario(
        pods=[{"name": "tiny", "replicas": pods, "threads": 1, "cpu_limit": "20m", "memory": "16MiB", "profile": "cpu-bound"}],
        policies=[{"label": "k8s", "policy": "k8s"}], duration="1s", warmup="500ms")
    res = numasim.run(numasim.from_dict(data), workers=1, quiet=True, with_sla=False)
    return len(fired), res.traces["k8s"].quota_log


def test_many_limited_pods_on_a_cpu_cost_quota_timers_linear_in_the_pods(monkeypatch):
    # Each throttle reshares its CPU and moves every other limited pod's due time there; one
    # timer at the earliest due keeps that a number, not an event per pod (quadratic until session 28).
    small, log_small = _quota_timers(monkeypatch, 40)
    large, log_large = _quota_timers(monkeypatch, 160)
    for log in (log_small, log_large):
        assert log and all(used <= 0.02 * 100e6 * (1 + 1e-9) + 1.0 for _s, _p, used in log)
    assert small > 40 and large < 6 * small  # 4x the pods: about 4x the timers (16x were it quadratic)


def test_a_limit_below_10m_gets_the_kubelets_minimum_quota_of_1ms_a_period():
    data = small_scenario(
        pods=[{"name": "tiny", "threads": 1, "cpu_limit": "2m", "memory": "16MiB", "profile": "cpu-bound"}],
        policies=[{"label": "k8s", "policy": "k8s"}])
    log = run_small(data).traces["k8s"].quota_log
    assert log and max(used for _s, _p, used in log) == pytest.approx(0.01 * 100e6, rel=1e-6)


def test_a_limit_at_or_above_the_threads_never_throttles():
    data = small_scenario(
        pods=[{"name": "free", "threads": 2, "cpu_limit": 2, "memory": "256MiB", "profile": "cpu-bound"}],
        policies=[{"label": "k8s", "policy": "k8s"}],
    )
    res = run_small(data)
    assert res.traces["k8s"].quota_log == [] and res.run("k8s").pods[0].throttled_seconds == 0


def test_single_numa_node_rejects_a_pod_wider_than_a_node():
    data = small_scenario(
        pods=[{"name": "wide", "threads": 6, "cpu_limit": 6, "memory": "1GiB", "profile": "java"},
              {"name": "narrow", "threads": 1, "cpu_limit": 1, "memory": "1GiB", "profile": "java"}],
        policies=[
            {"label": "snn", "policy": "k8s", "options": {"cpu_manager_policy": "static", "reserved_cpus": 1,
                                                          "topology_manager_policy": "single-numa-node"}},
            {"label": "restricted", "policy": "k8s", "options": {"cpu_manager_policy": "static", "reserved_cpus": 1,
                                                                 "topology_manager_policy": "restricted"}},
        ],
    )
    res = run_small(data)
    snn = {p.name: p for p in res.run("snn").pods}
    assert snn["wide"].status == "rejected" and "single NUMA node" in snn["wide"].reason
    assert snn["narrow"].status == "running" and len(snn["narrow"].placement["nodes"]) == 1
    assert {p.name: p.status for p in res.run("restricted").pods} == {"wide": "running", "narrow": "running"}


@pytest.mark.parametrize(
    ("options", "path", "words"),
    [
        ({"cpu_manager_policy": "static"}, "reserved_cpus", "needs reserved CPUs"),
        ({"memory_manager_policy": "Static"}, "reserved_memory", "needs reserved memory"),
        ({"topology_manager_policy": "numa-aligned"}, "topology_manager_policy", "'single-numa-node'"),
        ({"reserved_cpus": "0-99"}, "reserved_cpus", "outside the machine"),
    ],
)
def test_bad_kubelet_options_are_clear_errors(options, path, words):
    data = small_scenario(policies=[{"label": "k", "policy": "k8s", "options": options}])
    with pytest.raises(numasim.ScenarioError) as info:
        numasim.from_dict(data)
    text = str(info.value)
    assert f"policies[0].options.{path}" in text and words in text


def test_topology_manager_refuses_more_numa_nodes_than_the_kubelet_allows():
    """The kubelet's Topology Manager will not start on more than 8 NUMA nodes; its hint merging is 2^nodes."""
    machine = {"preset": "pacific-broadwell", "sockets": 2, "nodes_per_socket": 5, "cores_per_node": 2,
               "memory_per_node": "4GiB", "slit": None}
    options = {"cpu_manager_policy": "static", "reserved_cpus": 1, "topology_manager_policy": "single-numa-node"}
    data = small_scenario(machine=machine, policies=[{"label": "k", "policy": "k8s", "options": options}])
    with pytest.raises(numasim.ScenarioError) as info:
        numasim.from_dict(data)
    assert "policies[0].options.topology_manager_policy" in str(info.value) and "10 NUMA nodes" in str(info.value)
    kubelet = data["policies"][0]["options"]
    kubelet["topology_manager_policy"] = "none"
    numasim.from_dict(data)  # the CPU Manager alone has no such limit
    data["machine"]["nodes_per_socket"] = 4
    kubelet["topology_manager_policy"] = "single-numa-node"
    numasim.from_dict(data)  # 8 nodes is the kubelet's limit, allowed


def test_cpu_less_numa_nodes_count_toward_the_kubelets_limit():
    # cadvisor lists every NUMA node to the kubelet, memory-only ones too: 8 with CPUs and 6 CXL/HBM-like ones is 14.
    machine = {"preset": "sapphirerapids-8480-e3s", "nodes_per_socket": 4, "slit": None}
    options = {"cpu_manager_policy": "static", "reserved_cpus": 1, "topology_manager_policy": "best-effort"}
    data = small_scenario(machine=machine, policies=[{"label": "k", "policy": "k8s", "options": options}])
    spec = numasim.from_dict({**data, "policies": [{"label": "cfs", "policy": "cfs"}]})
    assert len(spec.machine.cpu_nodes) == 8 and spec.machine.n_nodes > 8
    with pytest.raises(numasim.ScenarioError, match=f"the machine has {spec.machine.n_nodes} NUMA nodes"):
        numasim.from_dict(data)


_MASKS = [frozenset(c) for k in range(1, 5) for c in itertools.combinations(range(4), k)]


@given(st.lists(st.dictionaries(st.sampled_from(_MASKS), st.booleans()), min_size=1, max_size=3))
def test_the_bit_mask_merge_of_hints_is_the_kubelets_iteration_of_every_combination(providers):
    from numasim.policies.k8s import merge_hints

    merged: dict[frozenset[int], bool] = {}
    for combo in itertools.product(*[list(p.items()) for p in providers]):  # the kubelet's loop, as sets
        mask = frozenset.intersection(*[mk for mk, _ in combo])
        if mask:
            merged[mask] = merged.get(mask, False) or all(p for _, p in combo)
    expected = sorted(merged.items(), key=lambda kv: (not kv[1], len(kv[0]), sorted(kv[0])))
    assert merge_hints(providers, range(4)) == expected
