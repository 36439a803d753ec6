"""Re-derive the probe's L3 miss share, the one fitted constant of the ``probe-*-skx8167`` validation cases.

Chris Hyser's probe (LKML, 15 December 2023: https://lore.kernel.org/lkml/20231216001801.3015832-1-chris.hyser@oracle.com/)
does random read-then-writes over a buffer of unstated size. Rows [00] and [03] of the post's table time it pinned
to node 0 with its memory on node 0 and on node 1: 136.50 and 165.95 s, a ratio of 1.216. The probe's
``llc_misses_per_op`` (the share of its accesses that reach DRAM, an effective figure that also absorbs the cases'
assumed 4 misses in flight and 20 cycles an access) is fitted so that the model gives that ratio; no validation
case judges those two rows (docs/validation.md, "The probe's L3").

Usage: python calibration/probe_l3.py [SHARE ...] [--seeds 3]

prints, for each share (default: 0.24 0.25 0.256 0.26 0.27), the local / remote throughput ratio of each seed and
their mean, over the scenario calibration/probe_l3.yaml (150 s, as the cases). About 20 s a seed on 2 cores.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

import numasim
from numasim.runner import run_variant

SCENARIO = Path(__file__).with_name("probe_l3.yaml")
PUBLISHED = 165.95 / 136.50


def ratio(share: float, seed: int) -> float:
    s = numasim.load(str(SCENARIO), overrides=[f"workloads.probe.llc_misses_per_op={share}"])
    by = {v.label: run_variant(s, v, seed=seed)[0].throughput for v in s.variants}
    return by["local"] / by["remote"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shares", nargs="*", type=float, default=[0.24, 0.25, 0.256, 0.26, 0.27])
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    jobs = [(x, seed) for x in args.shares for seed in range(1, args.seeds + 1)]
    with ProcessPoolExecutor() as pool:
        got = list(pool.map(ratio, *zip(*jobs)))
    print(f"published (rows [00] and [03]): {PUBLISHED:.4f}")
    for i, x in enumerate(args.shares):
        r = got[i * args.seeds:(i + 1) * args.seeds]
        print(f"llc_misses_per_op {x:.3f}: " + " ".join(f"{v:.4f}" for v in r) + f"  mean {np.mean(r):.4f}")


if __name__ == "__main__":
    main()
