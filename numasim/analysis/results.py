"""RunResult: the results of a scenario run and their one documented schema.

``RunResult.to_json()`` is a stable contract (docs/results.md): a top-level
object with ``schema``, ``scenario``, ``baseline`` and ``runs``; each run has
``label``, ``policy``, ``throughput`` (ops/s), ``relative_throughput``,
``locality`` and ``pods`` (rows with ``name``, ``throughput``, ``locality``),
plus the other fields documented there. ``to_frame()`` gives the same numbers
as pandas DataFrames.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..model.scenario import MAX_REPLICATIONS, MAX_VARIANTS
from ..sim.trace import Trace
from .confidence import half_width, mser_truncation, trend
from .metrics import REPLICATED, Metrics

__all__ = ["RunResult", "SCHEMA", "MAX_BYTES"]

SHOWN = 0.001  # a drift of a tenth of a percent: the last digit the run's table shows of a relative throughput

SCHEMA = "numasim.result/1"
MAX_BYTES = 256 * 2**20
"""The largest results file read back (a run of hours sampled every 100 ms, many variants, is tens of MiB)."""
MAX_CONTAINERS = 4_000_000  # JSON objects and lists in a results file
MAX_VALUES = 20_000_000  # and values (commas): at most about 1 GB parsed


@dataclass
class RunResult:
    """Results of one scenario run: one :class:`~numasim.analysis.metrics.Metrics` per policy variant."""

    scenario: dict[str, Any]
    baseline: str
    runs: list[Metrics]
    traces: dict[str, Trace] = field(default_factory=dict, repr=False)
    sla: dict[str, dict] = field(default_factory=dict)

    def run(self, label: str) -> Metrics:
        """The run with ``label``."""
        for r in self.runs:
            if r.label == label:
                return r
        raise KeyError(f"no run labelled {label!r}; labels: {', '.join(r.label for r in self.runs)}")

    def relative(self, label: str) -> float | None:
        """Throughput of ``label`` relative to the baseline run (``None`` without a baseline).

        With replications, the mean over seeds of the ratio to the baseline's run
        with the same seed (common random numbers).
        """
        ratios = self.relative_replicates(label)
        return float(np.mean(ratios)) if ratios else None

    def relative_replicates(self, label: str) -> list[float]:
        """Per-seed throughput of ``label`` relative to the baseline with the same seed."""
        base = next((r for r in self.runs if r.label == self.baseline), None)
        if base is None:
            return []
        run = self.run(label)
        if not run.replicates:
            return [run.throughput / base.throughput] if base.throughput > 0 else []
        b = {x["seed"]: x["throughput"] for x in base.replicates}
        return [x["throughput"] / b[x["seed"]] for x in run.replicates if b.get(x["seed"], 0) > 0]

    def spread(self, label: str) -> dict[str, float | None]:
        """Standard deviations over replications (``None`` with a single replication)."""
        run = self.run(label)
        if len(run.replicates) < 2:
            return {"throughput_sd": None, "relative_throughput_sd": None, "locality_sd": None}
        loc = [x.get("locality") for x in run.replicates if x.get("locality") is not None]
        rel = self.relative_replicates(label)
        return {
            "throughput_sd": float(np.std([x["throughput"] for x in run.replicates], ddof=1)),
            "relative_throughput_sd": float(np.std(rel, ddof=1)) if len(rel) > 1 else None,
            "locality_sd": float(np.std(loc, ddof=1)) if len(loc) > 1 else None,
        }

    def ci(self, label: str) -> dict[str, float | None]:
        """Half-widths of the 95 % confidence intervals over seeds (``None`` with one seed).

        Keys: ``relative_throughput_ci`` and ``<figure>_ci`` for each figure of
        :data:`~numasim.analysis.metrics.REPLICATED` (see :mod:`numasim.analysis.confidence`).
        """
        run = self.run(label)
        out = {"relative_throughput_ci": half_width(self.relative_replicates(label))}
        for name in REPLICATED:
            out[f"{name}_ci"] = half_width([x.get(name) for x in run.replicates])
        return out

    def warnings(self) -> list[str]:
        """What makes these results less sure than they look: one seed, unsettled rankings, a short warm-up,
        a run that ends before steady state."""
        out: list[str] = []
        n = len(self.runs[0].seeds) if self.runs else 0
        if n == 1 and len(self.runs) > 1:
            out.append("one seed per variant: no confidence intervals, and no ranking is tested "
                       "(--replications 3 or more)")
        ranked = sorted((r for r in self.runs if self.relative(r.label) is not None),
                        key=lambda r: -(self.relative(r.label) or 0.0))
        if n >= 2:
            for hi, lo in zip(ranked, ranked[1:]):
                a = dict(zip(hi.seeds, self.relative_replicates(hi.label)))
                b = dict(zip(lo.seeds, self.relative_replicates(lo.label)))
                diffs = [a[sd] - b[sd] for sd in a if sd in b]
                hw = half_width(diffs)
                mean = float(np.mean(diffs)) if diffs else 0.0
                if hw is None or (hw == 0.0 and mean == 0.0):
                    continue  # identical by construction (e.g. the same pinning written two ways)
                if abs(mean) <= hw:
                    out.append(f"{hi.label} ahead of {lo.label} is not settled at {len(diffs)} seeds: "
                               f"relative throughput differs by {mean:+.3f} ± {hw:.3f} (95 % CI); "
                               "more seeds (--replications) or a longer run would settle it")
        for r in self.runs:
            if r.throughput == 0.0 and r.pods:
                out.append(f"{r.label}: no operation completed in the window ({r.window_s[0]:g}-{r.window_s[1]:g} s): "
                           "its threads may still be first-touching their memory (a slow memory node or link) "
                           "or never have been admitted; a longer duration, or see the pods' memory and timeline")
        for r in self.runs:
            series = r.timeseries.get("throughput") or []
            times = r.timeseries.get("time_s") or []
            d = mser_truncation(series)
            start = max(times[d - 1] if d and times else r.window_s[0], r.window_s[0])
            if start > r.window_s[0] + 1e-9:
                # MSER ends the transient after the warm-up. It matters when dropping the rest of
                # it moves the window's mean by more than the window's own 95 % interval.
                window = [x for t, x in zip(times, series) if t > r.window_s[0] + 1e-9 and x is not None]
                steady = [x for x in series[d:] if x is not None]
                hw = half_width(window)
                if window and steady and hw is not None and abs(np.mean(steady) - np.mean(window)) > hw:
                    out.append(f"{r.label}: throughput is still settling after the warm-up: MSER puts steady "
                               f"state from {start:g} s, the warm-up ends at {r.window_s[0]:g} s, and the "
                               f"mean moves by {abs(np.mean(steady) / np.mean(window) - 1):.1%} "
                               "(a longer --warmup or duration)")
            # A drift to the end of the run, after MSER's point, which no truncation removes: significant
            # over all the variants (Bonferroni), and larger than what the figure's intervals already say
            # (the mean's over these samples, and the throughput's over seeds).
            tr = trend(times, series, start)
            seeds_hw = self.ci(r.label)["throughput_ci"]
            said = max(tr[2], seeds_hw / r.throughput if seeds_hw and r.throughput > 0 else 0.0,
                       SHOWN) if tr else 0.0
            if tr is not None and tr[1] < 0.05 / len(self.runs) and abs(tr[0]) > said:
                out.append(f"{r.label}: throughput is still {'rising' if tr[0] > 0 else 'falling'} when the run ends: "
                           f"{tr[0]:+.1%} from {start:g} s to the end (the first seed's time series; slope "
                           f"p = {tr[1]:.2g}): steady state is not reached (a longer duration)")
        policies = (((self.scenario or {}).get("provenance") or {}).get("scenario") or {}).get("policies") or []
        balancing = {p.get("label") or p.get("policy"): any((p.get("options") or {}).get(k) for k in (
            "numa_balancing", "numa_balancing_tiering")) for p in policies if isinstance(p, dict)}
        for r in self.runs:
            if balancing.get(r.label) and r.hinting_faults == 0:
                out.append(f"{r.label}: NUMA balancing is on but took no hinting fault in the window: from Linux 3.13 "
                           "it does not scan memory placed with numactl membind, preferred or interleave (unless "
                           "balancing: true), and it starts scanning only scan_delay_ms after a process starts")
        return out

    @classmethod
    def from_json(cls, data: "dict[str, Any] | str | Any") -> "RunResult":
        """The results written by :meth:`to_json` (``--json``), read back from the data or a file's path:
        figures, pods, time series, SLA scores and provenance; not the traces (per-thread samples),
        which are not written. ``.to_json()`` of the result gives the same document."""
        import os
        from dataclasses import fields

        from .metrics import PodMetrics

        if isinstance(data, (str, os.PathLike)):
            data = _read_json(data)

        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"not numasim results of schema {SCHEMA} (schema: {str((data or {}).get('schema'))[:40]!r})"
                             if isinstance(data, dict) else "not numasim results (a JSON object)")
        _check_document(data)
        pod_fields = {f.name for f in fields(PodMetrics)}
        run_fields = {f.name for f in fields(Metrics)}
        runs = []
        sla = {}
        for d in data["runs"]:
            pods = [PodMetrics(**{k: v for k, v in p.items() if k in pod_fields}) for p in d["pods"]]
            kw = {k: v for k, v in d.items() if k in run_fields}
            kw.update(pods=pods, window_s=tuple(d["window_s"]),
                      events=[(e["time_s"], e["kind"], e["text"]) for e in d.get("events", [])])
            runs.append(Metrics(**kw))
            if d.get("sla") is not None:
                sla[d["label"]] = d["sla"]
        return cls(scenario=data["scenario"], baseline=data["baseline"], runs=runs, sla=sla)

    def to_json(self) -> dict[str, Any]:
        """The results as JSON-ready data (schema ``numasim.result/1``)."""
        runs = []
        for r in self.runs:
            d = asdict(r)
            d["relative_throughput"] = self.relative(r.label)
            d["spread"] = self.spread(r.label)
            d.update(self.ci(r.label))
            d["sla"] = self.sla.get(r.label)
            d["window_s"] = list(r.window_s)
            d["events"] = [{"time_s": t, "kind": k, "text": x} for t, k, x in r.events]
            runs.append(d)
        return {"schema": SCHEMA, "scenario": self.scenario, "baseline": self.baseline, "runs": runs,
                "warnings": self.warnings()}

    def to_frame(self):
        """One row per policy variant (pandas DataFrame)."""
        import pandas as pd

        rows = []
        for r in self.runs:
            rows.append({
                "label": r.label,
                "policy": r.policy,
                "throughput": r.throughput,
                "relative_throughput": self.relative(r.label),
                "locality": r.locality,
                **self.spread(r.label),
                **self.ci(r.label),
                "p99_ms": (r.latency or {}).get("p99_ms"),
                "critical_rate": (self.sla.get(r.label) or {}).get("critical"),
                "cpu_utilisation": r.cpu_utilisation,
                "memory_gbps": r.memory_gbps,
                "runqueue_wait": r.runqueue_wait,
                "migrations": r.migrations,
                "cross_node_migrations": r.cross_node_migrations,
                "pages_migrated_bytes": r.pages_migrated_bytes,
                "pages_promoted_bytes": r.pages_promoted_bytes,
                "pages_demoted_bytes": r.pages_demoted_bytes,
                "hinting_faults": r.hinting_faults,
                "numa_task_moves": r.numa_task_moves,
                "kernel_cpu_seconds": r.kernel_cpu_seconds,
                "throttled_seconds": r.throttled_seconds,
                "rejected": sum(p.status == "rejected" for p in r.pods),
            })
        return pd.DataFrame(rows)

    def pods_frame(self):
        """One row per policy variant and pod (pandas DataFrame)."""
        import pandas as pd

        rows = []
        for r in self.runs:
            for p in r.pods:
                row = asdict(p)
                row.pop("memory_per_node_bytes")
                row.pop("placement")
                rows.append({"label": r.label, "policy": r.policy, **row})
        return pd.DataFrame(rows)

    def timeseries_frame(self):
        """Throughput and locality per sample interval, all variants (pandas DataFrame)."""
        import pandas as pd

        frames = []
        for r in self.runs:
            df = pd.DataFrame(r.timeseries)
            df.insert(0, "label", r.label)
            frames.append(df)
        return pd.concat(frames, ignore_index=True)


def _read_json(path) -> Any:
    """The JSON document in the file ``path``: at most MAX_BYTES of a regular file or a pipe (like a scenario file).

    Raises ValueError with a message that says what is wrong.
    """
    import json

    from ..errors import ScenarioError
    from ..model.yamlfile import read_text

    try:
        text = read_text(path, "a JSON file", MAX_BYTES)
    except ScenarioError as exc:
        raise ValueError("; ".join(p.message for p in exc.problems)) from None
    if not text.strip():
        raise ValueError("is empty; expected the results numasim run --json writes")
    # Parsed, a value takes 8-30 times its text (a float 32 bytes for "1e0,", an empty object 64
    # for "{},"): bound them before parsing, far above what a run writes in MAX_BYTES.
    if text.count("{") + text.count("[") > MAX_CONTAINERS:
        raise ValueError(f"holds more than {MAX_CONTAINERS:,} JSON objects and lists; numasim's results hold "
                         "a few per run and pod")
    if text.count(",") > MAX_VALUES:
        raise ValueError(f"holds more than {MAX_VALUES:,} values; numasim's results hold fewer")

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a number numasim writes (its results are plain JSON)")

    try:
        return json.loads(text, parse_constant=no_constant)
    except RecursionError:
        raise ValueError("nested too deeply to be numasim results") from None
    except ValueError as exc:
        raise ValueError(f"malformed JSON: {exc}") from None


# What from_json needs of a document, and what the methods of RunResult and compare() read.
_NUMBER = "a number"
_NUMBER_OR_NULL = "a number or null"
_FIGURE = "a number from 0 to 1e18"
_FIGURE_OR_NULL = "a number from 0 to 1e18, or null"
_RUN_NUMBERS = ("throughput", "cpu_utilisation", "memory_gbps", "migrations", "cross_node_migrations",
                "pages_migrated_bytes", "hinting_faults", "numa_task_moves", "kernel_cpu_seconds",
                "throttled_seconds", "sim_events", "rate_solves")
_RUN_OPTIONAL_NUMBERS = ("pages_promoted_bytes", "pages_demoted_bytes")
_RUN_NUMBERS_OR_NULL = ("locality", "runqueue_wait")
_POD_NAMES = ("name", "group")  # shown in tables and messages: printable
_LABEL = "a label (printable text of 1-80 characters)"
_POD_NAME = "a pod name (printable text of 1-300 characters)"
_POD_TEXTS = ("status", "reason")  # a policy's words, JSON-escaped when written
_POD_NUMBERS = ("throughput", "cpu_seconds", "migrations", "cross_node_migrations", "pages_migrated_bytes",
                "throttled_seconds")
_POD_NUMBERS_OR_NULL = ("locality", "runqueue_wait")


class _Shape(ValueError):
    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")


def _is_number(v: Any) -> bool:
    """A finite int or float (not true/false, NaN, an infinity or an int past a float's range)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _is_text(v: Any) -> bool:
    """A string of printable characters, as a scenario's names and labels are (nothing a terminal acts on)."""
    return isinstance(v, str) and not any(unicodedata.category(ch) in ("Cc", "Cf", "Cs") and ch not in "\n\t" for ch in v)


MAX_FIGURE = 1e18  # above any figure a run reports (bytes, events, ops/s), below where sums overflow


def _is_figure(v: Any) -> bool:
    """A figure numasim reports: a number from 0 to MAX_FIGURE (throughputs, counts, bytes, shares)."""
    return _is_number(v) and 0 <= v <= MAX_FIGURE


_KINDS = {
    "an object": lambda v: isinstance(v, dict),
    "an object or null": lambda v: v is None or isinstance(v, dict),
    "a list": lambda v: isinstance(v, list),
    "a string": lambda v: isinstance(v, str),
    "printable text": _is_text,
    # As a scenario's variant labels and pod names are bounded: a table lays out every line of a cell.
    _LABEL: lambda v: _is_text(v) and 1 <= len(v) <= 80,
    _POD_NAME: lambda v: _is_text(v) and 1 <= len(v) <= 300,
    _NUMBER: _is_number,
    _NUMBER_OR_NULL: lambda v: v is None or _is_number(v),
    _FIGURE: _is_figure,
    _FIGURE_OR_NULL: lambda v: v is None or _is_figure(v),
}


def _need(obj: dict, key: str, path: str, what: str, optional: bool = False) -> Any:
    """``obj[key]`` when it is ``what`` (one of the kinds below), else a _Shape error naming ``path.key``."""
    where = f"{path}.{key}" if path else key
    if key not in obj:
        if optional:
            return None
        raise _Shape(where, f"missing (expected {what})")
    v = obj[key]
    if not _KINDS[what](v):
        got = f"{v:g}" if _is_number(v) and what in (_FIGURE, _FIGURE_OR_NULL) else _kind(v)
        if what in (_LABEL, _POD_NAME) and _is_text(v):  # printable, so its length is what is wrong
            got = f"{len(v):,} characters"
        raise _Shape(where, f"expected {what}, got {got}")
    return v


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true/false"
    if isinstance(v, str) and not _is_text(v):
        return "a string with control characters"
    if isinstance(v, (int, float)) and not _is_number(v):
        return "a number past a float's range" if isinstance(v, int) else f"{v}"
    return {dict: "an object", list: "a list", str: "a string"}.get(type(v), "a number")


def _numbers(values: Any, path: str, null: bool = False) -> None:
    for i, v in enumerate(values):
        if not (_is_number(v) or (null and v is None)):
            raise _Shape(f"{path}[{i}]", f"expected {_NUMBER_OR_NULL if null else _NUMBER}, got {_kind(v)}")


def _check_document(data: dict[str, Any]) -> None:
    """Refuse a results document whose shape is not the one to_json writes (a _Shape error names the field)."""
    scenario = _need(data, "scenario", "", "an object")
    _need(scenario, "provenance", "scenario", "an object or null", optional=True)
    baseline = _need(data, "baseline", "", _LABEL)
    runs = _need(data, "runs", "", "a list")
    if not runs:
        raise _Shape("runs", "expected at least one run")
    if len(runs) > MAX_VARIANTS:
        raise _Shape("runs", f"expected at most {MAX_VARIANTS} runs (a scenario's policy variants), got {len(runs):,}")
    labels: dict[str, int] = {}
    for i, run in enumerate(runs):
        path = f"runs[{i}]"
        if not isinstance(run, dict):
            raise _Shape(path, f"expected an object, got {_kind(run)}")
        label = _need(run, "label", path, _LABEL)
        if label in labels:
            raise _Shape(f"{path}.label", f"{label[:80]!r} is also the label of runs[{labels[label]}]; "
                                          "each run has its own label")
        labels[label] = i
        _need(run, "policy", path, "printable text")
        for key in _RUN_NUMBERS:
            _need(run, key, path, _FIGURE)
        for key in _RUN_OPTIONAL_NUMBERS:
            _need(run, key, path, _FIGURE, optional=True)
        for key in _RUN_NUMBERS_OR_NULL:
            _need(run, key, path, _FIGURE_OR_NULL)
        _check_latency(run, path)
        _need(run, "sla", path, "an object or null", optional=True)
        window = _need(run, "window_s", path, "a list")
        if len(window) != 2:
            raise _Shape(f"{path}.window_s", f"expected [start, end], got {len(window)} values")
        _numbers(window, f"{path}.window_s")
        for j, event in enumerate(_need(run, "events", path, "a list", optional=True) or []):
            where = f"{path}.events[{j}]"
            if not isinstance(event, dict):
                raise _Shape(where, f"expected an object, got {_kind(event)}")
            _need(event, "time_s", where, _NUMBER)
            _need(event, "kind", where, "a string")
            _need(event, "text", where, "a string")
        series = _need(run, "timeseries", path, "an object")
        if "label" in series:  # the tables add each run's label as a column of that name
            raise _Shape(f"{path}.timeseries.label", "is not a series numasim writes (a table of the series "
                                                     "adds the run's label under that name)")
        for key, values in series.items():
            if not isinstance(values, list):
                raise _Shape(f"{path}.timeseries.{key[:80]!r}", f"expected a list, got {_kind(values)}")
        for key in ("time_s", "throughput"):
            _numbers(series.get(key) or [], f"{path}.timeseries.{key}", null=True)
        n_samples = len(series.get("time_s") or [])
        for key, values in series.items():  # one value a sample in every series (a table's columns)
            if len(values) != n_samples:
                raise _Shape(f"{path}.timeseries.{key[:80]}", f"has {len(values):,} values for {n_samples:,} "
                                                              "samples (time_s): every series has one a sample")
        seeds = _need(run, "seeds", path, "a list", optional=True) or []
        for j, seed in enumerate(seeds):
            if not isinstance(seed, int) or isinstance(seed, bool):
                raise _Shape(f"{path}.seeds[{j}]", f"expected an integer, got {_kind(seed)}")
        reps = _need(run, "replicates", path, "a list", optional=True) or []
        if len(reps) > MAX_REPLICATIONS or len(seeds) > MAX_REPLICATIONS:
            raise _Shape(f"{path}.replicates", f"expected at most {MAX_REPLICATIONS} replicates (seeds), got "
                                               f"{max(len(reps), len(seeds)):,}")
        for j, rep in enumerate(reps):
            where = f"{path}.replicates[{j}]"
            if not isinstance(rep, dict):
                raise _Shape(where, f"expected an object, got {_kind(rep)}")
            seed = rep.get("seed")
            if not isinstance(seed, int) or isinstance(seed, bool):
                raise _Shape(f"{where}.seed", f"expected an integer, got {_kind(seed) if 'seed' in rep else 'nothing'}")
            _need(rep, "throughput", where, _FIGURE)
            for key in REPLICATED:
                _need(rep, key, where, _FIGURE_OR_NULL, optional=True)
        links = _need(run, "links", path, "a list", optional=True) or []
        for j, link in enumerate(links):
            if not isinstance(link, str):
                raise _Shape(f"{path}.links[{j}]", f"expected a string, got {_kind(link)}")
        for j, pod in enumerate(_need(run, "pods", path, "a list")):
            where = f"{path}.pods[{j}]"
            if not isinstance(pod, dict):
                raise _Shape(where, f"expected an object, got {_kind(pod)}")
            for key in _POD_NAMES:
                _need(pod, key, where, _POD_NAME)
            for key in _POD_TEXTS:
                _need(pod, key, where, "a string")
            for key in _POD_NUMBERS:
                _need(pod, key, where, _FIGURE)
            for key in _POD_NUMBERS_OR_NULL:
                _need(pod, key, where, _FIGURE_OR_NULL)
            _need(pod, "throughput_ci", where, _NUMBER_OR_NULL, optional=True)
            _check_latency(pod, where)
            _numbers(_need(pod, "memory_per_node_bytes", where, "a list"), f"{where}.memory_per_node_bytes")
            _need(pod, "placement", where, "an object", optional=True)
    if baseline not in labels:
        raise _Shape("baseline", f"{baseline[:80]!r} names no run; labels: {', '.join(labels)[:200]}")


def _check_latency(obj: dict, path: str) -> None:
    latency = _need(obj, "latency", path, "an object or null")
    for key, v in (latency or {}).items():
        if not (v is None or _is_number(v)):
            raise _Shape(f"{path}.latency.{key[:80]!r}", f"expected {_NUMBER_OR_NULL}, got {_kind(v)}")
