import numpy as np
import pytest

import numasim
from numasim.model.cpulist import parse_cpulist
from numasim.model.machine import Machine, MachineSpec
from numasim.model.presets import load_preset, machine_preset, preset_names

BASE = dict(
    sockets=2, cores_per_node=4, frequency_ghz=2.0, memory_per_node="8GiB", local_latency_ns=80.0,
    remote_latency_ns=130.0, memory_bandwidth_gbps=50.0, interconnect_gbps=25.0,
    loaded_latency=[[1.0, 80.0], [30.0, 95.0], [45.0, 160.0], [50.0, 240.0]], loaded_latency_peak_gbps=50.0,
)


def make(**kw) -> Machine:
    return Machine.from_spec(MachineSpec.model_validate({**BASE, **kw}))


def test_block_numbering():
    m = make()
    assert list(m.cpu_node) == [0, 0, 0, 0, 1, 1, 1, 1]


def test_alternate_numbering():
    m = make(cpu_numbering="alternate")
    assert list(m.cpu_node) == [0, 1, 0, 1, 0, 1, 0, 1]
    assert sorted(m.cpus_of_nodes([0])) == [0, 2, 4, 6]


def test_smt_siblings_follow_cores():
    m = make(smt=True)
    assert m.n_cpus == 16 and m.n_cores == 8
    # Linux numbers the second hardware thread of every core after all first threads.
    assert m.siblings(0) == (8,)
    assert m.cpu_node[8] == 0 and m.cpu_node[12] == 1


def test_explicit_numbering():
    m = make(cpu_numbering=[1, 1, 0, 0, 1, 1, 0, 0])
    assert sorted(m.cpus_of_nodes([0])) == [2, 3, 6, 7]


def test_explicit_numbering_must_balance():
    with pytest.raises(ValueError, match="exactly 4 times"):
        MachineSpec.model_validate({**BASE, "cpu_numbering": [0, 0, 0, 0, 0, 1, 1, 1]})


def test_slit_gives_latency_and_distance():
    m = make(remote_latency_ns=None, slit=[[10, 21], [21, 10]])
    assert m.latency[0, 1] == pytest.approx(80.0 * 2.1)
    assert m.distance[0, 1] == 21


def test_slit_and_latency_together():
    m = make(slit=[[10, 21], [21, 10]])
    assert m.latency[0, 1] == 130.0 and m.distance[0, 1] == 21


def test_distance_derived_from_latency():
    m = make()
    assert m.distance[0, 1] == round(10 * 130 / 80)


def test_loaded_latency_fit_is_monotone_and_close():
    m = make()
    u = np.linspace(0, 1, 11)
    g = m.curve(u)
    assert np.all(np.diff(g) >= 0) and g[0] == pytest.approx(1.0)
    # Within 15% of the measured points it was fitted to.
    pts = np.array(BASE["loaded_latency"])
    assert np.allclose(m.curve(pts[:, 0] / 50.0), pts[:, 1] / 80.0, rtol=0.15)


def test_cpulist():
    assert parse_cpulist("0-3,8,10-14:2", 16) == frozenset({0, 1, 2, 3, 8, 10, 12, 14})
    with pytest.raises(ValueError, match="outside the machine"):
        parse_cpulist("0-99", 44)
    with pytest.raises(ValueError, match="malformed"):
        parse_cpulist("a-b", 44)


@pytest.mark.parametrize("name", preset_names("machines"))
def test_every_preset_constant_has_a_source(name):
    data = load_preset("machines", name)
    sources = data.pop("sources")
    for key in data:
        if key in ("name", "description", "nodes_per_socket", "threads_per_core"):
            continue
        assert key in sources, f"{name}: {key} has no source"
    machine_preset(name)  # and it builds


@pytest.mark.parametrize("name", preset_names("workloads"))
def test_every_workload_constant_has_a_source(name):
    data = load_preset("workloads", name)
    sources = data.pop("sources")
    for key in data:
        if key in ("name", "description", "sleep_ms") and key not in sources:
            continue
        assert key in sources, f"{name}: {key} has no source"
    numasim.WorkloadProfile.model_validate({**data, "sources": sources})


@pytest.mark.parametrize("name", preset_names("policies"))
def test_every_policy_default_has_a_source(name):
    data = load_preset("policies", name)
    sources = data.pop("sources")
    assert set(data) <= set(sources), f"{name}: {sorted(set(data) - set(sources))} have no source"


def _tiny(machine, profile: str) -> dict:
    return {"name": "tiny", "machine": machine, "pods": [{"name": "p", "threads": 2, "memory": "64MiB", "profile": profile}],
            "duration": "600ms", "warmup": "200ms", "sample_interval": "100ms", "replications": 1,
            "policies": [{"label": "cfs", "policy": "cfs"}]}


@pytest.mark.parametrize("name", preset_names("machines"))
def test_every_machine_preset_runs(name):
    res = numasim.run(numasim.from_dict(_tiny({"preset": name}, "java-transactions")), workers=1, with_sla=False, quiet=True)
    assert res.run("cfs").throughput > 0 and 0 <= res.run("cfs").locality <= 1


@pytest.mark.parametrize("name", preset_names("workloads"))
def test_every_workload_preset_runs(name):
    res = numasim.run(numasim.from_dict(_tiny({"preset": "cascadelake-8280", "memory_per_node": "4GiB"}, name)),
                      workers=1, with_sla=False, quiet=True)
    assert res.run("cfs").throughput > 0
