"""Fuzzing the CLI with mutated scenarios: exit 0 or 2, never a traceback, bounded time and output.

Each example takes a valid scenario and changes it the way a careless or hostile user
might: a field replaced by an edge value (empty, negative, huge, NaN, infinite, the
wrong type, markup, control characters, very long text), a field removed, an unknown
key added, or several of these at once. ``validate`` must answer each within a few
seconds with exit 0, or with exit 2 and at most one short block of text. ``run``, with a
small work budget, must also write nothing unless it succeeds.
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numasim.cli import main

from .test_bad_input import BASE

EDGE_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 2**31, 2**63, -(2**63), 1e308, -1e308, 1e-308, math.nan, math.inf, -math.inf,
    0.5, "", " ", "0", "-1", "1e10GB", "1e999", "-5s", "5", "inf", "nan", ".inf", "1ns", "1e9s", "0-999999999",
    "0-3,4-", "9" * 400, "x" * 20_000, "[bold]x[/", "\x1b[31mred", "a\x00b", "ünïcödé", [], {}, [[]], [None],
    [1, 2, 3], {"a": 1}, [[1, 2], [3]], {"preset": "no-such-machine"}, "cfs", "numactl", "auto", "42GiB",
]


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into ``node`` (mappings and lists), leaves and containers alike."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


PATHS = _paths(BASE)


def _mutate(data: dict, path: tuple, how: str, value: Any) -> None:
    node: Any = data
    for key in path[:-1]:
        node = node[key]
    last = path[-1]
    if how == "replace":
        node[last] = value
    elif how == "delete":
        del node[last]
    elif how == "unknown key" and isinstance(node, dict):
        node[f"surprise_{last}"] = value
    elif how == "wrap":
        node[last] = [node[last]]


mutation = st.tuples(st.sampled_from(PATHS), st.sampled_from(["replace", "replace", "replace", "delete", "unknown key", "wrap"]),
                     st.sampled_from(EDGE_VALUES))


def _scenario(tmp_path: Path, mutations) -> Path:
    data = copy.deepcopy(BASE)
    for path, how, value in mutations:
        try:
            _mutate(data, path, how, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced this path's parent
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def _check(capsys, argv: list[str], limit_s: float) -> int:
    t0 = time.perf_counter()
    rc = main(argv)
    elapsed = time.perf_counter() - t0
    out, err = capsys.readouterr()
    assert rc in (0, 2), (rc, err[-2000:])
    assert "Traceback" not in err and "Traceback" not in out
    assert elapsed < limit_s, f"took {elapsed:.1f} s"
    if rc == 2:
        assert err.startswith("error: ") and len(err) < 12_000, err[:2000]
    return rc


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutations=st.lists(mutation, min_size=1, max_size=3))
def test_validate_answers_every_mutated_scenario(tmp_path_factory, capsys, mutations):
    tmp = tmp_path_factory.mktemp("fuzz")
    _check(capsys, ["validate", str(_scenario(tmp, mutations))], limit_s=10.0)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutations=st.lists(mutation, min_size=1, max_size=2))
def test_run_answers_every_mutated_scenario_and_writes_only_on_success(tmp_path_factory, capsys, mutations):
    tmp = tmp_path_factory.mktemp("fuzz")
    path = _scenario(tmp, mutations)
    out = tmp / "out.json"
    rc = _check(capsys, ["run", str(path), "--quiet", "--workers", "1", "--no-sla", "--max-work", "60",
                         "--duration", "1500ms", "--json", str(out)], limit_s=60.0)
    assert out.exists() == (rc == 0)
    assert sorted(p.name for p in tmp.iterdir()) == sorted(["fuzz.yaml"] + (["out.json"] if rc == 0 else []))
