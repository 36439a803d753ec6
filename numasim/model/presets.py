"""Preset data files (machines, workloads, policy defaults): read, cached and copied.

With :mod:`numasim.model.scenario`, the only place YAML is read. Policies take
their documented defaults from here (:func:`policy_defaults`), never from the
scenario loader.
"""

from __future__ import annotations

import copy
import functools
from importlib import resources
from typing import Any

from ..errors import Problem, ScenarioError
from .yamlfile import read_yaml, read_yaml_text
from .machine import Machine, MachineSpec

__all__ = ["preset_names", "load_preset", "policy_defaults", "machine_preset", "read_yaml", "read_yaml_text"]


def _preset_dir(kind: str):
    return resources.files("numasim").joinpath("presets", kind)


@functools.cache
def preset_names(kind: str) -> tuple[str, ...]:
    """Names of the presets of ``kind`` (``machines``, ``workloads`` or ``policies``)."""
    return tuple(sorted(p.name[:-5] for p in _preset_dir(kind).iterdir() if p.name.endswith(".yaml")))


@functools.cache
def _load_preset_cached(kind: str, name: str) -> Any:
    res = _preset_dir(kind).joinpath(f"{name}.yaml")
    return read_yaml_text(res.read_text(encoding="utf-8"), f"numasim/presets/{kind}/{name}.yaml")


def load_preset(kind: str, name: str, path: str = "") -> dict[str, Any]:
    """The data of preset ``name`` of ``kind``, as a new dict.

    Raises
    ------
    ScenarioError
        Listing the known presets when ``name`` is unknown.
    """
    if name not in preset_names(kind):
        known = ", ".join(preset_names(kind))
        raise ScenarioError(Problem(path, f"unknown {kind[:-1]} preset {name!r}; known: {known}"))
    return copy.deepcopy(_load_preset_cached(kind, name))


def policy_defaults(name: str) -> dict[str, Any]:
    """Default options of a built-in policy, from presets/policies/NAME.yaml."""
    data = load_preset("policies", name)
    data.pop("sources", None)
    return data


def machine_preset(name: str) -> Machine:
    """A :class:`Machine` from a preset name."""
    return Machine.from_spec(MachineSpec.model_validate(load_preset("machines", name)))
