"""Lines in flight per node (docs/model.md, "Lines in flight per node"): a node's CPUs hold at most
``Machine.inflight_lines`` lines in the memory system, Little's law at the top of the node's own
loaded-latency curve, shared max-min among the node's threads."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numasim.model.presets import machine_preset
from numasim.sim.perf import LINE, RateInputs, solve_rates

MILAN = machine_preset("epyc-7763-nps1")


def _solve(m, access, mlp, compute_ns=1.0, inflight=True, nodes=None):
    t = access.shape[0]
    inp = RateInputs(cpu_node=np.zeros(t, dtype=np.int64) if nodes is None else nodes, capacity=np.ones(t), compute_ns=np.full(t, compute_ns),
                     misses=np.ones(t), stall_scale=1.0 / np.asarray(mlp, dtype=float), access=access,
                     extra_node=np.zeros(m.n_nodes), extra_link=np.zeros((m.n_nodes, m.n_nodes)))
    return inp, solve_rates(inp, m.latency, m.node_bandwidth, m.interconnect, m.curve, m.write_cost, m.node_curve,
                            None, m.node_port,
                            m.inflight_lines if inflight else None, max_iter=2000)


def _held(m, inp, sol):
    """Lines each thread holds in the memory system: rate x misses x its loaded latency there."""
    lat = np.einsum("tn,tn->t", inp.access, sol.lmat[inp.cpu_node])
    return sol.rate * inp.misses * lat


def test_the_limit_is_littles_law_at_the_top_of_the_nodes_curve():
    a = float(np.broadcast_to(MILAN.node_curve.a, (MILAN.n_nodes,))[0])
    expect = MILAN.node_bandwidth[0] / LINE * MILAN.latency[0, 0] * (1.0 + a)
    assert MILAN.inflight_lines[0] == pytest.approx(expect)
    assert 300 < MILAN.inflight_lines[0] < 340  # 144 GB/s x 100.7 ns x 1.42 / 64 B
    # a node without CPUs has no limit of its own
    cxl = machine_preset("sapphirerapids-8480-cxl")
    assert all(np.isinf(cxl.inflight_lines[n]) for n in range(cxl.n_nodes) if n not in cxl.cpu_nodes)


def test_local_streams_saturate_at_the_curves_top_latency_not_beyond():
    # 64 read streams of 45.5 lines would hold 2,900 lines: without the limit the node's latency climbs
    # far past the measured curve's top; with it the memory runs at its peak at the top's latency.
    acc = np.tile([1.0, 0.0], (64, 1))
    inp, free = _solve(MILAN, acc, np.full(64, 45.5), inflight=False)
    _, capped = _solve(MILAN, acc, np.full(64, 45.5))
    top = 1.0 + float(np.broadcast_to(MILAN.node_curve.a, (2,))[0])
    assert free.x[0] > 3 * top
    assert capped.x[0] == pytest.approx(top, rel=1e-3)
    assert capped.node_util[0] == pytest.approx(1.0, abs=1e-3)
    assert capped.rate.sum() == pytest.approx(free.rate.sum(), rel=1e-3)  # the same bandwidth
    assert _held(MILAN, inp, capped).sum() == pytest.approx(MILAN.inflight_lines[0], rel=1e-6)
    # the diagnostic: the lines the threads would hold at their unthrottled rates, over the limit
    assert capped.lines_demand[0] > 1.0 and capped.lines_demand[1] == 0.0
    assert free.lines_demand.tolist() == [0.0, 0.0]  # no limit, nothing to report


def test_a_latency_bound_thread_keeps_its_line_beside_streams_that_fill_the_node():
    # Max-min: a pointer chase (1 line) among 63 streams keeps its line and sees the curve's top latency,
    # as a latency probe does beside MLC's or Mess's traffic at their peak; the streams share the rest.
    acc = np.tile([1.0, 0.0], (64, 1))
    mlp = np.full(64, 45.5)
    mlp[0] = 1.0
    inp, sol = _solve(MILAN, acc, mlp)
    held = _held(MILAN, inp, sol)
    assert sol.throttle[0] == 1.0
    assert np.all(sol.throttle[1:] > 1.0)
    assert held[1:] == pytest.approx(np.full(63, held[1]))  # equal shares
    assert held.sum() == pytest.approx(MILAN.inflight_lines[0], rel=1e-6)
    assert held[0] < held[1]


def test_below_the_limit_nothing_changes():
    # 4 streams hold 182 lines of the node's 320: the same solution, bit for bit, with or without it.
    acc = np.tile([0.5, 0.5], (4, 1))
    _, free = _solve(MILAN, acc, np.full(4, 45.5), inflight=False)
    inp, capped = _solve(MILAN, acc, np.full(4, 45.5))
    assert np.array_equal(free.rate, capped.rate) and np.all(capped.throttle == 1.0)
    held = _held(MILAN, inp, capped).sum()
    assert capped.lines_demand[0] == pytest.approx(held / MILAN.inflight_lines[0], rel=1e-3)
    assert capped.lines_demand[0] < 1.0


def test_the_results_say_when_a_nodes_lines_bind():
    # 8 streams of 64 lines each on a node whose curve gives it 223 lines: the limit binds, the time
    # series shows the demand over the limit and the explanation says so; 8 pointer chases do not.
    from numasim.report import why

    from .conftest import run_small, small_scenario

    def run(mlp):
        data = small_scenario(
            workloads={"w": {"base": "stream", "cycles_per_op": 1, "llc_misses_per_op": 1, "mlp": mlp,
                             "write_fraction": 0.0}},
            pods=[{"name": "p", "threads": 8, "memory": "256MiB", "profile": "w"}],
            policies=[{"label": "t", "policy": "numactl", "options": {"cpunodebind": [[0]], "membind": [[0]]}}],
            duration="1s", warmup="500ms")
        data["machine"].update(cores_per_node=8)
        return run_small(data)

    limit = float(machine_preset("pacific-broadwell").inflight_lines[0])
    bound, chase = run(64.0), run(1.0)
    demand = bound.run("t").timeseries["lines_demand_max"][-1]
    assert demand > 1.0
    assert f"would keep {demand:.2f}x the lines in flight" in " ".join(why(bound))
    low = chase.run("t").timeseries["lines_demand_max"][-1]
    assert 0.0 < low < 8.0 / limit * 1.01  # one line each at most, over the node's limit
    assert "lines in flight" not in " ".join(why(chase))


def test_far_misses_hold_their_lines_longer_so_a_full_node_moves_less():
    # The mechanism: when the lines bind, threads half of whose misses go to the other socket move
    # less than threads whose misses are all local (Little's law with a longer mean latency); without
    # the limit the two move alike, both bounded by the memory's bandwidth (64 threads on each socket).
    def total(share_remote, inflight):
        nodes = np.repeat([0, 1], 64)
        acc = np.where(nodes[:, None] == np.arange(2)[None, :], 1.0 - share_remote, share_remote)
        _, sol = _solve(MILAN, acc, np.full(128, 45.5), inflight=inflight, nodes=nodes)
        return sol.rate.sum()

    assert total(0.5, True) < 0.9 * total(0.0, True)
    assert total(0.5, False) == pytest.approx(total(0.0, False), rel=0.02)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 80), st.floats(0.0, 1.0), st.floats(1.0, 60.0), st.floats(0.1, 300.0))
def test_a_node_never_holds_more_than_its_lines_and_no_thread_speeds_up(threads, remote, mlp, compute):
    acc = np.tile([1.0 - remote, remote], (threads, 1))
    inp, capped = _solve(MILAN, acc, np.full(threads, mlp), compute_ns=compute)
    assert _held(MILAN, inp, capped).sum() <= MILAN.inflight_lines[0] * (1 + 1e-6)
    assert np.all(capped.throttle >= 1.0)
