"""The engine carries out, checks and charges policy decisions; results have one schema."""

from __future__ import annotations

import json

import numpy as np
import pytest

import numasim
import numasim.cli
from numasim import Admission, Move, Policy, PolicyError, register
from numasim.policies.api import MoveChunks
from numasim.policies import registry as base

from .conftest import run_small, small_scenario


@register
class _OutsideAffinity(Policy):
    """A buggy policy: pins every thread to CPU 0, then moves one to CPU 1."""

    name = "test-outside-affinity"

    def admit(self, pod, sim):
        return Admission(affinity=tuple(frozenset({0}) for _ in pod.tids))

    def place(self, tid, sim):
        return 0

    def next_tick(self, now):
        return now + 10_000_000

    def tick(self, sim):
        active = np.flatnonzero(sim.thread_active)
        return [Move(int(active[0]), 1)] if active.size else []


@register
class _Rejects(Policy):
    name = "test-rejects-second"

    def admit(self, pod, sim):
        if pod.index == 1:
            return Admission(accepted=False, reason="TopologyAffinityError: test")
        return Admission()

    def place(self, tid, sim):
        return int(np.argmin(sim.nr_running))


def test_a_decision_outside_the_affinity_raises_policy_error():
    data = small_scenario(policies=[{"label": "bad", "policy": "test-outside-affinity"}])
    with pytest.raises(PolicyError, match=r"test-outside-affinity.*may not run on CPU 1"):
        run_small(data)


@register
class _BadChunks(Policy):
    """A buggy policy: moves chunks of region 0 that it names by ``chunks`` (options), once memory is placed."""

    name = "test-bad-chunks"
    chunks: tuple = ()

    def place(self, tid, sim):
        return 0

    def next_tick(self, now):
        return now + 10_000_000

    def tick(self, sim):
        return [MoveChunks(0, self.chunks, 0, -1, 1.0)] if sim.pod_memory().sum() > 0 else []


@pytest.mark.parametrize("chunks", [(10**6,), (-1,), (0, 0, 10**6), (0.5,), ("0",)])
def test_moving_chunks_a_region_lacks_raises_policy_error(monkeypatch, chunks):
    """A chunk index outside the region (a negative one used to count from the end), or not an integer."""
    monkeypatch.setattr(_BadChunks, "chunks", chunks)
    data = small_scenario(policies=[{"label": "bad", "policy": "test-bad-chunks"}])
    with pytest.raises(PolicyError, match=r"test-bad-chunks.*chunks must be indices"):
        run_small(data)


def test_a_rejected_pod_never_runs_and_is_reported():
    res = run_small(small_scenario(policies=[{"label": "r", "policy": "test-rejects-second"}]))
    pods = res.run("r").pods
    assert [p.status for p in pods] == ["running", "rejected"]
    assert pods[1].reason.startswith("TopologyAffinityError")
    assert pods[1].throughput == 0 and pods[1].cpu_seconds == 0
    assert any(e[1] == "rejected" for e in res.run("r").events)


def test_policies_from_entry_points_are_found(monkeypatch):
    class EP:
        name = "from-plugin"

        def load(self):
            class Plugin(Policy):
                name = "from-plugin"

                def place(self, tid, sim):
                    return 0

            return Plugin

    monkeypatch.setattr(base, "entry_points", lambda group: [EP()] if group == "numasim.policies" else [])
    monkeypatch.setattr(base, "_ENTRY_POINTS_LOADED", False)
    assert "from-plugin" in base.available_policies()
    base._REGISTRY.pop("from-plugin", None)


def test_bind_beyond_a_node_kills_the_pod_with_a_reason():
    data = small_scenario(
        pods=[{"name": "big", "threads": 2, "memory": "20GiB", "profile": "java"}],
        policies=[{"label": "bind", "policy": "numactl", "options": {"cpunodebind": [[0]], "membind": [[0]]}}],
    )
    pod = run_small(data).run("bind").pods[0]
    assert pod.status == "failed" and "out of memory" in pod.reason


def test_first_touch_spills_to_the_other_node_when_full():
    data = small_scenario(
        pods=[{"name": "big", "threads": 2, "memory": "20GiB", "profile": "java"}],
        policies=[{"label": "ts", "policy": "taskset", "options": {"cpus": ["0-7:2"]}}],  # node 0
    )
    pod = run_small(data).run("ts").pods[0]
    assert pod.status == "running"
    assert pod.memory_per_node_bytes[0] == 16 * 2**30 and pod.memory_per_node_bytes[1] > 0


def test_json_schema_contract(tmp_path):
    res = run_small(small_scenario())
    doc = json.loads(json.dumps(res.to_json()))
    assert doc["schema"] == "numasim.result/1"
    assert set(doc) >= {"scenario", "baseline", "runs"}
    for run in doc["runs"]:
        assert set(run) >= {"label", "policy", "throughput", "relative_throughput", "locality", "pods", "timeseries"}
        for pod in run["pods"]:
            assert set(pod) >= {"name", "throughput", "locality"}
        ts = run["timeseries"]
        assert len(ts["time_s"]) == len(ts["throughput"])
        # Per pod and per link over time: one column per pod / per named link, adding up.
        assert all(len(row) == len(run["pods"]) for row in ts["pod_throughput"])
        assert [sum(row) for row in ts["pod_throughput"]] == pytest.approx(ts["throughput"], rel=1e-3, abs=1e-3)
        assert run["links"] == ["socket 1 -> 0", "socket 0 -> 1"]
        assert all(len(row) == 2 for row in ts["link_gbps"])
        assert [max(row) > 0 for row in ts["link_gbps"]] == [u > 0 for u in ts["link_util_max"]]
    base_run = next(r for r in doc["runs"] if r["label"] == doc["baseline"])
    assert base_run["relative_throughput"] == 1.0
    frame = res.to_frame()
    assert list(frame["label"]) == [r["label"] for r in doc["runs"]]
    assert len(res.pods_frame()) == sum(len(r["pods"]) for r in doc["runs"])


def test_cli_writes_json_and_prints_a_table(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    import yaml

    path.write_text(yaml.safe_dump(small_scenario()), encoding="utf-8")
    out = tmp_path / "out.json"
    assert numasim.cli.main(["run", str(path), "--json", str(out), "--workers", "1"]) == 0
    text = capsys.readouterr().out
    for label in ("cfs", "numactl", "esxi", "taskset"):
        assert label in text
    assert json.loads(out.read_text())["runs"][0]["label"] == "cfs"


def test_select_variants_by_label_first_then_policy_name():
    from numasim.runner import select_variants

    s = numasim.load("scenarios/pacific.yaml")
    labels = lambda names: [v.label for v in select_variants(s, names)]  # noqa: E731
    assert labels(["cfs"]) == ["cfs"]  # the label, not every variant of the cfs policy
    assert labels(["numactl"]) == ["cfs", "numactl"]  # the baseline always runs
    assert labels(["taskset"]) == ["cfs", "taskset-node", "taskset-naive", "taskset-late"]


def test_pauses_and_arrivals_come_at_the_same_moments_whatever_the_policy(monkeypatch):
    # Common random numbers: each process's pauses and each pod's open-mode arrivals draw from
    # streams of their own, so the variants of one seed differ by their policies, not by their
    # draws (an open-mode pod starts when its workers have touched their memory, which depends
    # on the policy: its arrivals then start later, but their spacing is the same).
    from numasim.sim import drivers

    seen: dict[str, dict] = {}
    original = drivers.Drivers._stream

    def recording(self, kind, ident):
        rng = original(self, kind, ident)
        if kind not in (drivers.STREAM_PAUSES, drivers.STREAM_ARRIVALS):
            return rng  # the idle pull's (drawn as the policy makes CPUs idle), the picks of idle workers
        draws = seen.setdefault(self.policy.name, {}).setdefault((kind, ident), [])

        class Recorder:
            def exponential(self, scale):
                draws.append(rng.exponential(scale))
                return draws[-1]

            def standard_exponential(self, size):  # a pod's times between arrivals, in batches
                batch = rng.standard_exponential(size)
                draws.extend(batch.tolist())
                return batch

        return Recorder()

    monkeypatch.setattr(drivers.Drivers, "_stream", recording)
    data = small_scenario(
        workloads={"java": {"base": "java-transactions", "touch_gbps": 8.0},
                   "open": {"base": "java-transactions", "requests": {"mode": "open", "ops": 30, "rate_per_s": 300}}},
        pods=[{"name": "app", "replicas": 2, "threads": 3, "memory": "2GiB", "profile": "java"},
              {"name": "server", "threads": 2, "memory": "1GiB", "profile": "open"}],
        policies=[{"label": "cfs", "policy": "cfs"}, {"label": "numactl", "policy": "numactl"}],
        replications=1)
    run_small(data, workers=1, with_sla=False)
    assert set(seen) == {"cfs", "numactl"}, list(seen)
    cfs, numactl = seen["cfs"], seen["numactl"]
    assert set(cfs) == set(numactl) and {k for k, _ in cfs} == {drivers.STREAM_PAUSES, drivers.STREAM_ARRIVALS}
    for key, draws in cfs.items():
        n = min(len(draws), len(numactl[key]))
        assert n >= 5 and draws[:n] == numactl[key][:n], key


def test_open_mode_arrivals_come_at_their_rate_and_queue_in_order_when_the_service_falls_behind():
    # One worker serving long requests, arrivals at 5,000/s: the queue (a ring per pod, 16 long
    # at first) grows, keeps its arrival times in order, and they are spaced 1/rate apart on average.
    from numasim.runner import _simulate
    from numasim.sim import layout

    data = small_scenario(
        workloads={"open": {"base": "java-transactions", "requests": {"mode": "open", "ops": 2000, "rate_per_s": 5000}}},
        pods=[{"name": "server", "threads": 1, "memory": "256MiB", "profile": "open"}],
        policies=[{"label": "cfs", "policy": "cfs"}], duration="2s", warmup="500ms", replications=1)
    scenario = numasim.from_dict(data)
    sim, _, _ = _simulate(scenario, scenario.variants[0], 1, None)
    P, Q = sim._P, sim._Q
    n, head = int(P[layout.P_QLEN, 0]), int(P[layout.P_QHEAD, 0])
    assert Q.shape[1] > 16 and n > 1000, (Q.shape, n)
    times = np.array([Q[0, (head + k) % Q.shape[1]] for k in range(n)])
    gaps = np.diff(times)
    assert np.all(gaps >= 1) and 0 < times[0] and times[-1] <= 2_000_000_000
    assert abs(gaps.mean() / 200_000 - 1) < 4 / np.sqrt(len(gaps)) + 0.01  # exponential gaps: sd = mean


@pytest.mark.parametrize("preset, policy", [("pacific-broadwell", {"policy": "cfs"}),
                                            ("skylake-8160-8s", {"policy": "cfs"}),
                                            ("skylake-8160-8s", {"policy": "numactl", "options": {
                                                "cpunodebind": None, "membind": None, "interleave": "all"}})])
def test_one_threads_time_per_op_is_the_same_alone_as_among_others(preset, policy):
    # A move across nodes sets one thread's time per op (Rates._set_tau_one, plain floats); the
    # rate solve sets all of them as arrays: the same numbers, bit for bit, on 2 and 8 nodes,
    # memory on one node or interleaved over all.
    from numasim.runner import _simulate
    from numasim.sim.state import WORK

    data = small_scenario(machine={"preset": preset, "cores_per_node": 2, "memory_per_node": "16GiB"},
                          pods=[{"name": "app", "replicas": 4, "threads": 3, "memory": "2GiB", "profile": "java"}],
                          policies=[{"label": "p", **policy}], duration="2s", warmup="1s", replications=1)
    scenario = numasim.from_dict(data)
    sim, _, _ = _simulate(scenario, scenario.variants[0], 1, None)
    fields = ("r_tau", "r_cshare", "r_ishare", "r_latency", "r_local")
    working = [t for t in range(len(sim.t_cpu)) if sim.t_phase[t] == WORK]
    assert len(working) == 12
    spread = 0
    for tid in working:
        sim._set_tau(np.array([tid, working[0] if tid != working[0] else working[1]]))
        batch = [sim.__getattribute__(f)[tid] for f in fields], sim.r_access[tid].copy()
        assert sim._set_tau_one(tid)
        alone = [sim.__getattribute__(f)[tid] for f in fields], sim.r_access[tid].copy()
        assert batch[0] == alone[0] and np.array_equal(batch[1], alone[1]), (tid, batch, alone)
        spread = max(spread, int((alone[1] > 0).sum()))
    assert spread == 8 if policy["policy"] == "numactl" else spread >= 2  # rows with several nodes' shares
