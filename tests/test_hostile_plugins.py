"""Hostile input, sixth pass: plug-in classes, validation cases of the user's own, outputs that would
overwrite an input, and the Python API given the wrong things. Each is an error with status 2 (or
the project's own exception) that says what was wrong, never a traceback."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import yaml

import numasim
from numasim import validation
from numasim.cli import main
from numasim.errors import NumasimError, ScenarioError

from .test_bad_input import BASE, expect_error, scenario

GOOD = "from numasim.policies.cfs import CFS\n\nclass Good(CFS):\n    name = 'good'\n"


def _case(tmp_path, name: str = "mine.yaml", **changes):
    """The mlc-3to1-vs-reads-clx case as a file of the user's own, with ``changes`` (``scenario_policy``: the
    policy of its second variant)."""
    from numasim.model.yamlfile import read_yaml

    data = read_yaml(validation._cases_dir() / "mlc-3to1-vs-reads-clx.yaml")
    policy = changes.pop("scenario_policy", None)
    if policy is not None:
        data["scenario"]["policies"][1].update(policy=policy, options={})
    data.update({"id": "my-mix", "title": "my measurement", **changes})
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_no_output_replaces_a_policy_file_of_a_case_or_of_a_calibrated_scenario(tmp_path, capsys):
    plug = tmp_path / "good.py"
    plug.write_text(GOOD)
    case = _case(tmp_path, scenario_policy="good.py:Good")
    expect_error(capsys, ["validation", "--workers", "1", "--case", case, "--json", plug], f"--json {plug}", None,
                 "is an input of this command")
    s = scenario(tmp_path, policies=[{"label": "cfs", "policy": "cfs"}, {"label": "g", "policy": "good.py:Good"}])
    expect_error(capsys, ["calibrate", s, "--fit", "workloads.java-transactions.mlp=4..32", "--target",
                          "g:relative_throughput=1.0", "--max-evaluations", "2", "--workers", "1", "--json", plug],
                 f"--json {plug}", None, "is an input of this command")
    assert plug.read_text() == GOOD


def test_no_output_is_written_inside_numasims_installation(tmp_path, capsys):
    shipped = validation._cases_dir() / "likwid-copy-vs-load-hsw.yaml"
    before = shipped.read_bytes()
    expect_error(capsys, ["validation", "--only", "likwid-copy-vs-load-hsw", "--json", shipped], f"--json {shipped}",
                 None, "is inside numasim's installation")
    preset = os.path.join(os.path.dirname(numasim.__file__), "presets", "machines", "new.json")
    expect_error(capsys, ["run", scenario(tmp_path), "--quiet", "--json", preset], f"--json {preset}", None,
                 "is inside numasim's installation")
    assert shipped.read_bytes() == before and not os.path.exists(preset)


@pytest.mark.parametrize("body, words", [
    ("class P(CFS):\n    name = 'p'\n    Options = 42\n", ["P.Options must be a subclass of numasim's PolicyOptions",
                                                           "got 42"]),
    ("class P(CFS):\n    name = 'p'\n    Options = dict\n", ["P.Options must be a subclass"]),
    ("class Boom:\n    def __get__(self, obj, owner):\n        raise RuntimeError('name getter')\n\n"
     "class P(CFS):\n    name = Boom()\n", ["reading its name or Options raised RuntimeError: name getter"]),
    ("class E(Exception):\n    def __str__(self):\n        raise ValueError('str fails')\n\nraise E()\n",
     ["failed to load: E: <E whose str() raised>"]),
    ("from pydantic import model_validator\nfrom numasim.policies.cfs import CFSOptions\n\n"
     "class O(CFSOptions):\n    @model_validator(mode='after')\n    def _boom(self):\n        raise RuntimeError('mine')\n\n"
     "class P(CFS):\n    name = 'p'\n    Options = O\n", ["policies[0].options", "the policy's Options raised RuntimeError"]),
])
def test_a_plugin_class_that_is_not_a_policy_is_named_not_a_traceback(tmp_path, capsys, body, words):
    (tmp_path / "odd.py").write_text("from numasim.policies.cfs import CFS\n\n" + body)
    s = scenario(tmp_path, policies=[{"label": "p", "policy": "odd.py:P"}], baseline="p")
    line = expect_error(capsys, ["validate", s], str(s), None, *words)
    assert "Traceback" not in line
    if "options" not in words[0]:
        assert main(["policies", str(tmp_path / "odd.py") + ":P"]) == 2
        assert words[0] in capsys.readouterr().err


@pytest.mark.parametrize("ref, words", [
    ("./x.txt:X", ["a policy file is Python source, its name ending .py"]),
    ("d.py:X", ["is not a regular file"]),
    ("big.py:X", ["bytes; a policy file is at most 4,194,304"]),
])
def test_a_plugin_file_that_cannot_be_python_source_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch, ref,
                                                                                  words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.txt").write_text(GOOD)
    (tmp_path / "d.py").mkdir()
    (tmp_path / "big.py").write_text("#" * (4 * 2**20) + "\n")
    assert main(["policies", ref]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words) and "Traceback" not in err


def test_a_plugins_descriptions_reach_the_terminal_escaped(tmp_path, capsys):
    (tmp_path / "esc.py").write_text(
        "from pydantic import Field\nfrom numasim.policies.cfs import CFS, CFSOptions\n\n"
        "class O(CFSOptions):\n    extra_knob: int = Field(1, description='\\x1b]0;TITLE\\x07 what')\n\n"
        "class Esc(CFS):\n    name = 'esc'\n    description = 'hello \\x1b[2J\\x1b[31mRED'\n    Options = O\n")
    assert main(["policies", str(tmp_path / "esc.py") + ":Esc"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\\x1b[2J" in out


def test_a_case_of_your_own_is_shown_as_written_and_checked_whole(tmp_path, capsys):
    case = _case(tmp_path, title="[/]", machine_family="[bold]x[/bold]")
    assert main(["validation", "--case", str(case), "--list"]) == 0
    out = capsys.readouterr().out
    assert "[/]" in out and "[bold]x[/bold]" in out
    expect_error(capsys, ["validation", "--case", case, "--list", "--json", tmp_path / "v.json"], "--json", None,
                 "--list prints the cases")
    expect_error(capsys, ["validation", "--case", case, "--json", ""], "--json ", None, "the file name is empty")
    expect_error(capsys, ["validation", "--case", ""], "--case", None, "the file name is empty")
    expect_error(capsys, ["validation", "--case", case, "--only", "my-mix"], "--only", None,
                 "no shipped validation case my-mix (--only names shipped cases; a --case file runs whole)")
    for changes, words in (({"published": 5e-324}, "published: Input should be greater than or equal to 0.000001"),
                           ({"published": 1e308}, "published: Input should be less than or equal to 1000000"),
                           ({"numerator": "cxl", "denominator": "cxl"}, "numerator and denominator are both 'cxl'")):
        bad = _case(tmp_path, name="bad.yaml", **changes)
        assert main(["validation", "--case", str(bad)]) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and words in err, err


def test_a_plugins_error_in_a_validation_run_names_its_case(tmp_path, capsys):
    (tmp_path / "boom.py").write_text(
        "from numasim.policies.cfs import CFS\n\nclass Boom(CFS):\n    name = 'boom'\n"
        "    def place(self, tid, sim):\n        raise KeyError('in place')\n")
    case = _case(tmp_path, scenario_policy="boom.py:Boom")
    assert main(["validation", "--workers", "2", "--case", str(case)]) == 2
    err = capsys.readouterr().err
    # in a worker process, where the class came by value: its file is still named
    assert err.startswith(f"error: {case}: policy 'boom'") and "KeyError" in err and "in place() at boom.py:6" in err


def test_compare_shows_file_names_as_written(tmp_path, capsys):
    s = numasim.load(scenario(tmp_path, duration="1500ms"))
    res = numasim.run(s, policies=["cfs"], workers=1, quiet=True, with_sla=False)
    a = tmp_path / "[red]x.json"
    a.write_text(json.dumps(res.to_json()))
    assert main(["compare", str(a), str(a)]) == 0
    assert "[red]x.json (A)" in capsys.readouterr().out


def _deep(levels: int) -> dict:
    d: dict = {}
    cur = d
    for _ in range(levels):
        cur["a"] = {}
        cur = cur["a"]
    return d


@pytest.mark.parametrize("call, words", [
    (lambda s: numasim.run("scenario.yaml"), "scenario: expected a Scenario (numasim.load(FILE) or "
                                             "numasim.from_dict(DATA)), got 'scenario.yaml'"),
    (lambda s: numasim.load(None), "expected a scenario file's name, got None"),
    (lambda s: numasim.get_policy(5), "policy: expected a policy name or FILE.py:CLASS, got 5"),
    (lambda s: numasim.register(5), "register: 5 is not a numasim Policy subclass"),
    (lambda s: numasim.run(s, quiet=True, on_done=5), "on_done: expected a function (or None), got 5"),
    (lambda s: numasim.run(s, quiet=True, with_sla="no"), "with_sla: expected True or False, got 'no'"),
    (lambda s: numasim.run(s, quiet="yes"), "quiet: expected True or False, got 'yes'"),
    (lambda s: numasim.from_dict({**BASE, "description": _deep(5000)}, overrides=["name=x"]),
     "nested more than 64 levels deep"),
    (lambda s: numasim.sweep({**BASE, "description": _deep(5000)}, grid={"seed": [1]}), "nested more than 64"),
    (lambda s: numasim.calibrate({**BASE, "description": _deep(5000)}, fit={"workloads.w.mlp": (1, 2)},
                                 targets=[("cfs", "relative_throughput", 1.0)]), "nested more than 64"),
    (lambda s: numasim.calibrate(dict(BASE), fit={"workloads.w.mlp": (1, 2)},
                                 targets=[("cfs", "relative_throughput", 1.0)], leave_one_out="x"),
     "leave_one_out: expected True or False, got 'x'"),
    (lambda s: numasim.sweep(dict(BASE), grid={"seed": [1]}, on_point=5), "on_point: expected a function"),
])
def test_the_python_api_names_a_wrong_argument_before_any_work(call, words):
    s = numasim.from_dict(BASE)
    with pytest.raises(NumasimError) as exc:
        call(s)
    assert words in str(exc.value)


def test_numpy_flags_are_taken_as_flags():
    s = numasim.from_dict({**BASE, "duration": "1500ms"})
    r = numasim.run(s, policies=["cfs"], workers=1, quiet=np.bool_(True), with_sla=np.bool_(False))
    assert [x.label for x in r.runs] == ["cfs"]
    with pytest.raises(ScenarioError, match="register: .*Options must be a subclass"):
        numasim.register(type("P", (numasim.Policy,), {"name": "p", "Options": 42, "place": lambda self, tid, sim: 0}))
    with pytest.raises(ScenarioError, match=r"register: P.place\(self, view, tid, cpu\) cannot take the arguments the "
                                            r"engine passes it \(self, tid, sim\)"):
        numasim.register(type("P", (numasim.Policy,), {"name": "p", "place": lambda self, view, tid, cpu: 0}))


class _Callable:
    def __call__(self, *args):
        return None


@pytest.mark.parametrize("attrs", [
    {"slice_ns": staticmethod(lambda nr_running: 1_000_000)},
    {"wake_rule": staticmethod(lambda: None)},
    {"idle_rule": classmethod(lambda cls: None)},
    {"wake_rule": _Callable()},
    {"wake_rule": property(lambda self: None)},
    {"check": staticmethod(lambda options, machine, pods: [])},
    {"place": lambda self, tid, sim, *rest, extra=None: 0},
])
def test_a_method_the_engine_can_call_is_accepted_however_it_is_written(attrs):
    from numasim.policies.cfs import CFS
    from numasim.policies.registry import class_problem

    assert class_problem(type("P", (CFS,), {"name": "p", **attrs}), "P") is None


def test_an_entry_points_class_with_no_name_goes_by_the_entry_points(monkeypatch):
    from numasim.policies import registry

    class EP:
        name = "ep-nameless"
        value = "pkg:Nameless"

        def load(self):
            return type("Nameless", (numasim.Policy,), {"place": lambda self, tid, sim: 0})

    monkeypatch.setattr(registry, "entry_points", lambda group: [EP()] if group == "numasim.policies" else [])
    monkeypatch.setattr(registry, "_ENTRY_POINTS_LOADED", False)
    try:
        assert "ep-nameless" in registry.available_policies()
        assert "ep-nameless" not in registry.broken_policies()
    finally:
        registry._REGISTRY.pop("ep-nameless", None)


def test_a_class_a_policy_file_only_imports_is_not_marked_as_its(tmp_path):
    from numasim.policies.cfs import CFS
    from numasim.policies.registry import load_policy_ref

    (tmp_path / "reexport.py").write_text("from numasim.policies.cfs import CFS\n")
    assert load_policy_ref(str(tmp_path / "reexport.py") + ":CFS") is CFS
    assert "_numasim_file" not in vars(CFS)


def test_the_python_api_writes_nothing_inside_numasims_installation(tmp_path):
    from numasim.atomic import write_text

    inside = os.path.join(os.path.dirname(numasim.__file__), "presets", "x.html")
    with pytest.raises(NumasimError, match="is inside numasim's installation"):
        write_text(inside, "<html/>", "report")
    assert not os.path.exists(inside)
