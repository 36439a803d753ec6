"""Memory tiering (NUMA balancing mode 2) and hot/cold memory: metamorphic checks of the mechanism."""

from __future__ import annotations

import numpy as np
import pytest

from numasim.model.presets import machine_preset
from numasim.sim.memory import CHUNK, Memory, _weights

from .conftest import run_small

GIB = 2**30

# One socket of 8 cores with 2 GiB of DRAM and an 8 GiB CXL expander; a STREAM-like pod of
# 3 GiB, a fifth of it hot (90 % of the accesses): a third of it lands on the CXL node.
TIERED = {
    "name": "tiered",
    "machine": {"preset": "cascadelake-8280", "sockets": 1, "cores_per_node": 8, "smt": False,
                "memory_per_node": "2GiB",
                "memory_nodes": [{"kind": "cxl", "socket": 0, "memory": "8GiB", "latency_ns": 250, "bandwidth_gbps": 30}]},
    "workloads": {"svc": {"base": "stream", "mlp": 8, "hot_fraction": 0.2, "hot_access_share": 0.9}},
    "pods": [{"name": "svc", "threads": 4, "memory": "3GiB", "profile": "svc"}],
    "duration": "12s", "warmup": "6s", "sample_interval": "500ms", "replications": 1,
}


def _variant(label: str, **options) -> dict:
    return {"label": label, "policy": "cfs", "options": options}


@pytest.fixture(scope="module")
def tiered():
    return run_small({**TIERED, "policies": [
        _variant("none"),
        _variant("tiering", numa_balancing_tiering=True),
        _variant("demotion", numa_balancing_tiering=True, demotion_enabled=True),
        # A fault is hot with probability 1 - exp(-access rate x threshold): at 1e-6 ms about one
        # chunk of the run's thousands of faults still passes; at 1e-9 ms, none in expectation.
        _variant("cold", numa_balancing_tiering=True, demotion_enabled=True, hot_threshold_ms=1e-9),
        _variant("limited", numa_balancing_tiering=True, demotion_enabled=True, promote_rate_limit_mbps=20),
    ]})


def test_promotion_with_demotion_puts_the_hot_memory_on_dram(tiered):
    none, tier = tiered.run("none"), tiered.run("demotion")
    # Without tiering DRAM serves its share of the bytes (2 of 3 GiB) and so of the accesses.
    assert none.locality == pytest.approx(2 / 3, abs=0.02)
    # With it the hot fifth (0.6 GiB, 90 % of the accesses) sits in DRAM with 1.4 GiB of cold:
    # 0.9 + 0.1 x 1.4 / 2.4 of the accesses.
    assert tier.locality == pytest.approx(0.9 + 0.1 * 1.4 / 2.4, abs=0.02)
    assert tier.pages_promoted_bytes > 0 and tier.pages_demoted_bytes > 0
    assert tiered.relative("demotion") > 1.2


def test_no_room_and_no_demotion_means_no_promotion(tiered):
    # DRAM is full and reclaim may not demote: nothing moves, only the hinting faults cost.
    tier = tiered.run("tiering")
    assert tier.hinting_faults > 0 and tier.pages_promoted_bytes == 0
    assert tiered.relative("tiering") == pytest.approx(1.0, abs=0.005)


def test_nothing_is_hot_below_a_tiny_threshold(tiered):
    assert tiered.run("cold").pages_promoted_bytes == 0


def test_the_rate_limit_bounds_promotion(tiered):
    # 20 MB/s over the 6 s window (whole chunks: at most one more per second).
    promoted = tiered.run("limited").pages_promoted_bytes
    assert 0 < promoted <= 20 * 2**20 * 6 + 6 * CHUNK
    assert promoted < tiered.run("demotion").pages_promoted_bytes


def test_tiering_without_a_slower_tier_changes_nothing():
    machine = {k: v for k, v in TIERED["machine"].items() if k != "memory_nodes"}
    res = run_small({**TIERED, "machine": {**machine, "memory_per_node": "8GiB"},
                     "policies": [_variant("none"), _variant("tiering", numa_balancing_tiering=True)]})
    assert res.run("tiering").hinting_faults == 0
    assert res.run("tiering").throughput == res.run("none").throughput


def test_hot_weights_average_one_and_leave_uniform_memory_alone():
    for n, f in [(10, 0.2), (7, 0.5), (1000, 0.05)]:
        w = _weights(n, (f, 0.9))
        assert w.mean() == pytest.approx(1.0)
        hot = w > 1
        assert hot.sum() == pytest.approx(n * f, abs=1)
        assert w[hot].sum() / w.sum() == pytest.approx(0.9)
    # A region without hot memory: the access distribution is the byte distribution.
    mem = Memory(machine_preset("cascadelake-8280"))
    rid = mem.add_region(0, -1, 10 * CHUNK)
    hot = mem.add_region(0, 1, 10 * CHUNK, (0.2, 0.9))
    for r in (rid, hot):
        mem._set_nodes(r, 0, 5, 0)
        mem._set_nodes(r, 5, 10, 1)
    assert mem.distributions(np.array([rid]))[0].tolist() == [0.5, 0.5]
    # Hot chunks 4 and 9 (evenly spread): one on each node, so the split stays even.
    assert mem.distributions(np.array([hot]))[0] == pytest.approx([0.5, 0.5])
    mem.move_chunks(hot, np.array([4]), 1)  # node 0's hot chunk moves: node 1 has both hot ones and 4 of the 8 cold
    assert mem.distributions(np.array([hot]))[0][1] == pytest.approx(0.9 + 0.1 * 4 / 8)


def _tiering(**options):
    from numasim.policies.cfs import CFSOptions
    from numasim.policies.tiering import Tiering

    m = machine_preset("cascadelake-8280")
    return Tiering(m, CFSOptions(numa_balancing_tiering=True, **options), np.random.default_rng(0))


@pytest.mark.parametrize("candidates_mb, expected_ms", [
    (0.0, 1125.0),  # far fewer candidates than the limit lets through: the threshold rises by 2 x 1000 / 16
    (100 * 60 * 1.0, 1000.0),  # within 90-110 % of the limit's worth: unchanged
    (100 * 60 * 2.0, 875.0),  # twice the limit's worth: it drops by one step
])
def test_hot_threshold_follows_the_candidates_of_each_period(candidates_mb, expected_ms):
    t = _tiering(promote_rate_limit_mbps=100.0)
    assert t._threshold(0, 0) == 1000.0  # the period starts
    t.candidates[0] = candidates_mb * 2**20
    assert t._threshold(0, 59_000 * MS_) == 1000.0  # not yet a whole scan_period_max (60 s)
    assert t._threshold(0, 61_000 * MS_) == pytest.approx(expected_ms)


def test_hot_threshold_stays_within_an_eighth_and_twice_the_default():
    t = _tiering(promote_rate_limit_mbps=1.0)
    now = 0
    for _ in range(40):  # every period floods the limit: down to 1000 / 8 and no lower
        t.candidates[0] = t.candidates.get(0, 0.0) + 10 * 60 * 2**20
        now += 61_000 * MS_
        th = t._threshold(0, now)
    assert th == pytest.approx(125.0)
    quiet = _tiering()
    for k in range(1, 40):  # no candidates: up to 2000 and no higher
        th = quiet._threshold(0, k * 61_000 * MS_)
    assert th == pytest.approx(2000.0)
    assert _tiering(hot_threshold_adjust=False)._threshold(0, 10**15) == 1000.0


MS_ = 1_000_000


def _sim_after(data: dict):
    import numasim
    from numasim.runner import build_pods
    from numasim.sim.kernel import Simulation

    sc = numasim.from_dict(data)
    v = sc.variants[0]
    m = sc.machine_of(v)
    sim = Simulation(m, build_pods(sc, v), v.policy(v.options, m, np.random.default_rng(1)),
                     sc.spec.duration, sc.spec.warmup, sc.spec.sample_interval, rng=np.random.default_rng(2))
    sim.run()
    return sim


@pytest.mark.parametrize("threads, pays", [(4, False), (12, True)])
def test_kswapd_takes_cpu_time_only_when_its_node_has_no_idle_cpu(threads, pays):
    data = {**TIERED, "duration": "1s", "warmup": "500ms", "policies": [_variant("cfs")],
            "pods": [{"name": "svc", "replicas": threads // 4, "threads": 4, "memory": "256MiB", "profile": "svc"}]}
    sim = _sim_after(data)
    before = list(sim.t_debt)
    sim._kswapd(0, 1e6)  # 1 ms of copying by node 0's reclaim thread
    added = np.array(sim.t_debt) - np.array(before)
    if not pays:
        assert not added.any()  # 4 threads on 8 CPUs: it runs on an idle one
    else:
        cpu = min(range(8), key=lambda c: sim.nr[c])
        on = sim._runqueue(cpu)
        assert added.sum() == pytest.approx(1e6)  # all of it, from one CPU's threads
        assert set(np.flatnonzero(added)) == set(on) and np.allclose(added[on], 1e6 / len(on))


class _Chunks:
    """A process's touched chunks, laid end to end, on these nodes (View.process_chunks)."""

    def __init__(self, nodes):
        self.nodes = np.asarray(nodes, dtype=np.int64)

    def process_chunks(self, proc, start, count):
        idx = np.arange(start, min(start + count, self.nodes.size))
        return np.stack([np.zeros_like(idx), idx, self.nodes[idx]]), self.nodes.size


@pytest.mark.parametrize("dram_windows, scans", [(0, 1), (3, 1), (7, 1), (8, 2), (15, 2), (16, 3)])
def test_a_tiering_scan_skips_top_tier_windows_up_to_its_virtual_budget(dram_windows, scans):
    """Mode 2 marks no top-tier page, and task_numa_work spends its scan size only on ranges where it
    marked something, going on for up to 8 scan sizes of address space (virtpages): the first slow-tier
    chunks after ``dram_windows`` windows of DRAM are marked by scan ``dram_windows // 8 + 1``."""
    from numasim.policies.numab import VIRT_WINDOWS, NumaBalancing, _Mm

    window = 4
    nb = object.__new__(NumaBalancing)
    nb._slow = np.array([False, False, True])
    view = _Chunks([0] * (dram_windows * window) + [2] * 3 + [0] * 5)
    mm = _Mm()
    for scan in range(1, scans + 1):
        marked = nb._next_slow(mm, 0, view, window)
        assert (marked is None) == (scan < scans), scan
    assert VIRT_WINDOWS == 8
    rid, idx, nid = marked
    assert nid.tolist() == [2, 2, 2] and idx.tolist() == list(range(dram_windows * window, dram_windows * window + 3))


def test_a_tiering_scan_stops_at_the_end_of_the_process_memory():
    """task_numa_work resets its scan at the end of the address space and returns: the next scan starts
    over, and a slow-tier chunk at the start is marked by that one, not by the scan that wrapped."""
    from numasim.policies.numab import NumaBalancing, _Mm

    nb = object.__new__(NumaBalancing)
    nb._slow = np.array([False, False, True])
    view = _Chunks([2] + [0] * 10)  # 3 windows of 4: the slow chunk first, DRAM after it
    mm = _Mm(pos=4)
    assert nb._next_slow(mm, 0, view, 4) is None  # two DRAM windows, then the end
    assert (mm.pos, mm.seq) == (0, 1)
    rid, idx, nid = nb._next_slow(mm, 0, view, 4)
    assert idx.tolist() == [0] and nid.tolist() == [2] and mm.seq == 1
    small = _Mm()
    assert nb._next_slow(small, 0, _Chunks([0, 0]), 4) is None  # smaller than a window: one pass, not eight
    assert small.seq == 1


def test_a_tick_demotes_each_chunk_once_and_walks_each_node_once(monkeypatch):
    # Four one-process pods scanned at every tick: their scans in one tick share free memory and
    # the coldest-first order, since nothing they decide applies before the tick ends.
    from numasim.policies import tiering

    ticks, walks, demoted = [], [], []
    begin, coldest, demote = tiering.Tiering.begin_tick, tiering.Tiering._coldest, tiering.Tiering._demote

    def begin_tick(self, sim):
        ticks.append(sim.now)
        return begin(self, sim)

    def walk(node, sim):
        walks.append((ticks[-1], node))
        return coldest(node, sim)

    def record(self, node, nbytes, sim):
        out = demote(self, node, nbytes, sim)
        demoted.extend((ticks[-1], d.region, i) for d in out for i in d.chunks)
        return out

    monkeypatch.setattr(tiering.Tiering, "begin_tick", begin_tick)
    monkeypatch.setattr(tiering.Tiering, "_coldest", staticmethod(walk))
    monkeypatch.setattr(tiering.Tiering, "_demote", record)
    fast = {"scan_delay_ms": 10, "scan_period_min_ms": 10, "scan_period_max_ms": 10, "scan_size_mb": 1024}
    res = run_small({**TIERED, "pods": [{**TIERED["pods"][0], "threads": 1, "memory": "768MiB", "replicas": 4}],
                     "policies": [_variant("demotion", numa_balancing_tiering=True, demotion_enabled=True, **fast)]},
                    workers=0, with_sla=False)
    assert res.run("demotion").pages_demoted_bytes > 0
    assert len(set(walks)) == len(walks) > 0
    assert len(set(demoted)) == len(demoted) > 0
