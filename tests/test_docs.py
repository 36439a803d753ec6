"""The documentation stays true to the code."""

from pathlib import Path

from numasim.docgen import scenario_reference

ROOT = Path(__file__).resolve().parent.parent


def test_scenario_reference_is_generated_from_the_schema():
    current = (ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8")
    assert current == scenario_reference(), "run: python -m numasim.docgen > docs/scenarios.md"


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
