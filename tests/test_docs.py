"""The documentation stays true to the code."""

import json
import re
from pathlib import Path

import jsonschema  # with nbformat, of the test extras
import pytest

from numasim.cli import main
from numasim.docgen import scenario_reference
from numasim.model.presets import read_yaml
from numasim.schema import scenario_schema, schema_json
from numasim.units import parse_cpu, parse_duration, parse_size

ROOT = Path(__file__).resolve().parent.parent


def test_scenario_reference_is_generated_from_the_schema():
    current = (ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8")
    assert current == scenario_reference(), "run: python -m numasim.docgen > docs/scenarios.md"


def test_scenario_json_schema_is_current():
    current = (ROOT / "docs" / "scenario.schema.json").read_text(encoding="utf-8")
    assert current == schema_json(), "run: python -m numasim.docgen --schema > docs/scenario.schema.json"


@pytest.fixture(scope="module")
def validator():
    schema = scenario_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(validator, data) -> list[str]:
    return [f"{e.json_path}: {e.message[:200]}" for e in validator.iter_errors(data)]


def test_the_schema_accepts_every_shipped_scenario(validator):
    files = sorted((ROOT / "scenarios").glob("*.yaml"))
    cases = sorted((ROOT / "numasim" / "validation" / "cases").glob("*.yaml"))
    assert len(files) >= 4 and len(cases) >= 10
    for path in files:
        assert _errors(validator, read_yaml(path)) == [], path.name
    for path in cases:  # each validation case holds a scenario
        assert _errors(validator, read_yaml(path)["scenario"]) == [], path.name


def test_the_schema_refuses_what_validation_refuses(validator):
    good = read_yaml(ROOT / "scenarios" / "autonuma.yaml")
    bad = {
        "machine": {**good["machine"], "smtt": True},  # a typo among a preset's overrides
        "pods": [{**good["pods"][0], "memory": 42}],  # a size without a unit
        "policies": [{"policy": "cfs", "options": {"hzz": 100}}],  # an option cfs does not have
        "duration": "5 sec",
    }
    for key, value in bad.items():
        errors = _errors(validator, {**good, key: value})
        assert len(errors) == 1 and errors[0].startswith(f"$.{key}"), (key, errors)
    assert _errors(validator, {**good, "machine": "no-such-preset"})
    assert _errors(validator, {**good, "workloads": {"w": {"base": "stream", "mlp": 100}}})  # mlp <= 64
    assert _errors(validator, {**good, "workloads": {"w": {"mlp": 2}}})  # no base: cycles_per_op is required
    assert _errors(validator, {**good, "policies": [{"policy": "numactl", "options": {"interleave_weights": {"a": 1}}}]})


def _property(schema: dict, *path: str) -> dict:
    node = schema["$defs"][path[0]]
    for key in path[1:]:
        node = node["properties"][key]
    return node


def _text_pattern(field: dict) -> str:
    quantity = next(b for b in [field, *field.get("anyOf", ())] if "format" in b)
    return next(b["pattern"] for b in quantity["anyOf"] if b.get("type") == "string")


def _parses(parse, text: str) -> bool:
    try:
        parse(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("path, fmt, parse, accepted, refused", [
    (("PodSpec", "memory"), "size", parse_size, ["42GB", "42GiB", "42Gi", "512MiB", "1.5tb", " 4 G ", "7b", "3kIb"],
     ["42", "42 gigs", "-4GB", "4 GBs", "GB", "4.GB", ""]),
    (("PodSpec", "start"), "duration", parse_duration, ["500ms", "2s", "1.5min", "3m", "1e3us", "2h", "7µs"],
     ["5 sec", "2", "-1s", "2S", "1.5 mins", "ms"]),
    (("Resources", "cpu"), "cpu", parse_cpu, ["500m", "2", "0.5", " 250m "], ["500 mc", "-1", "1k", "m"]),
])
def test_a_quantity_schema_says_what_the_parser_accepts(path, fmt, parse, accepted, refused):
    field = _property(scenario_schema(), *path)
    pattern = _text_pattern(field)
    assert fmt in json.dumps(field)
    for text in accepted:
        assert re.search(pattern, text) and _parses(parse, text), text
    for text in refused:
        assert not re.search(pattern, text) and not _parses(parse, text), text


def test_a_size_field_keeps_its_bounds_and_a_bare_zero(validator):
    memory = _property(scenario_schema(), "PodSpec", "memory")
    assert memory["format"] == "size" and memory["exclusiveMinimum"] == 0 and memory["maximum"] == 2**50
    pod = {"name": "p", "threads": 1, "profile": "stream"}
    assert not _errors(jsonschema.Draft202012Validator(scenario_schema()["$defs"]["PodSpec"]), {**pod, "memory": "42GB"})
    assert _errors(jsonschema.Draft202012Validator(scenario_schema()["$defs"]["PodSpec"]), {**pod, "memory": 0})  # > 0


def test_every_default_in_the_schema_is_a_valid_value():
    schema = scenario_schema()
    checked = 0
    for name, obj in schema["$defs"].items():
        for field, prop in obj.get("properties", {}).items():
            if "default" in prop:
                sub = {**prop, "$defs": schema["$defs"]}
                assert not list(jsonschema.Draft202012Validator(sub).iter_errors(prop["default"])), (name, field)
                checked += 1
    assert checked > 100
    assert _property(schema, "K8sOptions", "reserved_memory")["default"] == "0B"


def test_numasim_schema_writes_the_schema(tmp_path, capsys):
    out = tmp_path / "scenario.schema.json"
    assert main(["schema", "-o", str(out)]) == 0
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert written["title"] == "numasim scenario" and "pods" in written["required"]
    assert written == json.loads((ROOT / "docs" / "scenario.schema.json").read_text(encoding="utf-8"))
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == written


def test_readme_shows_the_two_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "pip install . && numasim run scenarios/pacific.yaml" in readme
    assert "pip install '.[test]' && pytest" in readme
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install --quiet '.[test]'" in ci and "pytest" in ci


def test_docs_links_resolve():
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = md.read_text(encoding="utf-8")
        for target in __import__("re").findall(r"\]\(([^)#:]+\.md)\)", text):
            assert (md.parent / target).exists(), f"{md.name} links to missing {target}"


def test_policy_guide_example_runs():
    text = (ROOT / "docs" / "policies.md").read_text(encoding="utf-8")
    code = text.split("```python", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(code, "docs/policies.md", "exec"), namespace)
    frame = namespace["result"].to_frame().set_index("label")
    # Everything on node 0: all memory local, but half the machine's CPUs idle.
    assert frame.loc["pack", "locality"] == 1.0
    assert frame.loc["pack", "relative_throughput"] < 0.8


def test_docs_site_builds_strictly(tmp_path):
    import os
    import subprocess
    import sys

    # Material's end-of-life banner is not a documentation problem; NO_MKDOCS_2_WARNING hides it.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "WARNING" not in output, output


def _subcommands():
    import argparse

    from numasim.cli_parser import _parser

    def walk(parser, prefix):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
                    if nested:
                        yield from walk(sub, prefix + [name])
                    else:
                        yield " ".join(prefix + [name]), sub

    return list(walk(_parser(), []))


@pytest.mark.parametrize("name, parser", _subcommands(), ids=[n for n, _ in _subcommands()])
def test_every_subcommand_says_what_it_does_with_an_example(name, parser):
    text = parser.format_help()
    assert parser.description and len(parser.description) > 60, f"numasim {name} --help has no description"
    flat = " ".join(text.split())
    assert "Example: " in flat and f"numasim {name} " in flat.split("Example: ", 1)[1], f"numasim {name} --help has no example"
