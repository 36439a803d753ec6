"""Bad input gives one clear message, exit status 2, no traceback and no half-written output.

Every message has the form ``error: SOURCE: PATH: what was wrong ... what is allowed``,
where SOURCE is the scenario file (or ``--set`` / the command-line option) and PATH
the dotted path of the field. No test here runs a long simulation: scenarios are tiny
(``duration: 2s``) and only one test actually simulates.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import numasim.atomic
import numasim.cli
from numasim.cli import main
from numasim.policies.registry import available_policies
from numasim.model.presets import machine_preset, preset_names

PRESET = "pacific-broadwell"

BASE: dict = {
    "name": "tiny",
    "machine": {"preset": PRESET, "smt": False},
    "pods": [
        {"name": "jbb", "replicas": 2, "threads": 2, "cpu_limit": 2, "memory": "4GB", "profile": "java-transactions"},
    ],
    "duration": "2s",
    "warmup": "1s",
    "sample_interval": "1s",
    "seed": 1,
    "baseline": "cfs",
    "policies": [
        {"label": "cfs", "policy": "cfs"},
        {"label": "numactl", "policy": "numactl", "options": {"cpunodebind": "auto", "membind": "auto"}},
        {"label": "taskset", "policy": "taskset", "options": {"cpus": ["0-3", "4-7"]}},
    ],
}


@pytest.fixture(scope="module")
def machine():
    """The machine the base scenario runs on (its sizes come from the preset, not from this file)."""
    return machine_preset(PRESET)


def scenario(tmp_path: Path, data=None, name: str = "scenario.yaml", **changes) -> Path:
    """Write a copy of BASE (or ``data``), with top-level ``changes``, to ``tmp_path/name``."""
    d = copy.deepcopy(BASE) if data is None else data
    if isinstance(d, dict):
        d.update(changes)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(d, sort_keys=False), encoding="utf-8")
    return path


def with_pod(**fields) -> dict:
    d = copy.deepcopy(BASE)
    d["pods"][0].update(fields)
    return d


def with_options(i: int, options: dict) -> dict:
    d = copy.deepcopy(BASE)
    d["policies"][i]["options"] = options
    return d


def expect_error(capsys, argv: list, source: str, path: str | None, *words: str) -> str:
    """Run the CLI in-process; check status 2, one line ``error: SOURCE: PATH: ...`` containing ``words``."""
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out, err)
    assert out == ""
    assert "Traceback" not in err
    lines = err.rstrip("\n").splitlines()
    assert len(lines) == 1, f"expected one message line, got:\n{err}"
    line = lines[0]
    head = f"error: {source}: " + (f"{path}: " if path else "")
    assert line.startswith(head), f"{line!r} does not start with {head!r}"
    for w in words:
        assert w in line, f"{w!r} not in {line!r}"
    return line


def test_base_scenario_is_valid(tmp_path, capsys):
    """The starting point is valid, so each failure below is due to its one change."""
    path = scenario(tmp_path)
    assert main(["validate", str(path)]) == 0
    out, err = capsys.readouterr()
    assert f"{path}: OK" in out
    assert err == ""


# ---------------------------------------------------------------- unknown keys
def test_unknown_top_level_key_lists_allowed_keys(tmp_path, capsys):
    path = scenario(tmp_path, colour="red")
    line = expect_error(capsys, ["validate", path], path, "colour", "unknown key 'colour'", "allowed keys:")
    for key in ("name", "machine", "pods", "policies", "duration", "warmup", "seed"):
        assert key in line.split("allowed keys:")[1]


def test_unknown_pod_key_lists_pod_keys(tmp_path, capsys):
    path = scenario(tmp_path, with_pod(colour="red"))
    line = expect_error(capsys, ["validate", path], path, "pods[0].colour", "unknown key 'colour'", "allowed keys:")
    allowed = line.split("allowed keys:")[1]
    for key in ("name", "replicas", "threads", "cpu_limit", "memory", "profile"):
        assert key in allowed
    assert "policies" not in allowed  # the keys of a pod, not of the top level


def test_unknown_machine_key(tmp_path, capsys):
    d = copy.deepcopy(BASE)
    d["machine"]["hyperthreads"] = True
    path = scenario(tmp_path, d)
    line = expect_error(capsys, ["validate", path], path, "machine.hyperthreads", "unknown key 'hyperthreads'")
    assert "smt" in line.split("allowed keys:")[1]


def test_unknown_policy_option(tmp_path, capsys):
    path = scenario(tmp_path, with_options(2, {"cpus": ["0-3"], "cpu": "0-3"}))
    line = expect_error(capsys, ["validate", path], path, "policies[2].options.cpu", "unknown key 'cpu'")
    assert "cpus" in line.split("allowed keys:")[1]


# ----------------------------------------------------------- sizes and units
def test_negative_memory_says_negative(tmp_path, capsys):
    path = scenario(tmp_path, with_pod(memory="-4GB"))
    expect_error(capsys, ["validate", path], path, "pods[0].memory", "cannot be negative", "'-4GB'", "GiB", "42GB")


def test_bare_number_memory_asks_for_a_unit(tmp_path, capsys):
    path = scenario(tmp_path, with_pod(memory=4))
    expect_error(capsys, ["validate", path], path, "pods[0].memory", "bare number 4", "add a unit", "units:", "GB")


def test_bare_number_duration_asks_for_a_unit(tmp_path, capsys):
    path = scenario(tmp_path, duration=2)
    expect_error(capsys, ["validate", path], path, "duration", "bare number 2", "add a unit", "ms", "min")


def test_unknown_size_unit(tmp_path, capsys):
    path = scenario(tmp_path, with_pod(memory="4 gallons"))
    expect_error(capsys, ["validate", path], path, "pods[0].memory", "'4 gallons'", "units:", "GiB")


@pytest.mark.parametrize(("field", "value"), [("memory", "1e400GB"), ("start", "1e400s")])
def test_overflowing_size_or_duration(tmp_path, capsys, field, value):
    path = scenario(tmp_path, with_pod(**{field: value}))
    expect_error(capsys, ["validate", path], path, f"pods[0].{field}", repr(value), "too large", "with a unit")


# ------------------------------------------------------ pods vs the machine
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # scipy's overflow warnings while it tries to fit
def test_loaded_latency_curve_that_cannot_be_fitted(tmp_path, capsys):
    d = copy.deepcopy(BASE)
    d["machine"].update(loaded_latency=[[1, 100], [2, 1e300]], loaded_latency_peak_gbps=2)
    path = scenario(tmp_path, d)
    # Refused by the physical bounds before a fit is tried (a curve within them fits).
    expect_error(capsys, ["validate", path], path, "machine.loaded_latency[1][1]", "less than or equal to 100000")


def test_pod_with_more_cpus_than_the_machine(tmp_path, capsys, machine):
    path = scenario(tmp_path, with_pod(cpu_limit=machine.n_cpus + 20, threads=2))
    expect_error(capsys, ["validate", path], path, "pods[0].cpu_limit",
                 f"asks for {machine.n_cpus + 20} CPUs", f"machine has {machine.n_cpus}", f"<= {machine.n_cpus}")


def test_pod_with_more_memory_than_the_machine(tmp_path, capsys, machine):
    total_gib = int(machine.node_memory.sum()) / 2**30
    path = scenario(tmp_path, with_pod(memory=f"{int(total_gib) + 100}GiB"))
    expect_error(capsys, ["validate", path], path, "pods[0].memory",
                 f"needs {int(total_gib) + 100:.1f} GiB", f"machine has {total_gib:.1f} GiB", "must be smaller")


def test_zero_replicas(tmp_path, capsys):
    path = scenario(tmp_path, with_pod(replicas=0))
    expect_error(capsys, ["validate", path], path, "pods[0].replicas", "greater than or equal to 1", "got 0")


# ------------------------------------------------------ unknown names
def test_unknown_policy_lists_known_policies(tmp_path, capsys):
    d = copy.deepcopy(BASE)
    d["policies"][0]["policy"] = "linux"
    path = scenario(tmp_path, d)
    line = expect_error(capsys, ["validate", path], path, "policies[0].policy", "unknown policy 'linux'", "known policies:")
    known = available_policies()
    builtin = ["cfs", "esxi", "k8s", "numactl", "taskset"]
    assert set(builtin) <= set(known)
    listed = line.split("known policies:")[1]  # all of them, cut when the tests have registered many
    assert ", ".join(builtin) in listed


@pytest.mark.parametrize(("machine_value", "path"), [
    ("nosuch-box", "machine"),
    ({"preset": "nosuch-box", "smt": False}, "machine.preset"),
])
def test_unknown_machine_preset_lists_presets(tmp_path, capsys, machine_value, path):
    file = scenario(tmp_path, machine=machine_value)
    line = expect_error(capsys, ["validate", file], file, path, "unknown machine preset 'nosuch-box'", "known:")
    names = preset_names("machines")
    assert PRESET in names
    for name in names:
        assert name in line.split("known:")[1]


def test_unknown_workload_profile_lists_profiles(tmp_path, capsys):
    path = scenario(tmp_path, with_pod(profile="spec-jbb"))
    line = expect_error(capsys, ["validate", path], path, "pods[0].profile", "unknown workload 'spec-jbb'", "known:")
    names = preset_names("workloads")
    assert "java-transactions" in names
    for name in names:
        assert name in line.split("known:")[1]


def test_unknown_workload_base_lists_presets(tmp_path, capsys):
    d = with_pod(profile="mine")
    d["workloads"] = {"mine": {"base": "spec-jbb"}}
    path = scenario(tmp_path, d)
    line = expect_error(capsys, ["validate", path], path, "workloads.mine.base",
                        "unknown workload preset 'spec-jbb'", "known:")
    assert "java-transactions" in line.split("known:")[1]


# ------------------------------------------------------ policy options vs the machine
def test_taskset_cpuset_outside_the_machine(tmp_path, capsys, machine):
    assert machine.n_cpus < 100
    path = scenario(tmp_path, with_options(2, {"cpus": ["0-3", "0-99"]}))
    expect_error(capsys, ["validate", path], path, "policies[2].options.cpus[1]",
                 f"CPU {machine.n_cpus} is outside the machine", f"OS CPU ids are 0-{machine.n_cpus - 1}")


def test_taskset_malformed_cpulist(tmp_path, capsys):
    path = scenario(tmp_path, with_options(2, {"cpus": ["zero-three"]}))
    expect_error(capsys, ["validate", path], path, "policies[2].options.cpus[0]",
                 "malformed cpulist item 'zero-three'", "'0-7,16,18-30:2'")


def test_taskset_cpus_of_the_wrong_type_names_the_item_not_a_union_member(tmp_path, capsys):
    path = scenario(tmp_path, with_options(2, {"cpus": [1.5]}))
    line = expect_error(capsys, ["validate", path], path, "policies[2].options.cpus[0]",
                        "a valid string", "a valid integer", "a valid list")
    assert ".str:" not in line and ".int:" not in line


def test_machine_of_the_wrong_type(tmp_path, capsys):
    path = scenario(tmp_path, machine=5)
    line = expect_error(capsys, ["validate", path], path, "machine", "a valid string or a valid dictionary", "got 5")
    assert "machine.str" not in line


@pytest.mark.parametrize("mlp, words", [("hard", ("a valid number", "'hardware'", "got 'hard'")),
                                         (100, ("less than or equal to 64", "'hardware'", "got 100"))])
def test_mlp_is_a_number_or_hardware_said_once(tmp_path, capsys, mlp, words):
    d = copy.deepcopy(BASE)
    d["workloads"] = {"w": {"base": "stream", "mlp": mlp}}
    d["pods"][0]["profile"] = "w"
    path = scenario(tmp_path, d)
    line = expect_error(capsys, ["validate", path], path, "workloads.w.mlp", *words)
    assert "constrained" not in line


def test_numactl_node_that_does_not_exist(tmp_path, capsys, machine):
    bad = machine.n_nodes
    path = scenario(tmp_path, with_options(1, {"cpunodebind": [[0], [bad]], "membind": [[0], [0]]}))
    expect_error(capsys, ["validate", path], path, "policies[1].options.cpunodebind[1][0]",
                 f"node {bad} does not exist", f"nodes are 0-{machine.n_nodes - 1}")


def test_numactl_preferred_node_that_does_not_exist(tmp_path, capsys, machine):
    path = scenario(tmp_path, with_options(1, {"preferred": [7]}))
    expect_error(capsys, ["validate", path], path, "policies[1].options.preferred[0]",
                 "node 7 does not exist", f"nodes are 0-{machine.n_nodes - 1}")


def test_numactl_physcpubind_cpu_that_does_not_exist(tmp_path, capsys, machine):
    path = scenario(tmp_path, with_options(1, {"physcpubind": ["0-3", f"2-{machine.n_cpus}"]}))
    expect_error(capsys, ["validate", path], path, "policies[1].options.physcpubind[1]", str(machine.n_cpus))


def test_numactl_two_memory_policies(tmp_path, capsys):
    path = scenario(tmp_path, with_options(1, {"membind": [[0]], "interleave": "all"}))
    expect_error(capsys, ["validate", path], path, "policies[1].options",
                 "at most one of membind, preferred and interleave", "membind, interleave")


# ------------------------------------------------------ the file itself
def test_malformed_yaml_reports_line_and_column(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("name: tiny\npods:\n  - name: jbb\n     threads: 2\n", encoding="utf-8")
    expect_error(capsys, ["validate", path], path, None, "malformed YAML", "line 4, column 13", "mapping values")


def test_unterminated_quote(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text('name: "tiny\nseed: 1\n', encoding="utf-8")
    expect_error(capsys, ["validate", path], path, None, "malformed YAML at line 3, column 1", "end of stream")


def test_missing_file(tmp_path, capsys):
    path = tmp_path / "nope.yaml"
    expect_error(capsys, ["validate", path], path, None, "file not found")


def test_file_that_is_a_directory(tmp_path, capsys):
    path = tmp_path / "dir.yaml"
    path.mkdir()
    expect_error(capsys, ["validate", path], path, None, "is a directory", "expected a YAML file")


def test_file_that_is_not_utf8(tmp_path, capsys):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00name")
    expect_error(capsys, ["validate", path], path, None, "not a UTF-8 text file")


def test_scenario_that_is_a_list(tmp_path, capsys):
    path = scenario(tmp_path, [copy.deepcopy(BASE)])
    expect_error(capsys, ["validate", path], path, None, "must be a mapping of keys", "got list")


def test_empty_scenario(tmp_path, capsys):
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing yet\n", encoding="utf-8")
    expect_error(capsys, ["validate", path], path, None, "the scenario is empty", "mapping of keys", "pods")


# ------------------------------------------------------ cross-field checks
@pytest.mark.parametrize("warmup", ["2s", "3s"])
def test_warmup_not_shorter_than_duration(tmp_path, capsys, warmup):
    path = scenario(tmp_path, warmup=warmup)
    expect_error(capsys, ["validate", path], path, "warmup",
                 "must be shorter than duration (2s)", f"got {warmup}")


def test_duplicate_variant_labels(tmp_path, capsys):
    d = copy.deepcopy(BASE)
    d["policies"][1]["label"] = "cfs"
    path = scenario(tmp_path, d)
    expect_error(capsys, ["validate", path], path, "policies[1].label", "duplicate label 'cfs'", "its own label")


def test_duplicate_labels_from_policy_names(tmp_path, capsys):
    d = copy.deepcopy(BASE)
    d["policies"].append({"policy": "cfs"})  # label defaults to the policy name, "cfs" again
    path = scenario(tmp_path, d)
    expect_error(capsys, ["validate", path], path, "policies[3].label", "duplicate label 'cfs'")


def test_baseline_that_is_no_label(tmp_path, capsys):
    path = scenario(tmp_path, baseline="linux")
    expect_error(capsys, ["validate", path], path, "baseline",
                 "no policy variant is labelled 'linux'", "labels: cfs, numactl, taskset")


def test_several_problems_are_reported_together(tmp_path, capsys):
    d = with_pod(memory="-4GB", colour="red")
    d["warmup"] = "5s"
    path = scenario(tmp_path, d)
    rc = main(["validate", str(path)])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and "Traceback" not in err
    lines = err.rstrip("\n").splitlines()
    assert lines[0] == f"error: {path}: 2 problems:"
    items = sorted(lines[1:])
    assert len(items) == 2  # warmup is checked once the fields themselves are valid
    assert items[0].startswith("  - pods[0].colour: unknown key 'colour'")
    assert items[1].startswith("  - pods[0].memory: a size cannot be negative")


# ------------------------------------------------------ --set overrides
def test_set_without_equals(tmp_path, capsys):
    path = scenario(tmp_path)
    expect_error(capsys, ["validate", path, "--set", "machine.smt"], "--set", None,
                 "override 'machine.smt' must be PATH=VALUE", "machine.smt=true")


def test_set_with_empty_path(tmp_path, capsys):
    path = scenario(tmp_path)
    expect_error(capsys, ["validate", path, "--set", "=3"], "--set", None, "override '=3' has an empty path")


def test_set_index_out_of_range(tmp_path, capsys):
    path = scenario(tmp_path)
    expect_error(capsys, ["validate", path, "--set", "pods.5.replicas=1"], "--set", "pods.5",
                 "no item '5'", "the list has 1 item (index 0)")


def test_set_index_out_of_range_in_longer_list(tmp_path, capsys):
    path = scenario(tmp_path)
    expect_error(capsys, ["validate", path, "--set", "policies.3.label=x"], "--set", "policies.3",
                 "no item '3'", "the list has 3 items (indices 0-2)")


def test_set_below_a_plain_value(tmp_path, capsys):
    path = scenario(tmp_path)
    expect_error(capsys, ["validate", path, "--set", "pods.0.name.first=x"], "--set", "pods.0.name",
                 "is a value ('jbb')", "no field 'first'")


def test_set_malformed_yaml_value(tmp_path, capsys):
    path = scenario(tmp_path)
    expect_error(capsys, ["validate", path, "--set", "pods.0.memory=[4GB"], "--set", None,
                 "malformed YAML at line 1")


def test_set_value_that_fails_validation(tmp_path, capsys):
    path = scenario(tmp_path)
    expect_error(capsys, ["validate", path, "--set", "machine.smt=maybe"], path, "machine.smt",
                 "valid boolean", "got 'maybe'")


def test_set_negative_size(tmp_path, capsys):
    path = scenario(tmp_path)
    expect_error(capsys, ["validate", path, "--set", "pods.0.memory=-1GB"], path, "pods[0].memory",
                 "cannot be negative", "'-1GB'")


# ------------------------------------------------------ run options; nothing half-written
def _no_json_left(folder: Path, name: str = "out.json") -> None:
    assert not (folder / name).exists()
    assert not [p.name for p in folder.iterdir() if p.name.startswith(f".{name}.")], "temporary file left behind"


@pytest.mark.parametrize(("extra", "source", "words"), [
    (["--duration", "500ms"], "--duration", ["must be longer than the warm-up (1s)", "got 0.5s"]),
    (["--duration", "1s"], "--duration", ["must be longer than the warm-up (1s)", "got 1s"]),
    (["--duration", "soon"], "--duration", ["expected a duration with a unit", "got 'soon'"]),
    (["--policy", "linux"], "--policy", ["no variant 'linux' in this scenario", "labels: cfs, numactl, taskset"]),
    (["--seed", "-1"], "--seed", ["expected a whole number from 0 to 9,223,372,036,854,775,807 (2**63-1)", "got -1"]),
])
def test_bad_run_options_write_no_json(tmp_path, capsys, extra, source, words):
    path = scenario(tmp_path)
    expect_error(capsys, ["run", path, "--quiet", "--workers", "1", "--json", tmp_path / "out.json", *extra],
                 source, None, *words)
    _no_json_left(tmp_path)


def test_bad_scenario_writes_no_json(tmp_path, capsys):
    path = scenario(tmp_path, with_pod(memory="-4GB"))
    expect_error(capsys, ["run", path, "--quiet", "--workers", "1", "--json", tmp_path / "out.json"],
                 path, "pods[0].memory", "cannot be negative")
    _no_json_left(tmp_path)


def test_bad_input_leaves_an_existing_json_untouched(tmp_path, capsys):
    path = scenario(tmp_path)
    target = tmp_path / "out.json"
    target.write_text('{"old": true}\n', encoding="utf-8")
    expect_error(capsys, ["run", path, "--quiet", "--workers", "1", "--json", target, "--policy", "linux"],
                 "--policy", None, "no variant 'linux'")
    assert target.read_text(encoding="utf-8") == '{"old": true}\n'


def test_json_into_a_missing_folder(tmp_path, capsys):
    path = scenario(tmp_path)
    target = tmp_path / "no" / "such" / "out.json"
    expect_error(capsys, ["run", path, "--quiet", "--workers", "1", "--json", target],
                 f"--json {target}", None, "folder", "does not exist")
    assert not (tmp_path / "no").exists()


def test_json_onto_a_directory_fails_before_simulating(tmp_path, capsys, monkeypatch):
    path = scenario(tmp_path)
    target = tmp_path / "results"
    target.mkdir()
    monkeypatch.setattr(numasim.cli, "run", lambda *a, **k: pytest.fail("simulated although the output is unusable"))
    expect_error(capsys, ["run", path, "--quiet", "--workers", "1", "--json", target],
                 f"--json {target}", None, "is a directory", "file name")
    assert target.is_dir() and list(target.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, "results"])  # no temporary file


def test_failed_json_write_after_a_run_leaves_nothing(tmp_path, capsys, monkeypatch):
    """The one real (tiny) simulation: it succeeds, then writing its JSON fails."""
    path = scenario(tmp_path)
    target = tmp_path / "out.json"

    # First prove that the same command does write the file when nothing fails ...
    assert main(["run", str(path), "--quiet", "--workers", "1", "--policy", "cfs", "--json", str(target)]) == 0
    capsys.readouterr()
    assert json.loads(target.read_text(encoding="utf-8"))["runs"][0]["label"] == "cfs"
    target.unlink()

    # ... then make the final rename fail, as a full disk or a read-only folder would.
    def refuse(src, dst):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(dst))

    monkeypatch.setattr(numasim.atomic.os, "replace", refuse)
    rc = main(["run", str(path), "--quiet", "--workers", "1", "--policy", "cfs", "--json", str(target)])
    out, err = capsys.readouterr()
    assert rc == 2
    assert "Traceback" not in err
    assert err.strip() == f"error: --json {target}: cannot write: Permission denied"
    assert "wrote" not in out
    _no_json_left(tmp_path)


# ------------------------------------------------------ as the user sees it: a separate process
def _cli(args: list, cwd: Path, module: bool = True) -> subprocess.CompletedProcess:
    exe = [sys.executable, "-m", "numasim.cli"] if module else [str(Path(sys.executable).parent / "numasim")]
    env = {**os.environ, "COLUMNS": "40", "PYTHONWARNINGS": ""}  # a narrow terminal must not break the message
    return subprocess.run(exe + [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("case", ["unknown-key", "malformed-yaml", "missing-file", "bad-set", "bad-seed", "json-dir"])
def test_subprocess_no_traceback(tmp_path, case):
    path = scenario(tmp_path, with_pod(colour="red") if case == "unknown-key" else None)
    if case == "malformed-yaml":
        path.write_text("name: [tiny\n", encoding="utf-8")
    args, expected = {
        "unknown-key": (["validate", path.name], "error: scenario.yaml: pods[0].colour: unknown key 'colour'; allowed keys:"),
        "malformed-yaml": (["validate", path.name], "error: scenario.yaml: malformed YAML at line 2, column 1"),
        "missing-file": (["validate", "nope.yaml"], "error: nope.yaml: file not found"),
        "bad-set": (["validate", path.name, "--set", "pods.5.replicas=1"], "error: --set: pods.5: no item '5'"),
        "bad-seed": (["run", path.name, "--quiet", "--seed", "-3", "--json", "out.json"], "error: --seed: expected a whole number from 0 to"),
        "json-dir": (["run", path.name, "--quiet", "--json", "."], "error: --json .: is a directory"),
    }[case]
    proc = _cli(args, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.rstrip("\n").splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(expected), lines[0]
    assert not (tmp_path / "out.json").exists()


def test_console_script_no_traceback(tmp_path):
    script = Path(sys.executable).parent / "numasim"
    if not script.exists():
        pytest.skip("numasim console script not installed next to this Python")
    path = scenario(tmp_path, with_options(2, {"cpus": ["0-99"]}))
    proc = _cli(["validate", path.name], tmp_path, module=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("error: scenario.yaml: policies[2].options.cpus[0]: CPU ")
    assert "is outside the machine" in proc.stderr
