"""Sampling within its memory: the time series and the move log stay within ``sample_memory``, so a
run's memory is flat in its duration, and what the results say does not change with it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import numasim
from numasim.analysis.timeline import pod_cpu_time
from numasim.runner import _simulate
from numasim.sim.sampling import MIN_SAMPLES, n_samples, sample_every, sample_times

from .conftest import OVERCOMMITTED, small_scenario


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10**6), st.integers(0, 10**6), st.integers(1, 10**4), st.integers(1, 10**6),
       st.integers(1, 10**9))
def test_the_sample_interval_fits_the_budget(duration, warmup, every, row, budget):
    """Counted without building the times, as built; the interval a multiple of the asked one, the asked one
    where it fits, and never more rows than the budget holds (nor fewer than MIN_SAMPLES allowed)."""
    warmup = min(warmup, duration)
    assert n_samples(duration, warmup, every) == len(sample_times(duration, warmup, every))
    got = sample_every(duration, warmup, every, row, budget)
    cap = max(MIN_SAMPLES, budget // row)
    assert got % every == 0
    assert n_samples(duration, warmup, got) <= max(cap, n_samples(duration, warmup, every) if got == every else cap)
    if n_samples(duration, warmup, every) <= cap:
        assert got == every
    else:
        assert n_samples(duration, warmup, got) <= cap
        times = sample_times(duration, warmup, got)
        assert warmup in times and duration in times


def _run(sample_memory: str | None, **over):
    data = small_scenario(**{"sample_interval": "10ms", "policies": [{"label": "cfs", "policy": "cfs"}], **over})
    if sample_memory is not None:
        data["sample_memory"] = sample_memory
    sc = numasim.from_dict(data)
    return _simulate(sc, sc.variants[0], 1, None)


def test_a_small_sample_memory_samples_less_with_the_same_results():
    _, full, trace_full = _run(None)
    _, small, trace = _run("64KiB")
    assert "sampling" in [kind for _t, kind, _text in trace.events]
    assert "sampling" not in [kind for _t, kind, _text in trace_full.events]
    # Fewer rows, within the budget's floor; the window's ends sampled.
    assert MIN_SAMPLES // 2 <= len(trace.sample_times) <= MIN_SAMPLES < len(trace_full.sample_times)
    assert {1_000_000_000, 3_000_000_000} <= set(trace.sample_times.tolist())
    # The figures over the window: the same to the last bit (a sample reads, it does not integrate).
    assert (small.throughput, small.locality, small.rate_solves) == (full.throughput, full.locality, full.rate_solves)


# The figures of the window that come from the run, not from how often it was sampled.
_WINDOW = ("throughput", "locality", "cpu_utilisation", "memory_gbps", "runqueue_wait", "migrations",
           "cross_node_migrations", "pages_migrated_bytes", "hinting_faults", "numa_task_moves",
           "kernel_cpu_seconds", "latency", "rate_solves")  # (sim_events counts the samples too)


GROWING = {"workloads": {"java": {"base": "java-transactions", "touch": "work", "touch_gbps": 0.2}}}


@pytest.mark.parametrize("over", [{}, OVERCOMMITTED, GROWING], ids=["small", "overcommitted", "growing"])
def test_sampling_never_steers_a_run(over):
    """Metamorphic: any sample interval gives the same run (samples project the counters to their instant,
    core.project; they used to integrate them, which moved the overcommitted run's throughput 0.7 %)."""
    def window(interval):
        data = small_scenario(**{"sample_interval": interval, **over})
        data["policies"] = [{"label": "cfs+numab", "policy": "cfs", "options": {"numa_balancing": True}}]
        sc = numasim.from_dict(data)
        _sim, m, trace = _simulate(sc, sc.variants[0], 1, None)
        # ...and the run's last sample, whole: taken after every event of its instant.
        last = {k: np.asarray(v[-1]).tolist() for k, v in trace.samples.items()}
        return [getattr(m, k) for k in _WINDOW] + [(p.throughput, p.locality) for p in m.pods] + [last]

    first = window("10ms")
    for interval in ("7ms", "250ms", "1s"):
        assert window(interval) == first, interval


def test_a_full_move_log_stops_and_the_timeline_takes_the_samples():
    # More threads than CPUs, so that threads move: 1,600 moves in 8 s.
    sim, _, trace = _run("64KiB", **OVERCOMMITTED)
    _, _, trace_full = _run(None, **OVERCOMMITTED)
    assert "placements" in [kind for _t, kind, _text in trace.events]
    # The move log stopped at its share of the budget (the last batch of moves logged whole).
    assert sim._place_cap <= len(trace.placements) * 3 <= sim._place_cap + 3 * 64 < len(trace_full.placements) * 3
    assert trace.placements_until_ns < trace.duration_ns and trace_full.placements_until_ns is None
    # The timeline still accounts for every pod's CPU time (the samples' CPUs after the log stopped).
    edges, time_ns = pod_cpu_time(trace)
    cpu = trace.samples["cpu"]
    idx = np.searchsorted(trace.sample_times, edges.astype(np.int64))
    per_pod = np.zeros(len(trace.pods))
    np.add.at(per_pod, trace.thread_pod, cpu[idx[-1]] - cpu[idx[0]])
    assert time_ns.sum(axis=(0, 2)) == pytest.approx(per_pod, rel=1e-9)
