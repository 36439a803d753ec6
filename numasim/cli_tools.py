"""The command line's tool subcommands: ``machine import``, ``k8s import``, ``sweep``, ``calibrate``,
``compare``, ``validation`` and ``machines NAME`` / ``workloads NAME`` / ``policies NAME``; and ``--machine`` (a preset or
a machine file) for ``run``.

Part of the command line (:mod:`numasim.cli` parses the arguments, dispatches and prints errors).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text as RichText

from .atomic import check_target, write_all
from .errors import NumasimError, Problem, ScenarioError, inert, safe_str
from .model.presets import preset_names
from .model.yamlfile import MAX_BYTES, read_yaml_text


def _machine_arg(value: str | None):
    """--machine: a preset name as is, or the data of a machine file."""
    if value is None or value in preset_names("machines"):
        return value
    from .model.yamlfile import read_yaml

    if not os.path.exists(value):
        raise ScenarioError(Problem("--machine", f"{value!r} is neither a machine preset ({', '.join(preset_names('machines'))}) "
                                                 "nor a file"))
    data = read_yaml(Path(value))
    if not isinstance(data, dict):
        raise ScenarioError(Problem("", "the machine file is empty" if data is None else
                                    f"a machine file is a mapping of machine fields (or preset: NAME and the fields "
                                    f"it changes), got {type(data).__name__}"), source=value)
    # Its problems are the file's, at paths inside it (not the scenario's machine: section).
    from .model.scenario import _resolve_machine

    problems: list[Problem] = []
    _resolve_machine(data, problems)
    if problems:
        raise ScenarioError([Problem(p.path.removeprefix("machine.").removeprefix("machine"), p.message)
                             for p in problems], source=value)
    return data


def _cmd_machine(args, out: Console, err: Console) -> int:
    from .importers.machine import import_machine, to_yaml

    target = check_target(args.output, f"-o {args.output}", tuple(args.files), folders=True)
    spec, warnings = import_machine(args.files, args.name)
    header = ("# Written by `numasim machine import " + " ".join(Path(f).name for f in args.files) + "`.\n"
              "# Every value says where it came from under sources:; values marked guessed come from a preset.\n")
    write_all([(target, to_yaml(spec, header), f"-o {args.output}")])
    for w in warnings:
        err.print(f"warning: {w}", markup=False, highlight=False, soft_wrap=True)
    out.print(f"wrote {args.output}: {spec['sockets']} sockets, {spec['sockets'] * spec['nodes_per_socket']} nodes, "
              f"{spec['cores_per_node']} cores per node{', SMT' if spec['smt'] else ''}; "
              f"{sum(1 for v in spec['sources'].values() if v.startswith('guessed'))} values guessed",
              markup=False, highlight=False)
    return 0


def _cmd_k8s(args, out: Console, err: Console) -> int:
    from .importers.k8s import import_k8s
    from .importers.machine import to_yaml
    from .model.scenario import from_dict

    inputs = tuple(x for x in (args.pods, args.kubelet_config, args.machine) if x)
    target = check_target(args.output, f"-o {args.output}", inputs)
    machine = _machine_arg(args.machine)
    exclude = tuple(args.exclude_namespace) if args.exclude_namespace else ("kube-system",)
    scenario, warnings = import_k8s(args.pods, args.kubelet_config, machine, args.node, args.profile, exclude)
    header = (f"# Written by `numasim k8s import {Path(args.pods).name}"
              + (f" --kubelet-config {Path(args.kubelet_config).name}" if args.kubelet_config else "") + "`.\n"
              "# Guessed (Kubernetes does not know them): each pod's busy threads (its CPU limit, else request,\n"
              "# rounded up), the memory it touches (its memory limit, else request) and its workload profile.\n")
    text = to_yaml(scenario, header)
    size = len(text.encode())
    if size > MAX_BYTES:  # numasim would refuse to read it
        raise ScenarioError(Problem("", f"the imported scenario would be {size:,} bytes ({len(scenario['pods']):,} "
                                        f"pod groups), over the {MAX_BYTES:,} bytes numasim reads: import fewer "
                                        "pods (--node, --exclude-namespace)"), source=args.pods)
    try:  # and within the values numasim reads back
        read_yaml_text(text, source=str(target))
    except ScenarioError as exc:
        raise ScenarioError(Problem("", f"the imported scenario ({len(scenario['pods']):,} pod groups) would be "
                                        f"refused when read back ({exc.problems[0].message}): import fewer pods "
                                        "(--node, --exclude-namespace)"), source=args.pods) from None
    from_dict(scenario, source=f"the scenario imported from {args.pods}")  # refuse to write what would not run
    write_all([(target, text, f"-o {args.output}")])
    for w in warnings:
        err.print(f"warning: {w}", markup=False, highlight=False, soft_wrap=True)
    n = sum(p["replicas"] for p in scenario["pods"])
    out.print(f"wrote {args.output}: {n} pods in {len(scenario['pods'])} groups on node {scenario['name']}",
              markup=False, highlight=False)
    return 0


def _span(item: str, flag: str) -> tuple[str, tuple[float, float]]:
    """``PATH=LO..HI`` of --range and --fit, as (path, (lo, hi))."""
    path, sep, span = item.partition("=")
    lo, dots, hi = span.partition("..")
    try:
        if not sep or not dots or not path.strip() or hi.startswith("."):  # (10...40: not 10.0..0.4)
            raise ValueError
        return path.strip(), (float(lo), float(hi))
    except ValueError:
        raise ScenarioError(Problem(flag, f"{item[:80]!r} must be PATH=LO..HI with numbers")) from None


def _spans(items: list[str], flag: str) -> dict[str, tuple[float, float]]:
    """Every ``PATH=LO..HI`` of a repeated --range or --fit, by path; a path given twice is refused."""
    spans: dict[str, tuple[float, float]] = {}
    for item in items:
        path, span = _span(item, flag)
        if path in spans:
            raise ScenarioError(Problem(f"{flag} {path[:80]}", "given twice; give each path one LO..HI"))
        spans[path] = span
    return spans


def _budget_limits(args) -> tuple[float, float]:
    """``--max-work`` in CPU seconds and ``--max-memory`` in bytes, each a positive finite number."""
    for flag, value in (("--max-work", args.max_work), ("--max-memory", args.max_memory)):
        if not value > 0 or value == float("inf"):
            raise ScenarioError(Problem(flag, f"must be a positive number, got {value:g}"))
    return args.max_work, args.max_memory * 2**30


def _cmd_sweep(args, out: Console, err: Console) -> int:
    from .model.yamlfile import read_yaml_text
    from .sweep import sweep

    grid: dict[str, list] = {}
    for item in args.grid:
        path, sep, values = item.partition("=")
        if not sep or not path.strip() or not values.strip():
            raise ScenarioError(Problem("--grid", f"{item[:80]!r} must be PATH=V1,V2,..."))
        if path.strip() in grid:
            raise ScenarioError(Problem(f"--grid {path.strip()[:80]}", "given twice; list all its values in one "
                                                                      "--grid PATH=V1,V2,..."))
        if any(not v.strip() for v in values.split(",")):
            raise ScenarioError(Problem(f"--grid {path.strip()[:80]}", "has an empty value (two commas in a row, or "
                                                                      "one at an end); write null for no value"))
        grid[path.strip()] = [read_yaml_text(v, "--grid") for v in values.split(",")]
    ranges = _spans(args.range, "--range")
    max_work, max_memory = _budget_limits(args)
    frame = sweep(args.scenario, grid or None, args.sample, ranges or None, policies=args.policy, sets=args.set,
                  out=args.out, scheduler=args.scheduler, workers=args.workers, seed=args.seed,
                  sample_seed=args.sample_seed, quiet=args.quiet, max_work_s=max_work, max_memory_bytes=max_memory)
    points = frame["point"].nunique() if len(frame) else 0
    out.print(f"wrote {args.out}: {points} points, {len(frame)} rows", markup=False, highlight=False)
    return 0


def _cmd_calibrate(args, out: Console, err: Console) -> int:
    from .calibrate import calibrate

    fit = _spans(args.fit, "--fit")
    targets, origins = _measured_csv(args.measured) if args.measured else ([], [])
    for item in args.target:
        head, sep, value = item.partition("=")
        label, colon, metric = head.rpartition(":")
        try:
            if not sep or not colon or not label:
                raise ValueError
            targets.append((label, metric, float(value)))
            origins.append((None, f"--target {label[:80]}:{metric[:80]}"))
        except ValueError:
            raise ScenarioError(Problem("--target", f"{item[:80]!r} must be LABEL:METRIC=VALUE, "
                                                    "e.g. numactl:relative_throughput=1.17")) from None
    from .calibrate import MAX_EVALUATIONS

    if not 1 <= args.max_evaluations <= MAX_EVALUATIONS:
        raise ScenarioError(Problem("--max-evaluations", f"must be 1-{MAX_EVALUATIONS}"))
    max_work, max_memory = _budget_limits(args)
    target_file = None
    if args.json is not None:  # inputs are never outputs: the scenario, the measurements, its policy files
        from .model.scenario import load
        from .policies.registry import plugin_files

        plugins = plugin_files(v.policy for v in load(args.scenario, args.set).variants)
        inputs = (args.scenario,) + ((args.measured,) if args.measured else ()) + tuple(plugins)
        target_file = check_target(args.json, f"--json {args.json}", inputs)
    res = calibrate(args.scenario, fit, targets, sets=args.set, replications=args.replications,
                    workers=args.workers, max_evaluations=args.max_evaluations, leave_one_out=args.leave_one_out,
                    origins=origins, max_work_s=max_work, max_memory_bytes=max_memory,
                    on_evaluation=lambda values, e: err.print(
                        "run: " + ", ".join(f"{k}={v:.6g}" for k, v in values.items()) + f": error {e:.3g}",
                        markup=False, highlight=False))
    table = Table(title=f"calibration: {res.evaluations} runs")
    for col in ("target", "measured", "predicted", "error %"):
        table.add_column(col)
    for t in res.targets:
        table.add_row(RichText(f"{t['label']}:{t['metric']}"), f"{t['measured']:.4g}", f"{t['predicted']:.4g}", f"{t['error_pct']:+.1f}")
    out.print(table)
    for path, value in res.fitted.items():
        ci = res.ci.get(path)
        out.print(f"fitted {path} = {value:.6g}" + (f" ± {ci:.3g} (95 %)" if ci is not None else
                                                    f" (no interval: {res.ci_note})"),
                  markup=False, highlight=False)
    if res.error_before_pct is not None:
        out.print(f"RMS error of the targets: {res.error_before_pct:.1f} % before, {res.error_after_pct:.1f} % after",
                  markup=False, highlight=False)
    for row in res.leave_one_out:
        out.print(f"left out {row['left_out']}: predicted {row['predicted']:.4g} against {row['measured']:.4g} "
                  f"({row['error_pct']:+.1f} %)", markup=False, highlight=False)
    out.print("use with: " + " ".join(f"--set {o}" for o in res.overrides()), markup=False, highlight=False)
    if target_file is not None:
        doc = {**res.to_json(), "scenario": args.scenario, "sets": list(args.set),
               "note": "fitted on these targets: judge the model on other figures, not on these"}
        write_all([(target_file, json.dumps(doc, indent=2) + "\n", f"--json {args.json}")])
    return 0


def _measured_csv(path: str) -> tuple[list[tuple[str, str, float]], list[tuple[str | None, str]]]:
    """label,metric,value rows of a measurements file, and where each is (the file, its line) for errors."""
    import csv

    from .model.yamlfile import read_text

    text = read_text(path, "a CSV file", encoding="utf-8-sig")  # -sig: Excel's "CSV UTF-8" byte order mark
    try:
        rows = list(csv.reader(text.splitlines()))
    except csv.Error as exc:  # a field over the csv module's limit (128 KiB), a NUL
        raise ScenarioError(Problem("", f"not a readable CSV file ({exc})"), source=path) from None
    if not rows or [c.strip() for c in rows[0]] != ["label", "metric", "value"]:
        raise ScenarioError(Problem("line 1", "the header must be label,metric,value"), source=path)
    out = []
    origins: list[tuple[str | None, str]] = []
    for n, row in enumerate(rows[1:], start=2):
        if not row or not "".join(row).strip():
            continue
        try:
            label, metric, value = (c.strip() for c in row)
            out.append((label, metric, float(value)))
            origins.append((path, f"line {n}"))
        except ValueError:
            raise ScenarioError(Problem(f"line {n}", "expected label,metric,value with a number as value"),
                                source=path) from None
    return out, origins


def _cmd_compare(args, out: Console, err: Console) -> int:
    import numasim
    from .analysis.compare import compare

    a, b = numasim.load_result(args.a), numasim.load_result(args.b)
    pa, pb = a.scenario.get("provenance") or {}, b.scenario.get("provenance") or {}
    for key, what in (("scenario_hash", "scenarios"), ("numasim_version", "numasim versions")):
        if pa.get(key) != pb.get(key):
            shown = [repr(str(v)[:80]) if v is not None else "not recorded" for v in (pa.get(key), pb.get(key))]
            err.print(f"note: different {what}: {shown[0]} and {shown[1]}", markup=False, highlight=False)
    rows = compare(a, b)
    if not rows:
        raise NumasimError(f"{args.a} and {args.b} have no variant label in common")
    table = Table(title=RichText(inert(f"{Path(args.a).name} (A) against {Path(args.b).name} (B)")))
    for col in ("variant", "figure", "A", "B", "change", "p", "significant"):
        table.add_column(col)
    for r in rows:
        table.add_row(RichText(r["label"]), r["figure"], f"{r['a']:.4g}", f"{r['b']:.4g}",
                      "" if r["change_pct"] is None else f"{r['change_pct']:+.1f}%",
                      "" if r["p_value"] is None else f"{r['p_value']:.3f}",
                      r["why"] if r["significant"] is None else ("yes" if r["significant"] else "no"))
    out.print(table)
    return 0


def _cmd_validation(args, out: Console, err: Console) -> int:
    from . import validation

    cases = validation.load_cases(args.only, args.case)
    if args.list and args.json is not None:
        raise ScenarioError(Problem("--json", "--list prints the cases; --json writes a run's results: give one"))
    if args.list:
        table = Table(title="validation cases")
        for col in ("id", "mechanism", "machine", "published", "band %", "title"):
            table.add_column(col)
        for c in cases:
            table.add_row(c.id, c.mechanism, RichText(inert(c.machine_family)), f"{c.published:.3f}",
                          f"{c.band_pct:g}", RichText(inert(c.title)))  # a case of the user's: no markup
        out.print(table)
        return 0
    if args.json is not None:  # inputs are never outputs: the case files and their policy files
        check_target(args.json, f"--json {args.json}",
                     inputs=tuple(args.case) + tuple(f for c in cases for f in c.plugin_files()))
    max_work, max_memory = _budget_limits(args)
    done = []
    results = validation.run_suite(workers=args.workers, cases=cases, max_work_s=max_work, max_memory_bytes=max_memory,
                                   on_done=lambda cid: done.append(cid) or err.print(
                                       f"finished {cid} ({len(done)}/{len(cases)})", highlight=False))
    table = Table(title="numasim validation: published versus predicted")
    for col, just in (("case", "left"), ("mechanism", "left"), ("published", "right"), ("predicted", "right"),
                      ("error %", "right"), ("band %", "right"), ("within", "center"), ("direction", "center")):
        table.add_column(col, justify=just)
    for r in results:
        table.add_row(r.id, r.mechanism, f"{r.published:.3f}", f"{r.predicted:.3f}", f"{r.error_pct:+.1f}",
                      f"{r.band_pct:g}", "yes" if r.within else "NO", "ok" if r.direction_ok else "WRONG")
    out.print(table)
    data = validation.suite_json(results)
    out.print(f"MAPE {data['mape_pct']:.1f} % over {len(results)} cases; {sum(r.within for r in results)} within "
              f"their band; {sum(r.direction_ok for r in results)} in the right direction", highlight=False)
    if args.json is not None:
        write_all([(args.json, json.dumps(data, indent=2, allow_nan=False), f"--json {args.json}")])
    return 0 if all(r.within for r in results) else 1


# What kind of figure a preset's value is, read from its source's own words: the presets open a
# source with its kind ("assumed, not measured", "configuration: ...") or write it in capitals
# ("as java-transactions, CALIBRATED on ...", "EXPECTATION, not a measurement").
SOURCE_KINDS = ("measured", "calibrated", "derived", "expectation", "stand-in", "proxy", "assumed", "configuration")
_CAPITAL_KIND = re.compile(r"(?<![A-Za-z-])(NOT\s+)?(" + "|".join(k.upper() for k in SOURCE_KINDS) + r")(?![A-Za-z-])")


def source_kind(source: str) -> str:
    """``measured``, ``calibrated``, ... as the source says (its first word, or the first kind it writes in
    capitals that is not negated: "NOT MEASURED" is not measured); ``cited`` when it only gives where the
    figure comes from (a URL, or a pointer to one given for another value); else ``-``."""
    first = re.match(r"[\s'\"(]*([A-Za-z-]+)", source)
    if first and first.group(1).lower() in SOURCE_KINDS:
        return first.group(1).lower()
    for m in _CAPITAL_KIND.finditer(source):
        if not m.group(1):
            return m.group(2).lower()
    text = source.lower()
    return "cited" if "http" in text or "url as" in text else "-"


def _cmd_preset(kind: str, name: str, out: Console) -> int:
    """``numasim machines NAME`` / ``workloads NAME``: each value of the preset, its kind and its source."""
    from collections import Counter

    from .model.presets import load_preset

    data = load_preset(kind, name)
    sources = data.pop("sources", {}) or {}
    data.pop("name", None)
    description = data.pop("description", "")
    table = Table(title=f"{kind[:-1]} preset {name}: {description}", show_lines=True)
    for col, ratio in (("field", 3), ("value", 3), ("kind", 2), ("source", 12)):
        table.add_column(col, ratio=ratio, overflow="fold")
    kinds: Counter[str] = Counter()
    for key, value in data.items():
        shown = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        source = str(sources.get(key, "(no source)"))
        k = source_kind(source) if key in sources else "no source"
        kinds[k] += 1
        table.add_row(key, RichText(shown), k, RichText(" ".join(source.split())))
    for key in sources.keys() - data.keys():  # why a field is left at its default ("no measurement found")
        table.add_row(key, "(not set: the default)", source_kind(str(sources[key])),
                      RichText(" ".join(str(sources[key]).split())))
    out.print(table)
    out.print(f"{len(data)} values: " + ", ".join(f"{n} {k}" for k, n in kinds.most_common()), highlight=False)
    return 0


def _cmd_policy(name: str, out: Console) -> int:
    """``numasim policies NAME``: each option, its default, what it is and, for a built-in policy's
    documented default, its kind and source (presets/policies)."""
    from .model.presets import load_preset, preset_names
    from .policies.cfs import CFS
    from .policies.registry import available_policies, get_policy, listed_names

    policies = available_policies()
    if name not in policies and ":" not in name:
        raise ScenarioError(Problem("", f"unknown policy {name!r}; known: {', '.join(listed_names(policies))} (or a "
                                        "plug-in, FILE.py:CLASS)"))
    cls = policies.get(name) or get_policy(name)
    preset = name if name in preset_names("policies") else "cfs" if issubclass(cls, CFS) else None
    sources = (load_preset("policies", preset).get("sources") or {}) if preset else {}
    # A plug-in's words: no markup, and no character a terminal would act on.
    table = Table(title=RichText(inert(f"policy {name}: {safe_str(cls.description, 2000)}")), show_lines=True)
    for col, ratio in (("option", 3), ("default", 2), ("kind", 2), ("what it is", 6), ("source", 8)):
        table.add_column(col, ratio=ratio, overflow="fold")
    for key, field in cls.Options.model_fields.items():
        try:
            default = field.get_default(call_default_factory=True)
        except Exception as exc:  # a plug-in's default factory
            default = f"(its default factory raised {type(exc).__name__})"
        shown = json.dumps(default, default=str) if isinstance(default, (list, dict)) else safe_str(default, 200)
        source = sources.get(key)
        table.add_row(RichText(inert(key)), RichText(inert(shown if len(shown) <= 60 else shown[:57] + "...")),
                      source_kind(str(source)) if source else "-", RichText(inert(safe_str(field.description or "", 2000))),
                      RichText(" ".join(str(source).split()) if source else ""))
    out.print(table)
    return 0
