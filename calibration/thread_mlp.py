"""Calibrate a machine's ``thread_mlp`` (and ``core_mlp``) on a published one-core bandwidth.

A streaming thread's rate is set by how many lines it keeps in flight and the latency
they see; by Little's law ``lines = bandwidth x latency / 64 B``. The latency one core
sees while it streams is the model's own loaded latency at that core's share of its
node's bandwidth, not the idle latency, so the lines are found by simulation: bisect
``thread_mlp`` until one thread of a read stream (``mlp: hardware``) on CPU 0, memory on
node 0, moves the published bandwidth in the model. With ``--siblings`` the same is done
for ``core_mlp`` with two threads on core 0's two hardware threads (``thread_mlp`` given).

The published figure must not be one that a validation case judges (docs/validation.md
names what each preset's lines were fitted on).

Usage:
  python calibration/thread_mlp.py PRESET GBPS [--cycles-per-op 1.1] [--write-fraction 0] [--set FIELD=VALUE]
  python calibration/thread_mlp.py PRESET GBPS --siblings --thread-mlp T
  python calibration/thread_mlp.py --check     # each preset's value still moves its published figure
"""

from __future__ import annotations

import argparse
import sys

import yaml

from numasim.model.scenario import from_dict
from numasim.runner import run_variant

LINE = 64

# What each preset's thread_mlp was fitted on (docs/validation.md): preset, published one-thread GB/s, the
# kernel's write-backs per miss (STREAM Triad 1/3), machine fields of the measured host. Presets that share a
# core take the first one's value. `--check` (and tests/test_calibrate.py) verifies that each preset's
# thread_mlp still moves its figure in the model.
CALIBRATIONS: list[tuple[str, float, float, dict]] = [
    ("haswell-2699v3", 19.9, 1 / 3, {"local_latency_ns": 91}),
    ("skylake-8180", 12.0, 1 / 3, {}),
    ("epyc-7742-nps1", 19.9, 0.0, {}),
    ("epyc-9654-nps1", 37.0, 0.0, {}),
    ("epyc-7763-nps1", 21.56, 0.0, {"local_latency_ns": 108.0}),
    ("sapphirerapids-8480", 12.5, 0.0, {"local_latency_ns": 129.3}),
    ("epyc-7351-2s", 20.0, 0.0, {}),
    ("r810-e7-4807", 5.0, 1 / 3, {"local_latency_ns": 160.0, "memory_bandwidth_gbps": 25.6}),
]


def bandwidth_gbps(preset: str, lines: float, *, cycles_per_op: float, write_fraction: float,
                   siblings: bool = False, thread_mlp: float | None = None, machine_set: dict | None = None) -> float:
    """Bytes per ns (GB/s) one core moves streaming in the model, STREAM's way of counting
    (one 64-byte line per miss: write-allocate reads are not counted twice)."""
    machine: dict = {"preset": preset, **(machine_set or {})}
    if siblings:
        machine.update(smt=True, thread_mlp=thread_mlp, core_mlp=lines)
    else:
        machine.update(smt=False, thread_mlp=lines)
    scenario = {
        "name": "thread-mlp-calibration",
        "machine": machine,
        "workloads": {"s": {"base": "stream", "mlp": "hardware", "cycles_per_op": cycles_per_op,
                            "llc_misses_per_op": 1, "write_fraction": write_fraction}},
        "pods": [{"name": "s", "threads": 2 if siblings else 1, "memory": "256MiB", "profile": "s"}],
        "duration": "400ms", "warmup": "200ms", "sample_interval": "100ms", "replications": 1,
        "policies": [{"label": "pin", "policy": "taskset", "options": {"cpus": ["0"]}}],
    }
    if siblings:  # core 0's hardware threads, whatever the preset's CPU numbering
        core0 = from_dict(scenario, source="calibration").machine.core_cpus[0]
        scenario["policies"][0]["options"]["cpus"] = [",".join(map(str, core0[:2]))]
    s = from_dict(scenario, source="calibration")
    metrics, _ = run_variant(s, s.variant("pin"), seed=1)
    return metrics.throughput * LINE / 1e9


def calibrate(preset: str, target_gbps: float, **kw) -> tuple[float, float]:
    """The lines (thread_mlp, or core_mlp with siblings) at which the model moves ``target_gbps``."""
    lo, hi = 1.0, 1024.0
    if bandwidth_gbps(preset, hi, **kw) < target_gbps:
        raise SystemExit(f"{preset}: even 1024 lines in flight move less than {target_gbps} GB/s in the model")
    for _ in range(30):
        mid = (lo * hi) ** 0.5
        if bandwidth_gbps(preset, mid, **kw) < target_gbps:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1.005:
            break
    return hi, bandwidth_gbps(preset, hi, **kw)


def check() -> list[tuple[str, float, float]]:
    """(preset, published GB/s, the model's GB/s with the preset's thread_mlp) for each calibration."""
    from numasim.model.presets import load_preset

    out = []
    for preset, gbps, writes, machine_set in CALIBRATIONS:
        lines = load_preset("machines", preset)["thread_mlp"]
        out.append((preset, gbps, bandwidth_gbps(preset, lines, cycles_per_op=1.1, write_fraction=writes,
                                                 machine_set=machine_set)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    if "--check" in sys.argv[1:]:
        for preset, gbps, got in check():
            print(f"{preset}: published {gbps} GB/s, model {got:.2f} GB/s ({100 * (got / gbps - 1):+.1f} %)")
        return
    ap.add_argument("preset")
    ap.add_argument("gbps", type=float, help="the published one-core bandwidth, GB/s")
    ap.add_argument("--cycles-per-op", type=float, default=1.1,
                    help="the kernel's compute cycles per 64-byte line (a read-only loop: about 1)")
    ap.add_argument("--write-fraction", type=float, default=0.0, help="write-backs per miss (copy 0.5, triad 0.33)")
    ap.add_argument("--siblings", action="store_true", help="two threads on one core: calibrate core_mlp")
    ap.add_argument("--thread-mlp", type=float, help="with --siblings: the machine's thread_mlp")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="a machine field of the measured host where it differs from the preset's "
                         "(e.g. local_latency_ns=91: lines are the core's, latency the platform's)")
    a = ap.parse_args()
    machine_set = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in a.set)}
    if a.siblings and a.thread_mlp is None:
        ap.error("--siblings needs --thread-mlp")
    lines, got = calibrate(a.preset, a.gbps, cycles_per_op=a.cycles_per_op, write_fraction=a.write_fraction,
                           siblings=a.siblings, thread_mlp=a.thread_mlp, machine_set=machine_set)
    what = "core_mlp" if a.siblings else "thread_mlp"
    print(f"{a.preset}: {what} {lines:.1f} lines in flight -> {got:.2f} GB/s (published {a.gbps})")


if __name__ == "__main__":
    main()
