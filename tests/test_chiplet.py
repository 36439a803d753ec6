"""The chiplet link: the cores of one AMD CCD reach the memory controllers through one link."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import numasim
from numasim.model.curve import LoadedLatencyCurve
from numasim.model.interconnect import Interconnect
from numasim.model.machine import MachineSpec
from numasim.model.presets import load_preset
from numasim.sim.perf import RateInputs, solve_rates

from .conftest import run_small, small_scenario

# One read stream per thread, a 64-byte line per op, far more demand than a small link carries.
STREAM = {"base": "stream", "cycles_per_op": 1, "llc_misses_per_op": 1, "mlp": 16, "write_fraction": 0.0}


def _gbps(profile: dict[str, Any], threads: int, cpus: str = "0-3", **machine: Any) -> float:
    """GB/s of lines (reads and write-backs) that ``threads`` threads pinned to ``cpus`` move."""
    data = small_scenario(
        workloads={"w": profile},
        pods=[{"name": "p", "threads": threads, "memory": "256MiB", "profile": "w"}],
        policies=[{"label": "t", "policy": "taskset", "options": {"cpus": [cpus]}}],
        duration="1s", warmup="500ms",
    )
    data["machine"].update(smt=False, cpu_numbering="block", **machine)  # CPUs 0-3: the cores of node 0
    tput = run_small(data).run("t").throughput
    return tput * 64 * profile["llc_misses_per_op"] * (1 + profile.get("write_fraction", 0.0)) / 1e9


def test_a_chiplet_link_carries_at_most_its_bandwidth():
    free = _gbps(STREAM, 4)
    capped = _gbps(STREAM, 4, cores_per_chiplet=4, chiplet_gbps=5.0)
    assert free > 10.0  # without the link the four streams move far more
    assert capped == pytest.approx(5.0, rel=0.02)
    # Write-backs cross the link too: reads and writes together stay within it.
    triad = {**STREAM, "llc_misses_per_op": 2, "write_fraction": 0.5}
    assert _gbps(triad, 4, cores_per_chiplet=4, chiplet_gbps=5.0) == pytest.approx(5.0, rel=0.02)


def test_cores_on_two_chiplets_have_a_link_each():
    one = _gbps(STREAM, 4, cores_per_chiplet=4, chiplet_gbps=4.0)
    two = _gbps(STREAM, 4, cores_per_chiplet=2, chiplet_gbps=4.0)
    assert two / one == pytest.approx(2.0, rel=0.03)


def test_a_link_far_above_the_demand_changes_nothing_and_no_misses_no_link_effect():
    assert _gbps(STREAM, 4, cores_per_chiplet=4, chiplet_gbps=100_000.0) == pytest.approx(_gbps(STREAM, 4), rel=1e-4)
    compute = {**STREAM, "llc_misses_per_op": 0, "cycles_per_op": 1000}
    data = small_scenario(workloads={"w": compute}, pods=[{"name": "p", "threads": 4, "memory": "64MiB", "profile": "w"}],
                          policies=[{"label": "t", "policy": "taskset", "options": {"cpus": ["0-3"]}}],
                          duration="1s", warmup="500ms")
    free = run_small(data).run("t").throughput
    data["machine"].update(cores_per_chiplet=4, chiplet_gbps=1.0)  # the start-up touch crosses it too
    assert run_small(data).run("t").throughput == pytest.approx(free, rel=1e-9)


def test_one_thread_far_below_the_link_hardly_waits_and_near_it_waits_more():
    alone = _gbps(STREAM, 1, cpus="0")
    light = _gbps(STREAM, 1, cpus="0", cores_per_chiplet=4, chiplet_gbps=3 * alone)
    heavy = _gbps(STREAM, 1, cpus="0", cores_per_chiplet=4, chiplet_gbps=1.05 * alone)
    assert alone * 0.99 < light <= alone  # at a third of its capacity a line waits a sixth of its transfer
    assert heavy < 0.97 * light


@settings(max_examples=60, deadline=None)
@given(t=st.integers(1, 24), misses=st.floats(0.1, 100.0), chip_bw=st.floats(0.5, 100.0),
       per_chip=st.integers(1, 8), writes=st.floats(0.0, 1.0), seed=st.integers(0, 1000))
def test_no_chiplet_link_ever_carries_more_than_it_can(t, misses, chip_bw, per_chip, writes, seed):
    rng = np.random.default_rng(seed)
    cpu = rng.integers(0, 16, size=t)
    nodes = cpu // 8
    chip = cpu // per_chip
    n_chips = -(-16 // per_chip)
    inp = RateInputs(cpu_node=nodes, capacity=np.ones(t), compute_ns=np.full(t, 1.0), misses=np.full(t, misses),
                     stall_scale=np.full(t, 0.05), access=rng.dirichlet([1.0, 1.0], size=t), extra_node=np.zeros(2),
                     extra_link=np.zeros((2, 2)), writes=np.full(t, writes), chiplet=chip)
    sol = solve_rates(inp, np.array([[80.0, 130.0], [130.0, 80.0]]), np.array([1000.0, 1000.0]),
                      Interconnect.direct(np.full((2, 2), 1000.0)), LoadedLatencyCurve(a=2.0, b=5.0),
                      chiplet_bandwidth=np.full(n_chips, chip_bw), max_iter=2000)
    carried = np.bincount(chip, weights=sol.rate * misses * 64 * (1 + writes), minlength=n_chips)
    assert np.all(carried <= chip_bw * 1.01)
    assert np.all(sol.chiplet_wait >= 0.0) and np.all(sol.rate > 0)
    assert np.allclose(sol.chiplet_util, carried / chip_bw)
    # Each link's wait is the M/D/1 queue's at the load it carries (Pollaczek-Khinchine, deterministic service).
    util = sol.chiplet_util
    assert np.allclose(sol.chiplet_wait, 64 / chip_bw * util / (2 * (1 - util)), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("over, message", [
    ({"cores_per_chiplet": 4}, "together"),
    ({"chiplet_gbps": 30.0}, "together"),
    ({"cores_per_chiplet": 3, "chiplet_gbps": 30.0}, "multiple of cores_per_chiplet"),
])
def test_bad_chiplet_fields_are_refused(over, message):
    spec = {**load_preset("machines", "pacific-broadwell"), "cores_per_node": 4, **over}
    with pytest.raises(ValueError, match=message):
        MachineSpec(**spec)


@pytest.mark.parametrize("name, gbps", [
    ("epyc-7742-nps1", 36.0),  # ktransformers PR 2175: 'One L3 domain saturates at 36.0 GB/s on 4 cores'
    ("epyc-9654-nps1", 70.0),  # Chips and Cheese, Genoa-X: 'one CCD can only pull just under 70GB/s'
])
def test_an_epyc_presets_link_carries_the_figure_it_was_taken_from(name, gbps):
    """Four cores of one chiplet streaming (a read stream) move what the preset's link was measured to carry."""
    preset = load_preset("machines", name)
    scenario = numasim.from_dict({
        "name": "ccd", "machine": {"preset": name, "smt": False},
        "workloads": {"s": {"base": "stream", "mlp": "hardware", "cycles_per_op": 1.1, "llc_misses_per_op": 1,
                            "write_fraction": 0.0}},
        "pods": [{"name": "s", "threads": 4, "memory": "256MiB", "profile": "s"}],
        "duration": "400ms", "warmup": "200ms", "sample_interval": "100ms", "replications": 1,
        "policies": [{"label": "ccx", "policy": "taskset", "options": {"cpus": ["0-3"]}}],
    })
    res = numasim.run(scenario, seed=1, workers=1)
    assert res.run("ccx").throughput * 64 / 1e9 == pytest.approx(preset["chiplet_gbps"], rel=0.01)
    assert preset["chiplet_gbps"] == gbps


def test_the_results_show_the_busiest_chiplet_link():
    from numasim.report import why

    data = small_scenario(workloads={"w": STREAM}, pods=[{"name": "p", "threads": 4, "memory": "256MiB", "profile": "w"}],
                          policies=[{"label": "t", "policy": "taskset", "options": {"cpus": ["0-3"]}}],
                          duration="1s", warmup="500ms")
    data["machine"].update(smt=False, cpu_numbering="block")
    plain = run_small(data)
    assert set(plain.run("t").timeseries["chiplet_util_max"]) == {0.0}
    assert "chiplet" not in " ".join(why(plain))
    data["machine"].update(cores_per_chiplet=4, chiplet_gbps=5.0)
    res = run_small(data)
    busy = res.run("t").timeseries["chiplet_util_max"][-1]
    assert 0.97 < busy < 1.0  # an M/D/1 queue: full, never over
    assert f"the busiest chiplet link is {busy:.0%} utilised" in " ".join(why(res))


def test_a_link_too_slow_for_the_start_up_touch_is_warned_about():
    data = small_scenario(workloads={"w": STREAM}, pods=[{"name": "p", "threads": 4, "memory": "256MiB", "profile": "w"}],
                          policies=[{"label": "t", "policy": "taskset", "options": {"cpus": ["0-3"]}}],
                          duration="1s", warmup="500ms")
    data["machine"].update(smt=False, cpu_numbering="block", cores_per_chiplet=4, chiplet_gbps=0.01)
    res = run_small(data)
    assert res.run("t").throughput == 0.0  # 256 MiB at 10 MB/s: the touch outlasts the run
    assert any(w.startswith("t: no operation completed in the window") for w in res.warnings())
    data["machine"].update(chiplet_gbps=5.0)
    assert not any("no operation completed" in w for w in run_small(data).warnings())
