"""How sure a result is: confidence intervals, unsettled rankings, a warm-up that ends too early."""

from __future__ import annotations

import json

import math

import numpy as np
import pytest

import numasim
from numasim.analysis.confidence import half_width, mser_truncation, trend

from .conftest import OVERCOMMITTED, small_scenario


def test_half_width_is_students_t_interval():
    # t(0.975, 2) = 4.3027; sd of [1, 2, 3] = 1
    assert half_width([1.0, 2.0, 3.0]) == pytest.approx(4.3027 / math.sqrt(3), rel=1e-4)
    assert half_width([5.0]) is None and half_width([]) is None
    assert half_width([2.0, 2.0, None, 2.0]) == 0.0


def test_mser_drops_a_ramp_and_keeps_a_steady_series():
    rng = np.random.default_rng(1)
    steady = list(100 + rng.normal(0, 1, 40))
    assert mser_truncation(steady) <= 4
    ramp = [0, 10, 30, 60, 90] + steady
    assert 4 <= mser_truncation(ramp) <= 9
    long = [0.0] * 20 + list(100 + rng.normal(0, 1, 200))  # MSER-5: batches of 5
    assert mser_truncation(long) % 5 == 0 and 20 <= mser_truncation(long) <= 30


def test_a_drift_to_the_end_is_a_trend_and_noise_is_not():
    rng = np.random.default_rng(2)
    t = [0.5 * i for i in range(1, 81)]
    steady = list(100 + rng.normal(0, 2, 80))
    drift, p, hw = trend(t, steady, 0.0)
    assert p > 0.01 and abs(drift) < 0.05 and 0 < hw < 0.02
    rising = [x + 0.25 * i for i, x in enumerate(steady)]  # +20 over the run, about 18 % of its mean
    drift, p, hw = trend(t, rising, 0.0)
    assert p < 1e-6 and drift == pytest.approx(0.18, abs=0.03) and abs(drift) > hw
    assert trend(t, rising, 36.0) is None  # 8 samples left after 36 s: too few to say
    assert trend(t, [100.0] * 80, 0.0) == (0.0, 1.0, 0.0)


def test_a_run_that_ends_still_rising_is_warned_about():
    data = small_scenario(duration="4s", warmup="1s", sample_interval="100ms", replications=2,
                          policies=[{"label": "cfs", "policy": "cfs"}, {"label": "numactl", "policy": "numactl"}])
    res = numasim.run(numasim.from_dict(data))
    assert not any("when the run ends" in w for w in res.warnings())
    ts = res.run("numactl").timeseries
    ts["throughput"] = [x * (1 + 0.1 * t) if x is not None else None for t, x in zip(ts["time_s"], ts["throughput"])]
    (w,) = [w for w in res.warnings() if "when the run ends" in w]
    assert w.startswith("numactl: throughput is still rising when the run ends: +") and "a longer duration" in w


def test_ci_fields_over_seeds_and_none_with_one_seed():
    data = small_scenario(duration="2s", warmup="1s", replications=3,
                          policies=[{"label": "cfs", "policy": "cfs"}, {"label": "numactl", "policy": "numactl"}])
    res = numasim.run(numasim.from_dict(data))
    doc = res.to_json()
    run = doc["runs"][1]
    for name in ("throughput_ci", "relative_throughput_ci", "locality_ci", "p99_ms_ci", "cpu_utilisation_ci"):
        assert name in run and run[name] is not None and run[name] >= 0
    thr = [x["throughput"] for x in res.run("numactl").replicates]
    assert run["throughput_ci"] == pytest.approx(half_width(thr))
    assert "throughput_ci" in res.to_frame().columns
    one = numasim.run(numasim.from_dict({**data, "replications": 1}))
    assert one.to_json()["runs"][1]["throughput_ci"] is None
    assert any("one seed" in w for w in one.warnings())


def test_a_short_warm_up_is_warned_about_and_identical_variants_are_not():
    # taskset with every CPU allowed is cfs, seed for seed: no ranking to settle.
    data = small_scenario(duration="4s", warmup="100ms", sample_interval="200ms", replications=3,
                          policies=[{"label": "cfs", "policy": "cfs"},
                                    {"label": "all-cpus", "policy": "taskset", "options": {"cpus": ["0-7"]}}])
    data["workloads"]["java"]["touch_gbps"] = 1.0  # a start-up touch longer than the warm-up
    res = numasim.run(numasim.from_dict(data))
    warnings = res.warnings()
    assert res.relative_replicates("all-cpus") == [1.0, 1.0, 1.0]
    assert len(warnings) == 2 and all("still settling after the warm-up" in w for w in warnings), warnings
    assert res.to_json()["warnings"] == warnings


def test_a_ranking_inside_the_noise_is_warned_about():
    # 16 threads on 8 CPUs: the timer frequency (HZ 1000 or 300) moves the balancer's intervals a
    # little and every random path with them; at 3 seeds the difference is far inside the noise.
    pols = [{"label": "cfs", "policy": "cfs"}, {"label": "numab", "policy": "cfs", "options": {"numa_balancing": True}},
            {"label": "hz300", "policy": "cfs", "options": {"hz": 300}}]
    data = small_scenario(**{**OVERCOMMITTED, "duration": "3s", "warmup": "1s", "replications": 3, "policies": pols})
    res = numasim.run(numasim.from_dict(data))
    warnings = res.warnings()
    assert any(w.startswith(("hz300 ahead of cfs is not settled at 3 seeds", "cfs ahead of hz300 is not settled at 3 seeds"))
               for w in warnings), warnings
    # cfs against numab: a warning exactly when the 95 % interval of the paired difference holds 0.
    from scipy import stats

    d = np.array(res.relative_replicates("cfs")) - np.array(res.relative_replicates("numab"))
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    warned = any("numab" in w and "cfs" in w for w in warnings)
    assert warned == (abs(d.mean()) <= half), (d, half, warnings)


def test_no_warning_for_a_settled_comparison():
    data = small_scenario(duration="4s", warmup="2s", replications=3,
                          policies=[{"label": "cfs", "policy": "cfs"}, {"label": "numactl", "policy": "numactl"}])
    res = numasim.run(numasim.from_dict(data))
    assert res.warnings() == []


def test_results_record_their_provenance_and_load_back(tmp_path):
    import json

    import numasim
    from numasim.cli import main

    from .conftest import small_scenario
    import yaml

    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(small_scenario(duration="2s", policies=[{"label": "cfs", "policy": "cfs"},
                                                                           {"label": "numactl", "policy": "numactl"}])))
    out = tmp_path / "r.json"
    assert main(["run", str(path), "--set", "pods.0.replicas=1", "--json", str(out), "--quiet", "--no-sla"]) == 0
    data = json.loads(out.read_text())
    prov = data["scenario"]["provenance"]
    assert prov["numasim_version"] == numasim.__version__ and prov["overrides"] == ["pods.0.replicas=1"]
    assert prov["scenario"]["pods"][0]["replicas"] == 1  # the scenario as run, override applied
    assert prov["machine"]["name"] == "pacific-broadwell" and prov["machine"]["cores_per_node"] == 4
    back = numasim.load_result(out)
    assert back.to_frame().equals(numasim.RunResult.from_json(data).to_frame())
    assert back.relative("numactl") == data["runs"][1]["relative_throughput"]
    assert back.to_json()["runs"] == data["runs"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "other"}')
    import pytest

    with pytest.raises(numasim.NumasimError, match="cannot be read as numasim results"):
        numasim.load_result(bad)


def test_compare_two_results_with_significance(tmp_path, capsys):
    import yaml

    from numasim.analysis.compare import compare
    from numasim.cli import main

    from .conftest import small_scenario

    for name, remote in (("a", 130.0), ("b", 220.0)):
        data = small_scenario(duration="2s", replications=3, policies=[{"label": "cfs", "policy": "cfs"},
                                                                        {"label": "numactl", "policy": "numactl"}])
        data["machine"]["remote_latency_ns"] = remote
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data))
        assert main(["run", str(tmp_path / f"{name}.yaml"), "--json", str(tmp_path / f"{name}.json"),
                     "--quiet", "--no-sla"]) == 0
    capsys.readouterr()
    import numasim

    a, b = numasim.load_result(tmp_path / "a.json"), numasim.load_result(tmp_path / "b.json")
    rows = {(r["label"], r["figure"]): r for r in compare(a, b)}
    cfs = rows[("cfs", "throughput")]
    assert cfs["b"] < cfs["a"] and cfs["p_value"] is not None  # a farther remote node slows CFS
    numactl = rows[("numactl", "relative_throughput")]
    assert numactl["b"] > numactl["a"]  # and so raises numactl's gain over it
    assert rows[("cfs", "memory_gbps")]["p_value"] is not None  # kept per seed, so tested too
    base = rows[("cfs", "relative_throughput")]
    assert base["p_value"] is None and base["why"] == "no spread"  # 1.0 in every seed of both
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    io = capsys.readouterr()
    assert "different scenarios" in io.err and "relative_throughput" in io.out
    assert "no spread" in io.out and "one seed" not in io.out
    # A file written before memory_gbps was kept per seed: said so, not "one seed"
    old = json.loads((tmp_path / "a.json").read_text())
    for r in old["runs"]:
        for rep in r["replicates"]:
            rep.pop("memory_gbps", None)
    (tmp_path / "old.json").write_text(json.dumps(old))
    rows = {(r["label"], r["figure"]): r for r in compare(numasim.load_result(tmp_path / "old.json"), b)}
    assert rows[("cfs", "memory_gbps")]["why"] == "no per-seed values"


def test_each_pod_carries_its_interval_over_seeds_into_the_report():
    from numasim import report

    data = small_scenario(duration="3s", warmup="1s", replications=3,
                          policies=[{"label": "cfs", "policy": "cfs"}, {"label": "numactl", "policy": "numactl"}])
    res = numasim.run(numasim.from_dict(data), quiet=True)
    bars = report.figures(res)["pods"].data
    for run, bar in zip(res.runs, bars):
        halves = [p.throughput_ci for p in run.pods]
        assert all(h is not None and h >= 0 for h in halves)
        assert bar.error_y.visible is True and list(bar.error_y.array) == halves
    assert res.to_json()["runs"][0]["pods"][0]["throughput_ci"] == res.runs[0].pods[0].throughput_ci

