"""Calibrate the r810-e7-4807 preset's memory bandwidth on autonumabench NUMA01 without balancing.

No memory bandwidth of Mel Gorman's Dell R810 (4 x Xeon E7-4807) was published, and its derived peak
(four SMI links of 6.4 GB/s, 25.6 GB/s a node) is that of a 6.4 GT/s part: the E7-4807's links run at
4.8 GT/s. One measurement of what a node moves is in Mel Gorman's autonumabench tables: NUMA01 without
NUMA balancing (3.7.0-rc7 stats-v8r6, 1511.76 s elapsed; "[PATCH 00/49] Automatic NUMA Balancing v10",
LKML, 7 December 2012: https://lore.kernel.org/linux-mm/1354875832-9700-1-git-send-email-mgorman@suse.de/).
numa01 (numa01.c, github pholasek/autonuma-benchmark, built with -DNO_BIND_FORCE_SAME_NODE) forks two
processes of 24 threads; each thread clears its process's whole 3 GiB under MPOL_BIND to one node (the same
node for both processes) and then 50 times more with the default policy: 2 x 24 x 51 x 3 GiB = 7344 GiB
of zeroing, all of it into one node's memory from 48 threads on four sockets. The elapsed time also holds
the harness (the benchmark's build and plot), the same ``harness_s`` the autonumabench cases assume.

The model's node bandwidth (``memory_bandwidth_gbps``) is bisected until the model's threads zero the
same GB/s in that setting (write-allocate: a read and a write-back a line, as the cases assume). NUMA01 is
not a validation case; the cases it serves (``autonumabench-*-r810``) compare one node with four, where
the bandwidth cancels to first order, and their elapsed times add the harness's seconds, which do not.

Usage: python calibration/r810_bandwidth.py [--harness-s 3.0]   (about 10 s a step on 2 cores)
"""

from __future__ import annotations

import argparse

from numasim.model.scenario import from_dict
from numasim.runner import run_variant

GIB = 2 ** 30
LINE = 64
ELAPSED_S = 1511.76
ZEROED_BYTES = 2 * 24 * 51 * 3 * GIB
HARNESS_S = 3.0  # the elapsed time outside numa01: the autonumabench-*-r810 cases' elapsed.harness_s


def zeroing_gbps(bandwidth: float) -> float:
    """GB/s of zeroing the model's numa01 threads do with the node bandwidth ``bandwidth``, no balancing."""
    scenario = {
        "name": "r810-numa01-none",
        "machine": {"preset": "r810-e7-4807", "memory_bandwidth_gbps": bandwidth},
        "workloads": {"numa01": {
            "base": "stream", "cycles_per_op": 2, "llc_misses_per_op": 1, "write_fraction": 1.0, "mlp": "hardware",
            "dependent_fraction": 0.0, "shared_fraction": 1.0, "touch": "threads", "touch_nodes": [0],
            "touch_gbps": 4.0, "cache_footprint_mib": 0.25,
            "description": "a numa01 thread: bzero of its process's whole 3 GiB, first touched under a bind to node 0"}},
        "pods": [{"name": "numa01", "replicas": 2, "threads": 24, "memory": "3GiB", "profile": "numa01"}],
        "duration": "20s", "warmup": "4s", "sample_interval": "1s", "replications": 1,
        "policies": [{"label": "none", "policy": "cfs", "options": {"kernel": "3.7"}}],
    }
    s = from_dict(scenario, source="calibration")
    metrics, _ = run_variant(s, s.variant("none"), seed=1)
    return metrics.throughput * LINE / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--harness-s", type=float, default=HARNESS_S, help="seconds of the elapsed time outside numa01")
    a = ap.parse_args()
    target = ZEROED_BYTES / (ELAPSED_S - a.harness_s) / 1e9
    lo, hi = 2.0, 25.6
    if not zeroing_gbps(lo) < target <= zeroing_gbps(hi):
        raise SystemExit(f"the target {target:.3f} GB/s is outside what {lo} to {hi} GB/s a node give in the model")
    for _ in range(30):  # the zeroing rate rises with the bandwidth: bisect on a log scale
        mid = (lo * hi) ** 0.5
        if zeroing_gbps(mid) < target:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1.002:
            break
    print(f"published: {ZEROED_BYTES / GIB:.0f} GiB zeroed in {ELAPSED_S} - {a.harness_s} s = {target:.3f} GB/s")
    print(f"memory_bandwidth_gbps {hi:.2f} -> {zeroing_gbps(hi):.3f} GB/s of zeroing in the model")


if __name__ == "__main__":
    main()
