"""The layout's promises: no import cycle anywhere, and dependencies that point one way.

Every import in numasim/ counts, at module level and inside functions alike; only
imports under ``if TYPE_CHECKING:`` (annotations, never executed) are left out
(docs/architecture.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

import numasim

ROOT = Path(numasim.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_graph() -> dict[str, set[str]]:
    """numasim module -> the numasim modules it imports (anywhere in its file)."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
                       for stmt in block.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                # `from pkg import sub` imports the submodule when there is one.
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    deps.add(t)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path of module names, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_numasim():
    graph = import_graph()
    assert len(graph) > 20 and graph["numasim.runner"]  # the walk saw the package
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def _imports_under(graph: dict[str, set[str]], prefix: str) -> set[str]:
    return {d for m, deps in graph.items() if m.startswith(prefix) for d in deps}


def test_policies_import_the_contract_not_the_runtime():
    graph = import_graph()
    for mod, deps in graph.items():
        if mod.startswith("numasim.policies"):
            bad = {d for d in deps if d.startswith(("numasim.sim", "numasim.analysis", "numasim.runner",
                                                   "numasim.model.scenario", "numasim.cli"))}
            assert not bad, f"{mod} imports {bad}"
        if mod.startswith("numasim.policies") and mod != "numasim.policies.registry":
            assert "numasim.policies.registry" not in deps, f"{mod} imports the registry"


def test_the_runtime_names_no_policy_and_layers_point_down():
    graph = import_graph()
    sim = _imports_under(graph, "numasim.sim")
    assert {d for d in sim if d.startswith("numasim.policies")} == {"numasim.policies.api", "numasim.policies.rules"}
    assert not {d for d in sim if d.startswith(("numasim.analysis", "numasim.runner", "numasim.model.scenario"))}
    model = _imports_under(graph, "numasim.model")
    assert not {d for d in model if d.startswith(("numasim.sim", "numasim.analysis", "numasim.runner"))}
    analysis = _imports_under(graph, "numasim.analysis")
    assert not {d for d in analysis if d.startswith(("numasim.runner", "numasim.cli", "numasim.report"))}
