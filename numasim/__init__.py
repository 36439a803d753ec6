"""numasim: a discrete-event simulator of NUMA machines and the schedulers that run pods on them."""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import NumasimError, PolicyError, Problem, ScenarioError
from .machine import Machine, MachineSpec
from .metrics import Metrics, PodMetrics
from .policies.base import (
    Admission,
    MemPolicy,
    MigratePages,
    Move,
    Overhead,
    Policy,
    PolicyOptions,
    SetAffinity,
    SetMemPolicy,
    available_policies,
    get_policy,
    register,
)
from .results import RunResult
from .runner import run
from .scenario import Scenario, from_dict, load, machine_preset
from .workload import PodSpec, WorkloadProfile

__all__ = [
    "__version__",
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
