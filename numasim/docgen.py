"""Generate docs/scenarios.md from the validation schema, so the reference cannot drift.

Usage: ``python -m numasim.docgen > docs/scenarios.md`` (a test checks the file is current).
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from .model.machine import LinkSpec, MachineSpec, MemoryNodeSpec
from .policies.registry import available_policies
from .model.presets import preset_names
from .model.scenario import ScenarioSpec, SlaSpec, SweepSpec, VariantSpec
from .units import format_duration, format_size, parse_duration, parse_size
from .model.workload import PodSpec, Resources, WorkloadProfile

__all__ = ["scenario_reference"]

_INTRO = """# Scenario file reference

A scenario is a YAML file; `numasim validate FILE` checks it and reports every problem
with its path and what is allowed. Unknown keys are errors. Sizes take units (`42GB`,
`42GiB`, `42Gi`, `512MiB`); durations take units (`500ms`, `2s`, `1.5min`). Any field
can be overridden from the command line with `--set PATH=VALUE`, e.g.
`--set machine.smt=true` or `--set pods.0.replicas=4`, and is validated the same way.

Limits, so that a mistyped or hostile file gets an error, not a hang or a crash: a file
is read up to 4 MiB, YAML nesting up to 64 levels and alias expansion up to 100,000
values; a key may appear once per mapping; `true`/`false` are never numbers; names,
labels and descriptions may not hold control characters; every number has the bounds
given below. Before simulating, `numasim run` estimates the CPU time and memory of the
run (`numasim validate` prints the estimate) and refuses one over `--max-work` CPU
seconds (default 14,400) or `--max-memory` GiB per simulation (default 8).

This page is generated from the validation schema by `python -m numasim.docgen`.
"""


def _kind(metadata: list) -> str | None:
    for m in metadata:
        func = getattr(m, "func", None)
        if func is parse_size:
            return "size"
        if func is parse_duration:
            return "duration"
    return None


def _type(tp: Any) -> str:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _kind(list(args[1:])) or _type(args[0])
    if origin is typing.Literal:
        return " or ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a) for a in args)
    if origin in (list, tuple):
        inner = ", ".join(_type(a) for a in args if a is not Ellipsis)
        return f"list of {inner}" if origin is list else f"[{inner}]"
    if origin is dict:
        return f"mapping of {_type(args[0])} to {_type(args[1])}"
    if tp is type(None):
        return "null"
    if tp is Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


def _constraints(metadata: list) -> str:
    out = []
    for m in metadata:
        for attr, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("min_length", "min length")):
            if getattr(m, attr, None) is not None:
                out.append(f"{sym} {getattr(m, attr)}")
    return ", ".join(out)


def _default(field) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default
    kind = _kind(field.metadata)
    if kind == "duration" and isinstance(value, int):
        return f"`{format_duration(value)}`"
    if kind == "size" and isinstance(value, int):
        return f"`{format_size(value)}`"
    if isinstance(value, str) and kind == "duration":
        return f"`{value}`"
    return f"`{value!r}`" if value not in (None, "") else ("none" if value is None else "`''`")


def _table(model: type[BaseModel]) -> list[str]:
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        kind = _kind(field.metadata)
        typ = kind or _type(field.annotation)
        cons = _constraints(field.metadata)
        if cons:
            typ += f" ({cons})"
        desc = (field.description or "").replace("|", "/")
        rows.append(f"| `{name}` | {typ.replace('|', '/')} | {_default(field)} | {desc} |")
    return rows


def scenario_reference() -> str:
    """The scenario reference as Markdown."""
    out = [_INTRO]
    sections: list[tuple[str, type[BaseModel], str]] = [
        ("Scenario (top level)", ScenarioSpec, ""),
        ("Machine (`machine`)", MachineSpec, f"Presets: {', '.join(preset_names('machines'))} (`numasim machines`). "
                                             "`numasim machine import` writes one from a real machine's outputs."),
        ("Interconnect link (`machine.links[i]`)", LinkSpec, ""),
        ("Memory-only node (`machine.memory_nodes[i]`)", MemoryNodeSpec, ""),
        ("Workload profile (`workloads.NAME`)", WorkloadProfile,
         f"Presets: {', '.join(preset_names('workloads'))} (`numasim workloads`). Give `base: PRESET` to start from one."),
        ("Pod (`pods[i]`)", PodSpec, ""),
        ("Resources (`pods[i].requests`)", Resources, ""),
        ("Policy variant (`policies[i]`)", VariantSpec, ""),
        ("SLA (`sla`)", SlaSpec, ""),
        ("Sweep (`sweep`)", SweepSpec, "Used by `numasim sweep` when it is given no --grid or --sample."),
    ]
    for title, model, note in sections:
        out += [f"## {title}", ""] + ([note, ""] if note else []) + _table(model) + [""]
    out += ["## Policy options (`policies[i].options`)", ""]
    builtin = {n: c for n, c in available_policies().items() if c.__module__.startswith("numasim.policies.")}
    for name, cls in builtin.items():
        out += [f"### `{name}`", "", cls.description, ""] + _table(cls.Options) + [""]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(scenario_reference(), end="")
