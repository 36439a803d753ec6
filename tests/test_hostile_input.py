"""Hostile input: bounded reading, booleans as numbers, work and memory budgets, safe outputs, safe text.

Every case is refused before any simulation starts, with status 2, one message line and
nothing written.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

from numasim.budget import estimate
from numasim.cli import main
from numasim.model.machine import parse_cpulist
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
    ("x: &x [*x]\n" + BASE_TEXT, []),  # a recursive alias: refused one way or another, no hang
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
])
def test_cpulists_are_checked_against_the_machine_before_they_are_built(text, message):
    with pytest.raises(ValueError, match=message):
        parse_cpulist(text, 44)
    assert parse_cpulist("1-44:2", 44) == frozenset(range(1, 44, 2))


@pytest.mark.parametrize("changes, flag, words", [
    ({"duration": "1e9s"}, "--max-work", ["estimated", "--max-work SECONDS"]),
    ({"sample_interval": "1ns"}, "--max-memory", ["GiB", "sample_interval"]),
])
def test_runs_over_budget_are_refused_before_they_start(tmp_path, capsys, changes, flag, words):
    p = scenario(tmp_path, **changes)
    out = tmp_path / "out.json"
    expect_error(capsys, ["run", p, "--quiet", "--json", out], str(p), flag, *words)
    assert not out.exists()


def test_the_budget_is_a_flag_and_validate_shows_the_estimate(tmp_path, capsys):
    p = scenario(tmp_path)
    expect_error(capsys, ["run", p, "--quiet", "--max-work", "0.001"], str(p), "--max-work", "over the budget")
    expect_error(capsys, ["run", p, "--quiet", "--max-work", "-1"], "--max-work", None, "positive")
    assert main(["validate", str(p)]) == 0
    assert "estimated cost: " in capsys.readouterr().out


def test_the_estimate_errs_high_on_the_reference_scenario():
    # Pacific's default run is 56 simulations of 80 threads; measured at about 2.5 CPU
    # minutes (docs/performance.md), the estimate must not be below that.
    s = load("scenarios/pacific.yaml")
    est = estimate(s, list(s.variants), None, True)
    assert est.runs == 8 * (3 + 4)
    assert est.cpu_seconds > 150


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
    expect_error(capsys, ["run", p, "--quiet", "--csv", p], f"--csv {p}", None, "scenario file itself")
    assert p.read_text() == text


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


def test_from_dict_refuses_booleans_too():
    data = copy.deepcopy(BASE)
    data["pods"][0]["threads"] = True
    with pytest.raises(Exception, match="not true/false"):
        from_dict(data)
