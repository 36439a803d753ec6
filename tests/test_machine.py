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
        if key in ("name", "description"):
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


def test_a_preset_is_shown_value_by_value_with_its_source(capsys, monkeypatch):
    from numasim.cli import main
    from numasim.cli_tools import source_kind

    monkeypatch.setenv("COLUMNS", "400")  # one line per row: the checks below read whole cells
    assert main(["machines", "epyc-7763-nps1"]) == 0
    out = capsys.readouterr().out
    data = load_preset("machines", "epyc-7763-nps1")
    sources = data.pop("sources")
    rows = [line for line in out.splitlines() if line.startswith("│ ")]
    shown = {line.split("│")[1].strip(): line for line in rows if line.split("│")[1].strip()}
    assert (set(data) | set(sources)) - {"name", "description"} == set(shown)  # unset fields' notes too
    assert "(not set: the default)" not in shown["interconnect_gbps"]
    assert "expectation" in shown["interconnect_gbps"] and "calibrated" in shown["thread_mlp"]
    assert sources["interconnect_gbps"].split()[0] in shown["interconnect_gbps"]
    assert "values:" in out.splitlines()[-1]
    assert main(["workloads", "specjbb2005"]) == 0
    assert "calibrated" in [line for line in capsys.readouterr().out.splitlines() if "llc_misses_per_op" in line][0]
    assert main(["workloads", "no-such"]) == 2
    assert "unknown workload preset 'no-such'; known:" in capsys.readouterr().err
    assert source_kind("as java-transactions, CALIBRATED on the Pacific reference case") == "calibrated"
    assert source_kind("MEASURED on a VM, assumed to be ...") == "measured"  # the first kind word counts
    assert source_kind("LUMI user guide: https://example.org/x") == "cited"
    assert source_kind("the same run (URL as sockets)") == "cited"
    assert source_kind("64 cores per socket") == "-"
    assert source_kind("NOT MEASURED for Zen 1: the shape of Rome's curve") != "measured"  # negated
    assert source_kind("the 12 direct pairs of the measured SLIT; bandwidth DERIVED") == "derived"  # a word in passing


def test_a_policy_is_shown_option_by_option(capsys, monkeypatch, tmp_path):
    from numasim.cli import main
    from numasim.policies.registry import available_policies

    monkeypatch.setenv("COLUMNS", "400")
    for name, cls in available_policies().items():
        assert main(["policies", name]) == 0
        rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("│ ")]
        assert {line.split("│")[1].strip() for line in rows} - {""} == set(cls.Options.model_fields), name
    assert main(["policies", "numactl"]) == 0  # a CFS-based policy: the defaults' sources are cfs.yaml's
    out = capsys.readouterr().out
    hz = [line for line in out.splitlines() if line.startswith("│ hz ")][0]
    assert "CONFIG_HZ=1000" in hz
    plug = tmp_path / "weird.py"  # a plug-in by its file, whose words are shown as written (no rich markup)
    plug.write_text("from numasim.policies.cfs import CFS\nclass Weird(CFS):\n    name = 'weird'\n"
                    "    description = '[/bold] unbalanced [red'\n")
    assert main(["policies", f"{plug}:Weird"]) == 0
    assert "[/bold] unbalanced [red" in capsys.readouterr().out
    assert main(["policies", "nope"]) == 2
    err = capsys.readouterr().err  # known: the built-in ones and any loaded from files so far
    assert "unknown policy 'nope'; known: " in err and "cfs" in err
