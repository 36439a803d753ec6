"""numasim: a discrete-event simulator of NUMA machines and the schedulers that run pods on them."""

from __future__ import annotations

from ._version import __version__

from .errors import NumasimError, PolicyError, Problem, ScenarioError
from .model.machine import Machine, MachineSpec
from .analysis.metrics import Metrics, PodMetrics
from .policies.api import (
    Admission,
    MemPolicy,
    MigratePages,
    Move,
    Overhead,
    Policy,
    PolicyOptions,
    SetAffinity,
    SetMemPolicy,
)
from .policies.registry import available_policies, get_policy, register
from .analysis.results import RunResult
from .runner import run
from .model.presets import machine_preset
from .model.scenario import Scenario, from_dict, load
from .model.workload import PodSpec, WorkloadProfile
from .sweep import sweep
from .calibrate import calibrate


def load_result(path) -> "RunResult":
    """Results written by ``numasim run --json FILE`` (or ``RunResult.to_json``), read back."""
    from pathlib import Path

    from .errors import NumasimError

    try:
        return RunResult.from_json(Path(path))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise NumasimError(f"{path}: cannot be read as numasim results: {exc}") from None

__all__ = [
    "__version__",
    "sweep",
    "calibrate",
    "load_result",
    "Admission",
    "Machine",
    "MachineSpec",
    "MemPolicy",
    "Metrics",
    "MigratePages",
    "Move",
    "NumasimError",
    "Overhead",
    "PodMetrics",
    "PodSpec",
    "Policy",
    "PolicyError",
    "PolicyOptions",
    "Problem",
    "RunResult",
    "Scenario",
    "ScenarioError",
    "SetAffinity",
    "SetMemPolicy",
    "WorkloadProfile",
    "available_policies",
    "from_dict",
    "get_policy",
    "load",
    "machine_preset",
    "register",
    "run",
]
