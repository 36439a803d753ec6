"""Speed-up of numasim sweep from 1 to 2 local dask workers, timed in one run.

    python benchmarks/sweep_speedup.py [--points 8] [--workers 1,2] [--repeat 1]

Each point is the governor scenario's container-performance variant and its baseline at a
different seed (one replication each), shortened to 6 simulated seconds, so that each point takes about as long as a
short variant run. Reports wall time per worker count (cluster start included; the
client's one-time imports are done before any timing, else the count timed first pays
them) and the ratio against 1 worker; with ``--repeat N``, the worker counts take turns N times and
the median of each is reported. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numasim


def timed_sweep(points: int, workers: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        numasim.sweep("scenarios/governor.yaml", grid={"seed": list(range(1, points + 1))},
                      policies=["container-performance"], sets=["duration=6s", "warmup=2s", "replications=1"],
                      out=os.path.join(tmp, "s.parquet"), workers=workers, quiet=True)
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=8)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--repeat", type=int, default=1, help="times each worker count runs (the median is reported)")
    args = ap.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs; {args.points} points")
    # The client's one-time imports, before any timing: else the worker count timed first pays them.
    import distributed  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    runs: dict[int, list[float]] = {n: [] for n in counts}
    for _ in range(max(1, args.repeat)):
        for n in counts:
            runs[n].append(timed_sweep(args.points, n))
    times = {n: statistics.median(ts) for n, ts in runs.items()}
    for n, t in times.items():
        each = f"   (runs {', '.join(f'{x:.1f}' for x in runs[n])})" if len(runs[n]) > 1 else ""
        print(f"{n} workers: {t:6.1f} s   speed-up {times[counts[0]] / t:.2f}x{each}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
