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


# ------------------------------------------------- documents generated from the schema
from hypothesis.strategies import SearchStrategy  # noqa: E402

from numasim.model.machine import MachineSpec  # noqa: E402
from numasim.model.scenario import ScenarioSpec  # noqa: E402
from numasim.model.workload import WorkloadProfile  # noqa: E402
from numasim.policies.registry import available_policies  # noqa: E402

EDGE_TEXT = ["", " ", "x" * 300, "[bold]x[/", "\x1b[31m", "-1", "0", "1e999", "nan", "2s", "42GiB", "0-3", "auto",
             "cfs", "pacific-broadwell", "java-transactions", "ünï"]


def _number(schema: dict, integer: bool) -> SearchStrategy:
    bounds = [schema.get(k) for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")]
    near = [b + d for b in bounds if b is not None for d in (-1, 0, 1)]
    edge = [0, -1, 1, 2**63, -(2**63)] if integer else [0.0, -1.0, 1e-300, 1e300, math.nan, math.inf, -math.inf]
    base = st.integers(-(2**40), 2**40) if integer else st.floats(allow_nan=True, allow_infinity=True)
    return st.one_of(base, st.sampled_from(edge + [int(x) if integer else float(x) for x in near]))


def from_schema(schema: dict, defs: dict, depth: int = 0) -> SearchStrategy:
    """Values shaped by a JSON schema, at and beyond its bounds, sometimes of the wrong type."""
    if "$ref" in schema:
        return from_schema(defs[schema["$ref"].split("/")[-1]], defs, depth)
    if "anyOf" in schema:
        return st.one_of([from_schema(s, defs, depth) for s in schema["anyOf"]])
    wrong = st.sampled_from([None, True, [], {}, "text", -1, math.nan])
    kind = schema.get("type")
    if "enum" in schema or "const" in schema:
        right = st.sampled_from(schema.get("enum", [schema.get("const")]))
    elif kind == "string":
        right = st.one_of(st.sampled_from(EDGE_TEXT), st.text(max_size=12))
    elif kind in ("integer", "number"):
        right = _number(schema, kind == "integer")
    elif kind == "boolean":
        right = st.booleans()
    elif kind == "null":
        right = st.none()
    elif kind == "array" and depth < 4:
        items = schema.get("items", {})
        right = st.lists(from_schema(items, defs, depth + 1) if items else wrong, max_size=3)
    elif kind == "object" and depth < 4:
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        fields = {k: from_schema(v, defs, depth + 1) for k, v in props.items()}
        right = st.fixed_dictionaries({k: v for k, v in fields.items() if k in required},
                                      optional={k: v for k, v in fields.items() if k not in required})
    else:
        return wrong
    return st.one_of(right, right, right, wrong)


def _schema(model) -> tuple[dict, dict]:
    s = model.model_json_schema()
    return s, s.get("$defs", {})


@st.composite
def scenario_documents(draw) -> dict:
    scenario, defs = _schema(ScenarioSpec)
    doc = draw(from_schema(scenario, defs))
    if not isinstance(doc, dict):
        return {"value": doc}
    machine_schema, machine_defs = _schema(MachineSpec)
    doc["machine"] = draw(st.one_of(
        st.just("pacific-broadwell"),
        st.fixed_dictionaries({"preset": st.just("pacific-broadwell")},
                              optional={k: from_schema(v, machine_defs, 1)
                                        for k, v in machine_schema["properties"].items()}),
        from_schema(machine_schema, machine_defs)))
    profile_schema, profile_defs = _schema(WorkloadProfile)
    doc["workloads"] = {"w": draw(st.fixed_dictionaries(
        {"base": st.just("java-transactions")},
        optional={k: from_schema(v, profile_defs, 1) for k, v in profile_schema["properties"].items()}))}
    policies = available_policies()
    name = draw(st.sampled_from(sorted(policies)))
    options_schema, options_defs = _schema(policies[name].Options)
    options = draw(st.fixed_dictionaries({}, optional={k: from_schema(v, options_defs, 1)
                                                       for k, v in options_schema.get("properties", {}).items()}))
    doc["policies"] = [{"label": "v", "policy": name, "options": options}]
    return doc


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=scenario_documents())
def test_validate_answers_every_document_generated_from_the_schema(tmp_path_factory, capsys, doc):
    path = tmp_path_factory.mktemp("schema") / "doc.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
    _check(capsys, ["validate", str(path)], limit_s=10.0)
