"""numasim machine import refuses bad input with one clear message (exit 2), writing nothing."""

from __future__ import annotations

import io
import tarfile

import pytest

from numasim.cli import main

NUMACTL = """available: 2 nodes (0-1)
node 0 cpus: 0 1
node 0 size: 4000 MB
node 0 free: 3000 MB
node 1 cpus: 2 3
node 1 size: 4000 MB
node 1 free: 3000 MB
node distances:
node   0   1
  0:  10  21
  1:  21  10
"""


def _run(tmp_path, capsys, *files: str) -> tuple[int, str]:
    out = tmp_path / "m.yaml"
    code = main(["machine", "import", *files, "-o", str(out)])
    err = capsys.readouterr().err
    if code != 0:
        assert not out.exists()
    return code, err


def test_an_unrecognised_file_is_named(tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    code, err = _run(tmp_path, capsys, str(bad))
    assert code == 2 and "notes.txt" in err and "not recognised" in err and "Traceback" not in err


def test_inputs_that_disagree_are_refused(tmp_path, capsys):
    a = tmp_path / "a.txt"
    a.write_text(NUMACTL)
    b = tmp_path / "b.txt"
    b.write_text(NUMACTL.replace("node 1 cpus: 2 3", "node 1 cpus: 3 2").replace("node 0 cpus: 0 1", "node 0 cpus: 0 2")
                 .replace("node 1 cpus: 3 2", "node 1 cpus: 1 3"))
    code, err = _run(tmp_path, capsys, str(a), str(b))
    assert code == 2 and "but numactl -H (a.txt) says" in err


def test_missing_cpus_and_unequal_nodes_are_explained(tmp_path, capsys):
    a = tmp_path / "a.txt"
    a.write_text(NUMACTL.replace("node 1 cpus: 2 3", "node 1 cpus: 3"))
    code, err = _run(tmp_path, capsys, str(a))
    assert code == 2 and "CPUs [2] are missing" in err
    a.write_text(NUMACTL.replace("node 1 cpus: 2 3", "node 1 cpus: 2 3 4"))
    code, err = _run(tmp_path, capsys, str(a))
    assert code == 2 and "different CPU counts [2, 3]" in err


def test_hostile_xml_is_refused(tmp_path, capsys):
    bomb = tmp_path / "topo.xml"
    bomb.write_text('<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;">]>'
                    '<topology>&b;</topology>')
    code, err = _run(tmp_path, capsys, str(bomb))
    assert code == 2 and "not a readable hwloc XML file" in err


def test_a_tarball_with_too_many_members_is_refused(tmp_path, capsys, monkeypatch):
    import numasim.importers.tool_outputs as im

    monkeypatch.setattr(im, "MAX_TAR_MEMBERS", 50)
    path = tmp_path / "sys.tar"
    with tarfile.open(path, "w") as tar:
        for k in range(60):
            data = b"0\n"
            info = tarfile.TarInfo(f"cpu/cpu{k}/topology/core_id")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    code, err = _run(tmp_path, capsys, str(path))
    assert code == 2 and "more than 50 members" in err


def test_a_huge_file_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    import numasim.importers.tool_outputs as im

    monkeypatch.setattr(im, "MAX_INPUT_BYTES", 1000)
    big = tmp_path / "big.txt"
    big.write_text(NUMACTL + "#" * 2000)
    code, err = _run(tmp_path, capsys, str(big))
    assert code == 2 and "larger than" in err


def test_a_minimal_import_runs_and_says_what_it_guessed(tmp_path, capsys):
    a = tmp_path / "numactl.txt"
    a.write_text(NUMACTL)
    out = tmp_path / "m.yaml"
    assert main(["machine", "import", str(a), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: smt: guessed" in err and "warning: local_latency_ns: guessed" in err
    import yaml

    spec = yaml.safe_load(out.read_text())
    assert spec["sockets"] == 2 and spec["cores_per_node"] == 2 and spec["slit"] == [[10, 21], [21, 10]]
    assert spec["sources"]["slit"].startswith("imported: numactl -H (numactl.txt)")
    assert spec["sources"]["sockets"].startswith("guessed from the node distances")


def test_a_memory_only_node_becomes_a_memory_node_with_its_guesses_said(tmp_path, capsys):
    a = tmp_path / "numactl.txt"
    a.write_text("""available: 3 nodes (0-2)
node 0 cpus: 0 1
node 0 size: 4000 MB
node 1 cpus: 2 3
node 1 size: 4000 MB
node 2 cpus:
node 2 size: 16000 MB
node distances:
node   0   1   2
  0:  10  21  14
  1:  21  10  24
  2:  14  24  10
""")
    out = tmp_path / "m.yaml"
    assert main(["machine", "import", str(a), "-o", str(out)]) == 0
    assert "memory_nodes: nodes [2] have memory and no CPUs" in capsys.readouterr().err
    import yaml

    spec = yaml.safe_load(out.read_text())
    (node,) = spec["memory_nodes"]
    assert (node["socket"], node["memory"], node["slit"]) == (0, "16000MiB", 14)
    assert node["latency_ns"] == pytest.approx(spec["local_latency_ns"] * 1.4, abs=0.1)
    assert spec["slit"] == [[10, 21], [21, 10]]
