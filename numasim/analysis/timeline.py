"""Which pod ran where: each pod's CPU time on each CPU over a run, from its trace (the report's timeline)."""

from __future__ import annotations

import numpy as np

from ..sim.trace import Trace

__all__ = ["pod_cpu_time", "MAX_COLUMNS"]

MAX_COLUMNS = 100  # timeline columns per variant: bounds the page for long runs sampled finely


def _column_edges(n_samples: int) -> np.ndarray:
    """Sample indices bounding the timeline's columns: each interval, or runs of them past MAX_COLUMNS."""
    step = max(1, -(-(n_samples - 1) // MAX_COLUMNS))
    idx = np.arange(0, n_samples, step)
    return idx if idx[-1] == n_samples - 1 else np.append(idx, n_samples - 1)


def pod_cpu_time(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """CPU time of each pod on each CPU in each timeline column.

    A thread's CPU time in a column (from the ``cpu`` samples) is split over the
    CPUs it was placed on in that column (``trace.placements``) in proportion to
    the time it was placed there. A sleeping thread stays placed on its last CPU,
    so the split is exact for threads that stay put and approximate for movers.
    After the move log filled (``trace.placements_until_ns``), a thread is taken to
    be, until the next sample, on the CPU each sample found it on.

    Returns
    -------
    edges_ns
        Column boundaries, ns (``n_columns + 1``).
    time_ns
        Array ``[n_columns, n_pods, n_cpus]`` of CPU ns.
    """
    idx = _column_edges(len(trace.sample_times))
    edges = trace.sample_times[idx].astype(float)
    cpu = trace.samples["cpu"][idx]
    n_threads, n_cpus = cpu.shape[1], trace.machine.n_cpus
    out = np.zeros((len(edges) - 1, len(trace.pods), n_cpus))
    if len(trace.placements) == 0 or n_threads == 0:
        return edges, out
    p = trace.placements
    until = trace.placements_until_ns
    if until is not None:
        # The move log filled at `until`: after it, each thread is where the samples found it.
        later = trace.sample_times > until
        ts, cpus = trace.sample_times[later], trace.samples["thread_cpu"][later]
        p = np.vstack([p, np.column_stack([np.repeat(ts, n_threads), np.tile(np.arange(n_threads), len(ts)),
                                           cpus.reshape(-1)])])
    p = p[np.argsort(p[:, 1], kind="stable")]  # by thread, each in time order (appended as they happened)
    last = np.append(p[1:, 1] != p[:-1, 1], True)
    start, tid, where = p[:, 0].astype(float), p[:, 1], p[:, 2]
    end = np.where(last, edges[-1], np.roll(start, -1))
    keep = (where >= 0) & (end > start)  # -1: the thread died
    start, end, tid, where = start[keep], end[keep], tid[keep], where[keep]
    for b in range(len(edges) - 1):
        overlap = np.clip(np.minimum(end, edges[b + 1]) - np.maximum(start, edges[b]), 0.0, None)
        placed = np.zeros((n_threads, n_cpus))
        np.add.at(placed, (tid, where), overlap)
        total = placed.sum(axis=1, keepdims=True)
        share = np.divide(placed, total, out=np.zeros_like(placed), where=total > 0)
        np.add.at(out[b], trace.thread_pod, share * (cpu[b + 1] - cpu[b])[:, None])
    return edges, out
