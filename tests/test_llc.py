"""Last-level caches smaller than a node (AMD's CCX): CFS's domains, a move's refill, cache-to-cache transfers."""

from __future__ import annotations

from typing import Any

import pytest

from numasim.errors import ScenarioError
from numasim.model.machine import Machine, MachineSpec
from numasim.model.presets import load_preset
from numasim.policies.cfs import CFSOptions
from numasim.policies.domains import build_levels

from .conftest import run_small, small_scenario


def _machine(name: str, **over: Any) -> Machine:
    return Machine.from_spec(MachineSpec(**{**load_preset("machines", name), **over}))


def test_rome_domains_follow_its_ccx():
    # SMT (a core), MC (a CCX of 4 cores, 8 CPUs), PKG (the node: the socket in NPS1), NUMA.
    levels = build_levels(_machine("epyc-7742-nps1"), CFSOptions().model_dump())
    assert [lv.name for lv in levels] == ["SMT", "MC", "PKG", "NUMA-21"]
    assert [len(lv.spans[0]) for lv in levels] == [2, 8, 128, 256]
    # build_sched_domains: 16 LLCs in the level above the LLC, so 16 tasks of NUMA imbalance.
    assert levels[2].imb_numa_nr[0] == 16 and levels[3].imb_numa_nr == [16]


@pytest.mark.parametrize("name", ["epyc-7742-nps4", "sapphirerapids-8480-snc4", "kunpeng920-6426"])
def test_no_level_without_numa_spans_two_nodes(name):
    m = _machine(name)
    for lv in build_levels(m, CFSOptions().model_dump()):
        if not lv.numa:
            for span in lv.spans:
                assert len({int(m.cpu_node[c]) for c in span}) == 1, lv.name
    # The socket's nodes meet at a NUMA level (the kernel's cpu_cpu_mask is the node).
    assert any(lv.numa and len(lv.spans[0]) == m.n_cpus // m.spec.sockets for lv in build_levels(m, CFSOptions().model_dump()))


def test_without_cores_per_llc_the_llc_is_the_node():
    m = _machine("skylake-8180")
    assert list(m.cpu_llc) == list(m.cpu_node)


def test_cores_per_llc_must_divide_the_node():
    with pytest.raises(ValueError, match="cores_per_llc"):
        MachineSpec(**{**load_preset("machines", "epyc-7742-nps1"), "cores_per_llc": 5})
    data = small_scenario()
    data["machine"]["cores_per_llc"] = 3
    with pytest.raises(ScenarioError, match="cores_per_llc"):
        run_small(data)


# Two threads passing one line back and forth on a small machine with SMT and 2-core LLCs.
PINGPONG = {"cycles_per_op": 20, "lock_cycles_per_op": 20, "lock_lines_per_op": 1, "llc_misses_per_op": 0,
            "shared_fraction": 1.0, "cache_footprint_mib": 0.01}
LEVELS = dict(smt=True, cpu_numbering="block", cores_per_llc=2, c2c_smt_ns=5.0, c2c_llc_ns=20.0, c2c_local_ns=80.0,
              c2c_remote_ns=150.0)


def _pingpong(cpus: str, **machine: Any) -> float:
    data = small_scenario(
        workloads={"w": PINGPONG},
        pods=[{"name": "pp", "threads": 2, "memory": "16MiB", "profile": "w"}],
        policies=[{"label": "t", "policy": "taskset", "options": {"cpus": [cpus]}}],
        duration="1s", warmup="500ms",
    )
    data["machine"].update(machine)
    return run_small(data).run("t").throughput


def test_a_line_passed_within_a_core_or_an_llc_costs_its_own_latency():
    # Block numbering with SMT: CPUs 0-3 are node 0's cores 0-3, CPU 8 is core 0's other thread.
    ghz = float(load_preset("machines", "pacific-broadwell")["frequency_ghz"])
    work = PINGPONG["cycles_per_op"] / ghz
    for cpus, c2c in (("0,8", 5.0), ("0,1", 20.0), ("0,2", 80.0)):
        # The two threads alternate: one handoff and the work per operation.
        assert _pingpong(cpus, **LEVELS) == pytest.approx(1e9 / (c2c + work), rel=0.01), cpus


def test_without_the_levels_every_writer_on_the_node_costs_the_same():
    plain = {**LEVELS, "cores_per_llc": None, "c2c_smt_ns": None, "c2c_llc_ns": None}  # (the preset's too)
    assert _pingpong("0,8", **plain) == pytest.approx(_pingpong("0,2", **plain), rel=1e-9)


def test_measured_cache_to_cache_pairs_replace_the_rule():
    # The Kunpeng's two dies per socket: the rule (same-die transfer + the DRAM step between dies) gives
    # 53.7 ns, the core-to-core CSV 80.5; unmeasured cross-socket pairs keep the rule.
    measured = _machine("kunpeng920-6426")
    rule = _machine("kunpeng920-6426", c2c_ns=None)
    assert measured.c2c[0, 1] == pytest.approx(80.5) and measured.c2c[3, 2] == pytest.approx(80.5)
    assert rule.c2c[0, 1] == pytest.approx(35.7 + 135.3 - 117.3)
    assert measured.c2c[0, 2] == rule.c2c[0, 2] and measured.c2c[1, 3] == rule.c2c[1, 3]
    # One node ignores a preset's matrix; a wrong shape on more nodes is an error that names the field.
    assert _machine("kunpeng920-6426", sockets=1, nodes_per_socket=1).c2c.shape == (1, 1)
    with pytest.raises(ValueError, match="c2c_ns must be a 4x4 matrix"):
        _machine("kunpeng920-6426", c2c_ns=[[35.7, 80.5], [80.5, 35.7]])
