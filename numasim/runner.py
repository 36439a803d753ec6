"""Running a scenario: one simulation per policy variant, in parallel if asked."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from typing import Callable

import numpy as np

from .sim.kernel import Simulation
from .sim.trace import PodInstance, Trace
from .errors import Problem, ScenarioError
from .analysis.metrics import Metrics, combine, summarize
from .analysis.results import RunResult
from .model.scenario import Scenario, Variant
from .analysis.sla import PERCENTILE_KEYS, ladder_variant, score
from .units import parse_duration

__all__ = ["run", "run_variant", "build_pods", "select_variants"]


def build_pods(scenario: Scenario, variant: Variant | None = None) -> list[PodInstance]:
    """Expand the pod specs (the variant's, if it changes them) into instances, in arrival order."""
    pods: list[PodInstance] = []
    specs = scenario.pods_of(variant) if variant is not None else scenario.pods
    profiles = scenario.profiles_of(variant) if variant is not None else scenario.profiles
    for spec in specs:
        for r in range(spec.replicas):
            name = spec.name if spec.replicas == 1 else f"{spec.name}-{r}"
            pods.append(PodInstance(
                index=0, name=name, group=spec.name, replica=r, spec=spec,
                profile=profiles[spec.profile], arrival_ns=spec.start + r * spec.stagger,
            ))
    pods.sort(key=lambda p: p.arrival_ns)
    for i, p in enumerate(pods):
        p.index = i
    return pods


def run_variant(
    scenario: Scenario,
    variant: Variant,
    seed: int | None = None,
    duration_ns: int | None = None,
    progress: Callable[[float], None] | None = None,
) -> tuple[Metrics, Trace]:
    """Simulate one policy variant and summarise it."""
    seed = scenario.spec.seed if seed is None else seed
    duration = scenario.spec.duration if duration_ns is None else duration_ns
    # Common random numbers: every variant gets the same stream for the same seed.
    policy_seq, engine_seq = np.random.SeedSequence(seed).spawn(2)
    machine = scenario.machine_of(variant)
    policy = variant.policy(variant.options, machine, np.random.default_rng(policy_seq))
    sim = Simulation(
        machine, build_pods(scenario, variant), policy, duration, scenario.spec.warmup,
        min(scenario.spec.sample_interval, duration), rng=np.random.default_rng(engine_seq), progress=progress,
    )
    trace = sim.run()
    return summarize(trace, variant.label), trace


def select_variants(scenario: Scenario, policies: list[str] | None) -> list[Variant]:
    """The variants named (all if none), plus the baseline.

    A name that is a variant's label selects that variant only; any other name selects
    every variant of the policy of that name (``cfs`` is the label ``cfs``, not also
    ``cfs+numab``; ``taskset`` is every taskset variant).
    """
    variants = list(scenario.variants)
    if not policies:
        return variants
    labels = {v.label for v in variants}
    chosen = [v for v in variants
              if v.label in policies or any(p not in labels and p == v.policy.name for p in policies)]
    unknown = [p for p in policies if not any(p in (v.label, v.policy.name) for v in variants)]
    if unknown:
        labels = ", ".join(v.label for v in variants)
        raise ScenarioError(Problem("--policy", f"no variant {unknown[0]!r} in this scenario; labels: {labels}"))
    if not any(v.label == scenario.baseline for v in chosen):
        chosen.insert(0, scenario.variant(scenario.baseline))
    return chosen


def _worker(args):
    scenario, label, seed, duration = args
    return run_variant(scenario, scenario.variant(label), seed, duration)


def _sla_worker(args):
    """One rung of the SLA ladder: the variant open-loop at ``level`` x its closed-loop rate."""
    scenario, label, level, saturated, seed, duration = args
    variant = ladder_variant(scenario, scenario.variant(label), saturated, level)
    if variant is None:
        return label, level, None, None
    metrics, _ = run_variant(scenario, variant, seed, duration)
    offered = level * sum(p.latency["requests_per_s"] for p in saturated.pods if p.latency is not None)
    key = PERCENTILE_KEYS[scenario.spec.sla.percentile]
    return label, level, offered, (metrics.latency or {}).get(key)


def run(
    scenario: Scenario,
    policies: list[str] | None = None,
    seed: int | None = None,
    duration: str | int | None = None,
    workers: int = 1,
    on_done: Callable[[str], None] | None = None,
    with_sla: bool = True,
) -> RunResult:
    """Run the scenario's policy variants and collect the results.

    Parameters
    ----------
    scenario
        A validated scenario.
    policies
        Labels or policy names to run (default: all). The baseline variant is
        always run too, so that relative throughput is defined.
    seed
        Overrides the scenario's seed.
    duration
        Overrides the simulated duration (``"30s"`` or nanoseconds).
    workers
        Processes to run variants in; ``0`` means one per CPU.
    on_done
        Called with a variant's label each time one of its runs finishes.
    with_sla
        Run the scenario's SLA search (``sla:``), if it has one.
    """
    variants = select_variants(scenario, policies)
    dur_ns = None
    if duration is not None:
        try:
            dur_ns = parse_duration(duration) if not isinstance(duration, int) else duration
        except ValueError as exc:
            raise ScenarioError(Problem("--duration", str(exc))) from None
        if dur_ns <= scenario.spec.warmup:
            raise ScenarioError(Problem(
                "--duration", f"must be longer than the warm-up ({scenario.spec.warmup / 1e9:g}s), got {dur_ns / 1e9:g}s"
            ))
    if workers == 0:
        workers = os.cpu_count() or 1
    base_seed = scenario.spec.seed if seed is None else seed
    seeds = [base_seed + k for k in range(scenario.spec.replications)]
    jobs = [(v.label, sd) for v in variants for sd in seeds]
    done: dict[tuple[str, int], tuple[Metrics, Trace]] = {}
    workers = max(1, min(workers, len(jobs)))
    if workers == 1 or not _picklable(variants):
        for label, sd in jobs:
            done[(label, sd)] = run_variant(scenario, scenario.variant(label), sd, dur_ns)
            if on_done:
                on_done(label)
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {job: pool.submit(_worker, (scenario, job[0], job[1], dur_ns)) for job in jobs}
            for job, fut in futures.items():
                done[job] = fut.result()
                if on_done:
                    on_done(job[0])
    results: dict[str, tuple[Metrics, Trace]] = {}
    for v in variants:
        runs = [done[(v.label, sd)][0] for sd in seeds]
        results[v.label] = (combine(runs, seeds), done[(v.label, seeds[0])][1])
    sla = {}
    if scenario.spec.sla is not None and with_sla:
        sla = _sla(scenario, variants, {v.label: done[(v.label, seeds[0])][0] for v in variants},
                   seeds[0], dur_ns, workers, on_done)
    spec = scenario.spec
    meta = {
        "name": spec.name,
        "description": spec.description,
        "source": scenario.source,
        "machine": scenario.machine.name,
        "seed": spec.seed if seed is None else seed,
        "replications": spec.replications,
        "duration_s": (dur_ns or spec.duration) / 1e9,
        "warmup_s": spec.warmup / 1e9,
    }
    return RunResult(
        scenario=meta,
        baseline=scenario.baseline,
        runs=[results[v.label][0] for v in variants],
        traces={v.label: results[v.label][1] for v in variants},
        sla=sla,
    )


def _sla(scenario: Scenario, variants: list[Variant], saturated: dict[str, Metrics], seed: int,
         dur_ns: int | None, workers: int, on_done) -> dict[str, dict]:
    """Run the SLA ladder of every variant and score it (see numasim.analysis.sla)."""
    spec = scenario.spec.sla
    assert spec is not None
    jobs = [(scenario, v.label, lv, saturated[v.label], seed, dur_ns) for v in variants for lv in sorted(spec.levels)]
    if workers == 1 or not _picklable(variants):
        rungs = []
        for job in jobs:
            rungs.append(_sla_worker(job))
            if on_done:
                on_done(job[1])
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_sla_worker, job) for job in jobs]
            rungs = []
            for job, fut in zip(jobs, futures):
                rungs.append(fut.result())
                if on_done:
                    on_done(job[1])
    out: dict[str, dict] = {}
    for v in variants:
        curve = [(offered, p) for label, _lv, offered, p in rungs if label == v.label and offered is not None]
        if not curve:
            continue
        out[v.label] = {
            "percentile": spec.percentile,
            "targets_ms": list(spec.targets_ms),
            "curve": [{"level": lv, "rate": offered, "latency_ms": p}
                      for label, lv, offered, p in rungs if label == v.label and offered is not None],
            **score(curve, list(spec.targets_ms)),
        }
    return out


def _picklable(variants: list[Variant]) -> bool:
    """Policies defined in a notebook or script cannot be sent to worker processes."""
    return all(v.policy.__module__ not in ("__main__",) and "<" not in v.policy.__qualname__ for v in variants)
