"""numasim calibrate: fitting scenario fields to measured figures."""

from __future__ import annotations


import pytest
import yaml

import numasim
from numasim.cli import main

from .conftest import OVERCOMMITTED, small_scenario


def _data() -> dict:
    data = small_scenario(**OVERCOMMITTED)
    data.update(duration="4s", warmup="1s")
    return data


def test_a_known_parameter_is_recovered_from_its_own_prediction():
    # CFS's placement makes one seed's ratio a rough function of the misses (which CPUs, and so which
    # memory, a moved thread lands on); the mean of 3 seeds is smooth enough to invert.
    data = {**_data(), "replications": 3}
    truth = {**data, "workloads": {"java": {**data["workloads"]["java"], "llc_misses_per_op": 3000}}}
    target = numasim.run(numasim.from_dict(truth), workers=1, quiet=True, with_sla=False).relative("numactl")
    res = numasim.calibrate(data, {"workloads.java.llc_misses_per_op": (500.0, 6000.0)},
                            [("numactl", "relative_throughput", target)], workers=1)
    (fitted,) = res.fitted.values()
    assert res.targets[0]["predicted"] == pytest.approx(target, rel=0.01)
    # The fit lands near, not on, 3000.
    assert 2400 < fitted < 3700
    assert res.evaluations <= 40 and res.overrides() == [f"workloads.java.llc_misses_per_op={fitted:.6g}"]


def test_several_fields_reduce_the_error_within_the_budget():
    res = numasim.calibrate(_data(), {"workloads.java.llc_misses_per_op": (500.0, 6000.0),
                                      "machine.remote_latency_ns": (100.0, 250.0)},
                            [("numactl", "relative_throughput", 1.25), ("cfs", "locality", 0.5)],
                            workers=1, max_evaluations=8)
    assert res.evaluations == 8
    first, best = res.history[0]["error"], min(h["error"] for h in res.history)
    assert best <= first
    assert all(100.0 <= h["values"]["machine.remote_latency_ns"] <= 250.0 for h in res.history)


def test_cli_reads_measurements_writes_the_fit_and_refuses_bad_targets(tmp_path, capsys):
    import json

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_data()))
    measured = tmp_path / "m.csv"
    measured.write_text("label,metric,value\nnumactl,relative_throughput,1.15\ncfs,locality,0.5\n")
    out = tmp_path / "fit.json"
    assert main(["calibrate", str(path), "--fit", "workloads.java.llc_misses_per_op=500..6000",
                 "--measured", str(measured), "--max-evaluations", "6", "--workers", "1",
                 "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert set(doc["fitted"]) == {"workloads.java.llc_misses_per_op"} and doc["evaluations"] <= 6  # the interval's run included
    assert doc["error_after_pct"] <= doc["error_before_pct"]
    assert "judge the model on other figures" in doc["note"]
    # Two targets, one field: an interval for it, from the Jacobian.
    assert "±" in capsys.readouterr().out
    measured.write_text("label,metric,value\nnumactl,relative_throughput,lots\n")
    assert main(["calibrate", str(path), "--fit", "workloads.java.llc_misses_per_op=500..6000",
                 "--measured", str(measured)]) == 2
    assert "line 2" in capsys.readouterr().err
    assert main(["calibrate", str(path), "--fit", "workloads.java.llc_misses_per_op=500..6000",
                 "--target", "nosuch:throughput=1"]) == 2
    assert "no variant 'nosuch'" in capsys.readouterr().err
    assert main(["calibrate", str(path), "--fit", "workloads.java.llc_misses_per_op=6000..500",
                 "--target", "numactl:throughput=1"]) == 2
    assert "LO < HI" in capsys.readouterr().err
    assert main(["calibrate", str(path), "--fit", "pods.0.replicas=0..3", "--target", "numactl:throughput=1"]) == 2
    assert "replicas" in capsys.readouterr().err  # an end of the range that is not a valid scenario


def _calibration_module(name: str = "thread_mlp"):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "calibration" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_calibration", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_r810_bandwidth_still_zeroes_what_numa01_zeroed():
    # r810-e7-4807's memory bandwidth is calibrated on autonumabench NUMA01 without balancing (not a
    # validation case); the autonumabench R810 cases add the same harness seconds to their elapsed times.
    from numasim import validation
    from numasim.model.presets import load_preset

    fit = _calibration_module("r810_bandwidth")
    target = fit.ZEROED_BYTES / (fit.ELAPSED_S - fit.HARNESS_S) / 1e9
    assert fit.zeroing_gbps(load_preset("machines", "r810-e7-4807")["memory_bandwidth_gbps"]) == \
        pytest.approx(target, rel=0.01)
    assert fit.zeroing_gbps(25.6) > 2 * target  # the derived peak it replaced was far from what the host moved
    r810 = [c for c in validation.load_cases() if c.elapsed is not None and c.scenario["machine"] == "r810-e7-4807"]
    assert r810 and {c.elapsed.harness_s for c in r810} == {fit.HARNESS_S}


def test_each_presets_lines_in_flight_still_move_their_published_bandwidth():
    # thread_mlp is calibrated (docs/validation.md): if the model's latency or rate solve changes,
    # the preset's value no longer reproduces the figure it was fitted on, and must be fitted again.
    for preset, published, got in _calibration_module().check():
        assert got == pytest.approx(published, rel=0.015), preset
    # Presets with the same core take the same value.
    from numasim.model.presets import load_preset

    lines = {name: load_preset("machines", name).get("thread_mlp") for name in
             ("skylake-8180", "skylake-8180-4s", "skylake-8160-8s", "cascadelake-8280", "epyc-7742-nps1", "epyc-7742-nps4")}
    assert len({lines[n] for n in ("skylake-8180", "skylake-8180-4s", "skylake-8160-8s", "cascadelake-8280")}) == 1
    assert lines["epyc-7742-nps1"] == lines["epyc-7742-nps4"]


def test_bad_measurements_files(tmp_path, capsys):
    from numasim.cli_tools import _measured_csv

    bom = tmp_path / "excel.csv"
    bom.write_bytes(b"\xef\xbb\xbflabel,metric,value\r\nnumactl,relative_throughput,1.15\r\n")  # Excel's CSV UTF-8
    assert _measured_csv(str(bom))[0] == [("numactl", "relative_throughput", 1.15)]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_data()))
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"label,metric,value\n\xff\xfe,x,1\n")
    for measured, message in ((bad, "bad.csv: not a UTF-8 text file"), ("/dev/null", "is a device or socket"),
                              (tmp_path, "is a directory, expected a CSV file")):
        assert main(["calibrate", str(path), "--fit", "workloads.java.llc_misses_per_op=500..6000",
                     "--measured", str(measured)]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def _no_runs(tmp_path, monkeypatch):
    """The scenario file of _data(), with simulations made to fail the test: what follows is refused first."""
    import numasim.runner

    def no_run(*a, **kw):
        raise AssertionError("a simulation ran")

    monkeypatch.setattr(numasim.runner, "run", no_run)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_data()))
    return path


def test_a_fit_is_refused_before_any_run_on_a_whole_number_field_or_a_path_given_twice(tmp_path, capsys, monkeypatch):
    path = _no_runs(tmp_path, monkeypatch)
    assert main(["calibrate", str(path), "--fit", "pods.0.threads=1..3", "--target", "numactl:throughput=1"]) == 2
    err = capsys.readouterr().err
    assert "--fit pods.0.threads: needs a real-valued field" in err and "valid integer" in err
    assert main(["calibrate", str(path), "--fit", "machine.remote_latency_ns=100..200",
                 "--fit", "machine.remote_latency_ns=150..250", "--target", "numactl:throughput=1"]) == 2
    assert "--fit machine.remote_latency_ns: given twice" in capsys.readouterr().err


def test_each_measured_figure_is_checked_where_it_was_given(tmp_path, capsys, monkeypatch):
    path = _no_runs(tmp_path, monkeypatch)
    measured = tmp_path / "m.csv"
    fit = ["calibrate", str(path), "--fit", "workloads.java.llc_misses_per_op=500..6000"]
    for rows, where, words in (
            ("numactl,relative_throughput,1.1\ncfs,locality,nan\n", "line 3", "finite number at least 0"),
            ("numactl,relative_throughput,inf\n", "line 2", "finite number above 0"),
            ("numactl,relative_throughput,-1.1\n", "line 2", "above 0"),
            ("numactl,locality,1.5\n", "line 2", "at most 1"),
            ("nosuch,locality,0.5\n", "line 2", "no variant 'nosuch'"),
            ("numactl,speed,0.5\n", "line 2", "unknown metric 'speed'"),
            ("cfs,locality,0.5\nnumactl,throughput,9\ncfs,locality,0.6\n", "line 4", "m.csv, line 2)")):
        measured.write_text("label,metric,value\n" + rows)
        assert main([*fit, "--measured", str(measured)]) == 2, rows
        err = capsys.readouterr().err
        assert f"m.csv: {where}: " in err and words in err and "--target" not in err, err
    measured.write_text("label,metric,value\ncfs,locality,0.5\n")
    assert main([*fit, "--measured", str(measured), "--target", "cfs:locality=0.6"]) == 2
    assert "--target cfs:locality: cfs:locality is measured twice (also at " in capsys.readouterr().err
    assert main([*fit, "--target", "numactl:relative_throughput=0"]) == 2
    assert "--target numactl:relative_throughput: the measured relative_throughput must be" in capsys.readouterr().err


def test_a_calibration_over_its_budget_is_refused_before_any_run(tmp_path, capsys, monkeypatch):
    path = _no_runs(tmp_path, monkeypatch)
    fit = ["calibrate", str(path), "--fit", "workloads.java.llc_misses_per_op=500..6000",
           "--target", "numactl:relative_throughput=1.1", "--target", "cfs:locality=0.5"]
    assert main([*fit, "--max-work", "1"]) == 2
    err = capsys.readouterr().err
    assert "--max-work: this calibration's 40 runs at most are estimated at 80 simulations" in err
    assert main([*fit, "--max-work", "1", "--max-evaluations", "3", "--leave-one-out"]) == 2
    assert "this calibration's 11 runs at most" in capsys.readouterr().err  # 3 + 2 x (3 + 1)
    assert main([*fit, "--max-work", "0"]) == 2
    assert "--max-work: must be a positive number" in capsys.readouterr().err
    # From Python the same default budget holds: a 100-hour scenario is refused before it runs.
    long = {**_data(), "duration": "100h"}
    with pytest.raises(numasim.ScenarioError, match="--max-work: this calibration's 2 runs at most"):
        numasim.calibrate(long, {"workloads.java.llc_misses_per_op": (500.0, 6000.0)},
                          [("numactl", "relative_throughput", 1.1)], max_evaluations=2)


def test_the_costliest_corner_of_the_fit_bounds_is_costed():
    from numasim.budget import estimate

    # Shorter requests and no think time each bring more requests, both together more than either.
    fit = {"workloads.java.requests.think_ms": (0.0, 1.0), "workloads.java.requests.ops": (0.01, 30.0)}

    def data(think_ms: float = 1.0, ops: float = 30.0) -> dict:
        d = _data()
        d["workloads"]["java"]["requests"] = {"mode": "closed", "ops": ops, "think_ms": think_ms}
        return d

    def cost(**values) -> float:
        s = numasim.from_dict(data(**values))
        return estimate(s, [s.variant("cfs"), s.variant("numactl")], None, False).cpu_seconds

    alone = max(cost(think_ms=0.0), cost(ops=0.01), cost())
    corner = cost(think_ms=0.0, ops=0.01)
    assert corner > 1.5 * alone
    with pytest.raises(numasim.ScenarioError, match="this calibration's 5 runs at most"):
        numasim.calibrate(data(), fit, [("numactl", "relative_throughput", 1.1)], max_evaluations=5,
                          max_work_s=5 * (alone + corner) / 2)


def test_a_budget_too_small_for_the_interval_goes_to_the_fit_and_says_so():
    # 2 fields and 3 targets with 3 runs: keeping 2 for the interval would leave the fit only its start.
    res = numasim.calibrate(_data(), {"workloads.java.llc_misses_per_op": (500.0, 6000.0),
                                      "machine.remote_latency_ns": (100.0, 250.0)},
                            [("numactl", "relative_throughput", 1.25), ("cfs", "locality", 0.5),
                             ("numactl", "locality", 1.0)], workers=1, max_evaluations=3)
    assert res.evaluations == 3 and len({tuple(h["values"].values()) for h in res.history}) == 3
    assert all(v is None for v in res.ci.values()) and res.ci_note == "--max-evaluations left no runs for it"


def test_calibrate_from_python_refuses_what_the_command_line_would():
    from numasim.errors import NumasimError

    s = "scenarios/pacific.yaml"
    target = [("numactl", "throughput", 1.0)]
    bad = [
        (dict(fit=[("x", (1, 2))], targets=target), "--fit: expected a mapping"),
        (dict(fit={"x": ("a", "b")}, targets=target), "--fit x: expected a pair of numbers"),
        (dict(fit={"x": (1, 2)}, targets="numactl"), "--target: expected a list of"),
        (dict(fit={"x": (1, 2)}, targets=[("numactl", "throughput", "x")]), "--target: expected a list of"),
        (dict(fit={"x": (1, 2)}, targets=target, max_evaluations=0), "--max-evaluations: expected a whole number"),
        (dict(fit={"x": (1, 2)}, targets=target, replications="2"), "--replications: expected a whole number"),
        (dict(fit={"x": (1, 2)}, targets=target, sets=5), "--set: expected"),
        (dict(fit={"x": (1, 2)}, targets=target, origins=[(None, "a"), (None, "b")]), "origins: 1 targets but 2"),
    ]
    for kwargs, message in bad:
        with pytest.raises(NumasimError, match=message):
            numasim.calibrate(s, **kwargs)
    with pytest.raises(NumasimError, match="must be a mapping of keys"):
        numasim.calibrate(5, fit={"x": (1, 2)}, targets=target)
    with pytest.raises(NumasimError, match="at most 1e"):  # a measured figure no run reports
        numasim.calibrate(s, fit={"workloads.java-transactions.mlp": (1, 3)},
                          targets=[("numactl", "throughput", 1e300)])


def test_the_error_before_is_at_the_values_the_scenario_runs_with_a_presets_included():
    # pacific.yaml sets neither its machine's local latency nor its workload's misses per op: the
    # preset and the workload's base do, and the fit starts there, not at the middle of the bounds.
    from numasim.calibrate import _current, _resolved

    s = numasim.load("scenarios/pacific.yaml")
    resolved = _resolved(s)
    assert _current(resolved, "machine.local_latency_ns", -1.0) == s.machine.spec.local_latency_ns
    assert _current(resolved, "workloads.java-transactions.llc_misses_per_op", -1.0) == 4320.0
    assert _current(resolved, "machine.thread_mlp", -1.0) == -1.0  # not set anywhere: the middle of the bounds
    i = [v.label for v in s.variants].index("cfs+numab")  # a policy option left at its default
    assert _current(resolved, f"policies.{i}.options.scan_size_mb", -1.0) == s.variants[i].options.scan_size_mb
