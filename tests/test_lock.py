"""A process-wide lock: serialised critical sections and the lines passed from holder to holder.

Metamorphic checks (one thread has no one to wait for or take lines from; a tiny critical
section costs nothing; on one socket placement does not matter), the lock's bound (one
holder at a time), and the queue equation the solver must satisfy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numasim.errors import ScenarioError
from numasim.model.presets import load_preset
from numasim.sim.fixed_point import lock_waits

from .conftest import run_small, small_scenario

# Little but the lock: no DRAM misses, a tiny cache footprint.
LOCKED = {"cycles_per_op": 2000, "lock_cycles_per_op": 2000, "llc_misses_per_op": 0, "shared_fraction": 1.0,
          "cache_footprint_mib": 0.01}


def _tput(profile: dict[str, Any], cpus: str, threads: int, **machine: Any) -> float:
    data = small_scenario(
        workloads={"w": profile},
        pods=[{"name": "db", "threads": threads, "memory": "64MiB", "profile": "w"}],
        policies=[{"label": "t", "policy": "taskset", "options": {"cpus": [cpus]}}],
        duration="1s", warmup="500ms",
    )
    data["machine"].update(machine)
    return run_small(data).run("t").throughput


def _ghz() -> float:
    return float(load_preset("machines", small_scenario()["machine"]["preset"])["frequency_ghz"])


def test_one_thread_has_no_one_to_wait_for():
    free = {**LOCKED, "lock_cycles_per_op": 0}
    assert _tput({**LOCKED, "lock_lines_per_op": 4}, "0", 1) == pytest.approx(_tput(free, "0", 1), rel=1e-9)


def test_a_tiny_critical_section_costs_nothing():
    work = {**LOCKED, "lock_cycles_per_op": 0}
    tiny = {**LOCKED, "lock_cycles_per_op": 0.01}
    assert _tput(tiny, "0-3", 4) == pytest.approx(_tput(work, "0-3", 4), rel=1e-4)


def test_one_holder_at_a_time():
    # All of each operation inside the lock: four threads together do what one does alone.
    bound = _ghz() * 1e9 / LOCKED["cycles_per_op"]
    one = _tput(LOCKED, "0", 1)
    four = _tput(LOCKED, "0,2,4,6", 4)
    assert one == pytest.approx(bound, rel=0.01)
    assert four <= bound * (1 + 1e-6)
    assert four == pytest.approx(bound, rel=0.01)  # two or more always queue: the lock never idles


def test_half_the_work_inside_the_lock_caps_the_gain_at_two():
    half = {**LOCKED, "lock_cycles_per_op": 1000}
    one = _tput(half, "0", 1)
    four = _tput(half, "0,2,4,6", 4)
    assert 1.5 * one < four <= 2.0 * one * (1 + 1e-6)


def test_lines_passed_across_sockets_cost_more():
    kw = dict(c2c_local_ns=45.0, c2c_remote_ns=120.0)
    handoff = {**LOCKED, "cycles_per_op": 200, "lock_cycles_per_op": 200, "lock_lines_per_op": 2}
    # CPUs alternate between the nodes on the small machine: "0,2,4,6" is node 0.
    same, spread = _tput(handoff, "0,2,4,6", 4, **kw), _tput(handoff, "0-3", 4, **kw)
    assert spread < 0.8 * same
    # More threads on both sockets do not make up for it: the lock is the bottleneck.
    assert _tput(handoff, "0-7", 8, **kw) < same
    # Without lines to pass, where the threads run does not matter.
    quiet = {**handoff, "lock_lines_per_op": 0}
    assert _tput(quiet, "0-3", 4, **kw) == pytest.approx(_tput(quiet, "0,2,4,6", 4, **kw), rel=1e-6)
    # On one socket there is no remote cache to take the lines from.
    one_socket = dict(sockets=1, cores_per_node=8, **kw)
    assert _tput(handoff, "0-3", 4, **one_socket) == pytest.approx(_tput(handoff, "4-7", 4, **one_socket), rel=1e-6)


def test_lock_cycles_beyond_the_operation_are_refused():
    data = small_scenario(workloads={"w": {**LOCKED, "lock_cycles_per_op": 3000}},
                          pods=[{"name": "db", "threads": 2, "memory": "64MiB", "profile": "w"}])
    with pytest.raises(ScenarioError, match="lock_cycles_per_op"):
        run_small(data)


def test_two_threads_that_only_pass_the_lock_alternate():
    s = np.array([50.0, 50.0])
    w, util = lock_waits(np.zeros(2, dtype=np.int64), np.ones(2), s, s.copy(), 1)
    assert w[0] == pytest.approx(50.0, rel=1e-9)
    assert util[0] == pytest.approx(1.0, rel=1e-9)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.05, 1.0), st.floats(0.1, 1e4), st.floats(1.0, 50.0), st.integers(0, 2)),
             min_size=1, max_size=40),
)
def test_each_lock_wait_solves_its_queue_equation(threads):
    cap = np.array([c for c, _, _, _ in threads])
    service = np.array([s for _, s, _, _ in threads])
    tau0 = service * np.array([r for _, _, r, _ in threads])
    group = np.array([g for _, _, _, g in threads], dtype=np.int64)
    w, util = lock_waits(group, cap, service, tau0, 3)
    assert np.all(w >= 0.0)
    assert np.all(util <= 1.0 + 1e-9)  # one holder at a time
    for g in range(3):
        mine = group == g
        n = int(mine.sum())
        if n == 0:
            assert w[g] == 0.0 and util[g] == 0.0
            continue
        k = 1.0 - 1.0 / n
        q = cap[mine] * (w[g] + service[mine]) / (tau0[mine] + w[g])
        assert w[g] == pytest.approx(k * float(np.sum(q * service[mine])), rel=1e-7, abs=1e-9)


def test_results_show_the_busiest_lock():
    from numasim.report import why

    data = small_scenario(workloads={"w": {**LOCKED, "lock_cycles_per_op": 1000}},
                          pods=[{"name": "db", "threads": 4, "memory": "64MiB", "profile": "w"}],
                          policies=[{"label": "t", "policy": "taskset", "options": {"cpus": ["0,2,4,6"]}}],
                          duration="1s", warmup="500ms")
    res = run_small(data)
    held = res.run("t").timeseries["lock_util_max"][-1]
    assert 0.9 < held <= 1.0 + 1e-9  # four threads, half of each op inside: the lock is nearly always held
    assert f"the busiest process-wide lock is held {held:.0%} of the time" in " ".join(why(res))
    free = small_scenario(workloads={"w": {**LOCKED, "lock_cycles_per_op": 0}},
                          pods=[{"name": "db", "threads": 4, "memory": "64MiB", "profile": "w"}],
                          policies=[{"label": "t", "policy": "taskset", "options": {"cpus": ["0,2,4,6"]}}],
                          duration="1s", warmup="500ms")
    plain = run_small(free)
    assert set(plain.run("t").timeseries["lock_util_max"]) == {0.0}
    assert "lock" not in " ".join(why(plain))
