"""Hostile input: bounded reading, booleans as numbers, work and memory budgets, safe outputs, safe text.

Every case is refused before any simulation starts, with status 2, one message line and
nothing written.
"""

from __future__ import annotations

import copy
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import numasim
from numasim.budget import (CPU_S_PER_EVENT, DEFAULT_MAX_WORK_S, NUMAB_SCAN_CPU_S, NUMAB_TICKS_PER_S,
                            REPORT_CPU_S_PER_POD, estimate)
from numasim.cli import main
from numasim.errors import ScenarioError
from numasim.model.cpulist import parse_cpulist
from numasim.model.scenario import from_dict, load
from numasim.model.yamlfile import MAX_BYTES, MAX_DEPTH, MAX_NODES

from .test_bad_input import BASE, expect_error, scenario


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


BASE_TEXT = yaml.safe_dump(BASE, sort_keys=False)


@pytest.mark.parametrize("text, words", [
    ("description: " + "[" * 5000 + "]" * 5000 + "\n" + BASE_TEXT, ["nested more than"]),
    ("description: " + "[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2) + "\n" + BASE_TEXT, ["nested more than"]),
    (BASE_TEXT + "duration: 3s\n", ["duplicate key 'duration'", "line"]),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n" + BASE_TEXT, [f"more than {MAX_NODES:,} values"]),
    (BASE_TEXT.replace("seed: 1", "seed: &x [*x]"), ["an alias refers to a node that contains it"]),
    # counted as composed: refused at the first value past the limit, not after building millions
    ("description: [" + "0," * MAX_NODES + "0]\n" + BASE_TEXT, [f"more than {MAX_NODES:,} values: a scenario or machine file"]),
    # control characters are refused by YAML's reader, before any parsing (a traceback until session 27)
    (BASE_TEXT + "description: x\x01\n", ["malformed YAML at line", "#x0001 is not allowed"]),
    ("name: x\x00\n" + BASE_TEXT, ["malformed YAML at line 1", "#x0000 is not allowed"]),
])
def test_yaml_that_would_exhaust_time_or_memory_is_refused(tmp_path, capsys, text, words):
    path = write(tmp_path, text)
    expect_error(capsys, ["validate", path], str(path), None, *words)


def test_a_file_too_large_or_a_device_is_not_read(tmp_path, capsys):
    big = write(tmp_path, "# " + "x" * MAX_BYTES + "\n" + BASE_TEXT)
    expect_error(capsys, ["validate", big], str(big), None, "larger than 4 MiB")
    if Path("/dev/zero").exists():
        expect_error(capsys, ["validate", "/dev/zero"], "/dev/zero", None, "device")


def test_anchors_and_aliases_within_bounds_still_work(tmp_path):
    data = copy.deepcopy(BASE)
    text = "x-opts: &opts {cpunodebind: auto, membind: auto}\n" + yaml.safe_dump(data, sort_keys=False)
    text = text.replace("options:\n    cpunodebind: auto\n    membind: auto", "options: *opts")
    assert "*opts" in text
    with pytest.raises(Exception, match="x-opts"):  # unknown top-level key, not a YAML problem
        load(write(tmp_path, text))


@pytest.mark.parametrize("path, value", [
    ("pods.0.threads", True), ("pods.0.replicas", False), ("duration", True), ("seed", True),
    ("machine.cores_per_node", True), ("pods.0.cpu_limit", True), ("sample_interval", False),
])
def test_true_and_false_are_not_numbers(tmp_path, capsys, path, value):
    data = copy.deepcopy(BASE)
    node = data
    *head, last = path.split(".")
    for key in head:
        node = node[int(key)] if key.isdigit() else node[key]
    node[last] = value
    p = scenario(tmp_path, data)
    dotted = "".join(f"[{k}]" if k.isdigit() else f".{k}" for k in path.split(".")).lstrip(".")
    expect_error(capsys, ["validate", p], str(p), dotted, "not true/false")


def test_a_boolean_field_still_takes_true(tmp_path, capsys):
    p = scenario(tmp_path, machine={"preset": "pacific-broadwell", "smt": True})
    assert main(["validate", str(p)]) == 0


@pytest.mark.parametrize("text, message", [
    ("0-999999999", "CPU 44 is outside"),
    ("1-99:2", "CPU 45 is outside"),
    ("9" * 40, "malformed cpulist item"),
    ("\u0663", "malformed cpulist item"),  # ARABIC-INDIC DIGIT THREE: int() takes it, the kernel does not
    ("0-\uff17", "malformed cpulist item"),  # a fullwidth 7
])
def test_cpulists_are_checked_against_the_machine_before_they_are_built(text, message):
    with pytest.raises(ValueError, match=message):
        parse_cpulist(text, 44)
    assert parse_cpulist("1-44:2", 44) == frozenset(range(1, 44, 2))


def _java(**fields) -> dict:
    """The base pods on a java-transactions workload with ``fields`` changed."""
    return {"workloads": {"j": {"base": "java-transactions", **fields}},
            "pods": [{**BASE["pods"][0], "profile": "j"}]}


@pytest.mark.parametrize("changes, flag, words", [
    ({"duration": "1e9s"}, "--max-work", ["estimated", "--max-work SECONDS", "% of it is the simulated events"]),
    # Each sample costs time and memory: a microsecond interval over seconds is millions of them, where
    # sample_memory allows them (by default it bounds them, sampling less often: test_sampling.py).
    ({"sample_interval": "1ns", "sample_memory": "1TiB"}, "--max-work", ["of it is taking the samples", "use a longer sample_interval"]),
    ({"sample_interval": "1us", "sample_memory": "1TiB"}, "--max-memory", ["GiB"]),
    # Events the workload asks for: arrivals at a rate no thread keeps up with, requests of
    # next to no work with no think time, pauses every nanosecond.
    (_java(requests={"mode": "open", "rate_per_s": 1e9, "ops": 1000}), "--max-work", ["estimated"]),
    (_java(requests={"mode": "closed", "think_ms": 0, "ops": 1e-6}), "--max-work", ["estimated"]),
    (_java(pause_interval_ms=1e-6, pause_ms=1e-6), "--max-work", ["estimated"]),
    # The refusal names the part of the estimate that weighs most, and what makes it smaller.
    ({"duration": "1e6s", "policies": [{"label": "cfs", "policy": "esxi", "options": {"rebalance_period": "1ms"}}]},
     "--max-work", ["of it is the policy's rebalancing every rebalance_period", "use a longer rebalance_period"]),
    # An SLA ladder whose steps last for days, at twice the rate the threads can take.
    ({"sla": {"targets_ms": [50], "levels": [0.5, 2.0], "step": "1e6s"}}, "--max-work", ["estimated"]),
    # A machine whose SLIT has ~240 distances between 256 nodes of 32 CPUs: a NUMA level per distance,
    # each holding every node's span (about 16 GB of scheduling domains).
    ({"machine": {"preset": "skylake-8180-4s", "sockets": 64, "nodes_per_socket": 4, "cores_per_node": 32,
                  "smt": False, "links": None, "remote_latency_ns": None,
                  "slit": [[10 if i == j else 11 + (i * 7919 + j * 104729 + i * j) % 240 if i < j
                            else 11 + (j * 7919 + i * 104729 + i * j) % 240 for j in range(256)] for i in range(256)]}},
     "--max-memory", ["GiB"]),
])
def test_runs_over_budget_are_refused_before_they_start(tmp_path, capsys, changes, flag, words):
    p = scenario(tmp_path, **changes)
    out = tmp_path / "out.json"
    expect_error(capsys, ["run", p, "--quiet", "--json", out], str(p), flag, *words)
    assert not out.exists()


def test_the_results_kept_and_the_outputs_built_from_them_are_in_the_memory_budget(tmp_path, capsys):
    # 3 variants of 300 MiB of sampled values each (about 1.6 GB with the series built from them): every
    # simulation fits 8 GiB, their first seeds' series kept together too, but not with a trace (twice more).
    changes = {"sample_interval": "1us", "sample_memory": "300MiB"}
    sc = from_dict({**copy.deepcopy(BASE), **changes})
    plain = estimate(sc, list(sc.variants), None, False)
    traced = estimate(sc, list(sc.variants), None, False, ("trace",))
    assert plain.run_memory_bytes < 8 * 2**30 and 3 * 2**30 < plain.kept_bytes < 8 * 2**30
    assert traced.kept_bytes == pytest.approx(3 * plain.kept_bytes) and traced.run_memory_bytes == plain.run_memory_bytes
    p = scenario(tmp_path, **changes)
    out = tmp_path / "t.json"
    expect_error(capsys, ["run", p, "--quiet", "--trace", out], str(p), "--max-memory",
                 "the results kept in this process", "and the outputs built from them")
    assert not out.exists()


def test_the_report_costs_cpu_per_pod_and_variant():
    # Its figures take about 2.7 ms a pod and variant (2,500 pods, two variants: 13.7 s measured).
    sc = from_dict({**copy.deepcopy(BASE), "pods": [{**BASE["pods"][0], "replicas": 2500, "memory": "1MB"}]})
    cost = estimate(sc, list(sc.variants), None, False, ("report",)).cpu_seconds
    assert cost - estimate(sc, list(sc.variants), None, False).cpu_seconds == pytest.approx(
        len(sc.variants) * 2500 * REPORT_CPU_S_PER_POD)


def test_the_budget_is_a_flag_and_validate_shows_the_estimate(tmp_path, capsys):
    p = scenario(tmp_path)
    expect_error(capsys, ["run", p, "--quiet", "--max-work", "0.001"], str(p), "--max-work", "over the budget")
    expect_error(capsys, ["run", p, "--quiet", "--max-work", "-1"], "--max-work", None, "positive")
    assert main(["validate", str(p)]) == 0
    text = capsys.readouterr().out
    assert "estimated cost: " in text and "% of it is the" in text  # and the part that weighs most


def test_an_absurd_estimate_reads_as_words_not_digits():
    from numasim.budget import Estimate

    text = Estimate(runs=3, events=4.2e31, cpu_seconds=1e30, run_memory_bytes=5e40).describe()
    assert text == "3 simulations, about 4.2e+31 events, over a million years of CPU in all, up to over a million TiB per simulation"
    text = Estimate(runs=1, events=1234.4, cpu_seconds=4e7, run_memory_bytes=3 * 2**40).describe()
    assert text == "1 simulation, about 1,234 events, 1.3 years of CPU in all, up to 3 TiB per simulation"


def test_the_estimate_limits_cpu_quota_bookkeeping_only_where_a_limit_binds(tmp_path):
    base = {"name": "tiny", "replicas": 200, "threads": 1, "memory": "16MiB", "profile": "cpu-bound"}
    kubelet = [{"label": "cfs", "policy": "cfs"}, {"label": "k8s", "policy": "k8s"},
               {"label": "k8s-noquota", "policy": "k8s", "options": {"cfs_quota": False}}]
    free = from_dict({**BASE, "pods": [base], "policies": kubelet})
    capped = from_dict({**BASE, "pods": [{**base, "cpu_limit": "10m"}], "policies": kubelet})
    cost = [[estimate(s, [v], None, False) for v in s.variants] for s in (free, capped)]
    # Only the kubelet with CFS quota sets one: CFS alone and --cpu-cfs-quota=false never throttle.
    # A throttled thread blocks and wakes each period, so it counts as a thread that blocks (100 events a second).
    assert cost[1][0].events == cost[0][0].events and cost[1][2].events == cost[0][2].events
    assert cost[1][1].events > 5 * cost[0][1].events
    assert cost[1][1].cpu_seconds > 1.5 * cost[0][1].cpu_seconds
    assert cost[1][0].cpu_seconds == cost[0][0].cpu_seconds and cost[1][2].cpu_seconds == cost[0][2].cpu_seconds


def test_the_estimate_counts_staggered_arrivals_each_solving_the_threads_already_there():
    # Pods 1 ns apart each re-solve every running thread's rates: quadratic in the pods, where
    # pods arriving together share one solve (2,500 one-thread pods: 7.4 s against 5.3 s measured).
    # (Threads that block: the balancer's work is then counted alike, whether every CPU stays busy or not.)
    def cost(replicas, stagger):
        pod = {"name": "p", "replicas": replicas, "threads": 1, "memory": "16MiB", "profile": "java-transactions",
               "stagger": stagger}
        s = from_dict({**BASE, "pods": [pod]})
        return estimate(s, list(s.variants), None, False).cpu_seconds

    together, apart = cost(2500, "0ns"), cost(2500, "1ns")
    assert apart - together == pytest.approx(2500 * 2500 / 2 * 1e-6 * len(from_dict(BASE).variants), rel=0.01)
    assert cost(5000, "1ns") - cost(5000, "0ns") == pytest.approx(4 * (apart - together), rel=0.01)


def test_the_estimate_counts_numa_balancing_scans_per_process():
    # Every process is scanned at most once a tick (10 ms), and no more often than its shortest
    # period; each scan is about 150 us of CPU (4,096 one-thread processes: 62 s measured for 2 s).
    def cost(processes, **options):
        pod = {"name": "p", "replicas": 1, "threads": processes, "processes": processes, "memory": "64GB",
               "profile": "java-transactions", "cpu_limit": 8}
        s = from_dict({**BASE, "pods": [pod], "duration": "2s", "warmup": "1s", "replications": 1, "baseline": "x",
                       "policies": [{"label": "x", "policy": "cfs", "options": options}]})
        return estimate(s, list(s.variants), None, False).cpu_seconds

    ticks = NUMAB_TICKS_PER_S * 2 * CPU_S_PER_EVENT  # its own tick's events, apart from the scans
    fast = {"scan_delay_ms": 1, "scan_period_min_ms": 1, "scan_period_max_ms": 1, "scan_size_mb": 0.004}
    scans = cost(4096, numa_balancing=True, **fast) - cost(4096, **fast)
    assert scans == pytest.approx(ticks + 4096 * 100 * 2 * NUMAB_SCAN_CPU_S, rel=0.01)
    # The default scan (256 MB at most every 100 ms): 10 scans a second a process.
    assert cost(16, numa_balancing=True) - cost(16) == pytest.approx(ticks + 16 * 10 * 2 * NUMAB_SCAN_CPU_S, rel=0.01)


@pytest.mark.parametrize("workload", [
    {"base": "cpu-bound", "requests": {"mode": "closed", "ops": 5e-324, "think_ms": 0}},
    {"base": "java-transactions", "pause_interval_ms": 5e-324},
])
def test_subnormal_workload_values_are_costed_not_a_crash(workload):
    # At most one request (or pause) a simulated nanosecond: a huge estimate, refused as over budget, no traceback.
    s = from_dict({**BASE, "workloads": {"w": workload},
                   "pods": [{"name": "p", "threads": 1, "memory": "16MiB", "profile": "w"}]})
    assert estimate(s, list(s.variants), None, False).cpu_seconds > DEFAULT_MAX_WORK_S


def test_the_estimate_errs_high_on_the_reference_scenario():
    # Pacific's default run is 24 simulations of 80 threads, the first seed's going on to climb
    # 4 SLA levels; measured at 117 s on 2 cores (docs/performance-history.md), under 4 CPU minutes:
    # the estimate must not be below that.
    s = load("scenarios/pacific.yaml")
    est = estimate(s, list(s.variants), None, True)
    assert est.runs == 8 * 3
    assert est.cpu_seconds > 240
    assert est.cpu_seconds > estimate(s, list(s.variants), None, False).cpu_seconds * 1.5


@pytest.mark.parametrize("name", ["pacific.yaml", "autonuma.yaml", "governor.yaml", "k8s-topology.yaml",
                                  "cxl-tiering.yaml", "likwid-smt-load-1core-mem-rome", "likwid-load-snc-domain-vs-1core-clx",
                                  "numa01-thread-alloc-numab-vs-idle-milan", "specjbb-4jvm-numab-vs-none-r810",
                                  "autonuma-jbb-8node-eight-instances-numab-vs-none"])
def test_the_estimate_counts_no_fewer_events_than_a_run_makes(name):
    # Events are counted, not timed: each shipped scenario's variants (and validation cases of one
    # thread that never blocks on a large machine, where ticks, refreshes and samples are most of the
    # events, and of many such threads: 256 on Milan's 256 CPUs with NUMA balancing, four SPECjbb JVMs
    # started anew every 30 s, eight on the 8-node DL980), run a second past the warm-up, make no more
    # events than the estimate says.
    from numasim.runner import _simulate
    from numasim.validation import _scenario, load_cases

    s = load(f"scenarios/{name}") if name.endswith(".yaml") else _scenario(load_cases([name])[0])
    duration = min(s.spec.duration, s.spec.warmup + 1_000_000_000)
    for v in s.variants[:3]:
        est = estimate(s, [v], duration, False)
        _, _, trace = _simulate(s, v, 1, duration)
        assert est.events / s.spec.replications >= trace.n_events, v.label


@pytest.mark.parametrize("policy", [
    {"label": "x", "policy": "cfs", "options": {"hz": 100, "numa_balancing": True}},  # NUMA balancing's own tick
    {"label": "x", "policy": "cfs", "options": {"hz": 100, "numa_balancing_tiering": True}},
    {"label": "x", "policy": "esxi", "options": {"rebalance_period": "1ms"}},  # a tick every rebalance period
])
def test_the_estimate_counts_every_kind_of_tick(policy):
    # One thread that never blocks on a small SMT machine: ticks, refreshes and samples are most of the events.
    from numasim.runner import _simulate

    from .conftest import small_scenario

    s = from_dict(small_scenario(
        machine={"preset": "pacific-broadwell", "cores_per_node": 4, "memory_per_node": "16GiB", "smt": True},
        workloads={"stream": {"base": "stream-triad"}}, policies=[policy], duration="3s", warmup="1s",
        pods=[{"name": "app", "threads": 1, "memory": "1GiB", "profile": "stream"}]))
    _, _, trace = _simulate(s, s.variants[0], 1, None)
    assert estimate(s, [s.variants[0]], None, False).events / s.spec.replications >= trace.n_events


@pytest.mark.parametrize("policy", [
    {"label": "x", "policy": "cfs", "options": {"numa_balancing": True}},
    {"label": "x", "policy": "esxi", "options": {"rebalance_period": "1ms"}},
    {"label": "x", "policy": "taskset", "options": {"cpus": ["0-3"]}},  # 64 threads stacked on 4 CPUs
])
@pytest.mark.parametrize("replicas", [2, 16])
def test_threads_that_never_block_make_no_more_events_than_estimated(policy, replicas):
    # Threads without requests run at a rate until something moves them: the estimate gives them 10
    # events a second each, not a blocking thread's 100; overcommitted (64 on 16 CPUs), stacked by
    # affinity or rebalanced every millisecond, they make no more.
    from numasim.runner import _simulate

    from .conftest import small_scenario

    s = from_dict(small_scenario(
        machine={"preset": "pacific-broadwell", "cores_per_node": 4, "memory_per_node": "64GiB", "smt": True},
        workloads={"w": {"base": "java-transactions", "requests": None, "touch": "work", "touch_gbps": 1.0}},
        policies=[policy], duration="4s", warmup="1s",
        pods=[{"name": "app", "replicas": replicas, "threads": 4, "memory": "2GiB", "profile": "w"}]))
    _, _, trace = _simulate(s, s.variants[0], 1, None)
    est = estimate(s, [s.variants[0]], None, False).events / s.spec.replications
    assert trace.n_events <= est < 10 * trace.n_events


def test_the_balancer_is_counted_at_its_busy_interval_only_where_every_cpu_stays_busy():
    # 16 CPUs: 4 pods of 4 threads that never block keep every CPU busy under CFS; anything that can
    # leave a CPU idle (fewer threads, affinity, pauses, a late pod, blocking threads) keeps the worst case.
    from numasim.budget import _always_busy

    from .conftest import small_scenario

    def busy(replicas=4, policy=None, pod=None, **profile):
        s = from_dict(small_scenario(
            machine={"preset": "pacific-broadwell", "cores_per_node": 4, "memory_per_node": "64GiB", "smt": True},
            workloads={"w": {"base": "java-transactions", "requests": None, "pause_interval_ms": None, **profile}},
            policies=[policy or {"label": "x", "policy": "cfs"}],
            pods=[{"name": "app", "replicas": replicas, "threads": 4, "memory": "2GiB", "profile": "w", **(pod or {})}]))
        v = s.variants[0]
        return _always_busy(v, s.pods_of(v), s.profiles_of(v), s.machine_of(v))

    assert busy()
    assert not busy(replicas=3)
    assert not busy(policy={"label": "x", "policy": "taskset", "options": {"cpus": ["0-15"]}})
    assert not busy(policy={"label": "x", "policy": "numactl"})
    assert not busy(policy={"label": "x", "policy": "cfs", "options": {"numa_balancing": True}})  # task moves idle CPUs
    assert not busy(restart_interval_ms=100.0)
    assert not busy(pause_interval_ms=1000.0)
    assert not busy(touch="main")
    assert not busy(requests={"mode": "closed", "ops": 10, "think_ms": 1.0})
    assert not busy(pod={"stagger": "1ms"})
    assert not busy(pod={"memory": "40GiB"})  # 160 GiB on 128: an OOM kill may leave CPUs idle


def test_the_estimate_divides_the_balancer_by_busy_factor_where_every_cpu_stays_busy(monkeypatch):
    # The predicate above, used: the same scenario estimated as busy and as not differs by the
    # balancer's term times (1 - 1 / busy_factor), and by nothing else.
    import numasim.budget as budget

    from .conftest import small_scenario

    s = from_dict(small_scenario(
        machine={"preset": "pacific-broadwell", "cores_per_node": 4, "memory_per_node": "64GiB", "smt": True},
        workloads={"w": {"base": "java-transactions", "requests": None, "pause_interval_ms": None}},
        policies=[{"label": "x", "policy": "cfs"}], duration="10s",
        pods=[{"name": "app", "replicas": 4, "threads": 4, "memory": "2GiB", "profile": "w"}]))
    v = s.variants[0]
    m = s.machine_of(v)
    assert budget._always_busy(v, s.pods_of(v), s.profiles_of(v), m)
    busy = estimate(s, [v], None, False).cpu_seconds
    monkeypatch.setattr(budget, "_always_busy", lambda *a: False)
    idle = estimate(s, [v], None, False).cpu_seconds
    worst = s.spec.replications * 10.0 * m.n_cpus * budget._levels(m) * budget.BALANCER_CPU_S_PER_CPU_LEVEL_S
    assert idle - busy == pytest.approx(worst * (1 - 1 / v.options.busy_factor), rel=1e-9)


def test_one_thread_pods_under_a_cpu_quota_make_no_more_events_than_estimated():
    # Session 28's hostile case: 500 never-blocking one-thread pods limited to 1m on 8 CPUs are throttled
    # and unthrottled every period, 10-18 events a second each: counted as blocking threads (100).
    from numasim.runner import _simulate

    s = from_dict({"name": "t", "machine": {"preset": "pacific-broadwell", "cores_per_node": 4, "smt": False},
                   "pods": [{"name": "p", "replicas": 500, "threads": 1, "memory": "16MiB", "profile": "cpu-bound",
                             "cpu_limit": "1m"}],
                   "duration": "2s", "warmup": "1s", "sample_interval": "1s", "policies": [{"label": "k8s", "policy": "k8s"}]})
    _, _, trace = _simulate(s, s.variants[0], 1, None)
    assert estimate(s, [s.variants[0]], None, False).events / s.spec.replications >= trace.n_events


def test_first_touch_steps_are_counted_as_events():
    # 16 threads first-touch 256 GiB in 64 MiB steps in a run whose ticks, refreshes and threads make a
    # few hundred events: the steps make more than those (several threads' steps may end in one event,
    # so fewer than the 4,096 counted), and the estimate, which counts them by the pods' memory, is not below.
    from numasim.budget import TOUCH_STEP
    from numasim.runner import _simulate

    from .conftest import small_scenario

    s = from_dict(small_scenario(
        machine={"preset": "pacific-broadwell", "cores_per_node": 4, "memory_per_node": "160GiB"},
        workloads={"w": {"base": "cpu-bound", "touch_gbps": 40.0}},
        policies=[{"label": "x", "policy": "cfs", "options": {"hz": 100}}], duration="2s", warmup="1s",
        pods=[{"name": "app", "replicas": 4, "threads": 4, "memory": "64GiB", "profile": "w"}]))
    _, _, trace = _simulate(s, s.variants[0], 1, None)
    est = estimate(s, [s.variants[0]], None, False).events / s.spec.replications
    steps = 4 * 64 * 2**30 / TOUCH_STEP
    assert est - steps < trace.n_events <= est


def test_a_machine_past_the_modelled_size_is_refused(tmp_path, capsys):
    slit = [[10 if i == j else 21 for j in range(64)] for i in range(64)]
    p = scenario(tmp_path, machine={"preset": "pacific-broadwell", "sockets": 64, "cores_per_node": 1024,
                                    "smt": True, "slit": slit})
    expect_error(capsys, ["validate", p], str(p), "machine", "131,072 CPUs", "65,536")


@pytest.mark.parametrize("field, value", [
    ("label", "c\x1b[31mfs"), ("label", "a\x07b"), ("name", "x\x1b]0;title\x07"), ("description", "a\x00b"),
])
def test_control_characters_in_names_and_labels_are_refused(tmp_path, capsys, field, value):
    data = copy.deepcopy(BASE)
    if field == "label":
        data["policies"][0]["label"] = value
        data["baseline"] = value
        where = "policies[0].label"
    else:
        data[field] = value
        where = field
    p = scenario(tmp_path, data)
    expect_error(capsys, ["validate", p], str(p), where, "control character")


def test_rich_markup_in_names_is_printed_as_text(tmp_path, capsys):
    data = copy.deepcopy(BASE)
    data["name"] = "[red]s[/"
    data["policies"] = [{"label": "[bold]x[/", "policy": "cfs"}]
    data["baseline"] = "[bold]x[/"
    out = tmp_path / "o[1].json"
    assert main(["run", str(scenario(tmp_path, data)), "--quiet", "--workers", "1", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "[bold]x[/" in printed and "[red]s[/" in printed and out.exists()


def _outputs_refused(tmp_path, capsys, argv_tail, words, source=None):
    p = scenario(tmp_path)
    before = set(os.listdir(tmp_path))
    expect_error(capsys, ["run", p, "--quiet", *argv_tail], source or argv_tail[0] + " " + str(argv_tail[1]), None,
                 *words)
    assert set(os.listdir(tmp_path)) == before  # nothing written, no temporary file left


def test_an_empty_output_path_is_an_error(tmp_path, capsys):
    _outputs_refused(tmp_path, capsys, ["--json", ""], ["empty"])


def test_the_scenario_is_never_overwritten(tmp_path, capsys):
    p = scenario(tmp_path)
    text = p.read_text()
    expect_error(capsys, ["run", p, "--quiet", "--csv", p], f"--csv {p}", None, "is an input of this command")
    assert p.read_text() == text
    # Nor a machine file or a policy file the command reads.
    machine = tmp_path / "mine.yaml"
    machine.write_text("preset: pacific-broadwell\n")
    expect_error(capsys, ["run", p, "--quiet", "--machine", str(machine), "--json", str(machine)],
                 f"--json {machine}", None, "is an input of this command")
    policy = tmp_path / "pol.py"
    policy.write_text("from numasim.policies.cfs import CFS\n\n\nclass Mine(CFS):\n    name = 'mine'\n")
    expect_error(capsys, ["run", p, "--quiet", "--policy-file", f"{policy}:Mine", "--csv", str(policy)],
                 f"--csv {policy}", None, "is an input of this command")
    assert machine.read_text() == "preset: pacific-broadwell\n" and "class Mine" in policy.read_text()


def test_symlinks_fifos_and_devices_are_not_replaced(tmp_path, capsys):
    target = tmp_path / "target.txt"
    target.write_text("keep")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    _outputs_refused(tmp_path, capsys, ["--json", link], ["symbolic link"])
    assert link.is_symlink() and target.read_text() == "keep"
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    _outputs_refused(tmp_path, capsys, ["--csv", fifo], ["FIFO"])
    _outputs_refused(tmp_path, capsys, ["--report", "/dev/null"], ["device"])


def test_over_long_names_and_twice_the_same_file_are_errors(tmp_path, capsys):
    long = tmp_path / ("x" * 300 + ".json")
    p = scenario(tmp_path)
    expect_error(capsys, ["run", p, "--quiet", "--json", long], f"--json {long}"[:60] + "...", None, "too long")
    out = tmp_path / "a.out"
    expect_error(capsys, ["run", p, "--quiet", "--json", out, "--csv", out], f"--csv {out}", None, "same file as --json")


def test_outputs_are_written_all_together_or_not_at_all(tmp_path, capsys, monkeypatch):
    import numasim.atomic as atomic

    p = scenario(tmp_path, policies=[{"label": "cfs", "policy": "cfs"}])
    js, csv = tmp_path / "o.json", tmp_path / "o.csv"
    real_open = open
    calls = {"n": 0}

    def failing_open(file, mode="r", *a, **kw):  # the second temporary file cannot be created
        if "x" in mode:
            calls["n"] += 1
            if calls["n"] == 2:
                raise OSError(28, "No space left on device")
        return real_open(file, mode, *a, **kw)

    monkeypatch.setattr(atomic, "open", failing_open, raising=False)
    rc = main(["run", str(p), "--quiet", "--workers", "1", "--json", str(js), "--csv", str(csv)])
    err = capsys.readouterr().err
    assert rc == 2 and "No space left" in err
    assert sorted(os.listdir(tmp_path)) == ["scenario.yaml"]


def test_csv_cells_a_spreadsheet_would_run_are_quoted(tmp_path):
    data = copy.deepcopy(BASE)
    data["policies"][1]["label"] = '=HYPERLINK("http://x","y")'
    data["policies"] = data["policies"][:2]
    p = write(tmp_path, yaml.safe_dump(data))
    csv = tmp_path / "out.csv"
    assert main(["run", str(p), "--quiet", "--workers", "1", "--no-sla", "--csv", str(csv)]) == 0
    import pandas as pd

    frame = pd.read_csv(csv)
    assert set(frame["label"]) == {"cfs", """'=HYPERLINK("http://x","y")"""}
    assert (frame["throughput"] > 0).all()  # numbers stay numbers


def test_from_dict_refuses_booleans_too():
    data = copy.deepcopy(BASE)
    data["pods"][0]["threads"] = True
    with pytest.raises(Exception, match="not true/false"):
        from_dict(data)


# ------------------------------------------------------------------ plug-ins
from numasim import Policy, register  # noqa: E402
from numasim.policies import registry  # noqa: E402


class _Base(Policy):
    def place(self, tid, sim):
        return 0


@register
class _Raises(_Base):
    name = "test-raises"

    def place(self, tid, sim):
        return {}["no such key"]


@register
class _ReturnsNone(_Base):
    name = "test-none"

    def place(self, tid, sim):
        return None


@register
class _ReturnsFloat(_Base):
    name = "test-float"

    def place(self, tid, sim):
        return 1.7


@register
class _ReturnsBool(_Base):
    name = "test-bool"

    def place(self, tid, sim):
        return True


@register
class _TicksForever(_Base):
    name = "test-eager"

    def next_tick(self, now):
        return now


@register
class _TicksInThePast(_Base):
    name = "test-past"

    def next_tick(self, now):
        return now - 5


@register
class _TicksWithText(_Base):
    name = "test-text"

    def next_tick(self, now):
        return "soon"


@register
class _TicksEvery2ns(_Base):
    name = "test-tick2"

    def next_tick(self, now):
        return now + 2


def _admits(**fields):
    """A plug-in whose admit() returns an Admission with ``fields`` (or ``fields["raw"]`` itself)."""
    from numasim import Admission

    def admit(self, pod, sim):
        return fields["raw"] if "raw" in fields else Admission(**fields)

    return {"admit": admit}


def _ticks_with(decision):
    return {"next_tick": lambda self, now: now + 10_000_000, "tick": lambda self, sim: [decision]}


def _decision_plugins() -> dict[str, dict]:
    """Plug-ins that return bad values, by name."""
    from numasim import MemPolicy, Overhead
    from numasim.policies.api import MigratePages, MoveChunks

    return {
        "test-admit-none": _admits(raw=None),
        "test-overhead": _admits(overhead=Overhead(cpu=float("nan"))),
        "test-overhead-neg": _admits(overhead=Overhead(memory=-1.0)),
        "test-quota": _admits(cpu_quota=float("nan")),
        "test-memkind": _admits(mempolicy=MemPolicy("bogus", (0,))),  # type: ignore[arg-type]
        "test-memnode": _admits(mempolicy=MemPolicy("bind", (0.5,))),  # type: ignore[arg-type]
        "test-memweights": _admits(mempolicy=MemPolicy("interleave", (0, 1), 5)),  # type: ignore[arg-type]
        "test-mem-balancing": _admits(mempolicy=MemPolicy("bind", (0,), numa_balancing=1)),  # type: ignore[arg-type]
        "test-migrate-nan": _ticks_with(MigratePages(pod=0, dst=1, nbytes=float("nan"), rate_gbps=1.0)),
        "test-migrate-pod": _ticks_with(MigratePages(pod=99, dst=1, nbytes=10**6, rate_gbps=1.0)),
        "test-migrate-rate": _ticks_with(MigratePages(pod=0, dst=1, nbytes=10**6, rate_gbps=1e300)),
        "test-chunks": _ticks_with(MoveChunks(region=0.5, chunks=(0,), dst=1, tid=0, copy_gbps=1.0)),  # type: ignore[arg-type]
        "test-slice": {"slice_ns": lambda self, n: float("nan")},
        "test-exit": {"place": lambda self, tid, sim: sys.exit(0)},
        "test-reason-ansi": _admits(accepted=False, reason="\x1b[2J\x1b[31mgone"),
        "test-info-obj": _admits(info={"x": object()}),
        "test-info-nan": _admits(info={"x": float("nan")}),
        "test-info-big": _admits(info={"x": "y" * 70_000}),
        "test-tick-int": {"next_tick": lambda self, now: now + 10_000_000, "tick": lambda self, sim: 5},
    }


for _name, _methods in _decision_plugins().items():  # registered at import: a worker process imports them too
    register(type(f"_Plugin_{_name}", (_Base,), {"name": _name, **_methods}))


def _plugin_scenario(tmp_path, policy):
    return scenario(tmp_path, policies=[{"label": "p", "policy": policy}], baseline="p")


@pytest.mark.parametrize("policy, words", [
    ("test-raises", ["policy 'test-raises'", "raised KeyError", "in place()"]),
    ("test-none", ["policy 'test-none'", "integer id", "NoneType"]),
    ("test-float", ["policy 'test-float'", "integer id", "1.7"]),
    ("test-bool", ["policy 'test-bool'", "integer id", "bool"]),
    ("test-eager", ["policy 'test-eager'", "more than 10,000 ticks a simulated second"]),
    ("test-past", ["policy 'test-past'", "more than 10,000 ticks a simulated second"]),
    ("test-tick2", ["policy 'test-tick2'", "more than 10,000 ticks a simulated second"]),
    ("test-admit-none", ["admit() must return an Admission, got NoneType"]),
    ("test-overhead", ["overhead must be an Overhead whose cpu and memory are fractions 0-100"]),
    ("test-overhead-neg", ["overhead must be an Overhead"]),
    ("test-quota", ["cpu_quota must be None or a finite number of CPUs > 0"]),
    ("test-memkind", ["memory policy kind 'bogus': expected one of local, preferred, bind, interleave"]),
    ("test-memnode", ["memory policy nodes must be a tuple of integer node ids"]),
    ("test-memweights", ["memory policy weights must be a tuple of integers 1-255"]),
    ("test-mem-balancing", ["memory policy numa_balancing must be None, True or False"]),
    ("test-migrate-nan", ["nbytes must be an integer >= 0"]),
    ("test-migrate-pod", ["pod 99 does not exist"]),
    ("test-migrate-rate", ["rate_gbps a number of GB/s from 0.001 to 10000"]),
    ("test-chunks", ["region must be an integer id, got '0.5'"]),
    ("test-slice", ["slice_ns must return a time slice of 1,000 to 10,000,000,000 ns, got nan"]),
    ("test-text", ["policy 'test-text'", "an integer", "'soon'"]),
    # a plug-in's sys.exit() is its failure: the run used to end with status 0 and no output
    ("test-exit", ["policy 'test-exit'", "raised SystemExit", "in <lambda>()"]),
    ("test-reason-ansi", ["reason must be printable text (no control characters)"]),
    ("test-info-obj", ["info must hold plain JSON data", "object is not JSON serializable"]),
    ("test-info-nan", ["info must hold plain JSON data", "Out of range float"]),
    ("test-info-big", ["info is 70,009 characters as JSON; at most 65,536 a pod"]),
    ("test-tick-int", ["tick() must return a list of decisions, got int"]),
])
def test_a_misbehaving_plugin_is_named_and_stopped(tmp_path, capsys, policy, words):
    p = _plugin_scenario(tmp_path, policy)
    out = tmp_path / "out.json"
    rc = main(["run", str(p), "--quiet", "--workers", "1", "--json", str(out)])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == "" and "Traceback" not in captured.err
    assert len(captured.err.splitlines()) == 1 and captured.err.startswith(f"error: policy {policy!r} at t=")
    assert all(w in captured.err for w in words), captured.err
    assert not out.exists()


def test_debug_shows_the_plugins_own_traceback(tmp_path, capsys):
    p = _plugin_scenario(tmp_path, "test-raises")
    assert main(["--debug", "run", str(p), "--quiet", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError" in err and "test_hostile_input.py" in err


def test_a_broken_entry_point_spoils_only_its_own_name(monkeypatch, tmp_path, capsys):
    class EP:
        def __init__(self, name, value, load):
            self.name, self.value, self.load = name, value, load

    def boom():
        raise ImportError("no module named 'missing_dependency'")

    eps = [EP("broken", "pkg:Broken", boom), EP("notapolicy", "pkg:thing", lambda: object)]
    monkeypatch.setattr(registry, "entry_points", lambda group: eps)
    monkeypatch.setattr(registry, "_ENTRY_POINTS_LOADED", False)
    monkeypatch.setattr(registry, "_BROKEN", {})
    assert main(["machines"]) == 0
    assert main(["policies"]) == 0
    out = capsys.readouterr().out
    assert "policy 'broken' is not available" in out and "missing_dependency" in out
    assert "not a numasim Policy subclass" in out
    p = scenario(tmp_path)
    assert main(["validate", str(p)]) == 0
    capsys.readouterr()
    bad = scenario(tmp_path, policies=[{"label": "b", "policy": "broken"}], baseline="b")
    expect_error(capsys, ["validate", bad], str(bad), "policies[0].policy", "failed to load", "ImportError")


def test_a_set_error_names_the_set(tmp_path, capsys):
    p = scenario(tmp_path)
    expect_error(capsys, ["validate", p, "--set", "duration=abc"], str(p), "duration",
                 "from --set duration=abc")
    # a set that makes keys is blamed where the first one is refused
    expect_error(capsys, ["validate", p, "--set", "nosuch.b.c=1"], str(p), "nosuch", "unknown key 'nosuch'",
                 "from --set nosuch.b.c=1")


def test_error_lists_are_capped_and_long_values_cut(tmp_path, capsys):
    data = copy.deepcopy(BASE)
    data["policies"] = [{"label": f"v{i}", "policy": "nope"} for i in range(50)]
    data["baseline"] = "v0"
    p = scenario(tmp_path, data)
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err
    assert "and 30 more" in err and err.count("unknown policy") == 20
    p = scenario(tmp_path, duration="x" * 100_000)
    assert main(["validate", str(p)]) == 2
    assert len(capsys.readouterr().err) < 2000


def _descendants(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return kids + [d for k in kids for d in _descendants(k)]


def _running(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads child processes from /proc (Linux)")
@pytest.mark.parametrize("sig, code", [("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_signal_stops_the_run_and_its_workers_and_leaves_no_file(tmp_path, sig, code):
    import signal
    import subprocess
    import sys
    import time

    p = scenario(tmp_path, duration="120s", warmup="1s")
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "numasim.cli", "run", str(p), "--quiet", "--workers", "2",
                             "--json", str(out / "r.json"), "--csv", str(out / "r.csv")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while len(_descendants(proc.pid)) < 2 and time.time() < deadline:  # wait for the worker processes
        time.sleep(0.2)
    workers = _descendants(proc.pid)
    assert len(workers) >= 2, "the run never started its workers"
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=20)  # it stops (well before the 120 s run would end), in bounded time
    assert proc.returncode == code and f"stopped by {sig}" in err and "Traceback" not in err
    time.sleep(0.5)
    assert [w for w in workers if _running(w)] == []
    assert os.listdir(out) == []


@pytest.mark.parametrize("sets, where, words", [
    (["machine.remote_latency_ns=null", "machine.latency_ns=[[80,130],[70,80]]"], "machine", ["nearest"]),
    (["machine.remote_latency_ns=null", "machine.latency_ns=[[80,130],[130]]"], "machine", ["2x2 matrix"]),
    (["machine.remote_latency_ns=null", "machine.slit=[[10,21],[10,10]]"], "machine", ["greater than 10"]),
    (["sla={targets_ms: [.nan], levels: [0.5, 0.7]}"], "sla.targets_ms[0]", ["finite"]),
    (["sla={targets_ms: [-5], levels: [0.5, 0.7]}"], "sla.targets_ms[0]", ["greater than 0"]),
    (["sla={targets_ms: [5], levels: [0.5, 7]}"], "sla.levels[1]", ["less than or equal to 2"]),
    (["sla={targets_ms: [5], levels: [0.5, 0.5]}"], "sla", ["must not repeat"]),
    (["machine.frequency_ghz=1e300"], "machine.frequency_ghz", ["less than or equal to 10"]),
    (["machine.local_latency_ns=.inf"], "machine.local_latency_ns", ["finite"]),
    (["machine.memory_bandwidth_gbps=1e-300"], "machine.memory_bandwidth_gbps", ["greater than or equal to 0.01"]),
    (["pods.0.cpu_limit=1e-300"], "pods[0].cpu_limit", ["greater than or equal to 0.001"]),
    (["policies.0.options={migrate_rate_limit_mbps: .nan}"], "policies[0].options.migrate_rate_limit_mbps", ["finite"]),
])
def test_matrices_sla_and_physical_bounds(tmp_path, capsys, sets, where, words):
    p = scenario(tmp_path)
    argv = ["validate", p]
    for s in sets:
        argv += ["--set", s]
    expect_error(capsys, argv, str(p), where, *words)


def test_merge_keys_still_work(tmp_path, capsys):
    text = BASE_TEXT.replace("policies:\n", "policies:\n- &base {label: base, policy: cfs}\n- {<<: *base, label: other}\n")
    text = text.replace("baseline: cfs", "baseline: base")
    p = write(tmp_path, text)
    assert main(["validate", str(p)]) == 0, capsys.readouterr().err


def test_warmup_is_checked_against_the_duration_of_the_run(tmp_path, capsys):
    p = scenario(tmp_path)  # duration 2s, warm-up 1s
    assert main(["run", str(p), "--quiet", "--workers", "1", "--no-sla", "--warmup", "3s", "--duration", "4s"]) == 0
    capsys.readouterr()
    expect_error(capsys, ["run", p, "--quiet", "--warmup", "3s"], "--warmup", None, "shorter than the duration (2s)")
    expect_error(capsys, ["run", p, "--quiet", "--replications", "0"], "--replications", None, "1 to 1,000")


def test_the_same_file_through_a_symlinked_folder_is_caught(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "out")
    p = scenario(tmp_path)
    expect_error(capsys, ["run", p, "--quiet", "--json", tmp_path / "out" / "r.json", "--csv", tmp_path / "alias" / "r.json"],
                 f"--csv {tmp_path / 'alias' / 'r.json'}", None, "same file as --json")


def test_a_long_multibyte_name_that_passes_the_check_is_written(tmp_path, capsys):
    out = tmp_path / ("é" * 125 + ".json")  # 250 bytes: within the 255-byte limit
    p = scenario(tmp_path, policies=[{"label": "cfs", "policy": "cfs"}])
    assert main(["run", str(p), "--quiet", "--workers", "1", "--json", str(out)]) == 0, capsys.readouterr().err
    assert out.exists()


def test_deep_set_paths_are_refused(tmp_path, capsys):
    p = scenario(tmp_path)
    expect_error(capsys, ["validate", p, "--set", "policies.0.set." + ".".join(["a"] * 3000) + "=1"], "--set", None,
                 "more than 64 fields deep")


class _BadDecisions(_Base):
    """Returns, at its first tick, the decision in ``kind``."""

    kind = ""

    def next_tick(self, now):
        return 1_000_000 if now < 1_000_000 else None

    def tick(self, sim):
        from numasim.policies.api import Charge, MemPolicy, SetAffinity, SetMemPolicy

        return [{"affinity-big": SetAffinity((10**6,), frozenset({0})),
                 "affinity-negative": SetAffinity((-1,), frozenset({0})),
                 "affinity-text": SetAffinity((0,), frozenset({"0"})),
                 "mempolicy-pod": SetMemPolicy(99, MemPolicy()),
                 "charge-float": Charge(1.5, 10.0),
                 "charge-nan": Charge(0, float("nan"))}[self.kind]]


for _kind in ("affinity-big", "affinity-negative", "affinity-text", "mempolicy-pod", "charge-float", "charge-nan"):
    register(type(f"_Bad_{_kind}", (_BadDecisions,), {"name": f"test-{_kind}", "kind": _kind}))


@pytest.mark.parametrize("kind, words", [
    ("affinity-big", ["thread 1000000 does not exist"]),
    ("affinity-negative", ["thread -1 does not exist"]),
    ("affinity-text", ["integer CPU ids"]),
    ("mempolicy-pod", ["pod 99 does not exist"]),
    ("charge-float", ["thread must be an integer id"]),
    ("charge-nan", ["finite number"]),
])
def test_every_kind_of_decision_is_checked(tmp_path, capsys, kind, words):
    p = _plugin_scenario(tmp_path, f"test-{kind}")
    rc = main(["run", str(p), "--quiet", "--workers", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and err.startswith(f"error: policy 'test-{kind}' at t="), err
    assert all(w in err for w in words), err


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_worker_ends_quietly_on_sigterm():
    # A sweep's dask workers are forked from `numasim`, and inherit its SIGTERM handler:
    # in them it must end the process as the signal would, not raise (a traceback per worker).
    import signal

    from numasim import cli

    pid = os.fork()
    if pid == 0:  # the worker
        try:
            cli._MAIN_PID[:] = [os.getppid()]
            signal.signal(signal.SIGTERM, cli._stop)
            os.kill(os.getpid(), signal.SIGTERM)
        finally:
            os._exit(3)  # reached only if the signal did not end the process
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM


def test_a_machine_file_that_is_empty_or_wrong_is_blamed_for_itself(tmp_path, capsys):
    p = scenario(tmp_path)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    expect_error(capsys, ["run", p, "--quiet", "--machine", empty], str(empty), None, "the machine file is empty")
    bad = tmp_path / "m.yaml"
    bad.write_text("preset: skylake-8180\nsockets: 0\n")
    expect_error(capsys, ["run", p, "--quiet", "--machine", bad], str(bad), "sockets", "greater than or equal to 1")


def test_a_replicated_pod_named_like_a_replica_runs_under_other_names(tmp_path):
    # jbb x2 runs as jbb-0, jbb-1; jbb-1 x2 as jbb-1-0, jbb-1-1: no clash
    s = from_dict({**BASE, "pods": BASE["pods"] + [{**BASE["pods"][0], "name": "jbb-1"}]})
    assert [p.name for p in s.spec.pods] == ["jbb", "jbb-1"]


@pytest.mark.parametrize("setting, path, words", [
    ("policies.1={policy: esxi, options: {rebalance_period: 1ns}}", "policies[1].options.rebalance_period",
     ["must be at least 1ms", "1ns"]),
    ("policies.1={policy: esxi, options: {quantum: 1ns}}", "policies[1].options.quantum", ["at least 100us"]),
    ("machine.loaded_latency=[[1,300],[115,100]]", "machine", ["latency must rise with bandwidth"]),
    ("machine.latency_ns=[[5,6],[7]]", "machine", ["square matrix"]),
    # Bounds that keep every duration a finite number of nanoseconds (they failed mid-run, unnamed).
    ("policies.0.options={numa_balancing: true, fault_us: 1.0e+308}", "policies[0].options.fault_us", ["less than or equal to 1000000"]),
    ("policies.0.options={numa_balancing: true, scan_period_max_ms: 1.0e+308}", "policies[0].options.scan_period_max_ms",
     ["less than or equal to 86400000"]),
    ("policies.0.options={numa_balancing: true, scan_size_mb: 1.0e+308}", "policies[0].options.scan_size_mb", ["less than or equal"]),
    ("policies.0.options={sched_latency_ms: 1.0e+308}", "policies[0].options.sched_latency_ms", ["less than or equal to 1000"]),
    ("policies.0.options={migrate_copy_gbps: 1.0e-300}", "policies[0].options.migrate_copy_gbps", ["greater than or equal to 0.001"]),
    ("policies.1.options={preferred: []}", "policies[1].options", ["preferred: give at least one node id"]),
    ("workloads={w: {cycles_per_op: 5.0e-324, llc_misses_per_op: 0}}", "workloads.w.cycles_per_op", ["greater than or equal to 0.001"]),
    ("pods.1={name: jbb-1, threads: 1, memory: 1GB, profile: cpu-bound}", "pods[1].name",
     ["also the name of replica 1 of pods[0]", "replicas 2"]),
])
def test_values_that_would_stall_or_be_ignored_are_refused(tmp_path, capsys, setting, path, words):
    p = scenario(tmp_path)
    extra = ["--set", "machine.sockets=1", "--set", "machine.remote_latency_ns=null"] if "latency_ns" in setting else []
    expect_error(capsys, ["validate", p, *extra, "--set", setting], str(p), path, *words)


def test_variants_that_change_the_machine_share_equal_machines_and_are_capped_in_cpus(tmp_path, capsys, monkeypatch):
    import numasim.model.scenario as sc

    same = [{"label": f"v{k}", "policy": "cfs", "set": {"pods.0.replicas": 1 + k}} for k in range(3)]
    built = from_dict({**copy.deepcopy(BASE), "policies": same, "baseline": "v0"})
    assert len({id(built.machine_of(v)) for v in built.variants}) == 1  # one machine, built once
    monkeypatch.setattr(sc, "MAX_BUILT_CPUS", 100)  # the file's machine has 44 CPUs (smt off), v0's 48
    bigger = [{"label": f"v{k}", "policy": "cfs", "set": {"machine.cores_per_node": 24 + k}} for k in range(3)]
    path = scenario(tmp_path, {**copy.deepcopy(BASE), "policies": bigger, "baseline": "v0"})
    rc = main(["validate", str(path)])
    err = capsys.readouterr().err
    assert rc == 2 and "policies[0]" not in err and "policies[1].set: machine: the scenario's machines" in err
    assert "would have 142 CPUs in all; numasim builds at most 100 for one scenario" in err


def test_more_than_64_variants_are_refused(tmp_path, capsys):
    many = [{"label": f"v{k}", "policy": "cfs"} for k in range(65)]
    path = scenario(tmp_path, {**copy.deepcopy(BASE), "policies": many, "baseline": "v0"})
    expect_error(capsys, ["validate", path], str(path), "policies", "at most 64 items")


def test_emoji_codes_in_a_file_name_stay_text(tmp_path, capsys):
    rc = main(["validate", str(tmp_path / "nope:thumbs_up:.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and "nope:thumbs_up:.yaml" in err


def test_a_measurements_csv_with_a_field_over_the_csv_limit_is_a_clear_error(tmp_path):
    from numasim.cli_tools import _measured_csv
    from numasim.errors import ScenarioError

    path = tmp_path / "m.csv"
    path.write_text("label,metric,value\n" + "a" * 200_000 + ",relative_throughput,1.0\n")
    with pytest.raises(ScenarioError, match="not a readable CSV file"):
        _measured_csv(str(path))


@pytest.mark.parametrize("kw, words", [
    ({"seed": float("nan")}, "--seed: expected a whole number from 0 to 9,223,372,036,854,775,807 (2**63-1), got nan"),
    ({"seed": -1}, "--seed: expected a whole number from 0 to 9,223,372,036,854,775,807 (2**63-1), got -1"),
    ({"seed": 2**70}, "--seed: expected a whole number from 0 to 9,223,372,036,854,775,807 (2**63-1)"),
    ({"seed": "1"}, "--seed: expected a whole number from 0 to 9,223,372,036,854,775,807 (2**63-1), got '1'"),
    ({"seed": True}, "--seed: expected a whole number from 0 to 9,223,372,036,854,775,807 (2**63-1), got True"),
    ({"workers": "2"}, "--workers: expected a whole number from 0 to 512 (0: one per CPU), got '2'"),
    ({"workers": 2.0}, "--workers: expected a whole number from 0 to 512 (0: one per CPU), got 2.0"),
    ({"replications": np.float64(2)}, "--replications: expected a whole number from 1 to"),
    ({"duration": [1]}, "--duration: expected a duration with a unit"),
    ({"policies": [None]}, "--policy: expected variant labels or policy names: a string or a list of strings"),
    ({"max_work_s": float("nan")}, "--max-work: the limit must be a positive number, or None (or inf) for no limit; got nan"),
    ({"max_memory_bytes": -1}, "--max-memory: the limit must be a positive number, or None (or inf) for no limit; got -1"),
    ({"outputs": "json"}, "outputs: expected a tuple of"),
    ({"outputs": ("bogus",)}, "outputs: expected a tuple of"),
])
def test_run_from_python_checks_what_the_command_line_checks(kw, words):
    s = from_dict(BASE)
    with pytest.raises(ScenarioError) as exc:
        numasim.run(s, quiet=True, with_sla=False, **kw)
    assert words in str(exc.value)


def test_one_override_string_and_one_policy_name_are_taken_whole(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(BASE_TEXT)
    assert load(path, "replications=2").spec.replications == 2  # not its letters, one by one
    s = load(path, "duration=2s")
    assert [r.label for r in numasim.run(s, policies=s.variants[0].label, workers=1, quiet=True,
                                         with_sla=False).runs] == [s.variants[0].label]


@pytest.mark.parametrize("override, words", [
    ("pods..replicas=3", "has an empty field name (two dots in a row, or a dot at an end)"),
    ("pods.0.replicas.=3", "has an empty field name"),
    ("policies[0].label=x", "a list's items are numbered after a dot (policies.0.label), not in brackets"),
    ('policies.0.set={"machine..smt": false}', "policies[0].set: override path 'machine..smt' has an empty field name"),
])
def test_an_override_path_is_taken_as_written(override, words):
    with pytest.raises(ScenarioError) as exc:
        from_dict(BASE, overrides=[override])
    assert words in str(exc.value)


def test_a_key_with_brackets_is_a_key_where_there_is_one():
    # A workload may be named 'w[2]': its path is taken as written, not as a list item.
    data = {**copy.deepcopy(BASE), "workloads": {"w[2]": {"base": "java-transactions"}}}
    data["pods"][0]["profile"] = "w[2]"
    s = from_dict(data, overrides=["workloads.w[2].touch_gbps=3"])
    assert s.profiles_of(s.variants[0])["w[2]"].touch_gbps == 3.0


def test_numpy_integers_and_an_infinite_limit_are_taken():
    import numpy as np

    s = from_dict({**copy.deepcopy(BASE), "duration": "1500ms"})
    r = numasim.run(s, policies="cfs", seed=np.int64(3), workers=np.int64(1), quiet=True, with_sla=False,
                    max_memory_bytes=float("inf"), replications=np.int64(1), duration=np.int64(1_500_000_000))
    assert r.run("cfs").seeds == [3] and r.scenario["seed"] == 3 and r.scenario["duration_s"] == 1.5


def test_an_unknown_key_with_brackets_is_named_as_written():
    data = copy.deepcopy(BASE)
    data["pods"][0]["x[0]"] = 1
    with pytest.raises(ScenarioError, match=r"pods\[0\]\.x\[0\]: unknown key 'x\[0\]'; allowed keys: name"):
        from_dict(data)


@register
class _ChecksBadly(_Base):
    name = "test-check-garbage"

    @classmethod
    def check(cls, options, machine, pods):
        return [1, "x", None]


@register
class _CheckRaises(_Base):
    name = "test-check-raises"

    @classmethod
    def check(cls, options, machine, pods):
        raise RuntimeError("check boom")


@pytest.mark.parametrize("policy, words", [
    ("test-check-garbage", ["policies[0].options", "check() must return a list of Problem, got '1'"]),
    ("test-check-raises", ["policies[0].options", "its check() raised RuntimeError: check boom"]),
])
def test_a_plugins_check_that_fails_is_a_problem_not_a_traceback(tmp_path, capsys, policy, words):
    p = _plugin_scenario(tmp_path, policy)
    expect_error(capsys, ["validate", p], str(p), None, *words)


def test_outputs_never_replace_a_policy_file_the_scenario_names(tmp_path, capsys):
    plug = tmp_path / "plug.py"
    plug.write_text("from numasim.policies.cfs import CFS\n\nclass Mine(CFS):\n    name = 'mine-cfs'\n")
    p = scenario(tmp_path, policies=[{"label": "m", "policy": "plug.py:Mine"}], baseline="m")
    before = plug.read_text()
    expect_error(capsys, ["run", p, "--quiet", "--json", str(plug)], f"--json {plug}", None, "input")
    assert plug.read_text() == before


@pytest.mark.parametrize("where, value, words", [
    ("label", "c\ud800", ["policies[0].label", "lone surrogate"]),
    ("sources", {"a\ud800": "b"}, ["machine.sources", "lone surrogate"]),
])
def test_lone_surrogates_are_refused_where_text_is(tmp_path, capsys, where, value, words):
    data = copy.deepcopy(BASE)
    if where == "label":
        data["policies"][0]["label"] = data["baseline"] = value
    else:
        data["machine"]["sources"] = value
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=False), encoding="utf-8")
    expect_error(capsys, ["validate", p], str(p), None, *words)


def test_a_node_past_the_machine_in_cpu_numbering_is_named(tmp_path, capsys):
    n = from_dict(copy.deepcopy(BASE)).machine.n_cpus
    data = copy.deepcopy(BASE)
    data["machine"]["cpu_numbering"] = [0] * (n - 1) + [10**10]  # (a 75 GiB count, or a traceback, before)
    p = scenario(tmp_path, data)
    expect_error(capsys, ["validate", p], str(p), None, f"cpu_numbering[{n - 1}]: node 10000000000 does not exist")


def test_cpulists_that_repeat_are_bounded(monkeypatch):
    from numasim.policies import taskset

    with pytest.raises(ValueError, match="names more than 16 CPU ids"):
        parse_cpulist(",".join(["0-7"] * 3), 8)  # each range counted before it is built
    machine = from_dict(copy.deepcopy(BASE)).machine
    n = machine.n_cpus
    opts = taskset.TasksetOptions(cpus=[f"0-{n - 1}"] * 20_000)
    assert taskset.Taskset.check(opts, machine, []) == []  # the same list 20,000 times: one set, checked once
    assert len({id(c) for c in taskset.cpusets(opts.cpus, n)}) == 1  # and kept once
    monkeypatch.setattr(taskset, "MAX_CPUSET_IDS", 3 * n)
    distinct = taskset.TasksetOptions(cpus=[f"0-{n - 1}", f"0-{n - 1}:1", f"{n - 1},0-{n - 2}", f"0-{n - 1},0"])
    problems = taskset.Taskset.check(distinct, machine, [])
    assert [p.path for p in problems] == ["cpus[3]"] and f"more than {3 * n:,} CPU ids" in problems[0].message


def test_a_sweep_that_would_copy_too_much_is_refused_before_any_copy(tmp_path):
    from numasim.sweep import MAX_SWEEP_VALUES, sweep

    data = copy.deepcopy(BASE)
    data["description"] = "x"
    data["machine"]["sources"] = {f"k{i}": "v" for i in range(20_000)}
    values = 20_000
    points = MAX_SWEEP_VALUES // values + 1
    with pytest.raises(ScenarioError, match="more than 10,000,000"):
        sweep(data, grid={"seed": list(range(1, points + 1))}, quiet=True)


def test_an_error_that_quotes_the_user_shows_escapes_not_raw_control_characters(capsys):
    assert main(["validation", "--only", "x\x1b[31m\ud800"]) == 2
    err = capsys.readouterr().err
    assert "x\\x1b[31m\\ud800" in err and "\x1b" not in err and "\ud800" not in err


def test_the_estimate_counts_the_cpusets_a_policy_keeps():
    # 20,000 distinct cpulists of a 44-CPU machine: the sets are kept in every simulation, so the memory
    # the estimate gives grows by about 96 bytes an id (a list written twice counts once).
    from numasim.budget import CPUSET_BYTES_PER_ID

    def memory(cpus):
        data = copy.deepcopy(BASE)
        data["policies"] = [{"label": "t", "policy": "taskset", "options": {"cpus": cpus}}]
        data["baseline"] = "t"
        s = from_dict(data)
        return estimate(s, list(s.variants), None, False).run_memory_bytes

    n = from_dict(copy.deepcopy(BASE)).machine.n_cpus
    one = memory(["0"])
    same = memory(["0"] * 5000)
    distinct = memory([[0, k] for k in range(1, n)] * 2)  # (as lists: each distinct by how it is written)
    assert same == one
    assert distinct - one == pytest.approx((2 * (n - 1) - 1) * CPUSET_BYTES_PER_ID)


def test_the_estimate_counts_numactl_physcpubind_sets_as_tasksets():
    from numasim.budget import CPUSET_BYTES_PER_ID

    def memory(policy, key, cpus):
        data = copy.deepcopy(BASE)
        data["policies"] = [{"label": "t", "policy": policy, "options": {key: cpus}}]
        data["baseline"] = "t"
        s = from_dict(data)
        return estimate(s, list(s.variants), None, False).run_memory_bytes

    n = from_dict(copy.deepcopy(BASE)).machine.n_cpus
    lists = [[0, k] for k in range(1, n)]
    grown = memory("numactl", "physcpubind", lists) - memory("numactl", "physcpubind", ["0"])
    assert grown == pytest.approx((2 * (n - 1) - 1) * CPUSET_BYTES_PER_ID)  # 2 ids a set against 1
    assert grown == pytest.approx(memory("taskset", "cpus", lists) - memory("taskset", "cpus", ["0"]))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_named_pipe_nobody_writes_to_is_read_as_empty_not_waited_on(tmp_path):
    import subprocess

    fifo = tmp_path / "s.yaml"
    os.mkfifo(fifo)
    # (a blocking open waited for a writer for ever: the timeout would fail the test)
    done = subprocess.run([sys.executable, "-m", "numasim", "validate", str(fifo)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "the scenario is empty" in done.stderr and "Traceback" not in done.stderr
    # a pipe whose writer is there is read to its end, as it writes
    code = "import sys, time; time.sleep(1); sys.stdout.write(open(sys.argv[1]).read())"
    with subprocess.Popen([sys.executable, "-c", code, str(scenario(tmp_path, name="real.yaml"))],
                          stdout=subprocess.PIPE) as writer:
        read = subprocess.run([sys.executable, "-m", "numasim", "validate", "/dev/stdin"], stdin=writer.stdout,
                              capture_output=True, text=True, timeout=120)
    assert read.returncode == 0, read.stderr


# Adversarial pass 5 (session 33): each of these failed before its fix.

def test_a_pod_that_would_arrive_after_the_run_is_refused(tmp_path, capsys):
    p = scenario(tmp_path)
    expect_error(capsys, ["validate", p, "--set", "pods.0.start=1h"], str(p), "pods[0].start",
                 "3600s is at or after the end of the run", "never run")
    expect_error(capsys, ["validate", p, "--set", "pods.0.replicas=3", "--set", "pods.0.stagger=1h"], str(p),
                 "pods[0].stagger", "its last replica would arrive at 7200s")
    expect_error(capsys, ["run", p, "--set", "pods.0.start=3s", "--set", "duration=10s", "--duration", "2s"],
                 "--duration", None, "2s ends the run before pods[0]", "never run")


def test_an_output_inside_an_input_folder_and_a_file_as_its_folder_are_refused(tmp_path):
    from numasim.atomic import check_target
    from numasim.errors import NumasimError

    sysfs = tmp_path / "sys" / "node0"
    sysfs.mkdir(parents=True)
    (sysfs / "cpulist").write_text("0-3\n")
    for target in (sysfs / "cpulist", sysfs / "new.yaml"):  # an input's file, or a new one among them
        with pytest.raises(NumasimError, match="is inside .*an input folder of this command"):
            check_target(str(target), "-o", (str(tmp_path / "sys"),), folders=True)
    check_target(str(tmp_path / "out.yaml"), "-o", (str(tmp_path / "sys"),), folders=True)  # beside it: fine
    check_target(str(sysfs / "new.yaml"), "-o", (str(tmp_path / "sys"),))  # a command that reads no folders
    (tmp_path / "afile").write_text("x")
    with pytest.raises(NumasimError, match="afile is not a folder"):
        check_target(str(tmp_path / "afile" / "x.parquet"), "--out")


def test_an_empty_grid_value_is_named(tmp_path, capsys):
    p = scenario(tmp_path)
    expect_error(capsys, ["sweep", p, "--grid", "pods.0.replicas=1,,2", "--out", tmp_path / "s.parquet"],
                 "--grid pods.0.replicas", None, "has an empty value")


def test_a_plugin_name_that_is_no_label_is_the_plugins_error(tmp_path):
    from numasim.errors import ScenarioError as Refused
    from numasim.policies.registry import get_policy

    f = tmp_path / "longname.py"
    f.write_text("from numasim import Policy\nfrom numasim.policies.cfs import CFS\n"
                 "class Long(CFS):\n    name = 'x' * 10_000\n")
    with pytest.raises(Refused, match="Long.name must be printable text of at most 80 characters"):
        get_policy(f"{f}:Long")


def test_a_variant_whose_policy_reference_is_too_long_to_be_its_label_is_refused(tmp_path, capsys):
    # Its label would be the reference, and results hold labels of at most 80 characters (compare reads them).
    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    (deep / "pol.py").write_text("from numasim.policies.cfs import CFS\nclass Mine(CFS):\n    name = 'mine'\n")
    d = copy.deepcopy(BASE)
    d["policies"].append({"policy": f"{deep / 'pol.py'}:Mine"})
    p = tmp_path / "long.yaml"
    p.write_text(yaml.safe_dump(d), encoding="utf-8")
    expect_error(capsys, ["validate", p], str(p), "policies[3].label", "has no label and its policy",
                 "give it a label")
    d["policies"][-1]["label"] = "mine"
    p.write_text(yaml.safe_dump(d), encoding="utf-8")
    assert main(["validate", str(p)]) == 0


def test_workers_are_refused_in_the_same_words_from_the_command_line_and_from_python(tmp_path, capsys):
    words = "expected a whole number from 0 to 512 (0: one per CPU), got 600"
    with pytest.raises(SystemExit) as stop:
        main(["run", str(scenario(tmp_path)), "--quiet", "--workers", "600"])
    assert stop.value.code == 2 and words in capsys.readouterr().err
    with pytest.raises(ScenarioError, match=re.escape("--workers: " + words)):
        numasim.run(from_dict(BASE), quiet=True, workers=600)
