"""numasim machine import on real outputs of real machines (tests/fixtures/machines/*/SOURCE.md cites each)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import numasim
from numasim.cli import main
from numasim.importers.machine import import_machine

FIXTURES = Path(__file__).parent / "fixtures" / "machines"


def _inputs(slug: str) -> list[str]:
    return sorted(str(p) for p in (FIXTURES / slug).glob("*.txt")) + sorted(str(p) for p in (FIXTURES / slug).glob("*.xml"))


def test_cascade_lake_from_lscpu_and_mlc():
    spec, warnings = import_machine(_inputs("intel-xeon-8280-2s-clx-fdio"))
    assert (spec["sockets"], spec["nodes_per_socket"], spec["cores_per_node"], spec["smt"]) == (2, 1, 28, True)
    assert spec["cpu_numbering"] == "block"  # node0 0-27,56-83; node1 28-55,84-111
    assert spec["frequency_ghz"] == 2.7  # "@ 2.70GHz" in the model name
    assert spec["latency_ns"] == [[81.2, 130.2], [130.2, 81.1]]
    assert spec["memory_bandwidth_gbps"] == pytest.approx(122.05, abs=0.1)
    assert spec["interconnect_gbps"] == pytest.approx(51.3, abs=0.1)
    assert spec["loaded_latency"][0] == [2.18, 80.19] and spec["loaded_latency_peak_gbps"] == pytest.approx(244.29)
    assert (spec["bandwidth_1to1_gbps"], spec["c2c_local_ns"], spec["c2c_remote_ns"]) == (203.7, 55.6, 115.6)
    assert spec["c2c_remote_reader_homed_ns"] == pytest.approx(178.3)
    assert (spec["l2_kib"], spec["llc_mib_per_socket"]) == (1024.0, 38.5)
    assert spec["sources"]["latency_ns"].startswith("imported: Intel MLC (mlc-latency-matrix.txt)")
    # lscpu and MLC give no memory size: guessed, and said so.
    assert spec["sources"]["memory_per_node"].startswith("guessed")
    assert any(w.startswith("memory_per_node: guessed") for w in warnings)
    assert spec["thread_mlp"] == 16.7 and "chiplet_gbps" not in spec  # a Xeon: the Xeon preset's lines, no chiplets


def test_the_imported_file_runs_with_machine(tmp_path, capsys):
    out = tmp_path / "clx.yaml"
    assert main(["machine", "import", *_inputs("intel-xeon-8280-2s-clx-fdio"), "-o", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# Written by `numasim machine import")
    data = yaml.safe_load(text)
    scenario = numasim.load("scenarios/governor.yaml", machine=data)
    assert scenario.machine.n_cpus == 112 and scenario.machine.latency[0, 1] == 130.2


def test_epyc_rome_nps4_from_numactl_and_lscpu():
    spec, warnings = import_machine(_inputs("amd-epyc-7742-2s-nps4-sdsc-expanse"))
    assert (spec["sockets"], spec["nodes_per_socket"], spec["cores_per_node"], spec["smt"]) == (2, 4, 16, False)
    assert spec["cpu_numbering"] == "block"  # node k holds CPUs 16k-16k+15
    assert spec["slit"][0] == [10, 12, 12, 12, 32, 32, 32, 32] and spec["slit"][7][4] == 12
    assert spec["memory_per_node"] == "31799MiB"  # the smallest node
    assert spec["sources"]["sockets"].startswith("imported: lscpu")
    # No MLC: latencies and bandwidths come from a preset, marked and warned.
    assert spec["sources"]["local_latency_ns"].startswith("guessed")
    # The nearest preset in sockets and cores, then in nodes per socket: the NPS4 one.
    assert "epyc-7742-nps4 preset" in spec["sources"]["local_latency_ns"]
    assert any("one core complex's" in w for w in warnings)
    # The same CPU family as the preset: its core's lines in flight and its chiplet links, guessed and said so.
    assert (spec["thread_mlp"], spec["cores_per_chiplet"], spec["chiplet_gbps"]) == (47.1, 8, 36.0)
    assert all(spec["sources"][k].startswith("guessed: from the epyc-7742-nps4 preset (a AMD EPYC")
               for k in ("thread_mlp", "cores_per_chiplet", "chiplet_gbps"))
    assert any(w.startswith("chiplet_gbps: guessed") for w in warnings)
    # This lscpu prints one L3 instance without a count: the core complex is the family's, guessed too.
    assert spec["cores_per_llc"] == 4 and spec["sources"]["cores_per_llc"].startswith("guessed")
    m = numasim.load("scenarios/governor.yaml", machine=spec).machine
    assert m.n_nodes == 8 and m.latency[0, 1] / m.latency[0, 0] == pytest.approx(1.2)
    assert m.latency[0, 4] / m.latency[0, 0] == pytest.approx(3.2)  # local x SLIT / 10


def test_a_four_socket_opteron_from_a_sysfs_tarball():
    spec, warnings = import_machine([str(FIXTURES / "amd-opteron-6276-4s-8n-hwloc" / "sysfs.tar.gz")])
    assert (spec["sockets"], spec["nodes_per_socket"], spec["cores_per_node"]) == (4, 2, 4)
    # Bulldozer's two cores of a module report one core_id: numasim sees them as hardware threads,
    # numbered side by side (cpu0, cpu1), which its numbering rule does not follow: said so.
    assert spec["smt"] and spec["threads_per_core"] == 2
    assert any(w.startswith("cpu_numbering: this machine numbers hardware-thread siblings") for w in warnings)
    assert spec["slit"][0] == [10, 16, 16, 22, 16, 22, 16, 22]  # not uniform: a 4-socket HyperTransport mesh
    assert spec["memory_per_node"] == "8192MiB" and spec["sources"]["sockets"].startswith("imported: sysfs")
    m = numasim.load("scenarios/governor.yaml", machine=spec).machine
    assert m.n_nodes == 8 and m.n_cpus == 64
    assert "thread_mlp" not in spec  # an Opteron: no preset of its family to take a core's lines from


def test_an_arm_kunpeng_from_a_sysfs_tarball():
    spec, _ = import_machine([str(FIXTURES / "arm-kunpeng920-2s-4n-hwloc" / "sysfs.tar.gz")])
    assert (spec["sockets"], spec["nodes_per_socket"], spec["cores_per_node"], spec["smt"]) == (2, 2, 32, False)
    assert spec["slit"] == [[10, 16, 32, 33], [16, 10, 25, 32], [32, 25, 10, 16], [33, 32, 16, 10]]


def test_sandy_bridge_from_hwloc_xml():
    spec, _ = import_machine([str(FIXTURES / "intel-xeon-e5-2650-2s-hwloc" / "hwloc.xml")])
    assert (spec["sockets"], spec["nodes_per_socket"], spec["cores_per_node"], spec["threads_per_core"]) == (2, 1, 8, 2)
    assert spec["name"] == "Intel(R) Xeon(R) CPU E5-2650 0 @ 2.00GHz" and spec["frequency_ghz"] == 2.0
    assert spec["slit"] == [[10, 20], [20, 10]] and spec["cpu_numbering"] == "block"


def test_llcs_are_imported_where_lscpu_counts_them(tmp_path):
    base = FIXTURES / "amd-epyc-7742-2s-nps4-sdsc-expanse"
    text = (base / "lscpu.txt").read_text().replace("L3 cache:            16384K",
                                                    "L3 cache:            512 MiB (32 instances)")
    (tmp_path / "lscpu.txt").write_text(text)
    spec, _ = import_machine([str(base / "numactl-H.txt"), str(tmp_path / "lscpu.txt")])
    assert spec["cores_per_llc"] == 4 and spec["sources"]["cores_per_llc"].startswith("imported: lscpu")
    # lscpu -p's cache ids say the same: CPUs 4k-4k+3 share L3 k.
    rows = "\n".join(f"{c},{c},{c // 64},{c // 16},,{c}:{c}:{c}:{c // 4}" for c in range(128))
    (tmp_path / "lscpu-p.txt").write_text("# CPU,Core,Socket,Node,,L1d:L1i:L2:L3\n" + rows + "\n")
    spec, _ = import_machine([str(base / "numactl-H.txt"), str(tmp_path / "lscpu-p.txt")])
    assert spec["cores_per_llc"] == 4 and spec["sources"]["cores_per_llc"].startswith("imported: lscpu -p")
    # One L3 per node (an Intel socket): no field, the node is the LLC.
    rows = "\n".join(f"{c},{c},{c // 64},{c // 16},,{c}:{c}:{c}:{c // 16}" for c in range(128))
    (tmp_path / "lscpu-p.txt").write_text("# CPU,Core,Socket,Node,,L1d:L1i:L2:L3\n" + rows + "\n")
    spec, _ = import_machine([str(base / "numactl-H.txt"), str(tmp_path / "lscpu-p.txt")])
    assert "cores_per_llc" not in spec
