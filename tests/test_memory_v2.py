"""Metamorphic checks of the memory system v2: writes, dependent misses, coherence, SMT by stall, link graphs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import numasim
from numasim.model.machine import Machine, MachineSpec
from numasim.model.presets import load_preset
from numasim.sim.perf import lines_in_flight

from .conftest import run_small, small_scenario


def _one_pod(profile: dict[str, Any], threads: int = 1, cpunode: int = 0, memnode: int = 0, **machine: Any) -> dict:
    """One pod of ``threads`` threads pinned by numactl to node ``cpunode``, memory on ``memnode``."""
    data = small_scenario(
        workloads={"w": profile},
        pods=[{"name": "p", "threads": threads, "memory": "256MiB", "profile": "w"}],
        policies=[{"label": "n", "policy": "numactl",
                   "options": {"cpunodebind": [[cpunode]], "membind": [[memnode]]}}],
        duration="1s", warmup="500ms",
    )
    data["machine"].update(machine)
    return data


def _tput(data: dict) -> float:
    return run_small(data).run(data["policies"][0]["label"]).throughput


CHASE = {"cycles_per_op": 10, "llc_misses_per_op": 1, "mlp": 8, "dependent_fraction": 1.0,
         "shared_fraction": 0.0, "cache_footprint_mib": 0.1}
STREAMY = {"cycles_per_op": 10, "llc_misses_per_op": 1, "mlp": 8, "dependent_fraction": 0.0,
           "shared_fraction": 0.0, "cache_footprint_mib": 0.1}


def test_fully_dependent_misses_pay_the_full_latency_ratio():
    m = load_preset("machines", "pacific-broadwell")
    local, remote = _tput(_one_pod(CHASE)), _tput(_one_pod(CHASE, memnode=1))
    ratio = m["remote_latency_ns"] / m["local_latency_ns"]
    compute = 10 / m["frequency_ghz"]
    expected = (compute + m["remote_latency_ns"]) / (compute + m["local_latency_ns"])
    assert local / remote == pytest.approx(expected, rel=0.01)
    assert expected > 0.9 * ratio


def test_overlapped_misses_pay_less_than_dependent_ones():
    dep = _tput(_one_pod(CHASE)) / _tput(_one_pod(CHASE, memnode=1))
    ind = _tput(_one_pod(STREAMY)) / _tput(_one_pod(STREAMY, memnode=1))
    assert 1.0 < ind < dep - 0.05


def test_writes_load_memory_but_not_the_core():
    heavy = {**STREAMY, "mlp": 16}
    # Few threads, far from the bandwidth: write-backs change nothing the core waits for.
    assert _tput(_one_pod({**heavy, "write_fraction": 0.5})) == pytest.approx(_tput(_one_pod(heavy)), rel=0.01)
    # Enough threads to saturate the node: write-backs take bandwidth, and a costlier write takes more.
    sat = dict(threads=4, memory_bandwidth_gbps=8.0, loaded_latency_peak_gbps=115.8)
    none = _tput(_one_pod(heavy, **sat))
    writes = _tput(_one_pod({**heavy, "write_fraction": 0.5}, **sat))
    costly = _tput(_one_pod({**heavy, "write_fraction": 0.5}, bandwidth_1to1_gbps=80.0, **sat))
    assert writes < none * 0.9
    assert costly < writes * 0.97


def test_write_fraction_zero_is_the_v1_model():
    base = small_scenario(duration="2s", policies=[{"label": "cfs", "policy": "cfs"}])
    explicit = small_scenario(duration="2s", policies=[{"label": "cfs", "policy": "cfs"}])
    explicit["workloads"]["java"].update(write_fraction=0.0, dependent_fraction=0.0, coherence_misses_per_op=0.0)
    assert run_small(base).run("cfs").throughput == run_small(explicit).run("cfs").throughput


SHARED = {"cycles_per_op": 2000, "llc_misses_per_op": 0, "shared_fraction": 1.0, "cache_footprint_mib": 0.1,
          "coherence_misses_per_op": 5}


def _spread(profile: dict, nodes: list[list[int]], threads: int = 4, **machine: Any) -> float:
    data = small_scenario(
        workloads={"w": profile},
        pods=[{"name": "db", "threads": threads, "memory": "256MiB", "profile": "w"}],
        policies=[{"label": "t", "policy": "taskset", "options": {"cpus": nodes}}],
        duration="1s", warmup="500ms",
    )
    data["machine"].update(machine)
    return _tput(data)


def test_no_shared_writes_no_coherence_cost():
    quiet = {**SHARED, "coherence_misses_per_op": 0}
    # CPUs 0-7 alternate between the nodes on the pacific machine: "0,2,4,6" is node 0.
    assert _spread(quiet, ["0,2,4,6"]) == pytest.approx(_spread(quiet, ["0-3"]), rel=0.005)


def test_a_single_thread_has_no_one_to_share_with():
    alone = {**SHARED}
    assert _spread(alone, ["0"], threads=1) == pytest.approx(_spread({**SHARED, "coherence_misses_per_op": 0}, ["0"], threads=1), rel=0.005)


def test_shared_writes_across_sockets_cost_more_than_within_one():
    kw = dict(c2c_local_ns=45.0, c2c_remote_ns=120.0)
    one, two = _spread(SHARED, ["0,2,4,6"], **kw), _spread(SHARED, ["0-3"], **kw)
    assert two < one * 0.9
    # On one socket there is no remote cache to go to.
    one_socket = dict(sockets=1, cores_per_node=8, **kw)
    assert _spread(SHARED, ["0-3"], **one_socket) == pytest.approx(_spread(SHARED, ["4-7"], **one_socket), rel=0.005)


def _siblings(profile: dict, **machine: Any) -> float:
    """Throughput of two threads on one core's two hardware threads, relative to two cores."""
    def run(cpus: str) -> float:
        data = small_scenario(
            workloads={"w": profile},
            pods=[{"name": "p", "threads": 2, "memory": "64MiB", "profile": "w"}],
            policies=[{"label": "ts", "policy": "taskset", "options": {"cpus": [cpus]}}],
            duration="1s", warmup="500ms",
        )
        data["machine"].update(smt=True, cpu_numbering="block", **machine)
        return _tput(data)
    return run("0,8") / run("0,1")


def test_smt_gains_more_for_threads_that_stall():
    compute = _siblings({**CHASE, "llc_misses_per_op": 0})
    chase = _siblings({**CHASE, "cycles_per_op": 100})
    assert compute == pytest.approx(1.25 / 2, rel=0.01)
    assert chase > 0.9  # the pipeline is idle while a dependent miss is out: the sibling fills it


@pytest.mark.parametrize("share, pair", [(None, 1.25), (0.8, 1.25), (1.0, 1.0), (0.5, 2.0), (0.625, 1.6)])
def test_smt_pair_of_compute_bound_threads_shares_the_core_by_pipeline_share(share, pair):
    # Two miss-free threads on one core's hyperthreads each get 1 / max(2u, 1) of a core: with
    # the default u (1 / smt_yield) the pair gets smt_yield; threads that fill their core's
    # busiest resource alone (1.0) gain nothing; two that use half of it both run at full speed.
    profile = {**CHASE, "llc_misses_per_op": 0}
    if share is not None:
        profile["pipeline_share"] = share
    assert _siblings(profile) == pytest.approx(min(pair, 2.0) / 2, rel=0.01)


def test_pipeline_share_does_not_matter_to_a_thread_alone_on_its_core():
    profile = {**CHASE, "llc_misses_per_op": 0}
    full = _tput(_one_pod({**profile, "pipeline_share": 1.0}, smt=True, cpu_numbering="block"))
    assert full == pytest.approx(_tput(_one_pod(profile, smt=True, cpu_numbering="block")), rel=1e-9)


def test_smt_siblings_split_the_out_of_order_window():
    stream = {**STREAMY, "mlp": 16, "cycles_per_op": 1}
    assert _siblings(stream) == pytest.approx(0.5, abs=0.05)  # two streams through one core's window: no gain
    # A thread that overlaps only one miss loses nothing from a smaller window.
    assert _siblings({**STREAMY, "mlp": 1, "cycles_per_op": 1}) > 0.9


def test_core_mlp_caps_what_one_thread_overlaps():
    stream = {**STREAMY, "mlp": 16, "cycles_per_op": 1}
    capped, free = _tput(_one_pod(stream, core_mlp=4)), _tput(_one_pod(stream))
    assert 3.6 < free / capped < 4.0  # the memory part takes 4x; the half-ns of computing does not


def test_thread_mlp_limits_a_stream_and_core_mlp_what_its_siblings_add():
    stream = {**STREAMY, "mlp": "hardware", "cycles_per_op": 1}
    # A machine that does not give its lines in flight: a stream keeps 16, exactly as mlp 16 (v1).
    assert _tput(_one_pod(stream)) == _tput(_one_pod({**stream, "mlp": 16}))
    # Far from the node's bandwidth, one thread's rate follows the lines it keeps.
    assert 1.8 < _tput(_one_pod(stream, thread_mlp=8)) / _tput(_one_pod(stream, thread_mlp=4)) < 2.0
    # A workload that overlaps fewer misses than a thread keeps does not notice the limit.
    two = {**stream, "mlp": 2}
    assert _tput(_one_pod(two, thread_mlp=8)) == pytest.approx(_tput(_one_pod(two)), rel=1e-6)  # touch differs
    # Siblings share the core's lines: as many as one thread's, no gain; twice, each keeps its own.
    assert _siblings(stream, thread_mlp=4) == pytest.approx(0.5, abs=0.05)  # no core_mlp: the v1 split
    assert _siblings(stream, thread_mlp=4, core_mlp=4) == pytest.approx(0.5, abs=0.05)
    assert _siblings(stream, thread_mlp=4, core_mlp=6) == pytest.approx(0.75, abs=0.05)
    assert _siblings(stream, thread_mlp=4, core_mlp=8) > 0.95
    # A thread that keeps fewer lines than its share of the core loses nothing to a sibling.
    assert _siblings(two, thread_mlp=4, core_mlp=4) > 0.95


@given(mlp=st.floats(1, 64), thread=st.floats(1, 1024) | st.just(math.inf),
       core=st.floats(1, 1024) | st.just(math.inf), k=st.integers(1, 8))
def test_lines_in_flight_never_exceed_the_core_and_fall_with_siblings(mlp, thread, core, k):
    alone = lines_in_flight(mlp, thread, core, 1)
    shared = lines_in_flight(mlp, thread, core, k)
    assert 1.0 <= shared <= alone <= max(1.0, min(mlp, thread, core))
    if math.isfinite(core):
        assert k * shared <= max(core, k) * (1 + 1e-12)  # the siblings together keep at most the core's lines
    else:
        assert shared == max(1.0, alone / k)  # v1: the siblings split what one thread keeps


def _machine(**over: Any) -> Machine:
    base = dict(sockets=4, cores_per_node=2, frequency_ghz=2.0, memory_per_node="1GiB", local_latency_ns=80.0,
                memory_bandwidth_gbps=50.0, interconnect_gbps=20.0, loaded_latency=[[1, 80], [20, 85], [35, 100], [45, 150]],
                loaded_latency_peak_gbps=50.0)
    return Machine.from_spec(MachineSpec(**{**base, **over}))


def test_default_interconnect_links_every_socket_pair_directly():
    m = _machine(remote_latency_ns=130.0)
    assert np.array_equal(m.interconnect.path_len, 1 - np.eye(4, dtype=int))
    assert len(m.interconnect.bandwidth) == 12


def test_a_ring_routes_opposite_sockets_over_two_links():
    ring = [{"sockets": [a, (a + 1) % 4], "gbps": 20.0} for a in range(4)]
    m = _machine(links=ring, hop_latency_ns=50.0)
    assert m.interconnect.path_len[0, 2] == 2 and m.interconnect.path_len[0, 1] == 1
    assert m.latency[0, 2] == 180.0 and m.latency[0, 1] == 130.0
    assert len(m.interconnect.bandwidth) == 8  # 4 links, both directions


def test_two_hop_traffic_loads_both_links():
    from numasim.sim.perf import RateInputs, solve_rates

    ring = [{"sockets": [a, (a + 1) % 4], "gbps": 20.0} for a in range(4)]
    m = _machine(links=ring, hop_latency_ns=50.0)
    acc = np.zeros((1, 4))
    acc[0, 2] = 1.0  # a thread on node 0 reads node 2's memory
    inp = RateInputs(cpu_node=np.array([0]), capacity=np.ones(1), compute_ns=np.ones(1), misses=np.ones(1),
                     stall_scale=np.full(1, 1 / 16), access=acc, extra_node=np.zeros(4), extra_link=np.zeros((4, 4)))
    sol = solve_rates(inp, m.latency, m.node_bandwidth, m.interconnect, m.curve)
    loaded = np.flatnonzero(sol.link_util > 1e-9)
    assert len(loaded) == 2  # 2 -> 1 -> 0 (the lower socket id on a tie)
    assert {tuple(m.interconnect.ends[k]) for k in loaded} == {(2, 1), (1, 0)}


# Two pairs of sockets (0-1, 2-3) joined within the pair, each socket also joined to one of two
# node controllers (routers 4 and 5) that are joined to each other: an 8-socket glue topology in small.
GLUED = ([{"sockets": [0, 1], "gbps": 20.0}, {"sockets": [2, 3], "gbps": 20.0}]
         + [{"sockets": [s, 4 + s // 2], "gbps": 10.0} for s in range(4)] + [{"sockets": [4, 5], "gbps": 15.0}])


def test_traffic_between_pairs_crosses_the_node_controllers():
    m = _machine(links=GLUED, routers=2, hop_latency_ns=50.0)
    ic = m.interconnect
    assert ic.path_len[0, 1] == 1 and ic.path_len[0, 2] == 3  # 2 -> r1 -> r0 -> 0
    assert m.latency[0, 2] == 80.0 + 3 * 50.0
    assert "socket r0 -> r1" in ic.names and "socket 2 -> r1" in ic.names


def test_a_node_controller_link_is_a_bottleneck_shared_by_the_pairs_it_joins():
    from numasim.sim.perf import RateInputs, solve_rates

    m = _machine(links=GLUED, routers=2, hop_latency_ns=50.0)
    # Threads on nodes 0 and 1 stream from nodes 2 and 3: all of it crosses the 15 GB/s router link.
    acc = np.zeros((2, 4))
    acc[0, 2] = acc[1, 3] = 1.0
    inp = RateInputs(cpu_node=np.array([0, 1]), capacity=np.ones(2), compute_ns=np.ones(2), misses=np.ones(2),
                     stall_scale=np.full(2, 1 / 64), access=acc, extra_node=np.zeros(4), extra_link=np.zeros((4, 4)))
    sol = solve_rates(inp, m.latency, m.node_bandwidth, m.interconnect, m.curve)
    shared = m.interconnect.names.index("socket r1 -> r0")
    assert sol.link_util[shared] == max(sol.link_util)  # the busiest link: both flows cross it
    assert sol.link_load[0, 2] + sol.link_load[1, 3] <= 15.0 * 1.0001  # bytes/ns = GB/s, within its bandwidth


def _remote_streams(writes: float, budget: str):
    """Threads on nodes 0 and 1 of a 2-socket machine, each streaming from the other node's memory."""
    from numasim.sim.perf import RateInputs, solve_rates

    m = _machine(sockets=2, socket_link_budget=budget, remote_latency_ns=130.0, memory_bandwidth_gbps=200.0,
                 loaded_latency_peak_gbps=200.0, loaded_latency=[[1, 80], [100, 85], [150, 100], [190, 150]])
    acc = np.array([[0.0, 1.0], [1.0, 0.0]])
    inp = RateInputs(cpu_node=np.array([0, 1]), capacity=np.ones(2), compute_ns=np.ones(2), misses=np.ones(2),
                     stall_scale=np.full(2, 1 / 64), access=acc, extra_node=np.zeros(2), extra_link=np.zeros((2, 2)),
                     writes=np.full(2, writes))
    return m, solve_rates(inp, m.latency, m.node_bandwidth, m.interconnect, m.curve)


def test_a_shared_link_budget_changes_nothing_for_traffic_in_one_direction():
    from numasim.sim.perf import RateInputs, solve_rates

    runs = []
    for budget in ("per_direction", "shared"):
        m = _machine(sockets=2, socket_link_budget=budget, remote_latency_ns=130.0)
        acc = np.array([[0.0, 1.0]])  # one thread on node 0 reads node 1: data flows 1 -> 0 only
        inp = RateInputs(cpu_node=np.array([0]), capacity=np.ones(1), compute_ns=np.ones(1), misses=np.ones(1),
                         stall_scale=np.full(1, 1 / 64), access=acc, extra_node=np.zeros(2), extra_link=np.zeros((2, 2)))
        runs.append(solve_rates(inp, m.latency, m.node_bandwidth, m.interconnect, m.curve).rate[0])
    assert runs[0] == runs[1]


def test_a_shared_link_budget_carries_both_directions_within_one_bandwidth():
    # Reads one way and write-backs the other: each direction has its own 20 GB/s, or both share 20.
    _, free = _remote_streams(0.5, "per_direction")
    m, shared = _remote_streams(0.5, "shared")
    # Both links, both directions, GB/s.
    assert free.link_traffic.sum() > 20.0 * 1.5  # two directions of 20 GB/s each, well used
    assert shared.link_traffic.sum() <= 20.0 * 1.0001 * 1.02  # one budget (the curve overshoots by a hair at most)
    assert shared.rate.sum() < 0.6 * free.rate.sum()
    # The per-link traffic reported is the link's own, in its direction (not the budget's).
    assert np.allclose(shared.link_util * 20.0, m.interconnect.budget_load(shared.link_traffic))
    assert np.allclose(m.interconnect.budget_load(shared.link_traffic), shared.link_traffic.sum())


@pytest.mark.parametrize("links, message", [
    ([{"sockets": [0, 1], "gbps": 10}], "unreachable"),
    ([{"sockets": [0, 7], "gbps": 10}], "sockets 0-3"),
    ([{"sockets": [2, 2], "gbps": 10}], "itself"),
])
def test_bad_links_are_refused(links, message):
    with pytest.raises(ValueError, match=message):
        _machine(links=links, hop_latency_ns=50.0)


def test_bad_routers_are_refused():
    with pytest.raises(ValueError, match="router 2 unreachable"):
        _machine(links=GLUED, routers=3, hop_latency_ns=50.0)  # router 2 joins nothing
    with pytest.raises(ValueError, match="routers need links"):
        _machine(routers=1, remote_latency_ns=130.0)
    with pytest.raises(ValueError, match="routers 4-5"):
        _machine(links=GLUED + [{"sockets": [0, 6], "gbps": 1.0}], routers=2, hop_latency_ns=50.0)


def test_write_cost_from_the_mlc_mix():
    assert _machine(remote_latency_ns=130.0).write_cost == 1.0
    assert _machine(remote_latency_ns=130.0, bandwidth_1to1_gbps=40.0).write_cost == pytest.approx(1.5)


CXL = {"socket": 0, "memory": "64GiB", "latency_ns": 250.0, "bandwidth_gbps": 20.0}


def test_a_cpu_less_node_with_nothing_on_it_changes_nothing():
    plain = small_scenario(duration="2s", policies=[{"label": "cfs", "policy": "cfs"}, {"label": "numactl", "policy": "numactl"},
                                                    {"label": "esxi", "policy": "esxi"}])
    with_cxl = small_scenario(duration="2s", policies=plain["policies"])
    with_cxl["machine"]["memory_nodes"] = [CXL]
    a, b = run_small(plain), run_small(with_cxl)
    for label in ("cfs", "numactl", "esxi"):
        assert b.run(label).throughput == pytest.approx(a.run(label).throughput, rel=1e-6), label
        assert b.run(label).pods[0].memory_per_node_bytes[2] == 0


def test_memory_bound_to_a_cxl_node_pays_its_latency():
    m = load_preset("machines", "pacific-broadwell")
    local = _tput(_one_pod(CHASE, memory_nodes=[CXL]))
    cxl = _tput(_one_pod(CHASE, memnode=2, memory_nodes=[CXL]))
    compute = 10 / m["frequency_ghz"]
    assert local / cxl == pytest.approx((compute + 250.0) / (compute + m["local_latency_ns"]), rel=0.01)
    # From the other socket the CXL node is as far again as the other socket's DRAM.
    far = _tput(_one_pod(CHASE, cpunode=1, memnode=2, memory_nodes=[CXL]))
    extra = m["remote_latency_ns"] - m["local_latency_ns"]
    assert cxl / far == pytest.approx((compute + 250.0 + extra) / (compute + 250.0), rel=0.01)


def test_a_cpu_less_node_cannot_take_cpus():
    data = _one_pod(CHASE, cpunode=2, memory_nodes=[CXL])
    with pytest.raises(numasim.ScenarioError, match="node 2 has no CPUs"):
        numasim.from_dict(data)


def _interleaved(nodes: list[int], weights: dict | None = None, cxl_latency: float = 250.0, **machine: Any) -> float:
    stream = {**STREAMY, "mlp": 32, "cycles_per_op": 1}
    data = small_scenario(
        workloads={"w": stream},
        pods=[{"name": "p", "threads": 4, "memory": "1GiB", "profile": "w"}],
        policies=[{"label": "n", "policy": "numactl", "options": {
            "cpunodebind": [[0]], "interleave": [nodes], **({"interleave_weights": weights} if weights else {})}}],
        duration="1s", warmup="500ms",
    )
    data["machine"].update(memory_nodes=[{**CXL, "bandwidth_gbps": 4.0, "latency_ns": cxl_latency}], memory_bandwidth_gbps=8.0,
                           **machine)
    return run_small(data).run("n").memory_gbps


def test_interleaving_onto_cxl_adds_its_bandwidth_in_proportion_to_the_weights():
    # A CXL node as near as DRAM (85 ns), so that the socket's lines in flight do not bind first.
    dram = _interleaved([0], cxl_latency=85.0)
    even = _interleaved([0, 2], cxl_latency=85.0)
    weighted = _interleaved([0, 2], {0: 2, 2: 1}, cxl_latency=85.0)
    assert dram == pytest.approx(8.0, rel=0.03)  # DRAM alone saturates
    assert even == pytest.approx(8.0, rel=0.05)  # 1:1: the 4 GB/s CXL node caps its half, DRAM carries as much
    # 2:1 matches the bandwidths, but both nodes at their curve's top would need 1.5 times the lines in flight
    # that saturate DRAM alone, which is all the socket has (docs/model.md, "Lines in flight per node"):
    # more than DRAM alone, less than the sum.
    assert 1.2 * dram < weighted < 0.95 * 12.0
    # At CXL's own 250 ns its misses hold the socket's lines in flight longer (docs/model.md, "Lines in flight
    # per node"): the same interleaves move less than those bounds.
    assert _interleaved([0, 2]) < 0.95 * even
    assert _interleaved([0, 2], {0: 2, 2: 1}) < 0.95 * weighted


def _on_cxl(write_fraction: float, write_cost_one: bool = True, **node: Any) -> float:
    """GB/s four streaming threads of node 0 move to and from a CXL node (reads and write-backs); a
    write-back costs the device's memory one read unless ``write_cost_one`` is False (then the
    preset's own cost, 1.623 reads)."""
    stream = {**STREAMY, "mlp": 32, "cycles_per_op": 1, "write_fraction": write_fraction}
    cost = {"bandwidth_1to1_gbps": 115.8} if write_cost_one else {}  # 1:1 mix = all reads: cost 1
    data = _one_pod(stream, threads=4, memnode=2, memory_nodes=[{**CXL, "bandwidth_gbps": 8.0, **node}], **cost)
    run = run_small(data).run("n")
    assert run.timeseries["node_util_max"][-1] == pytest.approx(1.0, rel=1e-3)  # saturated: memory or port
    return run.memory_gbps


def test_a_port_limits_each_direction_so_a_mix_moves_more_than_reads():
    """A CXL device's port is full duplex: read data one way, write-backs the other (docs/model.md)."""
    # Reads only: the port (4 GB/s) caps them below the device's memory (8 GB/s).
    assert _on_cxl(0.0, port_gbps=4.0) == pytest.approx(4.0, rel=0.03)
    # One write-back per read: 4 GB/s each way through the port, 8 in all, the device's memory
    # taking reads + 1 x writes (this machine's write cost is 1) = 8 GB/s: both saturate.
    assert _on_cxl(1.0, port_gbps=4.0) == pytest.approx(8.0, rel=0.03)
    # One per two reads: the read direction caps at 4, so 6 in all.
    assert _on_cxl(0.5, port_gbps=4.0) == pytest.approx(6.0, rel=0.03)
    # With the preset's write cost (1.623 reads a write-back) the device's memory binds before the
    # port at one write-back per read: reads + 1.623 x writes = 8, so 2 x 8 / 2.623 = 6.1 in all.
    assert _on_cxl(1.0, write_cost_one=False, port_gbps=4.0) == pytest.approx(2 * 8.0 / 2.623, rel=0.03)
    # Without a port the same node is DRAM-like: the mix moves no more than reads alone.
    assert _on_cxl(1.0) <= _on_cxl(0.0) * 1.001


def test_a_port_wider_than_the_device_changes_nothing():
    for wf in (0.0, 0.5):
        assert _on_cxl(wf, port_gbps=1000.0) == _on_cxl(wf), wf


def test_page_copies_into_a_port_node_take_its_write_direction():
    """Copies out of a CXL node leave through the port's read direction, copies into it arrive through
    the other: 6 GB/s each way through an 8 GB/s port is 0.75 of it, not 1.5 (extra_link's rows and columns)."""
    from numasim.sim.perf import RateInputs, solve_rates

    m = _machine(sockets=2, remote_latency_ns=130.0, memory_nodes=[{**CXL, "bandwidth_gbps": 100.0, "port_gbps": 8.0}])
    n = m.n_nodes
    extra_link = np.zeros((n, n))
    extra_link[0, 2] = 6.0  # from the CXL node to node 0
    extra_link[2, 1] = 6.0  # from node 1 into the CXL node
    extra_node = np.array([6.0, 6.0, 12.0])
    none = np.zeros(0)
    inp = RateInputs(cpu_node=np.zeros(0, dtype=np.int64), capacity=none, compute_ns=none, misses=none,
                     stall_scale=none, access=np.zeros((0, n)), extra_node=extra_node, extra_link=extra_link)
    sol = solve_rates(inp, m.latency, m.node_bandwidth, m.interconnect, m.curve, m.write_cost, m.node_curve,
                      None, m.node_port)
    assert sol.node_util[2] == pytest.approx(0.75)
    assert sol.node_util[0] == pytest.approx(6.0 / 50.0)  # a DRAM node: its bandwidth only


def test_the_local_latency_series_is_the_cpu_nodes_own_memory():
    """A CPU-less node's own latency is no one's local latency: the series average over nodes with CPUs
    (a light load on the pacific machine: near its 85 ns), and CXL counts among the remote nodes."""
    m = load_preset("machines", "pacific-broadwell")
    data = _one_pod(CHASE, memory_nodes=[CXL])
    ts = run_small(data).run("n").timeseries
    assert ts["latency_local_ns"][-1] == pytest.approx(m["local_latency_ns"], rel=0.05)
    assert ts["latency_remote_ns"][-1] > m["remote_latency_ns"]  # the other socket's DRAM and the CXL node


@given(sockets=st.integers(1, 6), nps=st.integers(1, 3), routers=st.integers(0, 2),
       extra=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=6),
       memory_on=st.lists(st.integers(0, 5), max_size=3))
def test_the_route_count_that_bounds_the_build_is_the_built_routes(sockets, nps, routers, extra, memory_on):
    from types import SimpleNamespace

    from numasim.model.interconnect import build_interconnect, route_entries

    n = sockets + routers
    chain = [(v, v + 1) for v in range(n - 1)]  # connected, then random chords
    links = [SimpleNamespace(sockets=(a, b), gbps=1.0) for a, b in chain + [(a % n, b % n) for a, b in extra]
             if a % n != b % n] if n > 1 else None
    mem = [s % sockets for s in memory_on]
    node_socket = np.concatenate([np.repeat(np.arange(sockets), nps), mem]).astype(np.int64)
    per_socket = [nps + mem.count(s) for s in range(sockets)]
    if routers and not links:
        return
    ic = build_interconnect(sockets, links, node_socket, 10.0, 20.0, routers)
    assert route_entries(sockets, links, routers, per_socket) == ic.route.nnz


def test_a_machine_whose_routes_are_too_many_to_build_is_refused_before_building():
    ring = [{"sockets": [s, (s + 1) % 64], "gbps": 10.0} for s in range(64)]
    with pytest.raises(ValueError, match="routes cross 16,792,576 links"):
        _machine(sockets=64, nodes_per_socket=16, cores_per_node=1, links=ring, hop_latency_ns=10.0)
