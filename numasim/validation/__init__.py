"""The validation suite: published hardware results, their scenarios, and predicted versus published.

Each case (a YAML file in ``numasim/validation/cases/``) is one published figure,
written as a ratio between two configurations on one machine: a scenario whose
policy variants are the configurations (a variant's ``set`` changes the machine
or the workload), the two variants compared (``numerator`` and ``denominator``),
the metric, the published value with its source and a verbatim quote, and a
band. The band is what the published figure itself allows (run-to-run spread of
the measurement), not how good the model is. ``fitted`` names every parameter
of the case fitted on a published result, and on which one: never this case's.

:func:`run_suite` simulates every side of every case over one pool of worker
processes and returns one :class:`CaseResult` per case with its error and
whether it is within its band and on the right side of 1.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from ..budget import DEFAULT_MAX_WORK_S, MAX_MEMORY_BYTES
from ..errors import PolicyError, Problem, ScenarioError
from ..jobs import Job, run_jobs, worker_count
from ..model.spec import Spec, Text
from ..model.yamlfile import read_yaml
from ..policies.registry import plugin_files

__all__ = ["Case", "CaseResult", "Elapsed", "load_case_file", "load_cases", "run_suite", "suite_json"]

Mechanism = Literal["pinning", "bandwidth", "writes", "mlp", "smt", "coherence", "interconnect", "tiers",
                    "virtualisation", "load-balancing", "numa-balancing"]


class Elapsed(Spec):
    """A published ratio of elapsed times of a fixed amount of work: the time of each side is
    ``harness_s + common_ops / throughput(common_at) + ops / throughput(side)``, and the ratio is the
    denominator's time over the numerator's (a throughput-like ratio, as every case's)."""

    ops: float = Field(gt=0, le=1e18, description="operations of the timed program's work, each side at its own "
                                                    "simulated mean throughput (all pods together)")
    common_ops: float = Field(default=0.0, ge=0, le=1e18,
                              description="operations of a phase the compared setting does not change (a first "
                                          "clearing under a bind), on both sides at common_at's throughput")
    common_at: str | None = Field(default=None, description="label of the variant (numerator or denominator) "
                                                            "whose throughput the common phase runs at")
    harness_s: float = Field(default=0.0, ge=0, le=1e6,
                             description="seconds the published times hold outside the simulated program, the same "
                                         "on both sides (a build, a plot): assumed, with its estimate in notes")

    @model_validator(mode="after")
    def _common_needs_its_rate(self) -> "Elapsed":
        if self.common_ops > 0 and self.common_at is None:
            raise ValueError("common_ops needs common_at: the label of the variant whose throughput that phase "
                             "runs at")
        if self.common_at is not None and self.common_ops == 0:
            raise ValueError(f"common_at is {self.common_at!r} but common_ops is 0: give the common phase's "
                             "operations, or leave common_at out")
        return self

    def time_s(self, throughput: float, common_throughput: float) -> float:
        common = self.common_ops / common_throughput if self.common_ops else 0.0
        return self.harness_s + common + self.ops / throughput


class Case(Spec):
    """One published result (see the module docstring)."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=80)
    title: Text = Field(max_length=300)
    mechanism: Mechanism
    machine_family: Text = Field(max_length=80)
    source: Text = Field(max_length=500, description="public URL of the publication")
    quote: Text = Field(max_length=4000, description="the published numbers, verbatim")
    published: float = Field(ge=1e-6, le=1e6, description="the published ratio numerator / denominator")
    published_from: Text = Field(max_length=300, description="the arithmetic from the quoted numbers")
    band_pct: float = Field(gt=0, le=100, description="how far from the published value a prediction is within it, %")
    fitted: Text = Field(default="", max_length=2000, description="parameters fitted on published results, and on which")
    notes: Text = Field(default="", max_length=4000)
    metric: Literal["throughput", "memory_gbps", "locality"] = "throughput"
    elapsed: Elapsed | None = Field(default=None, description="the published figure is a ratio of elapsed times "
                                                                "of a fixed amount of work (metric throughput)")
    scenario: dict[str, Any]
    numerator: str = Field(description="label of the variant on top of the ratio")
    denominator: str = Field(description="label of the variant below")
    _file: str | None = PrivateAttr(default=None)  # a case file of the user's own: its policy files are beside it
    _plugins: tuple[str, ...] = PrivateAttr(default=())  # the files of its policies that are not numasim's
    _built: Any = PrivateAttr(default=None)  # its scenario, built when the file was checked: costed, then dropped

    @model_validator(mode="after")
    def _two_variants(self) -> "Case":
        if self.numerator == self.denominator:
            raise ValueError(f"numerator and denominator are both {self.numerator!r}: a ratio of two variants "
                             "needs two labels")
        if self.elapsed is not None:
            if self.metric != "throughput":
                raise ValueError(f"elapsed times come from throughput, not {self.metric}: give metric throughput")
            at = self.elapsed.common_at
            if at is not None and at not in (self.numerator, self.denominator):
                raise ValueError(f"elapsed.common_at is {at!r}: it must be the numerator ({self.numerator!r}) or "
                                 f"the denominator ({self.denominator!r})")
        return self

    def ratio(self, num: float, den: float) -> float:
        """The predicted ratio from the two sides' metrics (elapsed times where the figure is one)."""
        if self.elapsed is None:
            return num / den
        common = num if self.elapsed.common_at == self.numerator else den
        return self.elapsed.time_s(den, common) / self.elapsed.time_s(num, common)

    def plugin_files(self) -> tuple[str, ...]:
        """The source files of the case's policies outside numasim (inputs of the run, never its outputs)."""
        return self._plugins


@dataclass(frozen=True)
class CaseResult:
    id: str
    source: str
    machine: str
    mechanism: str
    published: float
    predicted: float
    error_pct: float
    band_pct: float
    within: bool
    direction_ok: bool


def _cases_dir() -> Path:
    return Path(str(resources.files("numasim.validation") / "cases"))


def load_case_file(path: str | Path) -> Case:
    """A case file of the user's own, in the shipped cases' format: its errors are input errors,
    named by the file and the field (its scenario's fields under ``scenario.``)."""
    from pydantic import ValidationError

    from ..model.problems import validation_problems

    if not str(path).strip():
        raise ScenarioError(Problem("--case", "the file name is empty"))
    path = Path(path)
    data = read_yaml(path)
    if not isinstance(data, dict):
        got = "nothing" if data is None else type(data).__name__
        raise ScenarioError(Problem("", f"a validation case must be a mapping of keys (id, title, mechanism, "
                                        f"source, published, band_pct, scenario, ...), got {got}"), source=str(path))
    try:
        case = Case.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(validation_problems(exc, Case), source=str(path)) from None
    case._file = str(path)
    try:
        case._built = _scenario(case)
        case._plugins = tuple(plugin_files(v.policy for v in case._built.variants))
    except ScenarioError as exc:
        raise ScenarioError([Problem(_under("scenario", p.path) if p.path not in ("numerator", "denominator")
                                     else p.path, p.message) for p in exc.problems], source=str(path)) from None
    return case


def _under(prefix: str, path: str) -> str:
    return prefix if not path else f"{prefix}{path}" if path.startswith("[") else f"{prefix}.{path}"


def load_cases(only: list[str] | None = None, files: list[str | Path] | tuple = ()) -> list[Case]:
    """The shipped cases, sorted by id, and the case files ``files`` of the user's own. ``only`` keeps
    those shipped ids (unknown ids are an error); with ``files`` and no ``only``, the shipped cases are
    left out. Two cases with one id are an error."""
    cases = []
    if only or not files:
        for path in sorted(_cases_dir().glob("*.yaml")):
            try:
                cases.append(Case.model_validate(read_yaml(path)))
            except Exception as exc:  # a broken case file is a bug of numasim, not of the user's input
                raise ScenarioError(Problem("", f"validation case {path.name}: {exc}"), source=str(path)) from exc
    if only:
        known = {c.id for c in cases}
        unknown = [i for i in only if i not in known]
        if unknown:
            import difflib

            near = difflib.get_close_matches(unknown[0], sorted(known), n=3, cutoff=0.5)
            hint = f"did you mean {', '.join(near)}? " if near else ""
            own = " (--only names shipped cases; a --case file runs whole)" if files else ""
            raise ScenarioError(Problem("--only", f"no shipped validation case {', '.join(unknown)}{own}; {hint}"
                                                  f"numasim validation --list names all {len(known)}"))
        cases = [c for c in cases if c.id in only]
    seen = {c.id: "the shipped suite" for c in cases}
    for path in files:
        case = load_case_file(path)
        if case.id in seen:
            raise ScenarioError(Problem("id", f"case {case.id!r} is also in {seen[case.id]}; each case needs an id "
                                              "of its own"), source=str(path))
        seen[case.id] = str(path)
        cases.append(case)
    return cases


def _scenario(case: Case, source: str | None = None):
    from ..model.scenario import from_dict

    source = source or case._file or f"validation case {case.id}"
    scenario = from_dict(case.scenario, source=source)
    labels = {v.label for v in scenario.variants}
    for which in ("numerator", "denominator"):
        if getattr(case, which) not in labels:
            raise ScenarioError(Problem(which, f"no variant {getattr(case, which)!r}; the scenario has "
                                                f"{', '.join(sorted(labels))}"), source=source)
    return scenario


def _measure(case: Case) -> tuple[float, float]:
    """Simulate ``case``'s two variants (in a worker) and return their metrics."""
    from ..runner import run

    try:
        result = run(_scenario(case), policies=[case.numerator, case.denominator], workers=1, with_sla=False,
                     quiet=True, max_work_s=None, max_memory_bytes=None)  # within the suite's budget, checked before
    except PolicyError as exc:  # a plug-in's bug, in a case of the user's: say in which (a shipped one's is numasim's)
        if case._file is None:
            raise
        raise ScenarioError(Problem("", str(exc)), source=case._file) from exc
    out = []
    for label in (case.numerator, case.denominator):
        value = getattr(result.run(label), case.metric)
        if value is None or not math.isfinite(value) or value <= 0:
            raise ScenarioError(Problem(label, f"{case.metric} is {value}: the ratio is undefined"),
                                source=case._file or f"validation case {case.id}")
        out.append(float(value))
    return out[0], out[1]


def _result(case: Case, num: float, den: float) -> CaseResult:
    predicted = case.ratio(num, den)
    error = 100.0 * (predicted - case.published) / case.published
    # Direction: on the same side of 1 as the published ratio (a published tie: a predicted tie, within the band).
    if abs(case.published - 1.0) * 100 <= case.band_pct:
        direction = abs(predicted - 1.0) * 100 <= case.band_pct
    else:
        direction = (predicted - 1.0) * (case.published - 1.0) > 0
    return CaseResult(id=case.id, source=case.source, machine=case.machine_family, mechanism=case.mechanism,
                      published=case.published, predicted=predicted, error_pct=error, band_pct=case.band_pct,
                      within=abs(error) <= case.band_pct, direction_ok=direction)


def run_suite(only: list[str] | None = None, workers: int = 0, on_done=None,
              cases: list[Case] | None = None, max_work_s: float | None = DEFAULT_MAX_WORK_S,
              max_memory_bytes: float | None = MAX_MEMORY_BYTES) -> list[CaseResult]:
    """Run the cases (all shipped ones, ``only`` those ids, or ``cases`` as :func:`load_cases` gave
    them), in parallel over ``workers`` processes (0: one per CPU). Refuse, before anything runs, a
    suite whose two runs a case are estimated over ``max_work_s`` CPU seconds in all, or one of whose
    simulations over ``max_memory_bytes`` (None: no limit), as ``numasim run`` refuses one run."""
    from ..budget import check_budget, combine, estimate
    from ..runner import select_variants

    cases = load_cases(only) if cases is None else cases
    costs = []
    for case in cases:  # every scenario is checked, and costed, before anything runs
        scenario = case._built or _scenario(case)  # (a case file of the user's was built when it was read)
        case._built = None  # not sent to the workers with the case: they build their own
        costs.append(estimate(scenario, select_variants(scenario, [case.numerator, case.denominator]), None, False))
    check_budget(combine(costs), max_work_s, max_memory_bytes, "numasim validation",
                 what="this case is" if len(cases) == 1 else f"these {len(cases)} cases are", fewer="run fewer cases (--only, --case)")
    values: dict[str, tuple[float, float]] = {}
    jobs = [Job(c.id, _measure, (c,), c.id, f"validation case {c.id}") for c in cases]

    def finished(job: Job, out: tuple[float, float]) -> list[Job]:
        values[job.key] = out
        if on_done is not None:
            on_done(job.key)
        return []

    run_jobs(jobs, max(1, min(worker_count(workers), len(jobs))), finished)
    return [_result(c, *values[c.id]) for c in cases]


def suite_json(results: list[CaseResult]) -> dict[str, Any]:
    """The suite's results in the documented JSON form (docs/validation.md)."""
    mape = sum(abs(r.error_pct) for r in results) / len(results) if results else None
    return {"cases": [asdict(r) for r in results], "mape_pct": mape}
