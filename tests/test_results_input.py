"""Reading results back (numasim.load_result, numasim compare): bad files get one clear message and exit 2.

A results file is read like a scenario file: a regular file (or a pipe) of at most
256 MiB, nested within reason, and of the shape ``RunResult.to_json`` writes; a wrong
field is named by its path (``runs[0].pods[0]: expected an object``).
"""

from __future__ import annotations

import copy
import json

import pytest

import numasim
from numasim.analysis.results import MAX_BYTES
from numasim.cli import main

from .conftest import small_scenario


@pytest.fixture(scope="module")
def good() -> dict:
    data = small_scenario(duration="2s", replications=2,
                          policies=[{"label": "cfs", "policy": "cfs"}, {"label": "numactl", "policy": "numactl"}])
    data["pods"][0]["replicas"] = 1
    return numasim.run(numasim.from_dict(data), workers=1, quiet=True, with_sla=False).to_json()


def _compare(tmp_path, capsys, doc) -> tuple[int, str]:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(doc[0]))
    b.write_text(doc[1] if isinstance(doc[1], str) else json.dumps(doc[1]))
    capsys.readouterr()
    rc = main(["compare", str(a), str(b)])
    return rc, capsys.readouterr().err


def test_a_good_file_still_compares(tmp_path, capsys, good):
    rc, _ = _compare(tmp_path, capsys, (good, good))
    assert rc == 0


def _set(doc: dict, path: list, value) -> dict:
    doc = copy.deepcopy(doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


_DELETE = object()

BAD = [
    (["runs", 0, "pods"], [1], "runs[0].pods[0]: expected an object, got a number"),
    (["scenario"], 5, "scenario: expected an object, got a number"),
    (["scenario", "provenance"], 5, "scenario.provenance: expected an object or null"),
    (["runs", 0, "label"], ["x"], "runs[0].label: expected a label (printable text of 1-80 characters), got a list"),
    # Labels and pod names as bounded as a scenario's: a table lays out every line of a cell.
    (["runs", 0, "label"], "x" + "\n" * 200_000, "runs[0].label: expected a label (printable text of 1-80 characters), "
                                                "got 200,001 characters"),
    (["baseline"], "b" * 81, "baseline: expected a label (printable text of 1-80 characters), got 81 characters"),
    (["runs", 0, "pods", 0, "group"], "g" * 301, "runs[0].pods[0].group: expected a pod name (printable text of "
                                                 "1-300 characters), got 301 characters"),
    (["runs", 0, "timeseries", "label"], [], "runs[0].timeseries.label: is not a series numasim writes"),
    (["runs", 0, "replicates"], "x", "runs[0].replicates: expected a list, got a string"),
    (["runs", 0, "replicates"], [{"seed": 1, "throughput": "a"}, {"seed": 2, "throughput": "b"}],
     "runs[0].replicates[0].throughput: expected a number from 0 to 1e18, got a string"),
    (["runs", 0, "replicates", 0, "seed"], _DELETE, "runs[0].replicates[0].seed: expected an integer"),
    (["runs", 0, "throughput"], "fast", "runs[0].throughput: expected a number"),
    (["runs", 0, "throughput"], None, "runs[0].throughput: expected a number from 0 to 1e18, got null"),
    (["runs", 0, "window_s"], 5, "runs[0].window_s: expected a list"),
    (["runs", 0, "events"], [1], "runs[0].events[0]: expected an object"),
    (["runs", 1], 7, "runs[1]: expected an object, got a number"),
    (["runs"], [], "runs: expected at least one run"),
    (["runs"], "x", "runs: expected a list, got a string"),
    (["baseline"], "nosuch", "baseline: 'nosuch' names no run; labels: cfs, numactl"),
    (["runs", 1, "label"], "cfs", "runs[1].label: 'cfs' is also the label of runs[0]"),
    # numasim writes plain JSON (allow_nan=False): NaN and Infinity are not read back, nor numbers past a float.
    (["runs", 0, "throughput"], float("nan"), "malformed JSON: NaN is not a number numasim writes"),
    (["runs", 0, "memory_gbps"], float("-inf"), "malformed JSON: -Infinity is not a number numasim writes"),
    (["runs", 0, "migrations"], 10 ** 400, "runs[0].migrations: expected a number from 0 to 1e18, got a number past a float's range"),
    # Figures a run cannot report: below zero, a share above one... or so large their sum overflows.
    (["runs", 0, "memory_gbps"], -1e308, "runs[0].memory_gbps: expected a number from 0 to 1e18, got -1e+308"),
    (["runs", 0, "throughput"], 1.7e308, "runs[0].throughput: expected a number from 0 to 1e18, got 1.7e+308"),
    (["runs", 0, "pods", 0, "throughput"], -5, "runs[0].pods[0].throughput: expected a number from 0 to 1e18, got -5"),
    (["runs", 0, "replicates", 0, "locality"], -0.5,
     "runs[0].replicates[0].locality: expected a number from 0 to 1e18, or null, got -0.5"),
    # No more runs than a scenario has variants, nor replicates than it has seeds.
    (["runs"], [{}] * 65, "runs: expected at most 64 runs (a scenario's policy variants), got 65"),
    (["runs", 0, "replicates"], [{"seed": k, "throughput": 1.0} for k in range(1001)],
     "runs[0].replicates: expected at most 1000 replicates (seeds), got 1,001"),
    # Text a terminal would act on (an ANSI escape, a carriage return) is refused, not echoed.
    (["runs", 0, "label"], "cfs\x1b[2J\rok", "runs[0].label: expected a label (printable text of 1-80 characters), "
                                             "got a string with control characters"),
    (["runs", 0, "pods", 0, "name"], "p\x07", "runs[0].pods[0].name: expected a pod name (printable text of 1-300 "
                                             "characters), got a string with control"),
    (["runs", 0, "label"], "x\ud800", "runs[0].label: expected a label"),  # a lone surrogate: no character
    # Every series has one value a sample (a frame's columns): a short one used to fail in pandas.
    (["runs", 0, "timeseries", "locality"], [], "runs[0].timeseries.locality: has 0 values for"),
]


@pytest.mark.parametrize("path,value,message", BAD, ids=[m.split(":")[0] for _, _, m in BAD])
def test_a_wrong_field_is_named_by_its_path(tmp_path, capsys, good, path, value, message):
    rc, err = _compare(tmp_path, capsys, (good, _set(good, path, value)))
    assert rc == 2, err
    assert f"b.json: cannot be read as numasim results: {message}" in err
    assert "Traceback" not in err


def test_deep_nesting_is_refused(tmp_path, capsys, good):
    rc, err = _compare(tmp_path, capsys, (good, "[" * 100_000 + "]" * 100_000))
    assert rc == 2 and "nested too deeply" in err


def test_a_device_a_directory_a_missing_file_and_bad_bytes(tmp_path, capsys, good):
    a = tmp_path / "a.json"
    a.write_text(json.dumps(good))
    for b, message in (("/dev/null", "is a device or socket, expected a JSON file"),
                       (str(tmp_path), "is a directory, expected a JSON file"),
                       (str(tmp_path / "nosuch.json"), "file not found")):
        assert main(["compare", str(a), b]) == 2
        assert f"{b}: cannot be read as numasim results: {message}" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe{}")
    with pytest.raises(numasim.NumasimError, match="not a UTF-8 text file"):
        numasim.load_result(bad)
    bad.write_text("{nope")
    with pytest.raises(numasim.NumasimError, match="malformed JSON"):
        numasim.load_result(bad)
    bad.write_text(" \n")
    with pytest.raises(numasim.NumasimError, match="is empty; expected the results numasim run --json writes"):
        numasim.load_result(bad)


def test_a_file_over_the_cap_is_refused_unread(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:  # sparse: no disk used
        fh.truncate(MAX_BYTES + 1)
    with pytest.raises(numasim.NumasimError, match=f"larger than {MAX_BYTES // 2**20} MiB"):
        numasim.load_result(big)


def test_a_file_of_many_small_values_is_refused_before_parsing(tmp_path, capsys, good, monkeypatch):
    # Parsed, "{}," takes 64 bytes and "1e0," 32: 256 MiB of either would take gigabytes.
    import numasim.analysis.results as results

    monkeypatch.setattr(results, "MAX_CONTAINERS", 1000)
    monkeypatch.setattr(results, "MAX_VALUES", 5000)
    dicts = _set(good, ["runs", 0, "timeseries", "junk"], [{}] * 1001)
    rc, err = _compare(tmp_path, capsys, (good, dicts))
    assert rc == 2 and "holds more than 1,000 JSON objects and lists" in err
    floats = _set(good, ["runs", 0, "timeseries", "junk"], [1.0] * 5001)
    rc, err = _compare(tmp_path, capsys, (good, floats))
    assert rc == 2 and "holds more than 5,000 values" in err
    assert _compare(tmp_path, capsys, (good, good))[0] == 0


def test_the_checks_apply_to_data_too(good):
    with pytest.raises(ValueError, match=r"runs\[0\]\.pods\[0\]: expected an object"):
        numasim.RunResult.from_json(_set(good, ["runs", 0, "pods"], [1]))
    with pytest.raises(ValueError, match=r"runs\[0\]\.throughput: expected a number from 0 to 1e18, got inf"):
        numasim.RunResult.from_json(_set(good, ["runs", 0, "throughput"], float("inf")))
    # A policy's reason for rejecting a pod is its own words: kept as written (JSON escapes them), not refused.
    reason = _set(good, ["runs", 0, "pods", 0, "reason"], "no room\r\n\tline two")
    assert numasim.RunResult.from_json(reason).run("cfs").pods[0].reason == "no room\r\n\tline two"
    back = numasim.RunResult.from_json(good)
    assert back.to_json()["runs"] == good["runs"]
