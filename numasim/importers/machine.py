"""``numasim machine import``: a machine file from what the machine already reports.

Reads, detecting each input by its content: ``numactl -H``, ``lscpu`` (plain,
``-p`` and ``-e``), hwloc XML (``lstopo --of xml``), a copy of
``/sys/devices/system/{node,cpu}`` (a directory or a tarball), and Intel MLC output
(``--latency_matrix``, ``--bandwidth_matrix``, ``--loaded_latency``,
``--max_bandwidth`` / ``--peak_injection_bandwidth``, ``--c2c_latency``; several
in one file are fine). Each parser returns :class:`Facts`, what its input says; the
facts are merged (a later input fills what an earlier one left out, and a
disagreement is an error) and turned into a machine spec whose ``sources`` say where
every value came from. What no input gives is taken from the closest preset and
marked ``guessed``, with a warning.
"""

from __future__ import annotations

import os
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import Problem, ScenarioError

__all__ = ["Facts", "parse", "import_machine", "to_yaml", "MAX_INPUT_BYTES"]

MAX_INPUT_BYTES = 16 * 2**20  # an hwloc XML of a 1,000-CPU machine is about 2 MB
MAX_TAR_MEMBERS = 200_000
MAX_TAR_BYTES = 64 * 2**20


@dataclass
class Facts:
    """What one input says about the machine; None: it does not say."""

    source: str
    kind: str
    cpu_node: dict[int, int] = field(default_factory=dict)  # OS CPU -> node
    cpu_socket: dict[int, int] = field(default_factory=dict)
    cpu_core: dict[int, tuple[int, int]] = field(default_factory=dict)  # OS CPU -> (socket, core id)
    node_memory_mb: dict[int, float] = field(default_factory=dict)
    distances: list[list[int]] | None = None
    max_mhz: float | None = None
    l2_kib: float | None = None  # per core
    l3_mib: float | None = None  # per socket
    latency: list[list[float]] | None = None  # ns, CPU node x memory node (MLC)
    bandwidth: list[list[float]] | None = None  # GB/s, CPU node x memory node (MLC)
    loaded: list[tuple[float, float]] | None = None  # (GB/s, ns)
    all_reads_gbps: float | None = None
    mix_1to1_gbps: float | None = None
    c2c_local: float | None = None
    c2c_remote_writer: float | None = None
    c2c_remote_reader: float | None = None
    model: str | None = None
    sockets: int | None = None  # counts, when no per-CPU topology is given (plain lscpu)
    l3_counted: bool | None = None  # lscpu said how many L3 instances there are
    threads_per_core: int | None = None


def _error(source: str, message: str) -> ScenarioError:
    return ScenarioError(Problem("", message), source=source)


# ----------------------------------------------------------------------------- parsers
def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split()]


def _cpulist(text: str, source: str) -> list[int]:
    out: list[int] = []
    for item in text.strip().split(","):
        item = item.strip()
        if not item:
            continue
        m = re.fullmatch(r"(\d{1,7})(?:-(\d{1,7}))?", item)
        if not m:
            raise _error(source, f"malformed CPU list item {item[:40]!r}")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo or hi - lo > 1_000_000:
            raise _error(source, f"malformed CPU range {item[:40]!r}")
        out.extend(range(lo, hi + 1))
    return out


def _parse_numactl(text: str, source: str) -> Facts:
    f = Facts(source, "numactl -H")
    rows: list[list[int]] = []
    in_dist = False
    for line in text.splitlines():
        s = line.strip()
        if m := re.fullmatch(r"node (\d+) cpus:(.*)", s):
            for cpu in _ints(m.group(2)):
                f.cpu_node[cpu] = int(m.group(1))
        elif m := re.fullmatch(r"node (\d+) size: (\d+) MB", s):
            f.node_memory_mb[int(m.group(1))] = float(m.group(2))
        elif s == "node distances:":
            in_dist = True
        elif in_dist and (m := re.fullmatch(r"(\d+):((?:\s+\d+)+)", s)):
            rows.append(_ints(m.group(2)))
    if rows:
        f.distances = rows
    return f


_LSCPU_KEYS = {
    "Model name": "model",
    "CPU max MHz": "max_mhz",
    "L2 cache": "l2",
    "L3 cache": "l3",
    "Socket(s)": "sockets",
    "Core(s) per socket": "cores",
    "Thread(s) per core": "threads",
}


def _cache_kib(value: str) -> tuple[float, int | None] | None:
    """'1024K', '1 MiB', '28 MiB (28 instances)' -> (KiB per instance, instances if said)."""
    m = re.match(r"([\d.]+)\s*([KMG])?i?B?\s*(?:\((\d+) instances?\))?", value.strip())
    if not m:
        return None
    size = float(m.group(1)) * {"K": 1, "M": 1024, "G": 1024**2, None: 1 / 1024}[m.group(2)]
    count = int(m.group(3)) if m.group(3) else None
    return size / (count or 1), count


def _parse_lscpu(text: str, source: str) -> Facts:
    f = Facts(source, "lscpu")
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if m := re.fullmatch(r"NUMA node(\d+) CPU\(s\)", key):
            for cpu in _cpulist(value, source):
                f.cpu_node[cpu] = int(m.group(1))
        elif key in _LSCPU_KEYS:
            values[_LSCPU_KEYS[key]] = value
    f.model = values.get("model")
    for key, attr in (("sockets", "sockets"), ("threads", "threads_per_core")):
        if values.get(key, "").isdigit():
            setattr(f, attr, int(values[key]))
    if "max_mhz" in values:
        f.max_mhz = float(values["max_mhz"])
    # lscpu prints a cache as per instance ('1024K') or, since util-linux 2.37, as a total
    # with its instance count ('28 MiB (28 instances)').
    if "l2" in values and (l2 := _cache_kib(values["l2"])):
        f.l2_kib = l2[0]
    if "l3" in values and (l3 := _cache_kib(values["l3"])):
        sockets = int(values["sockets"]) if values.get("sockets", "").isdigit() else None
        # Per socket: the instance size times the instances per socket (AMD has one per CCX).
        per_socket = l3[0] * (l3[1] // sockets if l3[1] and sockets and l3[1] % sockets == 0 else 1)
        f.l3_mib = per_socket / 1024
        f.l3_counted = l3[1] is not None
    return f


def _parse_lscpu_p(text: str, source: str) -> Facts:
    f = Facts(source, "lscpu -p")
    header: list[str] = []
    for line in text.splitlines():
        if line.startswith("# CPU,"):
            header = [h.strip().lower() for h in line[2:].split(",")]
            continue
        if line.startswith("#") or not line.strip():
            continue
        if not header:
            raise _error(source, "lscpu -p output without its '# CPU,Core,Socket,Node' header line")
        cols = dict(zip(header, line.split(",")))
        _cpu_row(f, cols, source)
    return f


def _parse_lscpu_e(text: str, source: str) -> Facts:
    f = Facts(source, "lscpu -e")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    header = [h.lower() for h in lines[0].split()]
    for line in lines[1:]:
        cols = dict(zip(header, line.split()))
        if cols.get("maxmhz") and f.max_mhz is None:
            try:
                f.max_mhz = float(cols["maxmhz"])
            except ValueError:
                pass
        _cpu_row(f, cols, source)
    return f


def _cpu_row(f: Facts, cols: dict[str, str], source: str) -> None:
    try:
        cpu = int(cols["cpu"])
        if cols.get("node", "") not in ("", "-"):
            f.cpu_node[cpu] = int(cols["node"])
        if cols.get("socket", "") not in ("", "-"):
            f.cpu_socket[cpu] = int(cols["socket"])
            if cols.get("core", "") not in ("", "-"):
                f.cpu_core[cpu] = (int(cols["socket"]), int(cols["core"]))
    except (KeyError, ValueError):
        raise _error(source, f"malformed lscpu row: {' '.join(cols.values())[:80]!r}") from None


def _matrix_after(lines: list[str], start: int) -> tuple[list[list[float]], int]:
    """The 'Numa node' matrix that follows line ``start``: rows of '<node> v v v'."""
    rows: list[list[float]] = []
    i = start
    while i < len(lines) and not re.match(r"\s*Numa node\s+\d", lines[i]):
        i += 1
    i += 1
    while i < len(lines) and (m := re.fullmatch(r"\s*\d+((?:\s+[\d.]+)+)\s*", lines[i])):
        rows.append([float(x) for x in m.group(1).split()])
        i += 1
    return rows, i


def _hitm_matrix(lines: list[str], start: int) -> float | None:
    """Mean of the off-diagonal numbers of an MLC c2c matrix ('-' on the diagonal)."""
    vals: list[float] = []
    i = start + 1
    while i < len(lines) and not lines[i].strip().startswith("Writer Numa Node"):
        i += 1
    i += 1
    while i < len(lines) and (m := re.fullmatch(r"\s*\d+((?:\s+(?:[\d.]+|-))+)\s*", lines[i])):
        vals += [float(x) for x in m.group(1).split() if x != "-"]
        i += 1
    return float(np.mean(vals)) if vals else None


def _parse_mlc(text: str, source: str) -> Facts:
    f = Facts(source, "Intel MLC")
    lines = text.splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("Measuring idle latencies"):
            f.latency, _ = _matrix_after(lines, i)
        elif s.startswith("Measuring Memory Bandwidths between nodes"):
            rows, _ = _matrix_after(lines, i)
            f.bandwidth = [[v / 1000 for v in r] for r in rows]
        elif re.match(r"Inject\s+Latency\s+Bandwidth", s):
            pts = []
            for row in lines[i + 1:]:
                if m := re.fullmatch(r"\s*\d+\s+([\d.]+)\s+([\d.]+)\s*", row):
                    pts.append((float(m.group(2)) / 1000, float(m.group(1))))
                elif row.strip() and not row.strip().startswith(("Delay", "=")):
                    break
            f.loaded = pts
        elif m := re.match(r"ALL Reads\s*:\s*([\d.]+)", s):
            f.all_reads_gbps = float(m.group(1)) / 1000
        elif m := re.match(r"1:1 Reads-Writes\s*:\s*([\d.]+)", s):
            f.mix_1to1_gbps = float(m.group(1)) / 1000
        elif m := re.match(r"Local Socket L2->L2 HITM latency\s+([\d.]+)", s):
            f.c2c_local = float(m.group(1))
        elif s.startswith("Remote Socket L2->L2 HITM latency (data address homed in writer socket)"):
            f.c2c_remote_writer = _hitm_matrix(lines, i)
        elif s.startswith("Remote Socket L2->L2 HITM latency (data address homed in reader socket)"):
            f.c2c_remote_reader = _hitm_matrix(lines, i)
    return f


def _parse_hwloc(text: str, source: str) -> Facts:
    from defusedxml import ElementTree
    from defusedxml.common import DefusedXmlException

    f = Facts(source, "hwloc XML")
    try:
        root = ElementTree.fromstring(text)
    except (DefusedXmlException, ElementTree.ParseError) as exc:
        raise _error(source, f"not a readable hwloc XML file: {exc}") from None

    def walk(el, socket: int | None, node: int | None, core: int | None) -> None:
        kind = el.get("type")
        idx = el.get("os_index")
        if kind == "Package" and idx is not None:
            socket = int(idx)
        elif kind == "NUMANode" and idx is not None:
            node = int(idx)
            if el.get("local_memory"):
                f.node_memory_mb[node] = int(el.get("local_memory")) / 2**20
        elif kind == "Core" and idx is not None:
            core = int(idx)
        elif kind == "PU" and idx is not None:
            cpu = int(idx)
            if socket is not None:
                f.cpu_socket[cpu] = socket
                if core is not None:
                    f.cpu_core[cpu] = (socket, core)
        for child in el:
            if child.tag == "object":
                walk(child, socket, node, core)

    for info in root.iter("info"):
        if info.get("name") == "CPUModel" and info.get("value"):
            f.model = info.get("value")
            break
    for top in root.iter("object"):
        if top.get("type") == "Machine":
            walk(top, None, None, None)
            break
    # hwloc 2 puts NUMA nodes beside the CPUs they serve (memory children): map CPUs by cpuset.
    for el in root.iter("object"):
        if el.get("type") == "NUMANode" and el.get("cpuset") and el.get("os_index") is not None:
            for cpu in _cpuset(el.get("cpuset"), source):
                f.cpu_node[cpu] = int(el.get("os_index"))
    for d in root.iter("distances2"):
        if d.get("type") == "NUMANode" and "Latency" in (d.get("name") or "NUMALatency"):
            n = int(d.get("nbobjs", "0"))
            vals = [int(v) for el in d.iter("u64values") for v in (el.text or "").split()]
            if n and len(vals) == n * n:
                f.distances = [vals[i * n:(i + 1) * n] for i in range(n)]
    for d in root.iter("distances"):  # hwloc 1.x: relative latencies, base 10
        vals = [float(el.get("value", "0")) for el in d.iter("latency")]
        n = int(d.get("nbobjs", "0"))
        base = float(d.get("latency_base", "10"))
        if n and len(vals) == n * n:
            f.distances = [[int(round(v * base)) for v in vals[i * n:(i + 1) * n]] for i in range(n)]
    return f


def _cpuset(mask: str, source: str) -> list[int]:
    """hwloc's cpuset '0x000000ff,0xffffffff' -> CPU ids (32-bit words, most significant first)."""
    words = mask.split(",")
    out: list[int] = []
    for k, word in enumerate(reversed(words)):
        try:
            value = int(word, 16)
        except ValueError:
            raise _error(source, f"malformed cpuset {mask[:60]!r}") from None
        out += [32 * k + b for b in range(32) if value >> b & 1]
    return out


def _parse_sysfs(files: dict[str, str], source: str) -> Facts:
    """A copy of /sys/devices/system/{node,cpu}: relative path -> file text."""
    f = Facts(source, "sysfs")
    dist: dict[int, list[int]] = {}
    files = {path: text.replace("\x00", "") for path, text in files.items()}  # some kernels end cpulist with a NUL
    for path, text in files.items():
        if m := re.search(r"node/node(\d+)/(cpulist|distance|meminfo)$", path):
            node, what = int(m.group(1)), m.group(2)
            if what == "cpulist":
                for cpu in _cpulist(text, source):
                    f.cpu_node[cpu] = node
            elif what == "distance":
                dist[node] = _ints(text)
            elif mm := re.search(r"MemTotal:\s+(\d+) kB", text):
                f.node_memory_mb[node] = int(mm.group(1)) / 1024
        elif m := re.search(r"cpu/cpu(\d+)/topology/(physical_package_id|core_id)$", path):
            cpu = int(m.group(1))
            if m.group(2) == "physical_package_id":
                f.cpu_socket[cpu] = int(text.strip())
        elif (m := re.search(r"cpu/cpu(\d+)/cpufreq/cpuinfo_max_freq$", path)) and f.max_mhz is None:
            f.max_mhz = int(text.strip()) / 1000
    for path, text in files.items():
        if m := re.search(r"cpu/cpu(\d+)/topology/core_id$", path):
            cpu = int(m.group(1))
            if cpu in f.cpu_socket:
                f.cpu_core[cpu] = (f.cpu_socket[cpu], int(text.strip()))
    if dist:
        f.distances = [dist[k] for k in sorted(dist)]
    return f


# ----------------------------------------------------------------------------- reading
def _read_text(path: Path) -> str:
    try:
        if not path.is_file():
            raise _error(str(path), "not a regular file, a directory or a tarball")
        size = path.stat().st_size
        if size > MAX_INPUT_BYTES:
            raise _error(str(path), f"larger than {MAX_INPUT_BYTES // 2**20} MiB")
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise _error(str(path), f"cannot be read: {exc.strerror or exc}") from None


_SYSFS = re.compile(r"(node/node\d+/(cpulist|distance|meminfo)|cpu/cpu\d+/(topology/(physical_package_id|core_id)"
                    r"|cpufreq/cpuinfo_max_freq))$")


def _sysfs_files_dir(root: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    total = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            if _SYSFS.search(rel.replace(os.sep, "/")):
                p = Path(dirpath, name)
                if p.is_symlink() or not p.is_file():
                    continue
                text = p.read_text(errors="replace")[:65536]
                total += len(text)
                if len(files) >= MAX_TAR_MEMBERS or total > MAX_TAR_BYTES:
                    raise _error(str(root), "too many or too large files for a copy of /sys/devices/system")
                files[rel.replace(os.sep, "/")] = text
    return files


def _sysfs_files_tar(path: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    total = 0
    try:
        with tarfile.open(path) as tar:
            for k, member in enumerate(tar):
                if k >= MAX_TAR_MEMBERS:
                    raise _error(str(path), f"more than {MAX_TAR_MEMBERS:,} members")
                if not member.isfile() or not _SYSFS.search(member.name):
                    continue
                total += member.size
                if member.size > 65536 or total > MAX_TAR_BYTES:
                    raise _error(str(path), "a member is too large for a sysfs file")
                fh = tar.extractfile(member)
                files[member.name] = fh.read().decode("utf-8", errors="replace") if fh else ""
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise _error(str(path), f"not a readable tarball: {exc}") from None
    return files


def parse(path: str | os.PathLike[str]) -> Facts:
    """Read one input and say what it is by its content."""
    p = Path(path)
    if p.is_dir():
        files = _sysfs_files_dir(p)
        if not files:
            raise _error(str(p), "a directory, but no copy of /sys/devices/system/{node,cpu} in it")
        return _parse_sysfs(files, str(p))
    if p.is_file() and tarfile.is_tarfile(p):
        files = _sysfs_files_tar(p)
        if not files:
            raise _error(str(p), "a tarball, but no copy of /sys/devices/system/{node,cpu} in it")
        return _parse_sysfs(files, str(p))
    text = _read_text(p)
    source = str(p)
    head = text.lstrip()[:4000]
    if head.startswith("<?xml") or "<topology" in head:
        return _parse_hwloc(text, source)
    if "Intel(R) Memory Latency Checker" in text or "Measuring idle latencies" in text:
        return _parse_mlc(text, source)
    if re.search(r"^available: \d+ nodes", text, re.M) or "node distances:" in text:
        return _parse_numactl(text, source)
    if re.search(r"^# CPU,", text, re.M):
        return _parse_lscpu_p(text, source)
    first = text.strip().splitlines()[0].split() if text.strip() else []
    if first and first[0] == "CPU" and ("NODE" in first or "SOCKET" in first):
        return _parse_lscpu_e(text, source)
    if re.search(r"^(Architecture|CPU\(s\)|Socket\(s\)):", text, re.M):
        return _parse_lscpu(text, source)
    raise _error(source, "not recognised: expected the output of numactl -H, lscpu (plain, -p or -e), "
                         "lstopo --of xml, Intel MLC, or a copy of /sys/devices/system (directory or tarball)")


# ----------------------------------------------------------------------------- merging
def _merge(facts: list[Facts]) -> tuple[dict[str, Any], dict[str, str]]:
    """One value per field, with the input that gave it; disagreements are errors."""
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for f in facts:
        for name, value in vars(f).items():
            if name in ("source", "kind") or value is None or value == {}:
                continue
            label = f"{f.kind} ({Path(f.source).name})"
            if isinstance(value, dict):
                have = merged.setdefault(name, {})
                for k, v in value.items():
                    if k in have and have[k] != v and name != "node_memory_mb":
                        raise _error(f.source, f"says {name.replace('_', ' ')} of {k} is {v}, but "
                                               f"{origin[name]} says {have[k]}")
                    have.setdefault(k, v)
                origin.setdefault(name, label)
            elif name not in merged:
                merged[name] = value
                origin[name] = label
            elif name == "distances" and merged[name] != value:
                raise _error(f.source, f"gives node distances {value}, but {origin[name]} gives {merged[name]}")
    return merged, origin


def _closest_preset(sockets: int, cores_per_socket: int) -> tuple[str, dict[str, Any]]:
    from ..model.presets import load_preset, preset_names

    best = None
    for name in preset_names("machines"):
        p = load_preset("machines", name)
        score = (abs(p["sockets"] - sockets), abs(p["cores_per_node"] * p.get("nodes_per_socket", 1) - cores_per_socket))
        if best is None or score < best[0]:
            best = (score, name, p)
    assert best is not None
    return best[1], best[2]


def import_machine(paths: list[str], name: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """Build a machine spec (plain data, with ``sources``) from ``paths``; also return the warnings."""
    from ..model.machine import MachineSpec

    facts = [parse(p) for p in paths]
    m, origin = _merge(facts)
    src: dict[str, str] = {}
    warnings: list[str] = []
    where = ", ".join(paths)
    cpu_node: dict[int, int] = m.get("cpu_node", {})
    if not cpu_node:
        raise _error(where, "no input says which CPUs belong to which NUMA node "
                            "(give numactl -H, lscpu, lscpu -p/-e, hwloc XML or a sysfs copy)")
    cpus = sorted(cpu_node)
    if cpus != list(range(len(cpus))):
        missing = sorted(set(range(max(cpus) + 1)) - set(cpus))[:5]
        raise _error(where, f"CPUs {missing} are missing (offline?): numasim needs every CPU 0-{max(cpus)}")
    dist = m.get("distances")
    n_all = len(dist) if dist else max(cpu_node.values()) + 1
    cpu_nodes = sorted(set(cpu_node.values()))
    memory_only = [k for k in range(n_all) if k not in cpu_nodes]
    if cpu_nodes != list(range(len(cpu_nodes))) or any(k < len(cpu_nodes) for k in memory_only):
        raise _error(where, f"nodes with CPUs are {cpu_nodes}: numasim numbers them first, then memory-only nodes")
    n = len(cpu_nodes)
    per_node = [sum(1 for c in cpus if cpu_node[c] == k) for k in range(n)]
    if len(set(per_node)) != 1:
        raise _error(where, f"nodes have different CPU counts {per_node}: numasim models nodes of equal size")

    # Sockets and SMT.
    sock = m.get("cpu_socket", {})
    cores = m.get("cpu_core", {})
    if len(sock) == len(cpus):
        node_socket = {}
        for c in cpus:
            prev = node_socket.setdefault(cpu_node[c], sock[c])
            if prev != sock[c]:
                raise _error(where, f"node {cpu_node[c]} spans sockets {prev} and {sock[c]}")
        socket_ids = sorted(set(node_socket.values()))
        sockets = len(socket_ids)
        if [node_socket[k] for k in range(n)] != sorted(node_socket[k] for k in range(n)):
            raise _error(where, "nodes are not numbered socket by socket; numasim numbers node k on socket "
                                "k // nodes_per_socket")
        src["sockets"] = f"imported: {origin['cpu_socket']}"
    elif m.get("sockets"):
        sockets = m["sockets"]
        src["sockets"] = f"imported: {origin['sockets']}"
    else:
        sockets = n if not dist else _sockets_from_distances(dist, n)
        src["sockets"] = (f"guessed from the node distances (nodes closer than {SAME_SOCKET_DISTANCE} share a socket)"
                          if dist else "guessed: one socket per node (no input names sockets)")
        warnings.append(f"sockets: {src['sockets']}")
    if n % sockets:
        raise _error(where, f"{n} nodes on {sockets} sockets: numasim needs the same number of nodes per socket")
    if len(cores) == len(cpus):
        threads = len(cpus) // len(set(cores.values()))
        src["smt"] = src["threads_per_core"] = f"imported: {origin['cpu_core']}"
    elif m.get("threads_per_core"):
        threads = m["threads_per_core"]
        src["smt"] = src["threads_per_core"] = f"imported: {origin['threads_per_core']}"
    else:
        threads = 1
        src["smt"] = "guessed: no hardware threads (no input gives cores; lscpu -p, lscpu -e, hwloc or sysfs would)"
        warnings.append(f"smt: {src['smt']}")
    cores_per_node = per_node[0] // threads
    spec: dict[str, Any] = {
        "name": name or (m.get("model") or "imported").strip()[:200],
        "description": f"imported by numasim machine import from {', '.join(Path(p).name for p in paths)}"[:4000],
        "sockets": sockets,
        "nodes_per_socket": n // sockets,
        "cores_per_node": cores_per_node,
        "smt": threads > 1,
    }
    if threads > 1:
        spec["threads_per_core"] = threads
    numbering = [cpu_node[c] for c in cpus]
    block = list(np.tile(np.repeat(np.arange(n), cores_per_node), threads))
    alternate = list(np.tile(np.tile(np.arange(n), cores_per_node), threads))
    spec["cpu_numbering"] = "block" if numbering == block else "alternate" if numbering == alternate else numbering
    src.update(nodes_per_socket=f"imported: {origin['cpu_node']}", cores_per_node=f"imported: {origin['cpu_node']}",
               cpu_numbering=f"imported: {origin['cpu_node']}")

    preset_name, preset = _closest_preset(sockets, n // sockets * cores_per_node)

    def guess(field_name: str, value: Any, why: str = "") -> Any:
        src[field_name] = f"guessed: from the {preset_name} preset{why}; no input gives it"
        warnings.append(f"{field_name}: {src[field_name]}")
        return value

    base = re.search(r"@\s*([\d.]+)\s*GHz", m.get("model") or "")
    if base:
        spec["frequency_ghz"] = float(base.group(1))
        src["frequency_ghz"] = f"imported: {origin['model']} (the base frequency in the model name)"
    elif m.get("max_mhz"):
        spec["frequency_ghz"] = round(m["max_mhz"] / 1000, 3)
        src["frequency_ghz"] = f"imported: {origin['max_mhz']} (the highest frequency the CPUs report)"
    else:
        spec["frequency_ghz"] = guess("frequency_ghz", preset["frequency_ghz"])
    mem = m.get("node_memory_mb", {})
    if all(k in mem for k in range(n)):
        spec["memory_per_node"] = f"{int(min(mem[k] for k in range(n)))}MiB"
        src["memory_per_node"] = f"imported: {origin['node_memory_mb']} (the smallest node)"
    else:
        spec["memory_per_node"] = guess("memory_per_node", preset["memory_per_node"])

    lat = m.get("latency")
    if dist and n_all > 1:
        spec["slit"] = [row[:n] for row in dist[:n]]
        src["slit"] = f"imported: {origin['distances']}"
    if lat and len(lat) >= n and all(len(r) >= n for r in lat):
        local = float(np.mean([lat[i][i] for i in range(n)]))
        spec["local_latency_ns"] = round(local, 1)
        if n > 1:
            spec["latency_ns"] = [[round(v, 1) for v in row[:n]] for row in lat[:n]]
            src["latency_ns"] = f"imported: {origin['latency']} (idle latency matrix)"
        src["local_latency_ns"] = f"imported: {origin['latency']} (mean of the diagonal)"
    else:
        spec["local_latency_ns"] = guess("local_latency_ns", preset["local_latency_ns"])
        if n > 1 and not dist:
            spec["remote_latency_ns"] = guess("remote_latency_ns", preset["remote_latency_ns"])
        elif n > 1:
            src["slit"] += "; remote latencies are local_latency_ns x slit / 10"
            warnings.append("latency_ns: remote latencies are derived as local x SLIT / 10, but SLIT is the "
                            "firmware's relative distance, not a measured latency (AMD EPYC reports 32 for a remote "
                            "socket at well under 3.2x the local latency); give Intel MLC --latency_matrix output")
    bw = m.get("bandwidth")
    if bw and len(bw) >= n:
        spec["memory_bandwidth_gbps"] = round(float(np.mean([bw[i][i] for i in range(n)])), 1)
        src["memory_bandwidth_gbps"] = f"imported: {origin['bandwidth']} (mean of the diagonal)"
        per_socket = n // sockets
        cross = [bw[i][j] for i in range(n) for j in range(n) if i // per_socket != j // per_socket]
        same = [bw[i][j] for i in range(n) for j in range(n) if i != j and i // per_socket == j // per_socket]
        if cross:
            spec["interconnect_gbps"] = round(float(min(cross)), 1)
            src["interconnect_gbps"] = f"imported: {origin['bandwidth']} (the smallest cross-socket figure)"
        if same:
            spec["same_socket_interconnect_gbps"] = round(float(min(same)), 1)
            src["same_socket_interconnect_gbps"] = f"imported: {origin['bandwidth']} (the smallest same-socket figure)"
    else:
        spec["memory_bandwidth_gbps"] = guess("memory_bandwidth_gbps", preset["memory_bandwidth_gbps"])
    if "interconnect_gbps" not in spec:
        spec["interconnect_gbps"] = guess("interconnect_gbps", preset["interconnect_gbps"])
    loaded = m.get("loaded")
    if loaded and len(loaded) >= 2:
        pts: list[list[float]] = []
        for b, ns in sorted(loaded):
            if not pts or b > pts[-1][0]:
                pts.append([round(b, 2), round(ns, 2)])
        spec["loaded_latency"] = pts
        spec["loaded_latency_peak_gbps"] = pts[-1][0]
        src["loaded_latency"] = f"imported: {origin['loaded']} (points in increasing bandwidth)"
        src["loaded_latency_peak_gbps"] = f"imported: {origin['loaded']} (its highest bandwidth)"
    else:
        spec["loaded_latency"] = guess("loaded_latency", preset["loaded_latency"])
        spec["loaded_latency_peak_gbps"] = guess("loaded_latency_peak_gbps", preset["loaded_latency_peak_gbps"])
    if m.get("mix_1to1_gbps") and loaded:
        spec["bandwidth_1to1_gbps"] = round(m["mix_1to1_gbps"], 1)
        src["bandwidth_1to1_gbps"] = f"imported: {origin['mix_1to1_gbps']} (1:1 Reads-Writes)"
    for key, fact in (("c2c_local_ns", "c2c_local"), ("c2c_remote_ns", "c2c_remote_writer"),
                      ("c2c_remote_reader_homed_ns", "c2c_remote_reader")):
        if m.get(fact):
            spec[key] = round(m[fact], 1)
            src[key] = f"imported: {origin[fact]}"
    if m.get("l2_kib"):
        spec["l2_kib"] = round(m["l2_kib"], 1)
        src["l2_kib"] = f"imported: {origin['l2_kib']}"
    if m.get("l3_mib"):
        spec["llc_mib_per_socket"] = round(m["l3_mib"], 2)
        src["llc_mib_per_socket"] = (f"imported: {origin['l3_mib']} (one L3 instance as lscpu prints it, times the "
                                     "instances per socket when lscpu counts them)")
        if "AMD" in (m.get("model") or "") and not m.get("l3_counted"):
            warnings.append("llc_mib_per_socket: this lscpu prints one L3 instance, which on AMD EPYC is one core "
                            "complex's, not the socket's; multiply by the complexes per socket")
    if memory_only:
        spec["memory_nodes"] = []
        per_socket = n // sockets
        for k in memory_only:
            near = min(range(n), key=lambda j: (dist[j][k], j))
            entry = {"kind": "cxl", "socket": near // per_socket,
                     "memory": f"{int(mem.get(k, 1024))}MiB",
                     "latency_ns": round(spec["local_latency_ns"] * dist[near][k] / 10, 1),
                     "bandwidth_gbps": spec["memory_bandwidth_gbps"], "slit": int(dist[near][k])}
            measured = []
            if lat and all(len(r) > k for r in lat[:n]):
                entry["latency_ns"] = round(lat[near][k], 1)
                measured.append("latency_ns")
            if bw and all(len(r) > k for r in bw[:n]):
                entry["bandwidth_gbps"] = round(bw[near][k], 1)
                measured.append("bandwidth_gbps")
            spec["memory_nodes"].append(entry)
        guessed = [f for f in ("latency_ns", "bandwidth_gbps") if f not in measured]
        src["memory_nodes"] = (f"imported: node ids, sizes and SLIT from {origin.get('distances', '?')}; "
                               "socket: the nearest CPU node's; "
                               + ("; ".join(f"{f} imported: Intel MLC, from the nearest CPU node" for f in measured)
                                  + ("; " if measured else ""))
                               + ("latency_ns guessed as local_latency_ns x SLIT / 10; " if "latency_ns" in guessed else "")
                               + ("bandwidth_gbps guessed as a DRAM node's; " if "bandwidth_gbps" in guessed else "")
                               + "kind guessed (cxl)")
        if guessed:
            warnings.append(f"memory_nodes: nodes {memory_only} have memory and no CPUs; their {' and '.join(guessed)} "
                            "are guessed (latency from SLIT, bandwidth a DRAM node's: a CXL device usually has much "
                            "less); measure them (MLC --latency_matrix and --bandwidth_matrix list memory-only nodes too)")
    if threads > 1 and len(cores) == len(cpus):
        # numasim pairs a node's CPUs into cores in OS order: the first cores_per_node are
        # distinct cores, the next ones their siblings in the same order. Say so if the machine differs.
        real = {frozenset(c for c in cpus if cores[c] == key) for key in set(cores.values())}
        ours: dict[tuple[int, int], set[int]] = {}
        seen: dict[int, int] = {}
        for c in cpus:
            k = seen.get(cpu_node[c], 0)
            seen[cpu_node[c]] = k + 1
            ours.setdefault((cpu_node[c], k % cores_per_node), set()).add(c)
        if {frozenset(v) for v in ours.values()} != real:
            warnings.append("cpu_numbering: this machine numbers hardware-thread siblings differently from "
                            "numasim's rule (a node's first cores_per_node CPUs are distinct cores, then their "
                            "siblings in the same order); SMT effects will pair other CPUs than the real siblings")
    spec["sources"] = src
    try:
        MachineSpec.model_validate(spec)
    except Exception as exc:
        raise _error(where, f"the imported machine is not valid: {exc}") from None
    return spec, warnings


SAME_SOCKET_DISTANCE = 20  # SLITs put a socket's own nodes at 11-16 (SNC, NPS, dies) and other sockets at 20+


def _sockets_from_distances(dist: list[list[int]], n: int) -> int:
    """Sockets, guessed from SLIT: nodes closer than ``SAME_SOCKET_DISTANCE`` to each other share one."""
    d = np.asarray(dist)[:n, :n]
    groups: list[set[int]] = []
    for i in range(n):
        for g in groups:
            if all(d[i, j] < SAME_SOCKET_DISTANCE for j in g):
                g.add(i)
                break
        else:
            groups.append({i})
    return len(groups) if n % len(groups) == 0 else n


def to_yaml(spec: dict[str, Any], header: str) -> str:
    """The machine file: mappings in block style, lists of numbers on one line each."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _list(dumper: yaml.SafeDumper, data: list) -> Any:
        flat = all(not isinstance(x, (list, dict)) for x in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat or None)

    _Dumper.add_representer(list, _list)
    return header + yaml.dump(spec, Dumper=_Dumper, sort_keys=False, width=120, default_flow_style=False)
