"""The validation suite's harness: case files, the ratio, the CLI and its JSON."""

from __future__ import annotations

import json

import pytest

from numasim import validation
from numasim.cli import main
from numasim.model.presets import load_preset


def test_every_case_file_is_complete_and_runnable():
    cases = validation.load_cases()
    assert len(cases) >= 5
    assert len({c.id for c in cases}) == len(cases)
    for c in cases:
        assert c.source.startswith("https://"), c.id
        assert c.quote and c.published_from, c.id
        validation._scenario(c)  # validates the scenario and both labels


def test_a_write_mix_case_gives_the_closed_form_of_the_model():
    # At saturation a node carries reads + write_cost x writes = its read bandwidth, so the
    # bandwidth of a mix with w writes per read, relative to all reads, is (1 + w) / (1 + cost w).
    (res,) = validation.run_suite(["mlc-3to1-vs-reads-clx"], workers=1)
    m = load_preset("machines", "cascadelake-8280")
    cost = 2 * m["loaded_latency_peak_gbps"] / m["bandwidth_1to1_gbps"] - 1
    assert res.predicted == pytest.approx((1 + 1 / 3) / (1 + cost / 3), rel=0.01)
    assert res.error_pct == pytest.approx(100 * (res.predicted / res.published - 1))
    assert res.within == (abs(res.error_pct) <= res.band_pct)
    assert res.direction_ok  # less than 1, as published


def test_an_elapsed_time_case_adds_its_harness_and_common_phase():
    # A published ratio of elapsed times of fixed work: T(side) = harness + common ops at common_at's
    # throughput + the work at the side's own; the ratio is T(denominator) / T(numerator).
    (case,) = validation.load_cases(["autonumabench-numa01-threadlocal-numab-vs-none-r810"])
    e = case.elapsed
    assert e.common_at == case.denominator and e.harness_s > 0 and e.common_ops > 0
    num, den = 4e8, 1e8
    t_den = e.harness_s + e.common_ops / den + e.ops / den
    t_num = e.harness_s + e.common_ops / den + e.ops / num
    assert case.ratio(num, den) == pytest.approx(t_den / t_num)
    assert 1 < case.ratio(num, den) < num / den  # parts both sides share draw the ratio towards 1
    # The common phase runs at the denominator's throughput whichever side is faster.
    assert case.ratio(den, num) == pytest.approx((e.harness_s + e.common_ops / num + e.ops / num)
                                                 / (e.harness_s + e.common_ops / num + e.ops / den))
    other = case.model_copy(update={"elapsed": e.model_copy(update={"common_at": case.numerator})})
    assert other.ratio(num, den) == pytest.approx((e.harness_s + e.common_ops / num + e.ops / den)
                                                  / (e.harness_s + e.common_ops / num + e.ops / num))
    bare = case.model_copy(update={"elapsed": validation.Elapsed(ops=e.ops)})
    assert bare.ratio(num, den) == pytest.approx(num / den)  # nothing shared: the throughput ratio
    assert case.model_copy(update={"elapsed": None}).ratio(num, den) == num / den


def test_cli_writes_the_documented_json_and_exits_by_the_bands(tmp_path, capsys):
    out = tmp_path / "v.json"
    code = main(["validation", "--only", "mlc-3to1-vs-reads-clx", "--only", "mlc-2to1-vs-reads-hsw",
                 "--workers", "1", "--json", str(out)])
    data = json.loads(out.read_text())
    assert set(data) == {"cases", "mape_pct"}
    assert [c["id"] for c in data["cases"]] == ["mlc-2to1-vs-reads-hsw", "mlc-3to1-vs-reads-clx"]
    keys = {"id", "source", "machine", "mechanism", "published", "predicted", "error_pct", "band_pct", "within",
            "direction_ok"}
    assert all(set(c) == keys for c in data["cases"])
    assert data["mape_pct"] == pytest.approx(sum(abs(c["error_pct"]) for c in data["cases"]) / 2)
    assert code == (0 if all(c["within"] for c in data["cases"]) else 1)
    assert "MAPE" in capsys.readouterr().out


def test_unknown_case_is_a_clear_error(capsys):
    assert main(["validation", "--only", "no-such-case"]) == 2
    err = capsys.readouterr().err
    assert "no shipped validation case no-such-case" in err and "numasim validation --list" in err
    assert main(["validation", "--only", "mlc-3to1-vs-reads-cxl"]) == 2  # a typo: the near ids are named
    assert "did you mean mlc-3to1-vs-reads-clx" in capsys.readouterr().err


def test_list_names_every_case(capsys):
    assert main(["validation", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(c.id[:20] in out for c in validation.load_cases())


def _own_case(tmp_path, **changes):
    """The mlc-3to1-vs-reads-clx case as a file of the user's own, with ``changes``."""
    from numasim.model.yamlfile import read_yaml
    import yaml

    data = read_yaml(validation._cases_dir() / "mlc-3to1-vs-reads-clx.yaml")
    data.update({"id": "my-mix", "title": "my measurement", **changes})
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_case_of_your_own_runs_alone_and_beside_shipped_ones(tmp_path, capsys):
    mine = _own_case(tmp_path, published=0.95)
    out = tmp_path / "v.json"
    assert main(["validation", "--case", str(mine), "--workers", "1", "--json", str(out)]) in (0, 1)
    (own,) = json.loads(out.read_text())["cases"]  # with --case alone the shipped cases stay out
    (shipped,) = validation.run_suite(["mlc-3to1-vs-reads-clx"], workers=1)
    assert own["id"] == "my-mix" and own["published"] == 0.95
    assert own["predicted"] == pytest.approx(shipped.predicted, rel=1e-9)  # the same scenario, the same figure
    assert own["error_pct"] == pytest.approx(100 * (own["predicted"] / 0.95 - 1))
    assert main(["validation", "--case", str(mine), "--only", "mlc-3to1-vs-reads-clx", "--list"]) == 0
    listed = capsys.readouterr().out
    assert "my-mix" in listed and "mlc-3to1-vs-reads-clx" in listed and "mlc-2to1" not in listed


def test_a_bad_case_of_your_own_names_its_file_and_fields(tmp_path, capsys):
    scenario = _own_case(tmp_path).read_text(encoding="utf-8")
    import yaml

    data = yaml.safe_load(scenario)
    del data["published"]
    data["band_pct"] = "wide"
    data["scenario"]["pods"][0]["memory"] = 42
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["validation", "--case", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "published: required field is missing" in err and "band_pct" in err
    data = yaml.safe_load(scenario)
    data["scenario"]["pods"][0]["memory"] = 42
    bad.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["validation", "--case", str(bad)]) == 2  # the scenario's fields, under scenario.
    assert "scenario.pods[0].memory" in capsys.readouterr().err
    data = yaml.safe_load(scenario)
    data["numerator"] = "nope"
    bad.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["validation", "--case", str(bad)]) == 2
    assert "numerator: no variant 'nope'" in capsys.readouterr().err
    for elapsed, metric, says in (({"ops": 1e9, "common_ops": 1e8}, "throughput", "common_ops needs common_at"),
                                  ({"ops": 1e9, "common_ops": 1e8, "common_at": "nope"}, "throughput",
                                   "elapsed.common_at is 'nope'"),
                                  ({"ops": 1e9}, "locality", "give metric throughput"),
                                  ({"ops": 1e9, "common_at": "mix"}, "throughput", "common_ops is 0"),
                                  ({"ops": -1}, "throughput", "elapsed.ops")):
        data = yaml.safe_load(scenario)
        data.update(elapsed=elapsed, metric=metric)
        bad.write_text(yaml.safe_dump(data), encoding="utf-8")
        assert main(["validation", "--case", str(bad)]) == 2
        assert says in capsys.readouterr().err, says
    twin = _own_case(tmp_path, id="mlc-3to1-vs-reads-clx")
    assert main(["validation", "--case", str(twin), "--only", "mlc-3to1-vs-reads-clx"]) == 2
    assert "also in the shipped suite" in capsys.readouterr().err
    bad.write_text("- a list\n", encoding="utf-8")
    assert main(["validation", "--case", str(bad)]) == 2
    assert "must be a mapping" in capsys.readouterr().err


def test_a_case_of_your_own_finds_its_policy_file_beside_it(tmp_path, monkeypatch):
    # A relative FILE.py:CLASS in the case's scenario is read beside the case file, in the workers too.
    import yaml

    sub = tmp_path / "cases"
    sub.mkdir()
    (sub / "pol.py").write_text("from numasim.policies.cfs import CFS\nclass Mine(CFS):\n    name = 'mine'\n")
    data = yaml.safe_load(_own_case(tmp_path).read_text(encoding="utf-8"))
    data["scenario"]["policies"][1]["policy"] = "pol.py:Mine"
    data["scenario"]["policies"][1]["options"] = {}
    mine = sub / "mine.yaml"
    mine.write_text(yaml.safe_dump(data), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    (case,) = validation.load_cases(files=[str(mine.relative_to(tmp_path))])
    (res,) = validation.run_suite(workers=1, cases=[case])
    assert res.id == "my-mix" and res.predicted > 0


def test_the_suite_is_costed_before_anything_runs(tmp_path, capsys):
    # A case of your own can be as costly as any scenario: the suite is refused whole, before it starts.
    mine = _own_case(tmp_path)
    out = tmp_path / "v.json"
    assert main(["validation", "--case", str(mine), "--only", "mlc-2to1-vs-reads-hsw", "--max-work", "0.01",
                 "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert "these 2 cases are estimated at 4 simulations" in err and "run fewer cases (--only, --case)" in err
    assert "finished" not in err and not out.exists()
    with pytest.raises(validation.ScenarioError, match="this case is estimated"):
        validation.run_suite(["mlc-3to1-vs-reads-clx"], workers=1, max_work_s=0.01)
