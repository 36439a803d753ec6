"""Command line: ``numasim run | validate | validation | sweep | calibrate | compare | machine import | k8s import | policies | machines | workloads | schema``.

The only module that prints. A :class:`~numasim.errors.NumasimError` is shown
as one clear message and exits with status 2; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import traceback

from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import __version__
from .atomic import check_target, write_all
from .budget import DEFAULT_MAX_WORK_S, MAX_MEMORY_BYTES, estimate
from .errors import NumasimError, Problem, ScenarioError
from .policies.registry import available_policies, broken_policies
from .analysis.results import RunResult
from .runner import run
from .model.presets import load_preset, machine_preset, preset_names
from .model.scenario import load
from .cli_tools import (_budget_limits, _cmd_calibrate, _cmd_compare, _cmd_k8s, _cmd_machine, _cmd_sweep,
                        _cmd_validation, _machine_arg)

__all__ = ["main"]


def _workers(text: str) -> int:
    """``--workers``: 0 (one per CPU) up to runner.MAX_WORKERS processes."""
    from .runner import MAX_WORKERS

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text[:40]!r}") from None
    if not 0 <= n <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"must be 0 (one per CPU) to {MAX_WORKERS}, got {text[:40]}")
    return n


def _budget_flags(parser: argparse.ArgumentParser, what: str, where: str = "") -> None:
    """``--max-work`` and ``--max-memory``: the estimated cost above which ``what`` is refused before it starts."""
    parser.add_argument("--max-work", type=float, default=DEFAULT_MAX_WORK_S, metavar="SECONDS",
                        help=f"refuse {what} estimated to take more CPU seconds in all (default {DEFAULT_MAX_WORK_S:g}){where}")
    parser.add_argument("--max-memory", type=float, default=MAX_MEMORY_BYTES / 2**30, metavar="GIB",
                        help=f"refuse a simulation estimated to need more memory (default {MAX_MEMORY_BYTES / 2**30:g} GiB)")


def _import_parser(sub, name: str, about: str, **kwargs) -> argparse.ArgumentParser:
    """``numasim NAME import``: a command group ``NAME`` whose one subcommand is ``import``."""
    group = sub.add_parser(name, help=about)
    return group.add_subparsers(dest=f"{name}_command", required=True).add_parser("import", **kwargs)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="numasim", description="Simulate pods on NUMA machines under competing schedulers.")
    p.add_argument("--version", action="version", version=f"numasim {__version__}")
    p.add_argument("--debug", action="store_true", help="with an error raised inside a policy, print its traceback too")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser(
        "run", help="run a scenario and print throughput and locality per policy",
        description="Simulate every policy variant of a scenario (each over the scenario's seeds, in parallel) and "
                    "print one row per variant: throughput, throughput relative to the baseline with its 95 % "
                    "interval, locality, migrations, CPU utilisation, rejected pods, and the p99 response time and "
                    "SLA score for request-driven workloads; warning: lines say when a ranking is within the noise. "
                    "Example: numasim run scenarios/pacific.yaml --policy numactl --replications 1 --no-sla "
                    "--report pacific.html")
    r.add_argument("scenario", help="scenario YAML file")
    r.add_argument("--policy", action="append", metavar="NAME", help="run only this variant (label or policy name); repeatable; the baseline always runs")
    r.add_argument("--seed", type=int, help="random seed (default: the scenario's)")
    r.add_argument("--duration", help="simulated time, e.g. 30s (default: the scenario's)")
    r.add_argument("--warmup", help="time before the measurement window, e.g. 10s (default: the scenario's)")
    r.add_argument("--replications", type=int, metavar="N", help="seeds per variant (default: the scenario's)")
    r.add_argument("--json", metavar="FILE", help="write the results as JSON (schema numasim.result/1)")
    r.add_argument("--report", metavar="FILE", help="write an HTML report: one self-contained page of plotly figures "
                   "(summary, per pod, per-CPU timeline, memory per node, over time, request latency); works offline")
    r.add_argument("--csv", metavar="FILE", help="write one CSV row per variant and pod: the pod columns "
                   "(label, policy, name, group, status, reason, throughput, locality, cpu_seconds, ...; latency_p99_ms "
                   "and the other latency_* statistics for request-driven pods), then the variant's columns prefixed "
                   "run_ (run_throughput, run_relative_throughput, run_locality, ...)")
    r.add_argument("--trace", metavar="FILE", help="write a Chrome trace-event JSON that Perfetto (ui.perfetto.dev) and "
                   "chrome://tracing open: a track per CPU with a slice per running thread, migrations, and counters "
                   "for node bandwidth and memory (each variant's first seed, at the scenario's sample interval)")
    r.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a scenario field, e.g. machine.smt=true or pods.0.replicas=4")
    r.add_argument("--policy-file", action="append", default=[], metavar="FILE.py:CLASS",
                   help="add a variant running a policy class from a Python file (or package.module:CLASS), "
                        "labelled by its name; repeatable; no packaging needed")
    r.add_argument("--machine", metavar="FILE_OR_PRESET", help="replace the scenario's machine: a preset name or a machine file (numasim machine import writes one); --set machine.* still applies")
    r.add_argument("--workers", type=_workers, default=0, help="processes for policy variants (default: one per CPU)")
    _budget_flags(r, "a run", " (numasim validate shows the estimate)")
    r.add_argument("--quiet", action="store_true", help="no progress display")
    r.add_argument("--no-sla", action="store_true", help="skip the scenario's SLA search over injection rates (faster)")

    v = sub.add_parser(
        "validate", help="check a scenario file and report every problem",
        description="Read a scenario file without simulating it: report every problem at once, each with the "
                    "file, the path of the field, what was wrong and what is allowed (exit status 2), or print the "
                    "variants and the estimated CPU time and memory of running them. "
                    "Example: numasim validate scenarios/pacific.yaml --set pods.0.replicas=12")
    v.add_argument("scenario", help="scenario YAML file")
    v.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                   help="override a scenario field first, as run does, e.g. machine.smt=true")

    val = sub.add_parser(
        "validation", help="run the validation suite: published hardware results against numasim's predictions",
        description="Simulate every case of the validation suite (published hardware results, each a ratio between "
                    "two configurations of one machine) and print published, predicted, error and whether it is "
                    "within the case's band and on the right side of 1. Exit status 1 if any case is outside its "
                    "band. Example: numasim validation --only mlc-2to1-vs-reads-clx --json validation.json")
    val.add_argument("--only", action="append", metavar="ID", help="run only this case; repeatable")
    val.add_argument("--json", metavar="FILE", help="write the results as JSON ({cases: [...], mape_pct})")
    val.add_argument("--workers", type=_workers, default=0, help="processes (default: one per CPU)")
    val.add_argument("--list", action="store_true", help="list the cases and exit")

    imp = _import_parser(
        sub, "machine", "machine files: import one from a real machine's outputs", help="write a machine file from numactl -H, lscpu, hwloc XML, sysfs and Intel MLC outputs",
        description="Read each FILE, recognised by its content: the output of numactl -H, lscpu (plain, -p or -e), "
                    "lstopo --of xml, Intel MLC (--latency_matrix, --bandwidth_matrix, --loaded_latency, "
                    "--max_bandwidth, --c2c_latency; several in one file are fine), or a copy of /sys/devices/system "
                    "(a directory or a tarball). Write a machine file whose sources say where every value came from; "
                    "what no input gives is taken from the closest preset and marked guessed, with a warning. "
                    "Example: numactl -H > n.txt; lscpu -p > p.txt; numasim machine import n.txt p.txt -o mine.yaml; "
                    "numasim run scenarios/pacific.yaml --machine mine.yaml")
    imp.add_argument("files", nargs="+", metavar="FILE")
    imp.add_argument("-o", "--output", required=True, metavar="FILE", help="the machine file to write (YAML)")
    imp.add_argument("--name", help="the machine's name (default: the CPU model, if an input gives it)")

    kimp = _import_parser(
        sub, "k8s", "Kubernetes: import a node's pods and kubelet configuration as a scenario", help="write a scenario from kubectl get pods -o json and a kubelet configuration",
        description="Read the pods of one node from `kubectl get pods -o json` (pods of one owner with the same "
                    "resources become one group with replicas) and, with --kubelet-config, the node's "
                    "KubeletConfiguration (CPU, Topology and Memory Manager policies, reserved CPUs and memory, "
                    "CFS quota). Write a scenario that compares that kubelet configuration with the default one "
                    "on --machine. Busy threads, memory touched and the workload are guessed and said so. "
                    "Example: kubectl get pods -A -o json > pods.json; numasim k8s import pods.json "
                    "--kubelet-config /var/lib/kubelet/config.yaml --machine mine.yaml -o node.yaml")
    kimp.add_argument("pods", metavar="PODS_JSON")
    kimp.add_argument("--kubelet-config", metavar="FILE", help="the node's KubeletConfiguration YAML")
    kimp.add_argument("--machine", required=True, metavar="FILE_OR_PRESET", help="the node's machine: a preset or a machine file")
    kimp.add_argument("--node", help="the node whose pods to import (default: the one with the most pods)")
    kimp.add_argument("--profile", default="java-transactions", help="the workload every pod runs (default: java-transactions)")
    kimp.add_argument("--exclude-namespace", action="append", metavar="NS",
                      help="leave out pods of this namespace; repeatable (default: kube-system)")
    kimp.add_argument("-o", "--output", required=True, metavar="FILE", help="the scenario file to write (YAML)")

    sw = sub.add_parser(
        "sweep", help="run a scenario over a grid (and a sample) of field values on dask.distributed, into Parquet",
        description="Run the scenario at every point of a grid of field values (every combination of the --grid "
                    "values) and, with --sample N, at N Latin-hypercube points over the --range fields for each. "
                    "Points run as tasks on a dask.distributed LocalCluster (one process per CPU) or, with "
                    "--scheduler, an existing cluster. Rows (one per point and variant: a column per swept path, "
                    "label, throughput, relative_throughput, locality, ...) are kept as points finish; run the same "
                    "command again to resume a sweep that was stopped. Without --grid/--sample, the scenario's "
                    "sweep: section gives the points. Example: numasim sweep scenarios/pacific.yaml --grid "
                    "pods.0.replicas=6,8,10 --grid machine.interconnect_gbps=20,30.3 --policy numactl --out s.parquet")
    sw.add_argument("scenario")
    sw.add_argument("--grid", action="append", default=[], metavar="PATH=V1,V2,...", help="values of one field; repeatable")
    sw.add_argument("--sample", type=int, metavar="N", help="Latin-hypercube points over the --range fields")
    sw.add_argument("--range", action="append", default=[], metavar="PATH=LO..HI", help="a numeric field to sample; repeatable")
    sw.add_argument("--sample-seed", type=int, default=None, help="seed of the sample (default: the sweep section's, else 0)")
    sw.add_argument("--policy", action="append", metavar="NAME", help="run only this variant (and the baseline); repeatable")
    sw.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a field at every point")
    sw.add_argument("--seed", type=int, help="random seed of the simulations (default: the scenario's)")
    sw.add_argument("--out", required=True, metavar="FILE.parquet", help="the results; rerunning resumes from it")
    sw.add_argument("--scheduler", metavar="ADDRESS", help="an existing dask.distributed scheduler (default: a local cluster)")
    sw.add_argument("--workers", type=_workers, default=0, help="local worker processes (default: one per CPU)")
    sw.add_argument("--quiet", action="store_true", help="no progress display")
    _budget_flags(sw, "a sweep whose points still to run are")

    cal = sub.add_parser(
        "calibrate", help="fit scenario fields so that predictions match your measurements",
        description="Run the scenario with candidate values of each --fit field (applied like --set) until the "
                    "--target figures match the measured values: Brent's method for one field and one target, "
                    "bounded least squares (scipy's trust-region reflective) for several. Every run uses the same seeds. Prints the "
                    "fitted values and the targets' predicted against measured; --json writes them as JSON with the "
                    "--set overrides used. A fitted value must not be judged on the targets it was fitted to. "
                    "Example: numasim calibrate scenarios/pacific.yaml --fit "
                    "workloads.java-transactions.llc_misses_per_op=1000..8000 --target numactl:relative_throughput=1.17 "
                    "--set workloads.java-transactions.base=java-transactions")
    cal.add_argument("scenario")
    cal.add_argument("--fit", action="append", default=[], metavar="PATH=LO..HI", help="a numeric field to fit, within bounds; repeatable")
    cal.add_argument("--measured", metavar="FILE.csv", help="measured figures: a CSV with columns label,metric,value")
    cal.add_argument("--target", action="append", default=[], metavar="LABEL:METRIC=VALUE",
                     help="a measured figure on the command line: variant label, metric (relative_throughput, "
                          "throughput, locality, memory_gbps, p99_ms, cpu_utilisation) and value; repeatable")
    cal.add_argument("--leave-one-out", action="store_true",
                     help="also fit without each target in turn and predict it: the error to expect on a figure not fitted")
    cal.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a scenario field first")
    cal.add_argument("--replications", type=int, metavar="N", help="seeds per run (default: the scenario's)")
    cal.add_argument("--max-evaluations", type=int, default=40, metavar="N",
                     help="at most this many runs for the fit, its interval included (default 40); --leave-one-out "
                          "adds a fit with this bound and a check run for each target")
    cal.add_argument("--workers", type=_workers, default=0, help="processes for the variants of each run (default: one per CPU)")
    _budget_flags(cal, "a calibration whose runs (each costed as the costliest end of any --fit bound) are")
    cal.add_argument("--json", metavar="FILE", help='write {"fitted": {PATH: value}, "ci", "targets", "error_before_pct", '
                                                   '"error_after_pct", "leave_one_out", "overrides", "ci_note"}')

    cmp_ = sub.add_parser(
        "compare", help="put two results (run --json) side by side, with the significance of each difference",
        description="For every variant label in both results: throughput, relative throughput, locality and "
                    "memory traffic in A and B, the change B/A - 1, and Welch's t-test p-value over their seeds "
                    "(none with one seed). Says when the two results come from different scenarios or numasim "
                    "versions. Example: numasim compare before.json after.json")
    cmp_.add_argument("a", metavar="A.json")
    cmp_.add_argument("b", metavar="B.json")

    sub.add_parser("policies", help="list the available policies",
                   description="List the policies a scenario's variants can name: the built-in ones and those "
                               "installed by packages (entry point group numasim.policies), with what each does. "
                               "A policy class in a file needs no packaging: numasim run SCENARIO --policy-file "
                               "mine.py:MyPolicy. Example: numasim policies")
    sub.add_parser("machines", help="list the machine presets",
                   description="List the machine presets (sockets, nodes, cores, SMT, frequency, memory, latencies "
                               "and bandwidths); a scenario names one as machine: NAME or machine: {preset: NAME, "
                               "...overrides}. Example: numasim machines")
    sub.add_parser("workloads", help="list the workload presets",
                   description="List the workload presets (cycles and DRAM misses per operation, memory-level "
                               "parallelism, sharing, requests); a scenario's pod names one as profile: NAME, or "
                               "a workload under workloads: starts from one with base: NAME. Example: numasim workloads")
    sch = sub.add_parser(
        "schema", help="write the scenario file's JSON schema, for editors that check and complete YAML",
        description="Write the JSON schema (draft 2020-12) of a scenario file: every field, its type, bounds, default "
                    "and meaning, the presets by name and each built-in policy's options. Editors check and complete "
                    "a scenario file against it; with VS Code's YAML extension, put "
                    "'# yaml-language-server: $schema=scenario.schema.json' on the file's first line. "
                    "Example: numasim schema -o scenario.schema.json")
    sch.add_argument("-o", "--output", metavar="FILE", help="the file to write (default: standard output)")
    return p


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _table(result: RunResult) -> Table:
    # User text (names, labels, reasons) goes in as Text, never parsed as rich markup.
    t = Table(title=Text(f"{result.scenario['name']} on {result.scenario['machine']} "
                         f"(window {result.runs[0].window_s[0]:g}-{result.runs[0].window_s[1]:g} s, seed {result.scenario['seed']}"
                         + (f", mean ± 95 % CI of {result.scenario['replications']} seeds"
                            if result.scenario["replications"] > 1 else "")
                         + ")"))
    cols = [("policy", "left"), ("ops/s", "right"), ("relative", "right"), ("locality", "right")]
    with_latency = any(r.latency for r in result.runs)
    if with_latency:
        cols.append(("p99 ms", "right"))
    if result.sla:
        pct = next(iter(result.sla.values()))["percentile"]
        cols.append((f"SLA req/s ({pct})", "right"))
    cols += [("migrations", "right"), ("cross-node", "right"), ("CPU util", "right"), ("rejected", "right")]
    for col, just in cols:
        t.add_column(col, justify=just)
    for r in result.runs:
        rel = result.relative(r.label)
        ci = result.ci(r.label)
        rejected = sum(p.status in ("rejected", "failed") for p in r.pods)
        t.add_row(
            Text(r.label + ("  (baseline)" if r.label == result.baseline else "")),
            f"{r.throughput:,.0f}",
            _fmt(rel, ".3f") + (f" ± {ci['relative_throughput_ci']:.3f}" if ci["relative_throughput_ci"] else ""),
            _fmt(r.locality, ".3f") + (f" ± {ci['locality_ci']:.3f}" if ci["locality_ci"] else ""),
            *([_fmt((r.latency or {}).get("p99_ms"), ".1f")] if with_latency else []),
            *([_sla_cell(result.sla.get(r.label))] if result.sla else []),
            f"{r.migrations:,}",
            f"{r.cross_node_migrations:,}",
            f"{r.cpu_utilisation:.0%}",
            str(rejected),
        )
    return t


def _sla_cell(sla: dict | None) -> str:
    if not sla or sla["critical"] is None:
        return "-"
    return f"{sla['critical']:,.0f} ({sla['targets_met']}/{len(sla['targets_ms'])})"


def _pods_csv(result: RunResult) -> str:
    """One row per variant and pod: ``pods_frame()`` joined with the variant's ``to_frame()`` columns as ``run_*``.

    A pod's ``latency`` statistics (a dict, or None without requests) become ``latency_*`` columns.
    """
    import pandas as pd

    pods = result.pods_frame()
    if "latency" in pods.columns:
        lat = pd.DataFrame([d or {} for d in pods.pop("latency")], index=pods.index).add_prefix("latency_")
        pods = pods.join(lat)
    prov = result.scenario.get("provenance") or {}
    pods["numasim_version"] = prov.get("numasim_version")  # with the pod columns: the run_* columns stay last
    pods["scenario_hash"] = prov.get("scenario_hash")
    runs = result.to_frame().drop(columns=["policy"]).add_prefix("run_").rename(columns={"run_label": "label"})
    frame = pods.merge(runs, on="label", how="left", validate="many_to_one")
    return frame.to_csv(index=False, lineterminator="\n")


def _cmd_run(args, out: Console, err: Console) -> int:
    from .policies.registry import load_policy_ref

    extra = []
    for ref in args.policy_file:
        cls = load_policy_ref(ref)
        extra.append("policies.-=" + json.dumps({"label": cls.name, "policy": ref}))
        if args.policy:
            args.policy.append(cls.name)
    scenario = load(args.scenario, list(args.set) + extra, machine=_machine_arg(args.machine))
    if args.seed is not None and not 0 <= args.seed <= 2**63 - 1:
        raise ScenarioError(Problem("--seed", f"must be between 0 and 2**63-1, got {args.seed}"))
    max_work, max_memory = _budget_limits(args)
    # Every output is checked before any simulation, and written with the others or not at all.
    outputs = [(flag, target) for flag, target in (("--json", args.json), ("--csv", args.csv), ("--report", args.report),
                                                   ("--trace", args.trace)) if target is not None]
    # Inputs are never outputs: the scenario, a machine file, policy files (FILE.py of FILE.py:CLASS).
    inputs = (args.scenario, *([args.machine] if args.machine else []),
              *(ref.rpartition(":")[0] for ref in args.policy_file if ref.rpartition(":")[0]))
    seen: dict[str, str] = {}
    for flag, target in outputs:
        path = check_target(target, f"{flag} {target}", inputs)
        key = os.path.join(os.path.realpath(path.parent if str(path.parent) else "."), path.name)
        if key in seen:
            raise NumasimError(f"{flag} {target}: the same file as {seen[key]}")
        seen[key] = flag
    result = run(scenario, policies=args.policy, seed=args.seed, duration=args.duration, warmup=args.warmup,
                 replications=args.replications,
                 workers=args.workers, with_sla=not args.no_sla, quiet=args.quiet,
                 max_work_s=max_work, max_memory_bytes=max_memory)
    result.scenario["provenance"].update(command=["numasim", *sys.argv[1:]] if sys.argv else [],
                                         overrides=list(args.set), machine_option=args.machine)
    out.print(_table(result))
    for r in result.runs:
        for p in r.pods:
            if p.status in ("rejected", "failed"):
                out.print(Text(f"{r.label}: pod {p.name} {p.status}: {p.reason}", style="yellow"))
    for w in result.warnings():
        out.print(Text(f"warning: {w}", style="yellow"))
    files = []
    for flag, target in outputs:
        if flag == "--json":
            text = json.dumps(result.to_json(), indent=2, allow_nan=False) + "\n"
        elif flag == "--csv":
            text = _pods_csv(result)
        elif flag == "--trace":
            from .perfetto import trace_events

            text = json.dumps(trace_events(result), separators=(",", ":")) + "\n"
        else:
            from .report import render_html  # plotly is imported only when a report is asked for

            text = render_html(result)
        files.append((target, text, f"{flag} {target}"))
    write_all(files)
    for _flag, target in outputs:
        out.print(f"wrote {target}", markup=False, highlight=False)
    return 0


def _cmd_validate(args, out: Console) -> int:
    s = load(args.scenario, args.set)
    m = s.machine
    out.print(f"{args.scenario}: OK - {s.name}: {m.name} ({m.n_nodes} nodes, {m.n_cpus} CPUs), "
              f"{sum(p.replicas for p in s.pods)} pods, {len(s.variants)} policy variants "
              f"({', '.join(v.label for v in s.variants)})", markup=False, highlight=False)
    out.print(f"estimated cost: {estimate(s, list(s.variants), None, True).describe()}", highlight=False)
    return 0


def _cmd_policies(out: Console) -> int:
    t = Table(title="policies")
    t.add_column("name")
    t.add_column("description")
    t.add_column("options")
    for name, cls in available_policies().items():
        t.add_row(Text(name), Text(cls.description), ", ".join(cls.Options.model_fields))
    out.print(t)
    for name, reason in broken_policies().items():
        out.print(Text(f"warning: policy {name!r} is not available: {reason}", style="yellow"))
    return 0


def _cmd_machines(out: Console) -> int:
    t = Table(title="machine presets")
    for col in ("name", "nodes", "CPUs", "GHz", "local/remote ns", "GB/s per node", "GB/s per chiplet", "cores per LLC",
                "stream lines", "node lines", "description"):
        t.add_column(col)
    for name in preset_names("machines"):
        m = machine_preset(name)
        lines = f"{m.thread_mlp:g}" if m.spec.thread_mlp is not None else f"{m.stream_mlp:g} (default)"
        t.add_row(name, str(m.n_nodes), str(m.n_cpus), f"{m.frequency_ghz:g}",
                  f"{m.latency[0, 0]:.0f}/{m.latency[0, -1]:.0f}", f"{m.node_bandwidth[0]:g}",
                  f"{m.spec.chiplet_gbps:g} ({m.spec.cores_per_chiplet} cores)" if m.spec.chiplet_gbps else "-",
                  str(m.spec.cores_per_llc or m.spec.cores_per_node), lines,
                  f"{m.inflight_lines[m.cpu_nodes[0]]:.0f}", m.spec.description)
    out.print(t)
    return 0


def _cmd_schema(args) -> int:
    from .schema import schema_json

    if args.output:
        write_all([(check_target(args.output, f"-o {args.output}"), schema_json(), f"-o {args.output}")])
    else:
        sys.stdout.write(schema_json())
    return 0


def _cmd_workloads(out: Console) -> int:
    t = Table(title="workload presets")
    for col in ("name", "cycles/op", "LLC misses/op", "MLP", "dependent", "writes/miss", "shared", "description"):
        t.add_column(col)
    for name in preset_names("workloads"):
        w = load_preset("workloads", name)
        t.add_row(name, f"{w['cycles_per_op']:g}", f"{w['llc_misses_per_op']:g}", str(w.get("mlp", 1)),
                  f"{w.get('dependent_fraction', 0):g}", f"{w.get('write_fraction', 0):.2g}",
                  f"{w.get('shared_fraction', 1):g}", w.get("description", ""))
    out.print(t)
    return 0


class _Stopped(BaseException):
    """SIGTERM or SIGHUP arrived: unwind like Ctrl-C (workers killed, temporary files removed)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signum)


_MAIN_PID: list[int] = []  # the process that installed _stop (forked workers inherit the handler)


def _stop(signum: int, _frame) -> None:
    if _MAIN_PID and os.getpid() != _MAIN_PID[-1]:
        # A forked worker (a dask worker of a sweep): end as the signal's default would, quietly.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise _Stopped(signum)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``numasim`` command."""
    args = _parser().parse_args(argv)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        _MAIN_PID.append(os.getpid())
        for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is not None:
                previous[sig] = signal.signal(sig, _stop)
    try:
        return _main(args)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if previous:
            _MAIN_PID.pop()


def _main(args) -> int:
    # Wide enough for the table when the output is a file or a pipe (rich assumes 80).
    out = Console(width=None if sys.stdout.isatty() else 160)
    err = Console(stderr=True)
    try:
        if args.command == "run":
            return _cmd_run(args, out, err)
        if args.command == "validate":
            return _cmd_validate(args, out)
        if args.command == "machine":
            return _cmd_machine(args, out, err)
        if args.command == "k8s":
            return _cmd_k8s(args, out, err)
        if args.command == "sweep":
            return _cmd_sweep(args, out, err)
        if args.command == "calibrate":
            return _cmd_calibrate(args, out, err)
        if args.command == "compare":
            return _cmd_compare(args, out, err)
        if args.command == "validation":
            return _cmd_validation(args, out, err)
        if args.command == "policies":
            return _cmd_policies(out)
        if args.command == "machines":
            return _cmd_machines(out)
        if args.command == "schema":
            return _cmd_schema(args)
        return _cmd_workloads(out)
    except NumasimError as exc:
        # soft_wrap: one message, not re-wrapped at the console width (it may be piped or grepped)
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        if args.debug and exc.__cause__ is not None:
            err.print("".join(traceback.format_exception(exc.__cause__)), markup=False, highlight=False)
        return 2
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    except _Stopped as stop:
        err.print(f"stopped by {signal.Signals(stop.signum).name}")
        return 128 + stop.signum


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
