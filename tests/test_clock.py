"""The clock the compiled thread events move on (numasim/sim/clock.py).

Thread events run without a simpy timeout each while no simpy event comes before them;
that must change nothing: every variant's trace (samples, moves, response times,
events, quotas) is the same, value for value, when each instant gets its own timeout.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy

import numasim
from numasim.sim.clock import Clock

from .conftest import small_scenario


def test_the_clock_moves_on_to_simpys_next_event_at_most_and_never_back():
    env = Clock()
    env.timeout(100)
    assert env.horizon(10_000) == 99 and env.horizon(50) == 50
    env.skip_to(40)
    assert env.now == 40
    env.skip_to(100)  # the instant of the next event itself: simpy then runs it at that time
    with pytest.raises(RuntimeError):
        env.skip_to(101)
    with pytest.raises(RuntimeError):
        env.skip_to(99)
    env.step()
    assert env.now == 100 and env.horizon(7_000) == 7_000  # nothing left: up to the run's end
    assert isinstance(env, simpy.Environment)


def _traces(data, monkeypatch, ahead: bool):
    from numasim.runner import _simulate
    from numasim.sim import clock, events, layout

    if not ahead:
        monkeypatch.setattr(clock.Clock, "horizon", lambda self, until: -1)  # every instant a timeout of its own
    fire, ran_ahead = events.fire, [0]

    def counting(*args):
        ctl = args[10]
        before = ctl[layout.N_AHEAD]
        code = fire(*args)
        ran_ahead[0] += ctl[layout.N_AHEAD] - before
        return code

    monkeypatch.setattr(events, "fire", counting)
    scenario = numasim.from_dict(data)
    out = {}
    for v in scenario.variants:
        ran_ahead[0] = 0
        sim, metrics, trace = _simulate(scenario, v, 3, None)
        lat = trace.latencies
        out[v.label] = dict(
            throughput=metrics.throughput, pods=[p.throughput for p in metrics.pods],
            samples={k: np.asarray(a).tolist() for k, a in trace.samples.items()},
            placements=np.asarray(trace.placements).tolist(), events=trace.events, quota=trace.quota_log,
            latencies=(lat.bins, lat.count.tolist(), lat.total_ns.tolist()), ahead=ran_ahead[0])
    monkeypatch.undo()
    return out


def test_running_thread_events_ahead_of_their_timeouts_changes_no_figure(monkeypatch):
    # Closed and open-mode pods, a CPU limit (CFS quota), CPU overcommit, NUMA balancing,
    # ESXi's migrations and pinning: each variant's whole trace is the same either way.
    data = small_scenario(
        workloads={"java": {"base": "java-transactions", "touch_gbps": 8.0},
                   "open": {"base": "java-transactions", "requests": {"mode": "open", "ops": 30, "rate_per_s": 400}}},
        pods=[{"name": "app", "replicas": 3, "threads": 3, "memory": "2GiB", "profile": "java"},
              {"name": "capped", "threads": 2, "memory": "1GiB", "profile": "java", "cpu_limit": 1.5},
              {"name": "server", "threads": 2, "memory": "1GiB", "profile": "open"}],
        policies=[{"label": "cfs", "policy": "cfs"},
                  {"label": "cfs+numab", "policy": "cfs", "options": {"numa_balancing": True}},
                  {"label": "esxi", "policy": "esxi"}, {"label": "numactl", "policy": "numactl"},
                  {"label": "k8s", "policy": "k8s"}],
        duration="3s", warmup="1s", replications=1)
    ahead = _traces(data, monkeypatch, True)
    each = _traces(data, monkeypatch, False)
    assert set(ahead) == {"cfs", "cfs+numab", "esxi", "numactl", "k8s"} and ahead["k8s"]["quota"]
    for label, tr in ahead.items():
        assert len(tr["placements"]) > 10 and sum(tr["latencies"][1]) > 100, label
        assert tr.pop("ahead") > 1000 and each[label].pop("ahead") == 0, label
        for key, value in tr.items():
            assert value == each[label][key], (label, key)
