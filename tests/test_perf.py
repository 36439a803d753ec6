import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numasim.model.interconnect import Interconnect
from numasim.model.curve import LoadedLatencyCurve
from numasim.sim.perf import RateInputs, solve_rates

CURVE = LoadedLatencyCurve(a=2.0, b=5.0)
L0 = np.array([[80.0, 130.0], [130.0, 80.0]])


def inputs(t: int, misses: float, access: np.ndarray, nodes: np.ndarray) -> RateInputs:
    return RateInputs(
        cpu_node=nodes, capacity=np.ones(t), compute_ns=np.full(t, 1000.0), misses=np.full(t, misses),
        stall_scale=np.full(t, 0.5), access=access, extra_node=np.zeros(2), extra_link=np.zeros((2, 2)),
    )


def test_idle_latency_at_low_load():
    inp = inputs(1, 1.0, np.array([[0.0, 1.0]]), np.array([0]))
    sol = solve_rates(inp, L0, np.array([100.0, 100.0]), Interconnect.direct(np.array([[np.inf, 50.0], [50.0, np.inf]])), CURVE)
    assert sol.latency[0] == pytest.approx(130.0, rel=1e-3)
    assert sol.rate[0] == pytest.approx(1.0 / (1000.0 + 130.0 * 0.5), rel=1e-3)
    assert sol.local[0] == 0.0


def test_no_misses_no_memory_effect():
    acc = np.array([[1.0, 0.0], [0.0, 1.0]])
    a = solve_rates(inputs(2, 0.0, acc, np.array([0, 0])), L0, np.full(2, 10.0), Interconnect.direct(np.full((2, 2), 1.0)), CURVE)
    assert np.allclose(a.rate, 1.0 / 1000.0)


@settings(max_examples=60, deadline=None)
@given(
    t=st.integers(1, 40),
    misses=st.floats(0.1, 200.0),
    bw=st.floats(1.0, 200.0),
    link=st.floats(0.5, 100.0),
    seed=st.integers(0, 1000),
)
def test_bandwidth_never_exceeds_capacity(t, misses, bw, link, seed):
    rng = np.random.default_rng(seed)
    acc = rng.dirichlet([1.0, 1.0], size=t)
    nodes = rng.integers(0, 2, size=t)
    links = Interconnect.direct(np.array([[np.inf, link], [link, np.inf]]))
    sol = solve_rates(inputs(t, misses, acc, nodes), L0, np.array([bw, bw]), links, CURVE, max_iter=2000)
    assert np.all(sol.node_load <= np.array([bw, bw]) * 1.01)
    off = ~np.eye(2, dtype=bool)
    assert np.all(sol.link_load[off] <= link * 1.01)
    assert np.all(sol.rate > 0) and np.all(sol.latency >= 80.0 - 1e-9)


def test_more_load_more_latency():
    acc = np.tile([1.0, 0.0], (20, 1))
    nodes = np.zeros(20, dtype=int)
    light = solve_rates(inputs(20, 5.0, acc, nodes), L0, np.array([100.0, 100.0]), Interconnect.direct(np.full((2, 2), 50.0)), CURVE)
    heavy = solve_rates(inputs(20, 50.0, acc, nodes), L0, np.array([100.0, 100.0]), Interconnect.direct(np.full((2, 2), 50.0)), CURVE)
    assert heavy.latency[0] > light.latency[0]


def test_compiled_access_rows_are_numpys_to_the_last_bit():
    """The solve's access rows (fixed_point.access_rows) against the numpy formulation they replaced,
    on machines of 1 to 20 nodes (numpy sums 8 or more values pairwise: the compiled sum must too)."""
    from numasim.sim.fixed_point import access_rows

    @settings(max_examples=150, deadline=None)
    @given(st.integers(1, 20), st.integers(1, 6), st.integers(1, 12), st.integers(0, 2**32 - 1))
    def check(n_nodes, n_regions, n_threads, seed):
        rng = np.random.default_rng(seed)
        access = rng.random((n_regions, n_nodes)) * 10.0 ** rng.integers(0, 12, size=(n_regions, 1))
        access[rng.random((n_regions, n_nodes)) < 0.3] = 0.0
        access[rng.integers(0, n_regions)] = 0.0  # a region with nothing placed yet
        n_cpus = 4 * n_nodes
        cpu_node = np.repeat(np.arange(n_nodes, dtype=np.int64), 4)
        cpu = rng.integers(-1, n_cpus, size=n_threads)  # -1: numpy's indexing read the last CPU
        shared = rng.integers(-1, n_regions, size=n_threads)
        private = rng.integers(0, n_regions, size=n_threads)
        sf = rng.random(n_threads)
        tids = rng.permutation(n_threads).astype(np.int64)
        out = np.empty((n_threads, n_nodes))
        access_rows(tids, cpu, shared, private, sf, cpu_node, access, out)

        def dist(rids):
            placed = access[rids]
            total = placed.sum(axis=1, keepdims=True)
            return np.divide(placed, total, out=np.zeros(placed.shape), where=total > 0)

        local = np.zeros((n_threads, n_nodes))
        local[np.arange(n_threads), cpu_node[cpu[tids]]] = 1.0
        sh, pr = dist(shared[tids]), dist(private[tids])
        sh = np.where(sh.sum(axis=1, keepdims=True) > 0, sh, local)
        pr = np.where(pr.sum(axis=1, keepdims=True) > 0, pr, local)
        want = sf[tids][:, None] * sh + (1.0 - sf[tids][:, None]) * pr
        assert np.array_equal(out, want)

    check()
