"""Performance benchmark for numasim (a script, not a test: speed is never asserted).

Measures, in one run:

1. a bare simpy baseline: events per second of a loop of ``env.timeout(1)``;
2. numasim's simulated events per second (and rate solves per second) on
   ``scenarios/pacific.yaml`` for each policy variant, run serially;
3. the wall time of the full pacific comparison, one simulation per variant and no SLA
   search (the target's definition), with ``workers=0`` (one process per CPU) and
   ``workers=1``; and, timed once, what ``numasim run SCENARIO`` does by default (every
   variant, the scenario's replications and its SLA search);
4. peak resident memory of this process and of its worker processes;
5. the machine: CPU model, core count, Python, numpy and simpy versions.

Every timing is repeated ``--repeat`` times; the best and the median are reported.

Usage::

    python benchmarks/bench.py [--repeat N] [--json FILE] [--scenario PATH] [--policies L1,L2,...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

import numasim
from numasim.runner import run_variant

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SCENARIO = ROOT / "scenarios" / "pacific.yaml"
TARGET_S = 10.0  # full pacific comparison (5 variants) on 2 cores


def timed(fn: Callable[[], Any], repeat: int) -> tuple[list[float], Any]:
    """Call ``fn`` ``repeat`` times; return the wall times and the last result."""
    times: list[float] = []
    result: Any = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return times, result


def summary(times: list[float]) -> dict[str, float]:
    """Best and median of a list of wall times (seconds)."""
    return {"best_s": min(times), "median_s": statistics.median(times)}


def simpy_baseline(n_events: int, repeat: int) -> dict[str, Any]:
    """Events per second of a bare simpy process yielding ``env.timeout(1)`` ``n_events`` times."""

    def loop(env: simpy.Environment) -> Generator[simpy.Event, None, None]:
        for _ in range(n_events):
            yield env.timeout(1)

    def once() -> None:
        env = simpy.Environment()
        env.process(loop(env))
        env.run()

    times, _ = timed(once, repeat)
    s = summary(times)
    return {
        "events": n_events,
        **s,
        "events_per_s_best": n_events / s["best_s"],
        "events_per_s_median": n_events / s["median_s"],
    }


def per_variant(scenario: numasim.Scenario, labels: list[str], repeat: int) -> list[dict[str, Any]]:
    """Simulated events and rate solves per wall second of each variant, run serially."""
    rows: list[dict[str, Any]] = []
    for v in (scenario.variant(label) for label in labels):
        times, (metrics, _trace) = timed(lambda v=v: run_variant(scenario, v), repeat)
        s = summary(times)
        ev, solves = metrics.sim_events, metrics.rate_solves
        rows.append({
            "label": v.label,
            "sim_events": ev,
            "rate_solves": solves,
            **s,
            "events_per_s_best": ev / s["best_s"],
            "events_per_s_median": ev / s["median_s"],
            "solves_per_s_best": solves / s["best_s"],
        })
    return rows


def full_run(scenario: numasim.Scenario, labels: list[str] | None, workers: int, repeat: int,
             with_sla: bool = False) -> dict[str, Any]:
    """Wall time of ``numasim.run`` over ``labels`` (None: all) with ``workers`` processes (0 = one per CPU)."""
    times, _ = timed(lambda: numasim.run(scenario, policies=labels, workers=workers, with_sla=with_sla), repeat)
    n = len(labels) if labels else len(scenario.variants)
    reps = scenario.spec.replications
    return {"workers": workers, "variants": n, "replications": reps, "sla": with_sla and scenario.spec.sla is not None,
            **summary(times), "times_s": times}


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or platform's guess elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, Any]:
    """Where the benchmark ran."""
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "simpy": simpy.__version__,
        "numasim": numasim.__version__,
        "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def peak_memory_mb() -> dict[str, float]:
    """Peak resident set size (ru_maxrss, KiB on Linux) of this process and of its largest child."""
    to_mb = 1 / 1024 if sys.platform != "darwin" else 1 / 1024 / 1024
    return {
        "self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * to_mb,
        "children_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * to_mb,
    }


def report(res: dict[str, Any]) -> None:
    """Print the results as plain text."""
    m = res["machine"]
    print(f"machine: {m['cpu_model']}, {m['cores']} cores; Python {m['python']}, "
          f"numpy {m['numpy']}, simpy {m['simpy']}, numasim {m['numasim']}")
    print(f"repeat: {res['repeat']} (best / median); load average at start {m['loadavg_at_start']}\n")
    b = res["simpy_baseline"]
    print(f"bare simpy timeout loop: {b['events']} events, {b['best_s']:.3f} / {b['median_s']:.3f} s, "
          f"{b['events_per_s_best']:,.0f} / {b['events_per_s_median']:,.0f} events/s\n")
    print(f"{'variant':<15}{'events':>8}{'solves':>8}{'best s':>9}{'median s':>10}{'events/s':>11}{'solves/s':>10}")
    for r in res["variants"]:
        print(f"{r['label']:<15}{r['sim_events']:>8}{r['rate_solves']:>8}{r['best_s']:>9.2f}{r['median_s']:>10.2f}"
              f"{r['events_per_s_best']:>11,.0f}{r['solves_per_s_best']:>10.1f}")
    tot = res["serial_sum_best_s"]
    print(f"{'sum':<31}{tot:>9.2f}\n")
    for key in ("full_run_workers_0", "full_run_workers_1", "cli_default"):
        f = res[key]
        print(f"numasim.run(workers={f['workers']}): {f['variants']} variants x {f['replications']} replications"
              f"{' + SLA search' if f['sla'] else ''}, {f['best_s']:.2f} / {f['median_s']:.2f} s")
    t = res["target"]
    print(f"target: full comparison < {t['seconds']:.0f} s with workers=0 (median) -> {'met' if t['met'] else 'NOT met'}")
    mem = res["peak_memory"]
    print(f"peak RSS: {mem['self_mb']:.0f} MB (this process), {mem['children_mb']:.0f} MB (largest worker)")
    print(f"load average at end: {res['loadavg_at_end']} (other load on the machine skews the timings)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="timings per measurement (default 3)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO, help="scenario file (default pacific)")
    ap.add_argument("--policies", metavar="L1,L2", help="variant labels to run (default: all in the scenario)")
    ap.add_argument("--simpy-events", type=int, default=200_000, help="events in the bare simpy loop")
    args = ap.parse_args(argv)
    repeat = max(1, args.repeat)

    scenario = numasim.load(args.scenario, ["replications=1"])
    labels = args.policies.split(",") if args.policies else [v.label for v in scenario.variants]
    res: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "scenario": str(args.scenario),
        "policies": labels,
        "repeat": repeat,
        "machine": machine(),
        "simpy_baseline": simpy_baseline(args.simpy_events, repeat),
        "variants": per_variant(scenario, labels, repeat),
    }
    res["serial_sum_best_s"] = sum(r["best_s"] for r in res["variants"])
    res["full_run_workers_0"] = full_run(scenario, labels, 0, repeat)
    res["full_run_workers_1"] = full_run(scenario, labels, 1, repeat)
    res["cli_default"] = full_run(numasim.load(args.scenario), None, 0, 1, with_sla=True)
    res["target"] = {"seconds": TARGET_S, "met": res["full_run_workers_0"]["median_s"] < TARGET_S, "on": "median"}
    res["peak_memory"] = peak_memory_mb()
    res["loadavg_at_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None

    report(res)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
