"""numasim machine import refuses bad input with one clear message (exit 2), writing nothing."""

from __future__ import annotations

import io
import tarfile

import numpy as np
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
    import numasim.importers.inputs as im

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


@pytest.mark.parametrize("mode", ["w:bz2", "w:gz", "w:xz"])
def test_a_compressed_tarball_that_decompresses_past_the_cap_is_refused_early(tmp_path, capsys, monkeypatch, mode):
    # Members whose names do not match are still read through to be skipped: the bytes count.
    import numasim.importers.inputs as im

    monkeypatch.setattr(im, "MAX_TAR_STREAM_BYTES", 2**20)
    path = tmp_path / "bomb.tar"
    with tarfile.open(path, mode) as tar:
        for k in range(4):
            data = bytes(600_000)
            info = tarfile.TarInfo(f"padding{k}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert path.stat().st_size < 20_000  # small on disk, 2.4 MB inside
    code, err = _run(tmp_path, capsys, str(path))
    assert code == 2 and "holds more than 1 MiB of tar (decompressed)" in err and "Traceback" not in err


def test_a_compressed_sysfs_copy_still_imports(tmp_path, capsys):
    src = _sysfs(tmp_path, **{})
    path = tmp_path / "sys.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(src, arcname=".")
    code, err = _run(tmp_path, capsys, str(path))
    assert code == 0, err


def test_a_directory_that_is_not_a_sysfs_copy_is_not_walked_to_the_end(tmp_path, capsys, monkeypatch):
    import numasim.importers.inputs as im

    monkeypatch.setattr(im, "MAX_WALK_ENTRIES", 30)
    for k in range(40):
        (tmp_path / "tree" / "node" / f"node{k}").mkdir(parents=True)
    code, err = _run(tmp_path, capsys, str(tmp_path / "tree"))
    assert code == 2 and "more than 30 files and directories under node/ and cpu/" in err


def test_a_directory_walk_enters_only_sysfs_folders_below_the_top(tmp_path, capsys, monkeypatch):
    import numasim.importers.inputs as im

    monkeypatch.setattr(im, "MAX_WALK_ENTRIES", 30)
    src = _sysfs(tmp_path)  # sys/node/node0/...
    for k in range(40):  # folders no sysfs file is in: not entered, not counted
        (tmp_path / "sys" / "node" / "other" / f"d{k}").mkdir(parents=True)
    code, err = _run(tmp_path, capsys, src)
    assert code == 0, err


def test_a_first_member_with_a_huge_long_name_is_not_read_whole(tmp_path, capsys, monkeypatch):
    # tarfile.is_tarfile reads a GNU long-name header's body whole: 531 bytes of bz2 held 512 MiB.
    import bz2

    import numasim.importers.inputs as im

    monkeypatch.setattr(im, "MAX_TAR_STREAM_BYTES", 2**20)

    def whole(*args):
        raise AssertionError("tarfile.is_tarfile reads a first member's header whole")

    monkeypatch.setattr(tarfile, "is_tarfile", whole)
    name = b"a" * (8 * 2**20)
    head = tarfile.TarInfo("././@LongLink")
    head.type, head.size = tarfile.GNUTYPE_LONGNAME, len(name)
    raw = io.BytesIO()
    raw.write(head.tobuf(format=tarfile.GNU_FORMAT))
    raw.write(name + bytes(-len(name) % 512))
    path = tmp_path / "long.tar.bz2"
    path.write_bytes(bz2.compress(raw.getvalue()))
    code, err = _run(tmp_path, capsys, str(path))
    assert code == 2 and "holds more than 1 MiB of tar" in err and "Traceback" not in err


def test_a_huge_file_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    import numasim.importers.inputs as im

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


# One bad value, in every format that carries it: a clear message naming the file (and the field), exit 2.
LSCPU_P = "# CPU,Core,Socket,Node,,L1d,L1i,L2,L3\n0,0,0,0,,0,0,0,0\n1,1,0,0,,1,1,1,0\n"
HWLOC = ('<?xml version="1.0"?><topology><object type="Machine"><object type="Package" os_index="0">'
         '<object type="NUMANode" os_index="0" local_memory="4294967296" cpuset="0x00000003"/>'
         '<object type="Core" os_index="0"><object type="PU" os_index="0"/></object>'
         '<object type="Core" os_index="1"><object type="PU" os_index="1"/></object>'
         '</object></object></topology>')


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _sysfs(tmp_path, **files: str) -> str:
    root = tmp_path / "sys"
    for rel, text in {"node/node0/cpulist": "0-1\n", "node/node0/distance": "10\n", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return str(root)


@pytest.mark.parametrize("name, text", [
    ("numactl.txt", NUMACTL.replace("node 0 cpus: 0 1", "node 0 cpus: 0 1 99999999")),
    ("lscpu-p.txt", LSCPU_P + "99999999,99999999,99999999,0,,0,0,0,0\n"),
    ("lscpu.txt", "Architecture: x86_64\nCPU(s): 2\nNUMA node0 CPU(s): 0,99999999\n"),
    ("topo.xml", HWLOC.replace('<object type="PU" os_index="1"/>', '<object type="PU" os_index="99999999"/>')),
    ("topo.xml", HWLOC.replace('cpuset="0x00000003"', 'cpuset="' + "0x00000001," * 3000 + '0x00000003"')),
])
def test_a_huge_cpu_id_is_refused_before_anything_is_sized_by_it(tmp_path, capsys, name, text):
    code, err = _run(tmp_path, capsys, _write(tmp_path, name, text))
    assert code == 2 and name in err and "is above the 65,536 CPUs numasim models" in err and "Traceback" not in err


def test_a_cpu_list_repeated_many_times_is_refused_at_the_cap_not_walked_each_time(tmp_path, capsys):
    text = "Architecture: x86_64\n" + "NUMA node0 CPU(s): 0-65535\n" * 1000
    code, err = _run(tmp_path, capsys, _write(tmp_path, "lscpu.txt", text))
    assert code == 2 and "more than 65,536 CPU-to-node entries in all" in err


def test_a_huge_cpu_id_in_a_sysfs_copy_is_refused(tmp_path, capsys):
    code, err = _run(tmp_path, capsys, _sysfs(tmp_path, **{"node/node0/cpulist": "0-1,99999999\n"}))
    assert code == 2 and "node/node0/cpulist: CPU 99999999 is above the 65,536 CPUs" in err


def test_missing_cpus_are_listed_without_sizing_by_the_largest(tmp_path, capsys):
    # 65,535 alone: the gaps are walked, not a set of every id below the largest.
    a = _write(tmp_path, "a.txt", NUMACTL.replace("node 1 cpus: 2 3", "node 1 cpus: 2 3 65535"))
    code, err = _run(tmp_path, capsys, a)
    assert code == 2 and "CPUs [4, 5, 6, 7, 8] are missing" in err and "every CPU 0-65535" in err


def test_a_number_too_long_to_convert_is_refused(tmp_path, capsys):
    a = _write(tmp_path, "n.txt", NUMACTL.replace("node 0 cpus: 0 1", "node 0 cpus: 0 1 " + "9" * 5000))
    code, err = _run(tmp_path, capsys, a)
    assert code == 2 and "a CPU id is 99999999999999999999... (5,000 digits)" in err and "Traceback" not in err


def test_a_distance_row_of_the_wrong_length_is_refused(tmp_path, capsys):
    a = _write(tmp_path, "n.txt", NUMACTL.replace("  0:  10  21", "  0:  10  21 30 40"))
    code, err = _run(tmp_path, capsys, a)
    assert code == 2 and "n.txt: node distances row 0 has 4 entries, expected 2" in err


def test_distances_for_fewer_nodes_than_have_cpus_are_refused(tmp_path, capsys):
    a = _write(tmp_path, "n.txt", NUMACTL.replace("node   0   1\n  0:  10  21\n  1:  21  10\n", "node   0\n  0:  10\n"))
    code, err = _run(tmp_path, capsys, a)
    assert code == 2 and "the node distances cover 1 nodes, but 2 nodes have CPUs" in err


@pytest.mark.parametrize("old, new, words", [
    ('local_memory="4294967296"', 'local_memory="abc"', '<object type="NUMANode"> attribute local_memory is \'abc\''),
    ('<object type="PU" os_index="1"/>', '<object type="PU" os_index="x"/>', '<object type="PU"> attribute os_index'),
    ('<object type="Package" os_index="0">', '<object type="Package" os_index="-1">', "attribute os_index is '-1'"),
    ('cpuset="0x00000003"', 'cpuset="0xzz"', "malformed cpuset '0xzz'"),
])
def test_a_non_numeric_hwloc_attribute_names_the_element(tmp_path, capsys, old, new, words):
    assert old in HWLOC
    code, err = _run(tmp_path, capsys, _write(tmp_path, "topo.xml", HWLOC.replace(old, new)))
    assert code == 2 and "topo.xml: " in err and words in err and "Traceback" not in err


def test_hwloc_distances_that_are_not_numbers_are_refused(tmp_path, capsys):
    xml = HWLOC.replace("</topology>", '<distances2 type="NUMANode" nbobjs="1" name="NUMALatency">'
                                       '<u64values length="1">ten</u64values></distances2></topology>')
    code, err = _run(tmp_path, capsys, _write(tmp_path, "topo.xml", xml))
    assert code == 2 and "a <u64values> distance is 'ten': expected a whole number" in err


@pytest.mark.parametrize("rel, text, words", [
    ("node/node0/distance", "x\n", "node/node0/distance: a node distance is 'x': expected a whole number"),
    ("node/node0/cpulist", "garbage\n", "node/node0/cpulist: malformed CPU list item 'garbage'"),
    ("node/node0/distance", "10 21\n", "node/node0/distance: 2 node distances, expected 1"),
    ("node/node0/meminfo", "Node 0 MemTotal:       " + "9" * 5000 + " kB\n", "node/node0/meminfo: MemTotal is"),
    ("cpu/cpu0/topology/physical_package_id", "zero\n", "cpu/cpu0/topology/physical_package_id: the socket id"),
    ("cpu/cpu0/topology/core_id", "?\n", "cpu/cpu0/topology/core_id: the core id is '?'"),
    ("cpu/cpu0/cpufreq/cpuinfo_max_freq", "fast\n", "cpuinfo_max_freq: the frequency in kHz is 'fast'"),
])
def test_garbage_in_a_sysfs_copy_names_the_file_inside_it(tmp_path, capsys, rel, text, words):
    files = {rel: text}
    if rel.endswith("core_id"):
        files["cpu/cpu0/topology/physical_package_id"] = "0\n"
    code, err = _run(tmp_path, capsys, _sysfs(tmp_path, **files))
    assert code == 2 and f"{tmp_path / 'sys'}: " in err and words in err and "Traceback" not in err


def test_garbage_numbers_in_lscpu_are_refused(tmp_path, capsys):
    a = _write(tmp_path, "lscpu.txt", "Architecture: x86_64\nCPU(s): 2\nNUMA node0 CPU(s): 0,1\nCPU max MHz: fast\n")
    code, err = _run(tmp_path, capsys, a)
    assert code == 2 and "CPU max MHz is 'fast': expected a number" in err


def test_an_invalid_imported_machine_is_reported_field_by_field(tmp_path, capsys):
    a = _write(tmp_path, "zero.txt", NUMACTL.replace("  0:  10  21", "  0:  0  21"))
    code, err = _run(tmp_path, capsys, a)
    assert code == 2 and "zero.txt: slit[0][0]: Input should be greater than or equal to 10, got 0" in err
    assert "in the imported machine" in err and "pydantic" not in err and "[type=" not in err


def test_a_missing_input_says_so(tmp_path, capsys):
    code, err = _run(tmp_path, capsys, str(tmp_path / "missing.txt"))
    assert code == 2 and "missing.txt: no such file or directory" in err


def test_a_cpu_listed_on_two_nodes_is_refused(tmp_path, capsys):
    # (session 27's adversarial pass: it was imported as a machine of one core per node)
    path = tmp_path / "n.txt"
    path.write_text(NUMACTL.replace("node 1 cpus: 2 3", "node 1 cpus: 1 3"))
    code, err = _run(tmp_path, capsys, str(path))
    assert code == 2 and "CPU 1 is listed on NUMA node 0 and on node 1" in err and "Traceback" not in err


def test_numactl_without_distances_takes_a_remote_latency_from_the_closest_preset(tmp_path, capsys):
    # The closest preset (2 sockets of 2 cores: epyc-7351-2s) has a SLIT, not remote_latency_ns: the guess
    # is the mean of its built remote latencies (a KeyError until session 27).
    path = tmp_path / "n.txt"
    path.write_text(NUMACTL.split("node distances:")[0])
    code, err = _run(tmp_path, capsys, str(path))
    assert code == 0, err
    assert "remote_latency_ns: guessed: from the epyc-7351-2s preset (the mean of its remote latencies)" in err
    import yaml

    from numasim.model.presets import machine_preset

    spec = yaml.safe_load((tmp_path / "m.yaml").read_text())
    lat = machine_preset("epyc-7351-2s").latency
    assert spec["remote_latency_ns"] == round(float(lat[~np.eye(len(lat), dtype=bool)].mean()), 1)


class _CountingRe:
    """The re module, counting the matches tried (the parsers' work: one or a few a line when linear)."""

    def __init__(self):
        import re

        self._re, self.calls = re, 0

    def __getattr__(self, name):
        attr = getattr(self._re, name)
        if name not in ("match", "fullmatch", "search"):
            return attr

        def counted(*args, **kwargs):
            self.calls += 1
            return attr(*args, **kwargs)
        return counted


@pytest.mark.parametrize("title", [
    "Measuring idle latencies (in ns)...",
    "Measuring Memory Bandwidths between nodes within system",
])
def test_mlc_section_titles_without_their_matrix_are_parsed_in_linear_time(monkeypatch, title):
    # Each title looked for its matrix's header to the end of the file: n titles cost n^2/2 matches
    # (10,000 took 46 s). Now each looks at most MLC_HEADER_WITHIN non-empty lines ahead. (The HITM
    # titles' look-ahead is no regular expression: test_many_mlc_headers... covers it by size.)
    from numasim.importers import tool_outputs

    def matches(n: int) -> int:
        counter = _CountingRe()
        monkeypatch.setattr(tool_outputs, "re", counter)
        tool_outputs._parse_mlc("Intel(R) Memory Latency Checker - v3.7\n" + f"{title}\n\n" * n, "mlc.txt")
        monkeypatch.undo()
        return counter.calls

    small, large = matches(500), matches(1000)
    assert 0 < small and large <= 2.2 * small  # quadratic work gives 4 times as many


def test_many_mlc_headers_are_parsed_quickly_and_real_sections_still_read(tmp_path, capsys):
    # 20,000 titles, then 100,000 'Inject' headers: quadratic (a scan to the end for each title, a copy of
    # the remaining lines for each header) took hours (10,000 titles alone: 46 s); linear takes a second.
    from numasim.importers.tool_outputs import _parse_mlc

    hitm = "Remote Socket L2->L2 HITM latency (data address homed in {} socket)\n"
    text = ("Intel(R) Memory Latency Checker - v3.7\n" + "Measuring idle latencies\n" * 10_000
            + (hitm.format("writer") + hitm.format("reader")) * 5_000
            + "Measuring idle latencies (in ns)...\n                Numa node\nNuma node            0       1\n"
            + "       0          81.2   130.2\n       1         130.2    81.1\n"
            + "Inject  Latency Bandwidth\n" * 100_000 + "Delay   (ns)    MB/sec\n==========================\n"
            + " 00000  233.86   243421.9\n 00002  230.61   243544.1\n")
    f = _parse_mlc(text, "mlc.txt")
    assert f.latency == [[81.2, 130.2], [130.2, 81.1]] and f.c2c_remote_writer is None and f.c2c_remote_reader is None
    assert f.loaded == [(243421.9 / 1000, 233.86), (243544.1 / 1000, 230.61)]
    code, err = _run(tmp_path, capsys, _write(tmp_path, "mlc.txt", "Intel(R) Memory Latency Checker\n"
                                                                 + "Measuring idle latencies\n" * 20_000))
    assert code == 2 and "mlc.txt: no input says which CPUs belong to which NUMA node" in err and "Traceback" not in err


def test_an_mlc_header_far_after_its_title_is_not_taken(tmp_path):
    from numasim.importers.tool_outputs import _parse_mlc

    MLC_HEADER_WITHIN = 10  # tool_outputs.MLC_HEADER_WITHIN: the matrix's header is looked for that many lines ahead
    matrix = "Numa node            0       1\n       0          81.2   130.2\n       1         130.2    81.1\n"
    near = "Measuring idle latencies (in ns)...\n" + "a note\n\n" * (MLC_HEADER_WITHIN - 1) + matrix
    far = "Measuring idle latencies (in ns)...\n" + "a note\n\n" * MLC_HEADER_WITHIN + matrix
    assert _parse_mlc(near, "mlc.txt").latency == [[81.2, 130.2], [130.2, 81.1]]
    assert _parse_mlc(far, "mlc.txt").latency == []


def _nested_hwloc(levels: int) -> str:
    """HWLOC with its Package inside ``levels`` nested Group objects."""
    head, tail = HWLOC.split('<object type="Package" os_index="0">', 1)
    return head + '<object type="Group">' * levels + '<object type="Package" os_index="0">' + tail.replace(
        "</object></object></topology>", "</object>" + "</object>" * levels + "</object></topology>")


def test_hwloc_nested_past_the_limit_is_refused_not_a_recursion_error(tmp_path, capsys):
    # 5,000 levels: the recursive walk raised RecursionError (a traceback, exit 1).
    code, err = _run(tmp_path, capsys, _write(tmp_path, "deep.xml", _nested_hwloc(5000)))
    assert code == 2 and "deep.xml" in err and "nested more than 256 levels deep" in err and "Traceback" not in err


def test_hwloc_nested_within_the_limit_still_imports(tmp_path, capsys):
    from numasim.importers.tool_outputs import _parse_hwloc

    f = _parse_hwloc(_nested_hwloc(250), "topo.xml")  # the PUs are at level 254
    assert f.cpu_socket == {0: 0, 1: 0} and f.cpu_core == {0: (0, 0), 1: (0, 1)} and f.node_memory_mb == {0: 4096.0}
    assert f.cpu_node == {0: 0, 1: 0}
