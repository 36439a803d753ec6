"""``PATH=VALUE`` overrides of scenario data (``--set``, sweep points, calibrate's fitted fields): applied
to the data before it is validated, and a problem of the validated scenario blamed on the override
that gave its field's value."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

from ..errors import Problem, ScenarioError
from .yamlfile import MAX_DEPTH, check_data, read_yaml, read_yaml_text

__all__ = ["apply_overrides", "set_path", "fraction_inside", "blame", "scenario_data"]


def fraction_inside(lo: float, hi: float) -> float:
    """A value strictly between ``lo`` and ``hi`` (``lo < hi``) that is not a whole number: setting a
    field to it tells whether the field takes real values (a whole-number field refuses it as "not
    an integer"), as sweep --range and calibrate --fit ask."""
    mid = (lo + hi) / 2
    return mid + min(0.5, (hi - lo) / 4) if mid.is_integer() else mid


def scenario_data(scenario: Any, sets: list[str] | tuple[str, ...], unnamed: str) -> tuple[str, dict[str, Any]]:
    """The data of a scenario given as a file name or as a mapping (copied, never the caller's), with
    ``sets`` applied, and the name errors give its source (``unnamed`` for a mapping); as sweep and
    calibrate take it."""
    if isinstance(scenario, (str, os.PathLike)):
        source, base = str(scenario), read_yaml(Path(scenario))
    else:
        source = unnamed
        check_data(scenario, source)  # before a copy walks it
        base = copy.deepcopy(scenario)
    if not isinstance(base, dict):
        raise ScenarioError(Problem("", "a scenario must be a mapping of keys"), source=source)
    return source, (apply_overrides(base, list(sets)) if sets else base)


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Apply ``PATH=VALUE`` overrides (``machine.smt=true``, ``pods.0.replicas=4``).

    VALUE is parsed as YAML (so ``true``, ``4``, ``[0, 1]``, ``{policy: cfs}`` and
    ``42GB`` work). The index ``-`` (or one equal to the list's length) appends.
    A machine given by preset name is expanded to ``{preset: NAME}`` first so
    that its fields can be overridden.
    """
    data = copy.deepcopy(data)
    if isinstance(overrides, str):  # one PATH=VALUE, not its letters
        overrides = [overrides]
    for item in overrides:
        if not isinstance(item, str):
            raise ScenarioError(Problem("", f"an override is a string PATH=VALUE, got {repr(item)[:60]}"), source="--set")
        if "=" not in item:
            raise ScenarioError(Problem("", f"override {item!r} must be PATH=VALUE, e.g. machine.smt=true"), source="--set")
        path, _, raw = item.partition("=")
        if not path.strip(". "):
            raise ScenarioError(Problem("", f"override {item!r} has an empty path"), source="--set")
        value = read_yaml_text(raw, "--set") if raw.strip() else ""
        set_path(data, path, value, "--set")
    return data


_BRACKETED = re.compile(r"[^\[\]]+\[[0-9]+\]")  # policies[0]: a list item written as in messages


def set_path(data: dict[str, Any], path: str, value: Any, source: str) -> None:
    """Set the field at dotted ``path`` of scenario data to ``value`` (in place)."""
    parts = path.strip().split(".")
    if not any(parts):
        raise ScenarioError(Problem("", f"override {path!r} has an empty path"), source=source)
    if not all(parts):
        raise ScenarioError(Problem("", f"override path {path[:80]!r} has an empty field name (two dots in a row, "
                                        "or a dot at an end)"), source=source)
    if len(parts) > MAX_DEPTH:
        raise ScenarioError(Problem("", f"override path {path[:60]!r}... is more than {MAX_DEPTH} fields deep"),
                            source=source)
    if parts[0] == "machine" and len(parts) > 1 and isinstance(data.get("machine"), str):
        data["machine"] = {"preset": data["machine"]}
    node: Any = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        where = ".".join(parts[: i + 1])
        if isinstance(node, list):
            if last and (part == "-" or ((part.isascii() and part.isdigit()) and int(part) == len(node))):
                node.append(value)  # PATH.- (as in JSON Pointer) appends, e.g. a new policy variant
                continue
            if not (part.isascii() and part.isdigit()) or int(part) >= len(node):
                allowed = ("the list is empty" if not node else
                           "the list has 1 item (index 0)" if len(node) == 1 else
                           f"the list has {len(node)} items (indices 0-{len(node) - 1})")
                raise ScenarioError(Problem(where, f"no item {part!r}: {allowed}"), source=source)
            if last:
                node[int(part)] = value
            else:
                node = node[int(part)]
        elif isinstance(node, dict):
            if part not in node and _BRACKETED.fullmatch(part):  # (a workload may be named 'w[2]': only if none is)
                raise ScenarioError(Problem("", f"override path {path[:80]!r}: a list's items are numbered after a "
                                                "dot (policies.0.label), not in brackets"), source=source)
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
        else:
            raise ScenarioError(
                Problem(".".join(parts[:i]), f"is a value ({node!r}), it has no field {part!r}"), source=source
            )


def blame(problems: list[Problem], overrides: list[str] | tuple[str, ...]) -> list[Problem]:
    """Say which ``--set`` gave the value of a field that has a problem."""
    sets = []
    for item in overrides:
        path = item.partition("=")[0]
        sets.append(([p for p in path.strip().split(".") if p], item))
    out = []
    for prob in problems:
        parts = [p for p in prob.path.replace("[", ".").replace("]", "").split(".") if p]
        # the set's path leads to the field, or the field is on the set's path (a key the set made: a.b.c.d=1
        # is refused at 'a')
        hit = next((item for sp, item in reversed(sets)
                    if sp and (parts[: len(sp)] == sp or (parts and sp[: len(parts)] == parts))), None)
        out.append(Problem(prob.path, f"{prob.message} (from --set {hit[:100]})") if hit else prob)
    return out
