"""Sweeps: one scenario over a grid, and a sample of ranges, of field values, on dask.distributed.

A point is one assignment of values to scenario paths (``pods.0.replicas``,
``machine.interconnect_gbps``), applied like ``--set``. Points come from a grid
(every combination of the listed values) times a Latin-hypercube sample of numeric
ranges (``sample`` points, scipy's ``qmc.LatinHypercube`` with the sweep's seed).
Every point is validated before anything runs. Each point runs as one task (all its
policy variants and seeds, no SLA search) on a ``dask.distributed`` cluster: a
``LocalCluster`` of one process per CPU by default (forked on Linux, so that a worker
starts in a tenth of a second with numasim, pandas and pyarrow already imported; no
dask profiler), an existing one with ``scheduler``. Its rows are written to Parquet as it finishes, as one
file per point in ``OUT.parts/``, named by the point's key: a hash of the point's
scenario data, the seed and numasim's version. The worker that ran the point writes
the file; the client writes it when that worker cannot (a cluster whose workers do not
see ``OUT``'s directory). A sweep that is killed, or loses a worker, is resumed by
running it again: finished points are read back, not run again. At the end the rows
of every point of the sweep go to ``OUT`` in one file and the parts are removed. An
``OUT`` (or parts) holding points of another sweep, or a file that is not a sweep's
result, is refused rather than written over; when every point fails nothing is written.
A range over a whole-number field samples whole numbers. Before anything runs, the points
still to run are costed (:mod:`numasim.budget`) and refused over the budget.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .atomic import check_target
from .budget import DEFAULT_MAX_WORK_S, MAX_MEMORY_BYTES, check_budget, combine, estimate
from .errors import NumasimError, Problem, ScenarioError
from .sweep_dask import check_scheduler
from .sweep_files import check_parts
from .sweep_files import one_kind_per_column, read_done, write_result
from .sweep_files import write_part as _write_part  # a name the tests replace

__all__ = ["sweep", "sweep_points", "MAX_POINTS"]

MAX_POINTS = 100_000
MAX_SWEEP_VALUES = 10_000_000  # points x values of the base scenario: each point is a copy (100,000 of 100 values)
CHECK_NOTICE_POINTS = 1_000  # from this many points a sweep says it is checking them (seconds)


def _values_label(v: Any) -> Any:
    """A point's value as a Parquet-friendly cell: numbers and text as they are, the rest as JSON."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return json.dumps(v, sort_keys=True)


def sweep_points(grid: dict[str, list[Any]] | None, sample: int | None = None,
                 ranges: dict[str, tuple[float, float]] | None = None, seed: int = 0,
                 whole: set[str] | frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The points of a sweep: the grid's combinations times ``sample`` Latin-hypercube points over ``ranges``.

    A path in ``whole`` takes whole numbers: each from LO to HI equally likely (the
    hypercube's stratum, floored).
    """
    grid = grid or {}
    ranges = ranges or {}
    if sample is not None and not (isinstance(sample, int) and 1 <= sample <= MAX_POINTS):
        raise ScenarioError(Problem("--sample", f"must be 1-{MAX_POINTS}, got {sample!r}"))
    if not (isinstance(seed, int) and 0 <= seed <= 2**63 - 1):
        raise ScenarioError(Problem("--sample-seed", f"must be 0..2**63-1, got {seed!r}"))
    for path, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ScenarioError(Problem(f"--grid {path}", "needs at least one value"))
    if bool(sample) != bool(ranges):
        raise ScenarioError(Problem("--sample", "give --sample N together with at least one --range PATH=LO..HI"))
    both = set(grid) & set(ranges)
    if both:
        raise ScenarioError(Problem(f"--range {sorted(both)[0]}", "is also a --grid path; sweep a path one way"))
    n_grid = math.prod(len(v) for v in grid.values())
    total = n_grid * (sample or 1)
    if total > MAX_POINTS:
        raise ScenarioError(Problem("--grid", f"{total:,} points; a sweep has at most {MAX_POINTS:,}"))
    combos = [dict(zip(grid, vals)) for vals in itertools.product(*grid.values())] if grid else [{}]
    if not sample:
        return combos
    from scipy.stats import qmc

    for path, (lo, hi) in ranges.items():
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ScenarioError(Problem(f"--range {path}", f"needs finite LO < HI, got {lo}..{hi}"))
        if path in whole and math.floor(hi) < math.ceil(lo):
            raise ScenarioError(Problem(f"--range {path}", f"takes whole numbers, and there is none in {lo:g}..{hi:g}"))
    unit = qmc.LatinHypercube(d=len(ranges), seed=seed).random(sample)

    def value(path: str, lo: float, hi: float, u: float) -> int | float:
        if path not in whole:
            return float(lo + u * (hi - lo))
        first, last = math.ceil(lo), math.floor(hi)
        return min(first + math.floor(u * (last - first + 1)), last)

    samples = [{path: value(path, lo, hi, u) for (path, (lo, hi)), u in zip(ranges.items(), row)} for row in unit]
    return [{**c, **s} for c in combos for s in samples]


def _whole_paths(base: dict[str, Any], ranges: dict[str, tuple[float, float]], source: str) -> set[str]:
    """The --range paths that take whole numbers only: a value between two is refused as not an integer,
    a whole one is accepted."""
    from .model.overrides import fraction_inside
    from .model.scenario import from_dict

    whole = set()
    for path, (lo, hi) in ranges.items():
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            continue  # sweep_points says so
        try:
            from_dict(_point_data(base, {path: fraction_inside(lo, hi)}, "--range"), source=source)
        except ScenarioError as exc:
            if "integer" not in str(exc):
                continue  # refused for another reason (a bound): the points' own checks say why
            try:
                from_dict(_point_data(base, {path: round((lo + hi) / 2)}, "--range"), source=source)
            except ScenarioError:
                continue
            whole.add(path)
    return whole


def _count_values(data: Any) -> int:
    """How many values (containers and scalars) scenario data holds."""
    n, stack = 0, [data]
    while stack:
        x = stack.pop()
        n += 1
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return n


def _point_data(base: dict[str, Any], point: dict[str, Any], source: str) -> dict[str, Any]:
    from .model.overrides import set_path

    data = copy.deepcopy(base)
    data.pop("sweep", None)
    for path, value in point.items():
        set_path(data, path, value, source)
    return data


def _key(data: dict[str, Any], seed: int | None, policies: list[str] | None) -> str:
    from ._version import __version__

    text = json.dumps({"scenario": data, "seed": seed, "policies": policies, "numasim": __version__},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _run_point(data: dict[str, Any], source: str, point: dict[str, Any], key: str,
               policies: list[str] | None, seed: int | None, parts: str | None = None) -> list[dict[str, Any]]:
    """One point (in a worker): run its variants, write its part and return its rows.

    Parameters
    ----------
    data, source, point, key
        The point's scenario data, where it comes from, its values and its key.
    policies, seed
        As for :func:`sweep`.
    parts
        The sweep's ``OUT.parts`` directory, or None. The part is written there when
        this worker can (the directory exists here); otherwise the client writes it.

    Returns
    -------
    list of dict
        The point's rows, one per variant.
    """
    from .model.scenario import from_dict
    from .runner import run

    scenario = from_dict(data, source=source)
    # The sweep's budget was checked before it started.
    result = run(scenario, policies=policies, seed=seed, workers=1, with_sla=False, quiet=True,
                 max_work_s=None, max_memory_bytes=None)
    rows = result.to_frame().to_dict("records")
    prov = result.scenario["provenance"]
    for r in rows:
        r.update({"point": key, **{p: _values_label(v) for p, v in point.items()},
                  "seeds": ",".join(str(x) for x in result.run(r["label"]).seeds),
                  "numasim_version": prov["numasim_version"], "scenario_hash": prov["scenario_hash"]})
    if parts is not None and os.path.isdir(parts):
        try:
            _write_part(Path(parts), key, rows)
        except OSError:
            pass  # the client sees no part and writes it
    return rows


def _check_call(grid, ranges, sample, policies, sets, out, scheduler, workers, sample_seed):
    """sweep()'s arguments as the command line would let them through (numasim.calls): a bad one fails
    here, named, not in every point once the cluster is up."""
    import numbers

    from .calls import grid_map, path_or_none, span_map, text_list, whole
    from .runner import MAX_WORKERS

    if scheduler is not None and not isinstance(scheduler, str):
        raise ScenarioError(Problem("--scheduler", f"expected an address (text), got {repr(scheduler)[:80]}"))

    def integer(v: Any) -> Any:  # numpy integers as ints; the rest as given, for sweep_points to judge
        return int(v) if isinstance(v, numbers.Integral) and not isinstance(v, bool) else v

    return (grid_map(grid), span_map(ranges, "--range"), integer(sample),
            None if policies is None else text_list(policies, "--policy", "variant labels or policy names"),
            text_list(sets, "--set", "PATH=VALUE overrides"), path_or_none(out, "--out"),
            whole(workers, "--workers", 0, MAX_WORKERS), integer(sample_seed))


def sweep(scenario: str | os.PathLike[str] | dict[str, Any], grid: dict[str, list[Any]] | None = None,
          sample: int | None = None, ranges: dict[str, tuple[float, float]] | None = None,
          policies: list[str] | None = None, sets: list[str] | tuple[str, ...] = (),
          out: str | os.PathLike[str] | None = None, scheduler: str | None = None, workers: int = 0,
          seed: int | None = None, sample_seed: int | None = None, quiet: bool = False,
          on_point: Callable[[str, int, int, int], None] | None = None,
          max_work_s: float | None = DEFAULT_MAX_WORK_S, max_memory_bytes: float | None = MAX_MEMORY_BYTES):
    """Run a sweep and return its rows as a pandas DataFrame (one row per point and variant).

    Each swept path is a column of the values as given; a path whose values are of more than
    one kind (``warmup: [0, 100ms]``: a number and text) is a column of text, as Parquet holds
    one type a column (numbers, true/false and lists written as JSON: ``"0"``, ``"true"``).

    Parameters
    ----------
    scenario
        A scenario file or its data. Its ``sweep:`` section (grid, sample, ranges, seed)
        gives the points when ``grid``, ``sample`` and ``ranges`` are not given.
    grid, sample, ranges
        The points: every combination of ``grid``'s values, times ``sample``
        Latin-hypercube points over ``ranges`` (``{path: (lo, hi)}``).
    policies, sets, seed
        As for ``numasim run``: the variants to run, ``PATH=VALUE`` overrides applied
        to every point, and the seed.
    out
        A Parquet file: rows are kept as points finish, and a sweep run again with the
        same ``out`` resumes (finished points are not run again).
    scheduler, workers
        An existing dask.distributed scheduler's address; or the processes of a local
        cluster (0: one per CPU).
    on_point
        Called as ``on_point(key, done, failed, total)`` when a point finishes.
    max_work_s, max_memory_bytes
        Refuse, before anything runs, a sweep whose points still to run are estimated to
        take more CPU seconds in all, or one of whose simulations more memory (None: no limit).
    """
    import pandas as pd

    from .model.overrides import scenario_data
    from .model.scenario import from_dict
    from .calls import callback, check_seed, flag
    from .runner import select_variants

    grid, ranges, sample, policies, sets, out, workers, sample_seed = _check_call(
        grid, ranges, sample, policies, sets, out, scheduler, workers, sample_seed)
    seed = check_seed(seed)  # (a bad one would fail every point once the cluster is up)
    on_point, quiet = callback(on_point, "on_point"), flag(quiet, "quiet")
    source, base = scenario_data(scenario, sets, "<sweep scenario>")
    spec = from_dict(base, source=source).spec  # the base scenario itself must be valid
    if scheduler is not None and not str(scheduler).strip():
        raise NumasimError("--scheduler: the address is empty (an unset variable?); give HOST:PORT, or leave "
                           "--scheduler out for a local cluster")
    if scheduler:
        check_scheduler(scheduler)
    out_path = Path(out) if out is not None else None
    parts = None
    if out_path is not None:  # checked before any point is validated or run
        check_target(str(out_path), f"--out {out_path}", (source,) if isinstance(scenario, (str, os.PathLike)) else ())
        parts = check_parts(out_path)
    if grid is None and sample is None and ranges is None and spec.sweep is not None:
        grid, sample = spec.sweep.grid, spec.sweep.sample
        ranges = {k: tuple(v) for k, v in spec.sweep.ranges.items()}
        sample_seed = spec.sweep.seed if sample_seed is None else sample_seed
    whole = _whole_paths(base, ranges, source) if sample and ranges else set()
    points = sweep_points(grid, sample, ranges, 0 if sample_seed is None else sample_seed, whole)
    if not points or points == [{}]:
        raise ScenarioError(Problem("--grid", "no points: give --grid PATH=V1,V2 (or --sample N --range PATH=LO..HI), "
                                              "or a sweep: section in the scenario"), source=source)
    values = _count_values(base)
    if len(points) * values > MAX_SWEEP_VALUES:  # each point is the base scenario copied, checked and sent
        raise ScenarioError(Problem("--grid", f"{len(points):,} points of a scenario of {values:,} values would copy "
                                              f"{len(points) * values:,} values, more than {MAX_SWEEP_VALUES:,}: sweep "
                                              "fewer points or a smaller scenario"), source=source)
    jobs = []
    seen = set()
    for point in points:
        where = "the sweep point " + ", ".join(f"{p}={v}" for p, v in point.items())
        data = _point_data(base, point, where)
        key = _key(data, seed, policies)
        if key not in seen:  # the same scenario again (a value listed twice, whole numbers sampled twice): run it once
            seen.add(key)
            jobs.append((point, data, key, where))
    done: dict[str, Any] = {}
    if out_path is not None and parts is not None:
        done = read_done(out_path, parts, seen)
    n_todo = sum(k not in done for _, _, k, _ in jobs)
    if not quiet and len(jobs) >= CHECK_NOTICE_POINTS:  # up to a few ms a point: say why nothing shows yet
        print(f"sweep: checking and costing {len(jobs):,} points before any runs", file=sys.stderr, flush=True)
    costs = []  # each point's estimate (not its Scenario: a sweep may have 100,000 points)
    work = memory = 0.0
    for _, data, key, where in jobs:
        checked = from_dict(data, source=f"{source} at {where}")  # every point checked before anything runs
        if key in done:
            continue
        costs.append(estimate(checked, select_variants(checked, policies), None, False))
        work, memory = work + costs[-1].cpu_seconds, max(memory, costs[-1].run_memory_bytes)
        if (max_work_s is not None and work > max_work_s) or (max_memory_bytes is not None and memory > max_memory_bytes):
            break  # over already: the rest are not costed
    what = (f"this sweep's {n_todo:,} points to run are" if len(costs) == n_todo
            else f"the first {len(costs):,} of this sweep's {n_todo:,} points to run are already")
    check_budget(combine(costs), max_work_s, max_memory_bytes, source, what=what,
                 fewer="sweep fewer points, shorten duration, lower replications or pods")
    todo = [(p, d, k) for p, d, k, _ in jobs if k not in done]
    jobs = [(p, d, k) for p, d, k, _ in jobs]
    results: dict[str, Any] = {k: done[k] for _, _, k in jobs if k in done}
    failures: list[str] = []
    total = len(jobs)
    report = _Progress(total, len(results), quiet)
    if todo:
        _run_points(todo, source, policies, seed, scheduler, workers, results, failures, parts, report, on_point, total)
    report.close()
    frames = [pd.DataFrame(results[k]) if not isinstance(results[k], pd.DataFrame) else results[k]
              for _, _, k in jobs if k in results]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    frame = one_kind_per_column(frame)
    if out_path is not None and parts is not None and frames:  # nothing finished: nothing to write
        write_result(frame, out_path, f"--out {out_path}")
        if not failures and parts.is_dir():
            for f in [*parts.glob("*.parquet"), *parts.glob(".*.tmp")]:  # .tmp: a write cut short
                f.unlink()
            parts.rmdir()
    if not frames and parts is not None and parts.is_dir() and not any(parts.iterdir()):
        parts.rmdir()  # every point failed: leave nothing behind
    if failures:
        raise NumasimError(f"{len(failures)} of {total} sweep points failed (the others are "
                           f"{'in ' + str(out_path) if out_path else 'lost: give --out to keep them'}; "
                           f"run the sweep again to retry): " + "; ".join(failures[:3]))
    return frame


def _run_points(todo, source, policies, seed, scheduler, workers, results, failures, parts, report, on_point, total):
    """Run the points still to do on dask (:mod:`numasim.sweep_dask`), keeping each one's rows as it finishes."""
    from .sweep_dask import execute, local_workers

    points = {key: point for point, _, key in todo}
    where = str(parts.resolve()) if parts is not None else None

    def connected() -> None:
        if parts is not None:
            try:
                parts.mkdir(exist_ok=True)  # once connected: a sweep that cannot start leaves nothing behind
            except OSError as exc:
                raise NumasimError(f"--out: cannot make {parts} (where a sweep keeps its finished points): "
                                   f"{exc.strerror or exc}") from None

    def finished(key: str, exc: Exception | None, rows: Any) -> None:
        if exc is not None:
            failures.append(", ".join(f"{p}={v}" for p, v in points[key].items()) + f": {exc}")
        else:
            results[key] = rows
            if parts is not None and not (parts / f"{key}.parquet").exists():
                _write_part(parts, key, rows)  # the worker could not: it does not see this filesystem
        report.point(failed=exc is not None)
        if on_point is not None:
            on_point(key, len(results), len(failures), total)

    if parts is not None and not scheduler:
        import pyarrow.parquet  # noqa: F401  (before the workers fork: they write Parquet)
    calls = {key: (_run_point, (data, source, point, key, policies, seed, where)) for point, data, key in todo}
    with contextlib.nullcontext() if scheduler else local_workers():
        execute(calls, scheduler, workers, connected, finished)


class _Progress:
    """Points done, failed and the ETA: a live bar on a terminal, a line per point otherwise."""

    def __init__(self, total: int, done: int, quiet: bool):
        self.total, self.done, self.failed, self.quiet = total, done, 0, quiet
        self.t0 = time.perf_counter()
        self.start_done = done
        self.bar = None
        if not quiet and sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[failed]} failed"),
                                TimeRemainingColumn(), transient=True)
            self.task = self.bar.add_task("sweep", total=total, completed=done, failed=0)
            self.bar.start()

    def point(self, failed: bool) -> None:
        self.done += 0 if failed else 1
        self.failed += 1 if failed else 0
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done + self.failed, failed=self.failed)
            return
        ran = self.done + self.failed - self.start_done
        rate = ran / max(time.perf_counter() - self.t0, 1e-9)
        left = self.total - self.done - self.failed
        eta = f", ETA {left / rate:.0f} s" if rate > 0 and left else ""
        print(f"sweep: {self.done}/{self.total} points done, {self.failed} failed{eta}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
