"""Policies from a file or a module, no packaging: FILE.py:CLASS and module:CLASS."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import numasim
from numasim.cli import main

from .conftest import small_scenario

ROOT = Path(__file__).resolve().parent.parent


def _guide_policy(tmp_path: Path) -> Path:
    """The subclass-of-CFS example of docs/policies.md, as the user would save it."""
    text = (ROOT / "docs" / "policies.md").read_text(encoding="utf-8")
    code = text.split("# my_policies.py\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "my_policies.py"
    path.write_text(code)
    return path


def test_the_guides_cfs_subclass_runs_from_the_command_line_in_parallel(tmp_path, capsys):
    _guide_policy(tmp_path)
    scen = tmp_path / "small.yaml"
    scen.write_text(yaml.safe_dump(small_scenario(duration="2s", policies=[{"label": "cfs", "policy": "cfs"}])))
    out = tmp_path / "r.json"
    assert main(["run", str(scen), "--policy-file", str(tmp_path / "my_policies.py") + ":Node0CFS",
                 "--workers", "2", "--quiet", "--json", str(out)]) == 0
    res = numasim.load_result(out)
    node0 = res.run("cfs-node0")
    # Every pod's memory on node 0 (2 GiB x 2 pods fit in its 16 GiB).
    assert all(p.memory_per_node_bytes[1] == 0 for p in node0.pods)
    assert res.run("cfs").pods[0].memory_per_node_bytes[1] > 0


def test_a_scenario_names_a_file_relative_to_itself_and_a_module(tmp_path, monkeypatch):
    _guide_policy(tmp_path)
    data = small_scenario(duration="2s", policies=[{"label": "mine", "policy": "my_policies.py:Node0CFS"},
                                                    {"label": "cfs", "policy": "numasim.policies.cfs:CFS"}])
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(data))
    monkeypatch.chdir(ROOT)  # elsewhere: the file is found next to the scenario
    res = numasim.run(numasim.load(scen), workers=1, quiet=True, with_sla=False)
    assert res.run("mine").locality is not None and res.relative("cfs") is not None


@pytest.mark.parametrize("content, ref, message", [
    (None, "missing.py:X", "no file"),
    ("def broken(:\n", "bad.py:X", "failed to load: SyntaxError"),
    ("class X:\n    pass\n", "notpolicy.py:X", "X is not a numasim Policy subclass"),
    ("raise SystemExit(0)\n", "exits.py:X", "failed to load: SystemExit: 0"),  # not a silent exit 0
    (None, "nosuchmodule_xyz:Thing", "failed to load: ModuleNotFoundError"),
    ("from numasim import Policy\nclass P(Policy):\n    name = 'p'\n", "noplace.py:P",
     "P does not implement place()"),
])
def test_bad_policy_references_are_explained(tmp_path, capsys, content, ref, message):
    name = ref.split(":")[0]
    if content is not None:
        (tmp_path / name).write_text(content)
    full = f"{tmp_path / name}:{ref.split(':')[1]}" if name.endswith(".py") else ref
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(small_scenario(duration="1s")))
    assert main(["run", str(scen), "--policy-file", full, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
