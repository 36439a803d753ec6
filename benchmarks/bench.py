"""Performance benchmark for numasim (a script, not a test: speed is never asserted).

Measures, in one run, each figure of issue 8's target table, with its ratio to the target:

1. a bare simpy baseline: events per second of a loop of ``env.timeout(1)``, timed
   before and after the variants, and right before each timing of a variant;
2. numasim's simulated events per second on ``scenarios/pacific.yaml`` for each policy
   variant (seed 1, serially), and that as a share of the bare simpy rate timed just before
   it (the best of the repeats' pairs: the host's speed drifts over seconds on a shared
   machine, and a pair timed together sees one speed);
3. the wall time of the 5-variant comparison (the scenario's 3 seeds, no SLA search) and
   of the default ``numasim run scenarios/pacific.yaml`` (every variant, 3 seeds and the
   SLA search), both with one worker process per CPU;
4. scaling, each case in a fresh process (so its peak RSS is its own): 2-thread pods, one
   per core, on 1x8, 2x16, 4x28 and 8x56 cores (the exponent of wall time in cores), the
   8x56 case for 4 s and 16 s (the exponent in simulated time) and 96 s (whether peak memory
   stays flat once the samples and the move log reach ``sample_memory``), and 1,000 pods on
   8x56 cores (the cost per event);
5. the machine: CPU model, core count, Python, numpy and simpy versions.

Usage::

    python benchmarks/bench.py [--repeat N] [--json FILE] [--quick]
    python benchmarks/bench.py --case SOCKETS,CORES_PER_NODE,PODS,DURATION   # one scaling case, JSON on stdout
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import resource
import statistics
import subprocess
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
PACIFIC = ROOT / "scenarios" / "pacific.yaml"
FIVE = ["cfs", "cfs+numab", "esxi", "numactl", "taskset-naive"]
# Issue 8's targets (docs/performance.md).
TARGETS = {
    "five_variants_s": 8.0,
    "default_run_s": 30.0,
    "share_of_simpy": 0.25,
    "share_of_simpy_numab": 0.15,
    "exponent": 1.05,
    "per_event_1000_pods_us": 20.0,
    "peak_rss_8x56_mb": 400.0,
}


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


def per_variant(scenario: numasim.Scenario, labels: list[str], repeat: int, simpy_events: int) -> list[dict[str, Any]]:
    """Simulated events and rate solves per wall second of each variant, run serially, each timing
    paired with a timing of the bare simpy loop just before it: the share of simpy's rate."""
    rows: list[dict[str, Any]] = []
    for v in (scenario.variant(label) for label in labels):
        times: list[float] = []
        shares: list[float] = []
        for _ in range(repeat):
            base = simpy_baseline(simpy_events, 1)["events_per_s_best"]
            t, (metrics, _trace) = timed(lambda v=v: run_variant(scenario, v), 1)
            times += t
            shares.append(metrics.sim_events / t[0] / base)
        s = summary(times)
        ev, solves = metrics.sim_events, metrics.rate_solves
        rows.append({"label": v.label, "sim_events": ev, "rate_solves": solves, **s,
                     "events_per_s_best": ev / s["best_s"], "events_per_s_median": ev / s["median_s"],
                     "share_of_simpy_best": max(shares)})
    return rows


def full_run(scenario: numasim.Scenario, labels: list[str] | None, repeat: int, with_sla: bool) -> dict[str, Any]:
    """Wall time of ``numasim.run`` over ``labels`` (None: all), one worker process per CPU."""
    times, _ = timed(lambda: numasim.run(scenario, policies=labels, workers=0, with_sla=with_sla), repeat)
    n = len(labels) if labels else len(scenario.variants)
    return {"variants": n, "replications": scenario.spec.replications,
            "sla": with_sla and scenario.spec.sla is not None, **summary(times), "times_s": times}


def scale_scenario(sockets: int, cores: int, pods: int, duration: str) -> numasim.Scenario:
    """``pods`` two-thread Java pods on ``sockets`` x ``cores`` cores (Skylake-SP constants, HT off)."""
    return numasim.from_dict({
        "name": f"scale-{sockets}x{cores}",
        "machine": {"preset": "skylake-8180", "sockets": sockets, "cores_per_node": cores, "smt": False,
                    "memory_per_node": "1TiB",
                    "slit": [[10 if i == j else 21 for j in range(sockets)] for i in range(sockets)]},
        "pods": [{"name": "p", "replicas": pods, "threads": 2, "memory": "1GiB", "profile": "java-transactions"}],
        "duration": duration, "warmup": "1s", "sample_interval": "100ms",
        "policies": [{"label": "cfs", "policy": "cfs"}],
    })


def load_compiled() -> float:
    """Seconds to load (or, the first time on this installation, compile) the engine's compiled
    functions: a tiny simulation, so that timings that follow are of the simulation alone."""
    t0 = time.perf_counter()
    tiny = scale_scenario(1, 2, 2, "1100ms")
    run_variant(tiny, tiny.variants[0])
    return time.perf_counter() - t0


def one_case(spec: str) -> dict[str, Any]:
    """Run one scaling case in a process whose compiled code is loaded; its wall time, events and peak RSS."""
    sockets, cores, pods, duration = spec.split(",")
    scenario = scale_scenario(int(sockets), int(cores), int(pods), duration)
    load_s = load_compiled()
    t0 = time.perf_counter()
    metrics, _ = run_variant(scenario, scenario.variants[0])
    wall = time.perf_counter() - t0
    return {"sockets": int(sockets), "cores_per_node": int(cores), "cores": int(sockets) * int(cores),
            "pods": int(pods), "duration_s": scenario.spec.duration / 1e9, "wall_s": wall,
            "sim_events": metrics.sim_events, "per_event_us": wall / metrics.sim_events * 1e6,
            "peak_rss_mb": peak_rss_mb(), "load_compiled_s": load_s}


def case(sockets: int, cores: int, pods: int, duration: str) -> dict[str, Any]:
    """:func:`one_case` in a fresh Python process."""
    out = subprocess.run([sys.executable, __file__, "--case", f"{sockets},{cores},{pods},{duration}"],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def exponent(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) on log(x)."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def scaling(quick: bool) -> dict[str, Any]:
    """Wall time against cores and simulated time, cost per event at 1,000 pods, peak RSS."""
    shapes = [(1, 8), (2, 16), (4, 28), (8, 56)]
    cores = [case(s, c, s * c, "4s") for s, c in shapes]
    long = case(8, 56, 448, "8s" if quick else "16s")
    # Past the point where the samples and the move log reach sample_memory (about 20 s here): flat from there.
    longest = long if quick else case(8, 56, 448, "96s")
    many = case(8, 56, 1000, "3s")
    big = cores[-1]
    return {
        "cores": cores,
        "long": long,
        "longest": longest,
        "many_pods": many,
        "exponent_cores": exponent([r["cores"] for r in cores], [r["wall_s"] for r in cores]),
        "exponent_time": exponent([big["duration_s"], long["duration_s"]], [big["wall_s"], long["wall_s"]]),
        "rss_growth_mb": long["peak_rss_mb"] - big["peak_rss_mb"],
        "rss_growth_longest_mb": longest["peak_rss_mb"] - long["peak_rss_mb"],
    }


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


def peak_rss_mb() -> float:
    """Peak resident set size of this process, MB.

    On Linux, VmHWM from /proc/self/status: ru_maxrss survives execve, so a child started
    from this benchmark would report at least the parent's peak.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    scale = 1 / 1024 if sys.platform != "darwin" else 1 / 1024 / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def ratio_line(name: str, value: float, target: float, unit: str, lower_is_better: bool = True) -> str:
    """One figure, its target and value/target (<= 1 meets a ceiling; >= 1 meets a floor)."""
    r = value / target
    met = r <= 1.0 if lower_is_better else r >= 1.0
    return f"{name:<52}{value:>10.3g} {unit:<6} target {'<=' if lower_is_better else '>='} {target:g}: " \
           f"ratio {r:.2f} ({'met' if met else 'NOT met'})"


def report(res: dict[str, Any]) -> None:
    """Print the results as plain text, each target figure with its ratio."""
    m = res["machine"]
    print(f"machine: {m['cpu_model']}, {m['cores']} cores; Python {m['python']}, "
          f"numpy {m['numpy']}, simpy {m['simpy']}, numasim {m['numasim']}")
    print(f"repeat: {res['repeat']} (best / median); load average at start {m['loadavg_at_start']}\n")
    base = res["simpy_events_per_s"]
    print(f"bare simpy timeout loop: {base:,.0f} events/s (best of before and after)")
    print(f"loading the engine's compiled code (a tiny run, before any timing): {res['load_compiled_s']:.2f} s\n")
    print(f"{'variant':<15}{'events':>8}{'solves':>8}{'best s':>9}{'events/s':>11}{'of simpy':>10}"
          f"{'of simpy, paired':>18}")
    for r in res["variants"]:
        print(f"{r['label']:<15}{r['sim_events']:>8}{r['rate_solves']:>8}{r['best_s']:>9.2f}"
              f"{r['events_per_s_best']:>11,.0f}{r['events_per_s_best'] / base:>10.1%}{r['share_of_simpy_best']:>18.1%}")
    print()
    longest = [] if res["scaling"]["longest"] is res["scaling"]["long"] else [res["scaling"]["longest"]]
    for r in res["scaling"]["cores"] + [res["scaling"]["long"]] + longest + [res["scaling"]["many_pods"]]:
        print(f"{r['sockets']}x{r['cores_per_node']} cores, {r['pods']} pods, {r['duration_s']:g} s: "
              f"{r['wall_s']:.2f} s wall, {r['sim_events']:,} events, {r['per_event_us']:.1f} us/event, "
              f"peak RSS {r['peak_rss_mb']:.0f} MB")
    print()
    t, sc = TARGETS, res["scaling"]
    shares = {r["label"]: r["share_of_simpy_best"] for r in res["variants"]}
    numab = [v for k, v in shares.items() if "numab" in k]
    other = [v for k, v in shares.items() if "numab" not in k]
    lines = [
        ratio_line("5 variants x 3 seeds, --no-sla, all CPUs (median)", res["five"]["median_s"], t["five_variants_s"], "s"),
        ratio_line("default pacific run with SLA search, all CPUs", res["default"]["best_s"], t["default_run_s"], "s"),
        ratio_line("events/s over simpy paired (lowest, no numab)", min(other), t["share_of_simpy"], "", False),
        ratio_line("events/s over simpy paired (cfs+numab)", min(numab) if numab else math.nan,
                   t["share_of_simpy_numab"], "", False),
        ratio_line("exponent of wall time in cores (1x8 .. 8x56)", sc["exponent_cores"], t["exponent"], ""),
        ratio_line("exponent of wall time in simulated time (8x56)", sc["exponent_time"], t["exponent"], ""),
        ratio_line("per event, 1,000 pods on 8x56 cores", sc["many_pods"]["per_event_us"], t["per_event_1000_pods_us"], "us"),
        ratio_line("peak RSS, 8x56 cores, longest run", sc["longest"]["peak_rss_mb"], t["peak_rss_8x56_mb"], "MB"),
    ]
    print("\n".join(lines))
    print(f"peak RSS growth from the short to the long 8x56 run: {sc['rss_growth_mb']:+.0f} MB"
          + (f"; from the long to the longest: {sc['rss_growth_longest_mb']:+.0f} MB" if longest else ""))
    print(f"load average at end: {res['loadavg_at_end']} (other load on the machine skews the timings)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="timings per measurement (default 3)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--quick", action="store_true", help="repeat once, the default run skipped, a shorter long case")
    ap.add_argument("--simpy-events", type=int, default=200_000, help="events in the bare simpy loop")
    ap.add_argument("--case", metavar="S,C,P,D", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.case:
        print(json.dumps(one_case(args.case)))
        return 0
    repeat = 1 if args.quick else max(1, args.repeat)

    res: dict[str, Any] = {"date": datetime.date.today().isoformat(), "repeat": repeat, "machine": machine()}
    res["load_compiled_s"] = load_compiled()  # in this process, before anything is timed
    before = simpy_baseline(args.simpy_events, repeat)
    one_seed = numasim.load(PACIFIC, ["replications=1"])
    res["variants"] = per_variant(one_seed, FIVE, repeat, args.simpy_events)
    after = simpy_baseline(args.simpy_events, repeat)
    res["simpy_baseline"] = {"before": before, "after": after}
    res["simpy_events_per_s"] = max(before["events_per_s_best"], after["events_per_s_best"])
    pacific = numasim.load(PACIFIC)
    res["five"] = full_run(pacific, FIVE, repeat, with_sla=False)
    res["default"] = (full_run(pacific, None, 1, with_sla=True) if not args.quick
                      else {"best_s": math.nan, "median_s": math.nan})
    res["scaling"] = scaling(args.quick)
    res["loadavg_at_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None

    report(res)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
