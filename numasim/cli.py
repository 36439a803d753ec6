"""Command line: ``numasim run | validate | validation | sweep | calibrate | compare | machine import | k8s import | policies | machines | workloads | schema``.

The only module that prints. A :class:`~numasim.errors.NumasimError` is shown
as one clear message and exits with status 2; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import traceback

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .atomic import check_target, write_all
from .budget import PARTS, estimate
from .errors import NumasimError, inert
from .policies.registry import available_policies, broken_policies, plugin_files
from .analysis.results import RunResult
from .calls import check_seed
from .runner import run
from .model.presets import load_preset, machine_preset, preset_names
from .model.scenario import load
from .cli_parser import _parser
from .cli_tools import (_budget_limits, _cmd_calibrate, _cmd_compare, _cmd_k8s, _cmd_machine, _cmd_policy,
                        _cmd_preset, _cmd_sweep, _cmd_validation, _machine_arg)

__all__ = ["main"]


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
    # A text cell that a spreadsheet would run as a formula (=, +, -, @, a tab or a carriage
    # return first: a variant's label can be) is written with a quote before it.
    for col in frame.select_dtypes(include=["object", "string"]).columns:
        frame[col] = frame[col].map(lambda v: "'" + v if isinstance(v, str) and v[:1] in _FORMULA else v)
    return frame.to_csv(index=False, lineterminator="\n")


_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _cmd_run(args, out: Console, err: Console) -> int:
    from .policies.registry import load_policy_ref

    extra = []
    for ref in args.policy_file:
        cls = load_policy_ref(ref)
        extra.append("policies.-=" + json.dumps({"label": cls.name, "policy": ref}))
        if args.policy:
            args.policy.append(cls.name)
    scenario = load(args.scenario, list(args.set) + extra, machine=_machine_arg(args.machine))
    check_seed(args.seed)
    max_work, max_memory = _budget_limits(args)
    # Every output is checked before any simulation, and written with the others or not at all.
    outputs = [(flag, target) for flag, target in (("--json", args.json), ("--csv", args.csv), ("--report", args.report),
                                                   ("--trace", args.trace)) if target is not None]
    # Inputs are never outputs: the scenario, a machine file, policy files (FILE.py of FILE.py:CLASS, on the
    # command line or in the scenario: the file of each variant's policy class outside numasim).
    inputs = (args.scenario, *([args.machine] if args.machine else []),
              *(ref.rpartition(":")[0] for ref in args.policy_file if ref.rpartition(":")[0]),
              *plugin_files(v.policy for v in scenario.variants))
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
                 max_work_s=max_work, max_memory_bytes=max_memory,
                 outputs=tuple(flag.removeprefix("--") for flag, _ in outputs))
    result.scenario["provenance"].update(command=["numasim", *sys.argv[1:]] if sys.argv else [],
                                         overrides=list(args.set), machine_option=args.machine)
    # The outputs first: a standard output that fails (a full disk, a closed pipe) cannot lose them.
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
    out.print(_table(result))
    for r in result.runs:
        for p in r.pods:
            if p.status in ("rejected", "failed"):
                out.print(Text(f"{r.label}: pod {p.name} {p.status}: {p.reason}", style="yellow"))
    for w in result.warnings():
        out.print(Text(f"warning: {w}", style="yellow"))
    for _flag, target in outputs:
        out.print(f"wrote {target}", markup=False, highlight=False)
    return 0


def _cmd_validate(args, out: Console) -> int:
    s = load(args.scenario, args.set)
    m = s.machine
    out.print(f"{args.scenario}: OK - {s.name}: {m.name} ({m.n_nodes} nodes, {m.n_cpus} CPUs), "
              f"{sum(p.replicas for p in s.pods)} pods, {len(s.variants)} policy variants "
              f"({', '.join(v.label for v in s.variants)})", markup=False, highlight=False)
    est = estimate(s, list(s.variants), None, True)
    name, share = est.largest()
    most = (f"; {share:.0%} of it is {PARTS[name][0]}" if math.isfinite(share) else f"; most of it is {PARTS[name][0]}") if name else ""
    out.print(f"estimated cost: {est.describe()}{most}", markup=False, highlight=False)
    return 0


def _cmd_policies(out: Console) -> int:
    t = Table(title="policies")
    t.add_column("name")
    t.add_column("description")
    t.add_column("options")
    for name, cls in available_policies().items():
        t.add_row(Text(inert(name)), Text(inert(str(cls.description))), inert(", ".join(cls.Options.model_fields)))
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
    out = Console(width=None if sys.stdout.isatty() else 160, emoji=False)  # ':fire:' in a file name stays text
    err = Console(stderr=True, emoji=False)
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
            return _cmd_policy(args.name, out) if args.name else _cmd_policies(out)
        if args.command in ("machines", "workloads") and args.name:
            return _cmd_preset(args.command, args.name, out)
        if args.command == "machines":
            return _cmd_machines(out)
        if args.command == "schema":
            return _cmd_schema(args)
        return _cmd_workloads(out)
    except NumasimError as exc:
        # soft_wrap: one message, not re-wrapped at the console width (it may be piped or grepped)
        err.print(f"error: {inert(str(exc))}", markup=False, highlight=False, soft_wrap=True)
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
