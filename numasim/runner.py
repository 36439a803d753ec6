"""Running a scenario: one simulation per policy variant, in parallel if asked."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from .sim.kernel import Simulation
from .sim.trace import PodInstance, Trace
from .errors import Problem, ScenarioError
from .analysis.metrics import Metrics, combine, summarize
from .analysis.results import RunResult
from .model.scenario import MAX_REPLICATIONS, Scenario, Variant
from .analysis.sla import climb, score
from .budget import DEFAULT_MAX_WORK_S, MAX_MEMORY_BYTES, OUTPUT_COPIES, check_budget, estimate
from .jobs import Job, run_jobs, worker_count
from .progress import RunProgress
from .calls import as_duration_ns, callback, check_seed, flag, text_list, whole

__all__ = ["run", "run_variant", "build_pods", "select_variants"]

MAX_WORKERS = 512  # worker processes; more than any machine numasim runs on has cores


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
    _, metrics, trace = _simulate(scenario, variant, seed, duration_ns, progress)
    return metrics, trace


def _simulate(scenario: Scenario, variant: Variant, seed: int | None, duration_ns: int | None,
              progress: Callable[[float], None] | None = None) -> tuple[Simulation, Metrics, Trace]:
    seed = scenario.spec.seed if seed is None else seed
    duration = scenario.spec.duration if duration_ns is None else duration_ns
    # Common random numbers: every variant gets the same stream for the same seed.
    policy_seq, engine_seq = np.random.SeedSequence(seed).spawn(2)
    machine = scenario.machine_of(variant)
    policy = variant.policy(variant.options, machine, np.random.default_rng(policy_seq))
    sim = Simulation(
        machine, build_pods(scenario, variant), policy, duration, scenario.spec.warmup,
        min(scenario.spec.sample_interval, duration), rng=np.random.default_rng(engine_seq), progress=progress,
        sample_bytes=scenario.spec.sample_memory,
    )
    trace = sim.run()
    return sim, summarize(trace, variant.label), trace


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


def _run_job(scenario: Scenario, label: str, seed: int, duration: int | None,
             keep_trace: bool, ladder: bool) -> tuple[Metrics, Trace | None, list[tuple]]:
    """One variant and seed in a worker, then its SLA ladder if asked; the trace is sent back only if it is kept."""
    sim, metrics, trace = _simulate(scenario, scenario.variant(label), seed, duration)
    rungs: list[tuple] = []
    if ladder:
        spec = scenario.spec
        assert spec.sla is not None
        end = spec.duration if duration is None else duration
        rungs = climb(sim, metrics, spec.sla, end, spec.sla.step_ns(end - spec.warmup))
    return metrics, trace if keep_trace else None, rungs


def run(
    scenario: Scenario,
    policies: list[str] | None = None,
    seed: int | None = None,
    duration: str | int | None = None,
    warmup: str | int | None = None,
    replications: int | None = None,
    workers: int = 0,
    on_done: Callable[[str], None] | None = None,
    with_sla: bool = True,
    quiet: bool = False,
    max_work_s: float | None = DEFAULT_MAX_WORK_S,
    max_memory_bytes: float | None = MAX_MEMORY_BYTES,
    outputs: tuple[str, ...] = (),
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
    duration, warmup
        Override the simulated duration and the warm-up (``"30s"`` or nanoseconds).
    replications
        Overrides the number of seeds per variant.
    workers
        Processes to run the simulations in: ``0`` (the default) means one per CPU,
        ``1`` runs them in this process. The results are the same, byte for byte,
        whatever the number.
    on_done
        Called with a variant's label each time one of its runs finishes.
    with_sla
        Run the scenario's SLA search (``sla:``), if it has one.
    quiet
        No progress report (by default one goes to standard error: a live bar on a
        terminal or in Jupyter, a line per finished variant otherwise).
    max_work_s, max_memory_bytes
        The budget: refuse, before simulating, a run estimated (:mod:`numasim.budget`)
        to take more CPU seconds in all, or more memory per simulation or for the results this
        process keeps; ``None`` for no limit.
    outputs
        What the caller will build from the result ("json", "csv", "report", "trace"): their memory
        is counted with the results kept.
    """
    if not isinstance(scenario, Scenario):
        raise ScenarioError(Problem("scenario", f"expected a Scenario (numasim.load(FILE) or numasim.from_dict(DATA)), "
                                                f"got {repr(scenario)[:80]}"))
    seed = check_seed(seed)
    policies, workers, replications = _check_call(policies, workers, replications, outputs)
    on_done, with_sla, quiet = callback(on_done, "on_done"), flag(with_sla, "with_sla"), flag(quiet, "quiet")
    variants = select_variants(scenario, policies)
    scenario, dur_ns = _run_options(scenario, duration, warmup, replications)
    check_budget(estimate(scenario, variants, dur_ns, with_sla, tuple(outputs)), max_work_s, max_memory_bytes,
                 scenario.source)
    base_seed = scenario.spec.seed if seed is None else seed
    seeds = [base_seed + k for k in range(scenario.spec.replications)]
    sla_spec = scenario.spec.sla if with_sla else None
    # The first seed of every variant first: it goes on to climb the SLA ladder, the longest job.
    jobs = [Job(("run", v.label, sd), _run_job,
                (scenario, v.label, sd, dur_ns, sd == seeds[0], sla_spec is not None and sd == seeds[0]), v.label,
                f"variant {v.label}, seed {sd}" + (", then its SLA ladder" if sla_spec is not None and sd == seeds[0] else ""))
            for sd in seeds for v in variants]
    done: dict[tuple, tuple] = {}

    def finished(job: Job, out) -> list[Job]:
        done[job.key] = out
        report.finished(job.key[1])
        if on_done:
            on_done(job.key[1])
        return []

    per_variant = {v.label: len(seeds) for v in variants}
    # No more processes than simulations: a pool starts all its workers up front.
    n_workers = min(worker_count(workers), len(jobs))
    with RunProgress(scenario.name, per_variant, quiet=quiet) as report:
        run_jobs(jobs, n_workers, finished, on_start=lambda job: report.started(job.group))
    runs = [combine([done[("run", v.label, sd)][0] for sd in seeds], seeds) for v in variants]
    sla = {}
    if sla_spec is not None:
        sla = _score_sla(sla_spec, {v.label: done[("run", v.label, seeds[0])][2] for v in variants})
    spec = scenario.spec
    meta = {
        "provenance": provenance(scenario),
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
        runs=runs,
        traces={v.label: done[("run", v.label, seeds[0])][1] for v in variants},
        sla=sla,
    )


def provenance(scenario: Scenario) -> dict[str, Any]:
    """What produced a result: numasim's version, the platform, when, the scenario as run
    (overrides applied) and the machine as resolved (a preset's values written out)."""
    import datetime
    import platform

    from ._version import __version__

    import hashlib
    import json

    resolved = scenario.spec.model_dump(mode="json", exclude_none=True)
    machine = scenario.machine.spec.model_dump(mode="json", exclude_none=True)
    content = json.dumps({"scenario": resolved, "machine": machine, "numasim": __version__}, sort_keys=True)
    return {
        "numasim_version": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "scenario_hash": hashlib.sha256(content.encode()).hexdigest()[:20],
        "scenario": resolved,
        "machine": machine,
    }


def _check_call(policies: Any, workers: Any, replications: Any, outputs: Any) -> tuple:
    """run()'s arguments as the command line would let them through (numasim.calls; the budget's are
    check_budget's): the policies as a list, the numbers as ints."""
    if policies is not None:
        policies = text_list(policies, "--policy", "variant labels or policy names")
    known = tuple(OUTPUT_COPIES) + ("csv",)
    if not isinstance(outputs, (list, tuple)) or not all(o in known for o in outputs):
        raise ScenarioError(Problem("outputs", f"expected a tuple of {', '.join(known)}, got {str(outputs)[:80]!r}"))
    return (policies, whole(workers, "--workers", 0, MAX_WORKERS, " (0: one per CPU)"),
            None if replications is None else whole(replications, "--replications", 1, MAX_REPLICATIONS))


def _run_options(scenario: Scenario, duration, warmup, replications) -> tuple[Scenario, int | None]:
    """The scenario with ``--warmup`` and ``--replications`` applied, and ``--duration`` in ns (None: the scenario's)."""
    if replications is not None:
        scenario = dataclasses.replace(scenario, spec=scenario.spec.model_copy(update={"replications": replications}))
    if warmup is not None:
        warm_ns = as_duration_ns(warmup, "--warmup")
        if warm_ns < 0:
            raise ScenarioError(Problem("--warmup", f"must not be negative, got {warm_ns / 1e9:g}s"))
        scenario = dataclasses.replace(scenario, spec=scenario.spec.model_copy(update={"warmup": warm_ns}))
    dur_ns = as_duration_ns(duration, "--duration") if duration is not None else None
    end, warm = (dur_ns if dur_ns is not None else scenario.spec.duration), scenario.spec.warmup
    if end <= warm:
        if duration is not None:
            raise ScenarioError(Problem("--duration", f"must be longer than the warm-up ({warm / 1e9:g}s), got {end / 1e9:g}s"))
        raise ScenarioError(Problem("--warmup", f"must be shorter than the duration ({end / 1e9:g}s), got {warm / 1e9:g}s"))
    if dur_ns is not None:  # as the scenario's own duration is checked (model/scenario.py): every pod arrives
        from .model.scenario import late_pods

        late = next(late_pods(scenario.spec.pods, dur_ns), None)
        if late is not None:
            i, pod, last = late
            raise ScenarioError(Problem("--duration", f"{dur_ns / 1e9:g}s ends the run before pods[{i}] ({pod.name}) "
                                                      f"has all arrived ({last / 1e9:g}s): it would never run; "
                                                      "lengthen --duration"))
    return scenario, dur_ns


def _score_sla(spec, ladders: dict[str, list[tuple]]) -> dict[str, dict]:
    """Score each variant's SLA ladder (see numasim.analysis.sla)."""
    out: dict[str, dict] = {}
    for label, rungs in ladders.items():
        if not rungs:
            continue
        out[label] = {
            "percentile": spec.percentile,
            "targets_ms": list(spec.targets_ms),
            "curve": [{"level": lv, "rate": offered, "latency_ms": p} for lv, offered, p in rungs],
            **score([(offered, p) for _, offered, p in rungs], list(spec.targets_ms)),
        }
    return out
