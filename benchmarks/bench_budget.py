"""How far the run budget's estimate (numasim.budget) is from what runs cost: every shipped scenario's
variants and both variants of every validation case, one seed each at the scenario's duration, no SLA search.

For each run: the events the engine made and the CPU seconds it took (process time, building the
simulation included), against the estimate for that one run; the ratios are estimate / measured, so
above 1 is the estimate erring high, as it is meant to. The CPU ratio depends on this machine's speed
(the estimate's per-event cost is the benchmark machine's); the events ratio does not.

    python benchmarks/bench_budget.py [--only NAME ...] [--json FILE]

Results go to docs/performance.md ("The run budget's estimate").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from numasim.budget import estimate  # noqa: E402
from numasim.model.scenario import load  # noqa: E402
from numasim.runner import _simulate  # noqa: E402
from numasim.validation import _scenario, load_cases  # noqa: E402


def _sources(only: list[str] | None):
    """(name, scenario, variants) for every shipped scenario and validation case."""
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        if not only or path.stem in only:
            s = load(str(path))
            yield path.stem, s, list(s.variants)
    for case in load_cases():
        if not only or case.id in only:
            s = _scenario(case)
            yield case.id, s, [v for v in s.variants if v.label in (case.numerator, case.denominator)]


def measure(s, v) -> dict:
    est = estimate(s, [v], None, False)
    n = s.spec.replications
    t0 = time.process_time()
    _, _, trace = _simulate(s, v, 1, None)
    cpu = time.process_time() - t0
    threads = sum(p.replicas * p.threads for p in s.pods_of(v))
    return {"variant": v.label, "sim_s": s.spec.duration / 1e9, "threads": threads,
            "events": trace.n_events, "events_est": est.events / n, "cpu_s": cpu, "cpu_s_est": est.cpu_seconds / n,
            "events_per_thread_s": trace.n_events / max(threads, 1) / (s.spec.duration / 1e9)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", help="scenario stems or case ids")
    ap.add_argument("--json", help="write every run's figures here")
    args = ap.parse_args()
    rows = []
    print(f"{'scenario / case':55s} {'variant':24s} {'events':>10s} {'x est':>7s} {'cpu s':>7s} {'x est':>7s} {'ev/thr-s':>8s}")
    for name, s, variants in _sources(args.only):
        for v in variants:
            r = {"name": name, **measure(s, v)}
            rows.append(r)
            print(f"{name[:55]:55s} {v.label[:24]:24s} {r['events']:10,d} {r['events_est'] / r['events']:7.1f} "
                  f"{r['cpu_s']:7.2f} {r['cpu_s_est'] / r['cpu_s']:7.1f} {r['events_per_thread_s']:8.1f}", flush=True)
    ev = [r["events_est"] / r["events"] for r in rows]
    cpu = [r["cpu_s_est"] / r["cpu_s"] for r in rows]
    print(f"\n{len(rows)} runs; estimate / measured: events {min(ev):.2f}-{max(ev):.0f} (median {statistics.median(ev):.1f}), "
          f"CPU {min(cpu):.2f}-{max(cpu):.0f} (median {statistics.median(cpu):.1f}); "
          f"measured CPU {sum(r['cpu_s'] for r in rows):.0f} s, estimated {sum(r['cpu_s_est'] for r in rows):.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": rows}, indent=1))


if __name__ == "__main__":
    main()
