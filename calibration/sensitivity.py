"""How the Pacific predictions move with each assumed parameter, and with the seed.

Prints Markdown tables for docs/validation.md: for each assumed workload or machine
parameter, alternative values and the resulting CFS locality and throughput of
numactl, ESXi and the two tasksets relative to CFS, each the mean over the same
``--row-seeds`` seeds (a single seed's CFS locality moves by several hundredths, which
would hide the parameter's effect); then the spread over ``--seeds`` seeds.

Usage: python calibration/sensitivity.py [--row-seeds 3] [--seeds 8]
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor

import numpy as np

import numasim
from numasim.runner import run_variant

SCENARIO = "scenarios/pacific.yaml"
LABELS = ("cfs", "numactl", "esxi", "taskset-naive", "taskset-late")
W = "workloads.java-transactions"
VARIATIONS: list[tuple[str, str, list[str]]] = [
    ("requests", "{ops: 30, think_ms: 1}", ["{ops: 15, think_ms: 1}", "{ops: 60, think_ms: 1}",
                                            "{ops: 30, think_ms: 0.5}", "{ops: 30, think_ms: 5}"]),
    ("pause_interval_ms", "1000", ["500", "2000"]),
    ("pause_ms", "20", ["10", "40"]),
    ("touch_gbps", "2.0", ["1.0", "4.0"]),
    ("mlp", "2.0", ["1.5", "3.0"]),
    ("shared_fraction", "0.95", ["0.8", "1.0"]),
    ("cache_footprint_mib", "2.0", ["1.0", "4.0"]),
]
MACHINE = [("context_switch_ns", "2000", ["1000", "5000"])]


def _one(args: tuple[tuple[str, ...], str, int]) -> tuple[float, float]:
    sets, label, seed = args
    s = numasim.load(SCENARIO, list(sets))
    m, _ = run_variant(s, s.variant(label), seed=seed)
    return m.throughput, m.locality


def _row(pool, sets: tuple[str, ...], seeds: range) -> dict[str, tuple[float, float]]:
    """Per label: (throughput relative to CFS, locality), each the mean over ``seeds``."""
    jobs = [(sets, lab, seed) for seed in seeds for lab in LABELS]
    out = dict(zip([(lab, seed) for _, lab, seed in jobs], pool.map(_one, jobs)))
    return {lab: (float(np.mean([out[lab, s][0] / out["cfs", s][0] for s in seeds])),
                  float(np.mean([out[lab, s][1] for s in seeds]))) for lab in LABELS}


def _fmt(r: dict[str, tuple[float, float]]) -> str:
    rel = " | ".join(f"{r[lab][0]:.3f}" for lab in LABELS[1:])
    return f"{r['cfs'][1]:.3f} | {rel}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--row-seeds", type=int, default=3)
    args = ap.parse_args()
    seeds = range(1, args.row_seeds + 1)
    head = "| CFS locality | numactl / CFS | ESXi / CFS | taskset-naive / CFS | taskset-late / CFS |"
    with ProcessPoolExecutor() as pool:
        print("| parameter | value | " + head[2:])
        print("|---|---|---|---|---|---|---|")
        print(f"| (as calibrated) | | {_fmt(_row(pool, (), seeds))} |")
        for name, default, values in VARIATIONS:
            for v in values:
                sets = (f"{W}.base=java-transactions", f"{W}.{name}={v}")
                print(f"| workload `{name}` (default {default}) | {v} | {_fmt(_row(pool, sets, seeds))} |", flush=True)
        for name, default, values in MACHINE:
            for v in values:
                print(f"| machine `{name}` (default {default}) | {v} | {_fmt(_row(pool, (f'machine.{name}={v}',), seeds))} |", flush=True)
        print()
        print("| seed | " + head[2:])
        print("|---|---|---|---|---|---|")
        rows = []
        for seed in range(1, args.seeds + 1):
            r = _row(pool, (), range(seed, seed + 1))
            rows.append(r)
            print(f"| {seed} | {_fmt(r)} |", flush=True)
        loc = np.array([r["cfs"][1] for r in rows])
        rel = {lab: np.array([r[lab][0] for r in rows]) for lab in LABELS[1:]}
        summary = " | ".join(f"{rel[lab].mean():.3f} +- {rel[lab].std(ddof=1):.3f}" for lab in LABELS[1:])
        print(f"| mean +- sd | {loc.mean():.3f} +- {loc.std(ddof=1):.3f} | {summary} |")


if __name__ == "__main__":
    main()
