"""The command line's arguments: every subcommand, its flags and its help (:func:`_parser`).

:mod:`numasim.cli` runs the commands; this module only describes them.
"""

from __future__ import annotations

import argparse

from . import __version__
from .budget import DEFAULT_MAX_WORK_S, MAX_MEMORY_BYTES

__all__ = ["_parser"]


def _workers(text: str) -> int:
    """``--workers``: 0 (one per CPU) up to runner.MAX_WORKERS processes, in run()'s words (numasim.calls)."""
    from .calls import whole
    from .errors import ScenarioError
    from .runner import MAX_WORKERS

    try:
        return whole(int(text), "--workers", 0, MAX_WORKERS, " (0: one per CPU)")
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text[:40]!r}") from None
    except ScenarioError as exc:
        raise argparse.ArgumentTypeError(exc.problems[0].message) from None


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
                    "band. Example: numasim validation --only mlc-2to1-vs-reads-clx --json validation.json. "
                    "A case of your own (a published or measured result, in the shipped cases' format: "
                    "docs/validation.md, 'Cases of your own'): numasim validation --case mine.yaml")
    val.add_argument("--only", action="append", metavar="ID", help="run only this shipped case; repeatable")
    _budget_flags(val, "a suite whose cases' runs are")
    val.add_argument("--case", action="append", default=[], metavar="FILE",
                     help="also run this case file of your own (repeatable); with --case, the shipped cases run "
                          "only as --only names them")
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

    pp = sub.add_parser("policies", help="list the available policies, or show one's options",
                        description="List the policies a scenario's variants can name: the built-in ones and those "
                                    "installed by packages (entry point group numasim.policies), with what each does. "
                                    "A policy class in a file needs no packaging: numasim run SCENARIO --policy-file "
                                    "mine.py:MyPolicy. With NAME: each option, its default, what it is and where the "
                                    "default comes from. Example: numasim policies cfs")
    pp.add_argument("name", nargs="?", help="a policy whose options to show")
    for kind, listed, example in (
            ("machines", "the machine presets (sockets, nodes, cores, SMT, frequency, memory, latencies and "
                         "bandwidths); a scenario names one as machine: NAME or machine: {preset: NAME, "
                         "...overrides}", "epyc-7763-nps1"),
            ("workloads", "the workload presets (cycles and DRAM misses per operation, memory-level parallelism, "
                          "sharing, requests); a scenario's pod names one as profile: NAME, or a workload under "
                          "workloads: starts from one with base: NAME", "specjbb2005")):
        pre = sub.add_parser(kind, help=f"list the {kind[:-1]} presets, or show one with the source of each value",
                             description=f"List {listed}. With NAME: every value of that preset, what kind of figure "
                                         "it is (measured, derived, assumed, calibrated, ...) and its source. "
                                         f"Example: numasim {kind} {example}")
        pre.add_argument("name", nargs="?", help="a preset to show value by value, with sources")
    sch = sub.add_parser(
        "schema", help="write the scenario file's JSON schema, for editors that check and complete YAML",
        description="Write the JSON schema (draft 2020-12) of a scenario file: every field, its type, bounds, default "
                    "and meaning, the presets by name and each built-in policy's options. Editors check and complete "
                    "a scenario file against it; with VS Code's YAML extension, put "
                    "'# yaml-language-server: $schema=scenario.schema.json' on the file's first line. "
                    "Example: numasim schema -o scenario.schema.json")
    sch.add_argument("-o", "--output", metavar="FILE", help="the file to write (default: standard output)")
    return p
