"""Scenarios: scenario files read, presets expanded, ``--set`` overrides applied, all validated.

A scenario names a machine (a preset, a preset with overrides, or a full
description), workload profiles, pods, the policy variants to compare, the
simulated duration and the measurement window. :func:`load` and
:func:`from_dict` validate everything once and report every problem with
its path and what is allowed (house rule 5).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator
from .spec import Duration, Size, Spec, Text

from ..errors import Problem, ScenarioError, safe_str
from ..policies.api import Policy, PolicyOptions
from ..policies.registry import get_policy
from ..units import parse_duration
from .machine import MAX_CPUS, Machine, MachineSpec, shared_machine
from .yamlfile import check_data
from .problems import fmt_path, policy_problems, validation_problems
from .overrides import apply_overrides, blame, set_path
from .presets import load_preset, machine_preset, policy_defaults, preset_names, read_yaml
from .workload import PodSpec, WorkloadProfile

__all__ = [
    "Scenario",
    "Variant",
    "ScenarioSpec",
    "load",
    "from_dict",
    "apply_overrides",
    "preset_names",
    "load_preset",
    "policy_defaults",
    "machine_preset",
    "SlaSpec",
    "MAX_VARIANTS",
    "MAX_REPLICATIONS",
]

MAX_VARIANTS = 64  # policy variants of a scenario (numasim sweep runs more points)
MAX_REPLICATIONS = 1000  # seeds per variant

# ------------------------------------------------------------------- specs
class VariantSpec(Spec):
    """One policy variant to run: a policy name, its options and a label."""


    label: Text | None = Field(default=None, min_length=1, max_length=80, description="name in tables (default: the policy name)")
    policy: str = Field(min_length=1, description="a registered policy (numasim policies)")
    options: dict[str, Any] = Field(default_factory=dict, description="the policy's options (see below)")
    set: dict[str, Any] = Field(
        default_factory=dict,
        description="what differs for this variant only: {dotted path under machine, workloads or pods: value}, e.g. {machine.governor: powersave}",
    )


class SlaSpec(Spec):
    """The SLA search of a scenario (``sla:``)."""


    targets_ms: list[Annotated[float, Field(gt=0, le=1e7)]] = Field(
        min_length=1, max_length=100, description="response-time targets, ms (SPECjbb: 10, 25, 50, 75, 100)")
    percentile: Literal["p50", "p90", "p99", "p99.9"] = Field(default="p99", description="the percentile held under each target")
    levels: list[Annotated[float, Field(gt=0, le=2)]] = Field(
        default_factory=lambda: [0.5, 0.7, 0.85, 0.95],
        min_length=2,
        max_length=100,
        description="injection rates to try, as fractions (0-2] of the rate each pod reached closed-loop",
    )
    step: Duration | None = Field(
        default=None, gt=0,
        description="how long each level's response times are measured (default: the run's measurement window, duration - warmup)")
    settle: Duration = Field(
        default=parse_duration("1s"), ge=0,
        description="time at each new level before its response times count (the queues adjust to the new rate)")

    def step_ns(self, window_ns: int) -> int:
        """How long each level is measured, for a run whose measurement window is ``window_ns``."""
        return self.step if self.step is not None else window_ns

    @model_validator(mode="after")
    def _distinct(self) -> "SlaSpec":
        for name in ("targets_ms", "levels"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ValueError(f"{name} must not repeat a value")
        return self


class SweepSpec(Spec):
    """The points of ``numasim sweep`` (see docs/quickstart.md): a grid, and a sample of ranges."""

    grid: dict[str, list[Any]] = Field(default_factory=dict, description="{PATH: [values]}: every combination is a point")
    sample: int | None = Field(default=None, ge=1, le=100_000, description="Latin-hypercube points over ranges, for each grid point")
    ranges: dict[str, tuple[float, float]] = Field(default_factory=dict, description="{PATH: [LO, HI]} sampled uniformly")
    seed: int = Field(default=0, ge=0, le=2**63 - 1, description="seed of the sample")


class ScenarioSpec(Spec):
    """The top level of a scenario file (see docs/scenarios.md)."""


    name: Text = Field(min_length=1, max_length=200, description="the scenario's name")
    description: Text = Field(default="", max_length=4000, description="free text")
    machine: str | dict[str, Any] = Field(
        description="a machine preset name, {preset: NAME, field: value, ...}, or a full machine (see Machine)"
    )
    workloads: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="workload profiles by name: {base: PRESET, field: value, ...} or a full profile"
    )
    pods: list[PodSpec] = Field(min_length=1, description="the pods (see Pod)")
    policies: list[VariantSpec] = Field(min_length=1, max_length=MAX_VARIANTS, description="the policy variants to compare, at most 64 (see Policy variant; numasim sweep runs more points)")
    baseline: str | None = Field(default=None, description="label of the variant others are relative to (default: the first)")
    duration: Duration = Field(default=parse_duration("60s"), gt=0, description="simulated time")
    warmup: Duration = Field(default=parse_duration("20s"), ge=0, description="start of the measurement window")
    sample_interval: Duration = Field(default=parse_duration("1s"), gt=0, description="interval of the time series")
    sample_memory: Size = Field(
        default=32 * 2**20, gt=0, le=2**40,
        description="the most the time series may take per run (and the log of thread moves, for the report's "
                    "timeline); a run whose samples would need more samples every few intervals, and a full move "
                    "log stops (both noted in the run's events), so memory stays flat in duration",
    )
    seed: int = Field(default=1, ge=0, le=2**63 - 1, description="random seed")
    sla: SlaSpec | None = Field(default=None, description="the SLA search over injection rates (see SLA); none: no search")
    replications: int = Field(
        default=1, ge=1, le=MAX_REPLICATIONS,
        description="runs per variant, with seeds seed, seed+1, ...; results are their means, relative throughput pairs equal seeds",
    )
    sweep: SweepSpec | None = Field(default=None, description="the points numasim sweep runs (see Sweep); numasim run ignores it")


@dataclass(frozen=True)
class Variant:
    """A resolved policy variant: label, policy class, validated options and, when its
    ``set`` changes them, its own machine, workload profiles and pods."""

    label: str
    policy: type[Policy]
    options: PolicyOptions
    machine: Machine | None = None
    profiles: dict[str, WorkloadProfile] | None = None
    pods: tuple[PodSpec, ...] | None = None


@dataclass(frozen=True)
class Scenario:
    """A validated scenario, ready to run."""

    spec: ScenarioSpec
    machine: Machine
    profiles: dict[str, WorkloadProfile]
    variants: tuple[Variant, ...]
    source: str

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pods(self) -> list[PodSpec]:
        return list(self.spec.pods)

    @property
    def baseline(self) -> str:
        return self.spec.baseline or self.variants[0].label

    def machine_of(self, v: Variant) -> Machine:
        return v.machine or self.machine

    def profiles_of(self, v: Variant) -> dict[str, WorkloadProfile]:
        return v.profiles or self.profiles

    def pods_of(self, v: Variant) -> list[PodSpec]:
        return list(v.pods) if v.pods is not None else list(self.spec.pods)

    def variant(self, label: str) -> Variant:
        for v in self.variants:
            if v.label == label:
                return v
        raise KeyError(label)


# ------------------------------------------------------------------ loading
def load(path: str | Path, overrides: list[str] | tuple[str, ...] = (), machine: Any = None) -> Scenario:
    """Read, override and validate a scenario file.

    ``machine`` (a preset name or a machine's data) replaces the file's machine before
    the overrides apply.
    """
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        raise ScenarioError(Problem("", f"expected a scenario file's name, got {repr(path)[:80]}"), source="load")
    path = Path(path)
    data = read_yaml(path)
    if machine is not None and isinstance(data, dict):
        data = {**data, "machine": machine}
    return from_dict(data, source=str(path), overrides=overrides)


def late_pods(pods, end_ns: int):
    """``(index, pod, last arrival)`` of each pod whose last replica would arrive at or after ``end_ns``."""
    for i, pod in enumerate(pods):
        last = pod.start + pod.stagger * (pod.replicas - 1)
        if last >= end_ns:
            yield i, pod, last


def from_dict(data: Any, source: str = "<scenario>", overrides: list[str] | tuple[str, ...] = (),
              _machines: "dict[str, Machine] | None" = None) -> Scenario:
    """Validate a scenario given as plain data (as parsed from YAML).

    ``_machines`` holds the machines already built for this scenario by their spec (its
    variants' own scenarios share them): one spec is built once, and all of them together
    at most ``MAX_BUILT_CPUS`` CPUs."""
    if data is None:
        raise ScenarioError(Problem("", "the scenario is empty; it must be a mapping of keys "
                                        "(name, machine, pods, policies, ...)"), source=source)
    if not isinstance(data, dict):
        raise ScenarioError(Problem("", f"a scenario must be a mapping of keys, got {type(data).__name__}"), source=source)
    check_data(data, source)  # data from Python: bounded as a file's is
    if overrides:
        data = apply_overrides(data, overrides)
    try:
        spec = ScenarioSpec.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(blame(validation_problems(exc, ScenarioSpec), overrides), source=source) from None

    problems: list[Problem] = []
    machines: dict[str, Machine] = {} if _machines is None else _machines
    machine = _resolve_machine(spec.machine, problems, machines)
    profiles = _resolve_profiles(spec, problems)
    variants: list[Variant] = []
    labels: set[str] = set()
    for i, v in enumerate(spec.policies):
        label = v.label or v.policy
        if len(label) > 80:  # a plug-in's FILE.py:CLASS taken as the label: results hold labels of at most 80
            problems.append(Problem(f"policies[{i}].label", f"the variant has no label and its policy, {len(label)} "
                                                            "characters, is too long to be one (at most 80): give it a label"))
        if label in labels:
            problems.append(Problem(f"policies[{i}].label", f"duplicate label {label!r}; give each variant its own label"))
        labels.add(label)
        try:
            cls = get_policy(v.policy, base_dir=os.path.dirname(os.path.abspath(source)) if os.path.isfile(source) else None)
        except ScenarioError as exc:
            problems.append(Problem(f"policies[{i}].policy", exc.problems[0].message))
            continue
        try:
            opts = cls.Options.model_validate(v.options)
        except ValidationError as exc:
            problems.extend(validation_problems(exc, cls.Options, (f"policies[{i}]", "options")))
            continue
        except Exception as exc:  # a plug-in's own validator, whatever it raises (numasim's own: a bug, raised)
            if cls.__module__.startswith("numasim."):
                raise
            problems.append(Problem(f"policies[{i}].options", f"the policy's Options raised {type(exc).__name__}: "
                                                              f"{safe_str(exc)}"))
            continue
        own: Scenario | None = None
        if v.set:
            own = _variant_scenario(data, i, v, source, problems, machines)
            if own is None:
                continue
        m = own.machine if own is not None else machine
        if m is not None:
            problems.extend(policy_problems(cls, opts, m, list(own.spec.pods if own is not None else spec.pods),
                                            fmt_path((f"policies[{i}]", "options"))))
        if own is None:
            variants.append(Variant(label, cls, opts))
        else:
            variants.append(Variant(label, cls, opts, own.machine, own.profiles, tuple(own.spec.pods)))

    if spec.baseline is not None and spec.baseline not in labels:
        problems.append(Problem("baseline", f"no policy variant is labelled {spec.baseline!r}; labels: {', '.join(sorted(labels))}"))
    if spec.warmup >= spec.duration:
        problems.append(Problem("warmup", f"must be shorter than duration ({spec.duration / 1e9:g}s), got {spec.warmup / 1e9:g}s"))
    for i, pod, last in late_pods(spec.pods, spec.duration):  # it would arrive once the run is over: never run
        end = f"the end of the run (duration {spec.duration / 1e9:g}s)"
        if pod.start >= spec.duration:
            problems.append(Problem(f"pods[{i}].start", f"{pod.start / 1e9:g}s is at or after {end}: the pod would "
                                                        "never run; start it earlier or lengthen duration"))
        else:
            problems.append(Problem(f"pods[{i}].stagger", f"its last replica would arrive at {last / 1e9:g}s, at or "
                                                          f"after {end}, and never run; shorten stagger or start, "
                                                          "or lengthen duration"))
    names = [p.name for p in spec.pods]
    for i, name in enumerate(names):
        if names.index(name) != i:
            problems.append(Problem(f"pods[{i}].name", f"duplicate pod name {name!r}"))
    replicated = {p.name: (j, p.replicas) for j, p in enumerate(spec.pods) if p.replicas > 1}
    for i, name in enumerate(names):  # replicas are named NAME-0, NAME-1, ...; a single pod NAME (runner.py)
        base, _, idx = name.rpartition("-")
        if spec.pods[i].replicas == 1 and base in replicated and idx.isascii() and idx.isdigit() and str(int(idx)) == idx and int(idx) < replicated[base][1]:
            j = replicated[base][0]
            problems.append(Problem(f"pods[{i}].name", f"{name!r} is also the name of replica {idx} of pods[{j}] ({base!r}, "
                                                       f"replicas {replicated[base][1]}); rename one of them"))
    if machine is not None:
        total_mem = int(machine.node_memory.sum())
        for i, pod in enumerate(spec.pods):
            if pod.cpus > machine.n_cpus:
                problems.append(Problem(
                    f"pods[{i}].cpu_limit",
                    f"the pod asks for {pod.cpus:g} CPUs but the machine has {machine.n_cpus}; must be <= {machine.n_cpus}",
                ))
            if pod.memory > total_mem:
                problems.append(Problem(
                    f"pods[{i}].memory",
                    f"the pod needs {pod.memory / 2**30:.1f} GiB but the machine has {total_mem / 2**30:.1f} GiB; must be smaller",
                ))
            prof = profiles.get(pod.profile)
            for k, node in enumerate((prof.touch_nodes or []) if prof is not None else []):
                if node >= machine.n_nodes:
                    where = f"workloads.{pod.profile}.touch_nodes[{k}]" if pod.profile in spec.workloads else f"pods[{i}].profile"
                    if not any(p.path == where for p in problems):  # (once for the pods that share the workload)
                        problems.append(Problem(where, f"workload {pod.profile!r} binds its first touch to node {node}, which "
                                                       f"does not exist on this machine (nodes 0-{machine.n_nodes - 1})"))
                    break
            if pod.requests is not None and pod.requests.cpu is not None and pod.requests.cpu > pod.cpus:
                problems.append(Problem(f"pods[{i}].requests.cpu", f"must be <= cpu_limit ({pod.cpus:g}), got {pod.requests.cpu:g}"))
    if problems:
        raise ScenarioError(blame(problems, overrides), source=source)
    assert machine is not None
    return Scenario(spec=spec, machine=machine, profiles=profiles, variants=tuple(variants), source=source)


_VARIANT_ROOTS = ("machine", "workloads", "pods")
# The machines one scenario builds (its own and its variants'), in CPUs: four of the largest
# (about 2.6 s and 100 MB each at 65,536 CPUs, session 30).
MAX_BUILT_CPUS = 4 * MAX_CPUS


def _variant_scenario(data: dict, i: int, v: VariantSpec, source: str, problems: list[Problem],
                      machines: dict[str, Machine]) -> "Scenario | None":
    """The scenario as variant ``i`` sees it, with its ``set`` applied (or None, with problems)."""
    sub = copy.deepcopy(data)
    sub["policies"] = [{"label": v.label or v.policy, "policy": v.policy, "options": v.options}]
    sub.pop("baseline", None)
    for path, value in v.set.items():
        if path.split(".", 1)[0] not in _VARIANT_ROOTS:
            problems.append(Problem(f"policies[{i}].set.{path}", "only fields under machine, workloads or pods may differ between variants"))
            return None
        try:
            set_path(sub, path, value, source)
        except ScenarioError as exc:
            problems.extend(Problem(f"policies[{i}].set.{p.path}" if p.path else f"policies[{i}].set", p.message)
                            for p in exc.problems)
            return None
    try:
        return from_dict(sub, source=source, _machines=machines)
    except ScenarioError as exc:
        problems.extend(Problem(f"policies[{i}].set: {p.path}" if p.path else f"policies[{i}].set", p.message)
                        for p in exc.problems)
        return None


def _resolve_machine(value: str | dict[str, Any], problems: list[Problem],
                     built: dict[str, Machine] | None = None) -> Machine | None:
    try:
        if isinstance(value, str):
            data = load_preset("machines", value, "machine")
        else:
            data = dict(value)
            if "preset" in data:
                name = data.pop("preset")
                if not isinstance(name, str):
                    problems.append(Problem("machine.preset", f"must be a preset name, got {name!r}"))
                    return None
                base = load_preset("machines", name, "machine.preset")
                base.update(data)
                data = base
        spec = MachineSpec.model_validate(data)
    except ScenarioError as exc:
        problems.extend(exc.problems)
        return None
    except ValidationError as exc:
        problems.extend(validation_problems(exc, MachineSpec, ("machine",)))
        return None
    built = {} if built is None else built
    key = spec.model_dump_json()
    if key in built:
        return built[key]
    total = spec.n_cpus + sum(m.n_cpus for m in built.values())
    if built and total > MAX_BUILT_CPUS:
        problems.append(Problem("machine", f"the scenario's machines (the file's and those its variants' set changes) "
                                           f"would have {total:,} CPUs in all; numasim builds at most "
                                           f"{MAX_BUILT_CPUS:,} for one scenario: fewer variants that change the "
                                           "machine, or numasim sweep over the field"))
        return None
    try:
        built[key] = shared_machine(spec, key)
        return built[key]
    except RuntimeError as exc:  # scipy's curve_fit gives up on a curve of the wrong shape
        problems.append(Problem("machine.loaded_latency", f"cannot fit a loaded-latency curve to these points ({exc}); "
                                "give [GB/s, ns] points whose latency rises with bandwidth"))
        return None


def _resolve_profiles(spec: ScenarioSpec, problems: list[Problem]) -> dict[str, WorkloadProfile]:
    profiles: dict[str, WorkloadProfile] = {}
    for key, raw in spec.workloads.items():
        data = dict(raw)
        try:
            if "base" in data:
                base = load_preset("workloads", str(data.pop("base")), f"workloads.{key}.base")
                base.update(data)
                data = base
            data.setdefault("name", key)
            profiles[key] = WorkloadProfile.model_validate(data)
        except ScenarioError as exc:
            problems.extend(exc.problems)
        except ValidationError as exc:
            problems.extend(validation_problems(exc, WorkloadProfile, ("workloads", key)))
    for i, pod in enumerate(spec.pods):
        if pod.profile in profiles or pod.profile in spec.workloads:  # a broken profile is reported above
            continue
        if pod.profile in preset_names("workloads"):
            profiles[pod.profile] = WorkloadProfile.model_validate(load_preset("workloads", pod.profile))
        else:
            known = sorted(set(profiles) | set(preset_names("workloads")))
            problems.append(Problem(f"pods[{i}].profile", f"unknown workload {pod.profile!r}; known: {', '.join(known)}"))
    return profiles
