"""What each tool's output says about a machine: one parser per format, all returning :class:`Facts`.

The formats: ``numactl -H``, ``lscpu`` (plain, ``-p``, ``-e``), hwloc XML (read with
defusedxml), a copy of ``/sys/devices/system/{node,cpu}`` (as files by their path), and
Intel MLC output (several sections in one file are fine). :mod:`numasim.importers.inputs`
reads an input and picks its parser; :mod:`numasim.importers.machine` merges the facts
into a machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import Problem, ScenarioError
from ..model.machine import MAX_CPUS

__all__ = ["Facts", "error"]


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
    l3_instances: int | None = None  # L3 caches in the machine (lscpu's count, or lscpu -p's cache ids)
    threads_per_core: int | None = None
    listed: int = 0  # CPU-to-node entries read, repeats included: bounds the work of a hostile input


def error(source: str, message: str, path: str = "") -> ScenarioError:
    """The importers' error: ``source`` (the input file), ``path`` (where in it, if it says) and what was wrong."""
    return ScenarioError(Problem(path, message), source=source)


# ----------------------------------------------------------------------------- parsers
def _int(text: str, source: str, what: str, path: str = "", signed: bool = False) -> int:
    """A whole number (at most 30 digits) or an error naming ``what`` it should have been."""
    t = text.strip()
    if re.fullmatch(r"[0-9]{31,}", t):
        raise error(source, f"{what} is {t[:20]}... ({len(t):,} digits): expected a whole number of at most 30 digits",
                    path)
    if not re.fullmatch(r"-?[0-9]{1,30}" if signed else r"[0-9]{1,30}", t):
        raise error(source, f"{what} is {t[:40]!r}: expected a whole number", path)
    return int(t)


def _ints(text: str, source: str, what: str, path: str = "") -> list[int]:
    return [_int(x, source, what, path) for x in text.split()]


def _cpu_id(cpu: int, source: str, path: str = "") -> int:
    """``cpu``, if numasim can model a machine with it; checked before anything is sized by it."""
    if not 0 <= cpu < MAX_CPUS:
        raise error(source, f"CPU {cpu} is above the {MAX_CPUS:,} CPUs numasim models (CPU ids 0-{MAX_CPUS - 1})", path)
    return cpu


def _cpu_ids(text: str, source: str, path: str = "") -> list[int]:
    return [_cpu_id(c, source, path) for c in _ints(text, source, "a CPU id", path)]


def _square(rows: list[list[int]], source: str, what: str, path: str = "") -> None:
    """A distance matrix has one row per node and one entry per node in each row."""
    for k, row in enumerate(rows):
        if len(row) != len(rows):
            raise error(source, f"{what} row {k} has {len(row)} entries, expected {len(rows)} (one per node)", path)


def _cpulist(text: str, source: str, path: str = "") -> list[int]:
    out: list[int] = []
    for item in text.strip().split(","):
        item = item.strip()
        if not item:
            continue
        m = re.fullmatch(r"([0-9]{1,30})(?:-([0-9]{1,30}))?", item)
        if not m:
            raise error(source, f"malformed CPU list item {item[:40]!r}: expected CPU ids and ranges such as 0-3,8,10-11",
                        path)
        lo, hi = _cpu_id(int(m.group(1)), source, path), _cpu_id(int(m.group(2) or m.group(1)), source, path)
        if hi < lo:
            raise error(source, f"malformed CPU range {item[:40]!r}: the first CPU must not be above the last", path)
        out.extend(range(lo, hi + 1))
        if len(out) > MAX_CPUS:
            raise error(source, f"a CPU list of more than {MAX_CPUS:,} CPUs (numasim models up to {MAX_CPUS:,})", path)
    return out


def _node_id(text: str, source: str, path: str = "") -> int:
    return _node(_int(text, source, "a NUMA node id", path), source, path)


def _node(node: int, source: str, path: str = "") -> int:
    if node >= MAX_CPUS:  # a node has at least one CPU, or memory only (and is numbered after those that have CPUs)
        raise error(source, f"NUMA node {node} is above the nodes numasim models (ids below {MAX_CPUS:,})", path)
    return node


def _put_node(f: "Facts", cpu: int, node: int, source: str, path: str = "") -> None:
    """Record that ``cpu`` is on ``node``; a CPU listed on two nodes is an error (each CPU is on one)."""
    f.listed += 1
    if f.listed > MAX_CPUS:
        raise error(source, f"more than {MAX_CPUS:,} CPU-to-node entries in all (repeats included): numasim "
                            f"models machines of up to {MAX_CPUS:,} CPUs, each listed once", path)
    known = f.cpu_node.get(cpu)
    if known is not None and known != node:
        raise error(source, f"CPU {cpu} is listed on NUMA node {known} and on node {node}: each CPU belongs to "
                            "exactly one node", path)
    f.cpu_node[cpu] = node


def _parse_numactl(text: str, source: str) -> Facts:
    f = Facts(source, "numactl -H")
    rows: list[list[int]] = []
    in_dist = False
    for line in text.splitlines():
        s = line.strip()
        if m := re.fullmatch(r"node ([0-9]+) cpus:(.*)", s):
            node = _node_id(m.group(1), source)
            for cpu in _cpu_ids(m.group(2), source):
                _put_node(f, cpu, node, source)
        elif m := re.fullmatch(r"node ([0-9]+) size: ([0-9]+) MB", s):
            f.node_memory_mb[_node_id(m.group(1), source)] = float(_int(m.group(2), source, "a node size"))
        elif s == "node distances:":
            in_dist = True
        elif in_dist and (m := re.fullmatch(r"([0-9]+):((?:\s+[0-9]+)+)", s)):
            rows.append(_ints(m.group(2), source, "a node distance"))
    if rows:
        _square(rows, source, "node distances")
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


def _number(text: str, source: str, what: str) -> float:
    """A finite number, such as lscpu's '3600.0000', or an error naming ``what`` it should have been."""
    if not re.fullmatch(r"[0-9]{1,30}(\.[0-9]{0,30})?", text.strip()):
        raise error(source, f"{what} is {text.strip()[:40]!r}: expected a number such as 3600.0000")
    return float(text)


def _cache_kib(value: str) -> tuple[float, int | None] | None:
    """'1024K', '1 MiB', '28 MiB (28 instances)' -> (KiB per instance, instances if said)."""
    m = re.match(r"([0-9]{1,30}(?:\.[0-9]{1,30})?)\s*([KMG])?i?B?\s*(?:\(([0-9]{1,9}) instances?\))?", value.strip())
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
        if m := re.fullmatch(r"NUMA node([0-9]+) CPU\(s\)", key):
            node = _node_id(m.group(1), source)
            for cpu in _cpulist(value, source):
                _put_node(f, cpu, node, source)
        elif key in _LSCPU_KEYS:
            values[_LSCPU_KEYS[key]] = value
    f.model = values.get("model")
    for key, attr in (("sockets", "sockets"), ("threads", "threads_per_core")):
        if re.fullmatch(r"[0-9]{1,9}", values.get(key, "")):
            setattr(f, attr, int(values[key]))
    if "max_mhz" in values:
        f.max_mhz = _number(values["max_mhz"], source, "CPU max MHz")
    # lscpu prints a cache as per instance ('1024K') or, since util-linux 2.37, as a total
    # with its instance count ('28 MiB (28 instances)').
    if "l2" in values and (l2 := _cache_kib(values["l2"])):
        f.l2_kib = l2[0]
    if "l3" in values and (l3 := _cache_kib(values["l3"])):
        sockets = int(values["sockets"]) if re.fullmatch(r"[0-9]{1,9}", values.get("sockets", "")) else None
        # Per socket: the instance size times the instances per socket (AMD has one per CCX).
        per_socket = l3[0] * (l3[1] // sockets if l3[1] and sockets and l3[1] % sockets == 0 else 1)
        f.l3_mib = per_socket / 1024
        f.l3_counted = l3[1] is not None
        f.l3_instances = l3[1]
    return f


def _parse_lscpu_p(text: str, source: str) -> Facts:
    f = Facts(source, "lscpu -p")
    header: list[str] = []
    l3_ids: set[int] = set()
    for line in text.splitlines():
        if line.startswith("# CPU,"):
            header = [h.strip().lower() for h in line[2:].split(",")]
            continue
        if line.startswith("#") or not line.strip():
            continue
        if not header:
            raise error(source, "lscpu -p output without its '# CPU,Core,Socket,Node' header line")
        cols = dict(zip(header, line.split(",")))
        _cpu_row(f, cols, source)
        # The cache ids ('L1d:L1i:L2:L3' in one column): CPUs with one L3 id share that cache.
        for name, value in cols.items():
            levels = name.split(":")
            if "l3" in levels:
                ids = value.split(":")
                if len(ids) == len(levels) and re.fullmatch(r"[0-9]{1,9}", ids[levels.index("l3")].strip()):
                    l3_ids.add(int(ids[levels.index("l3")]))
    if l3_ids:
        f.l3_instances = len(l3_ids)
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
        cpu = _int(cols["cpu"], source, "a CPU id")
        if cols.get("node", "") not in ("", "-"):
            node = _int(cols["node"], source, "a NUMA node id")
        if cols.get("socket", "") not in ("", "-"):
            socket = _int(cols["socket"], source, "a socket id")
            if cols.get("core", "") not in ("", "-"):
                core = _int(cols["core"], source, "a core id")
    except (KeyError, ScenarioError):
        raise error(source, f"malformed lscpu row: {' '.join(cols.values())[:80]!r}: expected whole numbers in its "
                            "CPU, Core, Socket and Node columns") from None
    _cpu_id(cpu, source)
    if cols.get("node", "") not in ("", "-"):
        _put_node(f, cpu, _node(node, source), source)
    if cols.get("socket", "") not in ("", "-"):
        f.cpu_socket[cpu] = socket
        if cols.get("core", "") not in ("", "-"):
            f.cpu_core[cpu] = (socket, core)


_NUM = r"[0-9]{1,30}(?:\.[0-9]{1,30})?"  # a number in MLC's output
MLC_HEADER_WITHIN = 10
"""A matrix's header ('Numa node  0  1', 'Writer Numa Node  0  1') is looked for in at most this many
non-empty lines after its section's title (MLC v3.7, in tests/fixtures, prints it within 5): each title
costs a bounded look-ahead, so a file of many titles parses in linear time."""


def _header_after(lines: list[str], start: int, pattern: str) -> int | None:
    """The index of the line matching ``pattern`` among the MLC_HEADER_WITHIN non-empty lines after ``start``."""
    seen = 0
    i = start + 1
    while i < len(lines) and seen < MLC_HEADER_WITHIN:
        if re.match(pattern, lines[i]):
            return i
        if lines[i].strip():
            seen += 1
        i += 1
    return None


def _matrix_after(lines: list[str], start: int) -> list[list[float]]:
    """The 'Numa node' matrix that follows the title on line ``start``: rows of '<node> v v v'."""
    rows: list[list[float]] = []
    i = _header_after(lines, start, r"\s*Numa node\s+[0-9]")
    if i is None:
        return rows
    i += 1
    while i < len(lines) and (m := re.fullmatch(rf"\s*[0-9]+((?:\s+{_NUM})+)\s*", lines[i])):
        rows.append([float(x) for x in m.group(1).split()])
        i += 1
    return rows


def _hitm_matrix(lines: list[str], start: int) -> float | None:
    """Mean of the off-diagonal numbers of an MLC c2c matrix ('-' on the diagonal)."""
    vals: list[float] = []
    i = _header_after(lines, start, r"\s*Writer Numa Node")
    if i is None:
        return None
    i += 1
    while i < len(lines) and (m := re.fullmatch(rf"\s*[0-9]+((?:\s+(?:{_NUM}|-))+)\s*", lines[i])):
        vals += [float(x) for x in m.group(1).split() if x != "-"]
        i += 1
    return float(np.mean(vals)) if vals else None


def _loaded_after(lines: list[str], start: int) -> list[tuple[float, float]]:
    """The (GB/s, ns) rows after an 'Inject Latency Bandwidth' header on line ``start``; blank, 'Delay' and '='
    lines are skipped. The rows end at the next other line (the next header at the latest): linear in all."""
    pts = []
    i = start + 1
    while i < len(lines):
        row = lines[i]
        if m := re.fullmatch(rf"\s*[0-9]+\s+({_NUM})\s+({_NUM})\s*", row):
            pts.append((float(m.group(2)) / 1000, float(m.group(1))))
        elif row.strip() and not row.strip().startswith(("Delay", "=")):
            break
        i += 1
    return pts


def _parse_mlc(text: str, source: str) -> Facts:
    f = Facts(source, "Intel MLC")
    lines = text.splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("Measuring idle latencies"):
            f.latency = _matrix_after(lines, i)
        elif s.startswith("Measuring Memory Bandwidths between nodes"):
            rows = _matrix_after(lines, i)
            f.bandwidth = [[v / 1000 for v in r] for r in rows]
        elif re.match(r"Inject\s+Latency\s+Bandwidth", s):
            f.loaded = _loaded_after(lines, i)
        elif m := re.match(rf"ALL Reads\s*:\s*({_NUM})", s):
            f.all_reads_gbps = float(m.group(1)) / 1000
        elif m := re.match(rf"1:1 Reads-Writes\s*:\s*({_NUM})", s):
            f.mix_1to1_gbps = float(m.group(1)) / 1000
        elif m := re.match(rf"Local Socket L2->L2 HITM latency\s+({_NUM})", s):
            f.c2c_local = float(m.group(1))
        elif s.startswith("Remote Socket L2->L2 HITM latency (data address homed in writer socket)"):
            f.c2c_remote_writer = _hitm_matrix(lines, i)
        elif s.startswith("Remote Socket L2->L2 HITM latency (data address homed in reader socket)"):
            f.c2c_remote_reader = _hitm_matrix(lines, i)
    return f


MAX_HWLOC_DEPTH = 256
"""The deepest nesting of <object> elements read from hwloc XML (a real topology nests fewer than 20:
Machine, Package, groups, caches, Core, PU); deeper is refused with an error, not walked."""


def _parse_hwloc(text: str, source: str) -> Facts:
    from defusedxml import ElementTree
    from defusedxml.common import DefusedXmlException

    f = Facts(source, "hwloc XML")
    try:
        root = ElementTree.fromstring(text)
    except (DefusedXmlException, ElementTree.ParseError) as exc:
        raise error(source, f"not a readable hwloc XML file: {exc}") from None

    def attr(el, name: str) -> int:
        """An element's whole-number attribute, or an error naming the element and the attribute."""
        what = f'<{el.tag} type="{el.get("type", "")[:40]}"> attribute {name}'
        return _int(el.get(name), source, what)

    def walk(top) -> None:
        """Each <object> under ``top`` (pre-order, with an explicit stack) with the socket, node and core it is in."""
        stack = [(top, None, None, None, 1)]
        while stack:
            el, socket, node, core, depth = stack.pop()
            if depth > MAX_HWLOC_DEPTH:
                raise error(source, f"<object> elements nested more than {MAX_HWLOC_DEPTH} levels deep: not an hwloc "
                                    f"topology (lstopo writes fewer than 20 levels; numasim reads up to "
                                    f"{MAX_HWLOC_DEPTH})")
            kind = el.get("type")
            idx = el.get("os_index")
            if kind == "Package" and idx is not None:
                socket = attr(el, "os_index")
            elif kind == "NUMANode" and idx is not None:
                node = _node(attr(el, "os_index"), source)
                if el.get("local_memory"):
                    f.node_memory_mb[node] = attr(el, "local_memory") / 2**20
            elif kind == "Core" and idx is not None:
                core = attr(el, "os_index")
            elif kind == "PU" and idx is not None:
                cpu = _cpu_id(attr(el, "os_index"), source)
                if socket is not None:
                    f.cpu_socket[cpu] = socket
                    if core is not None:
                        f.cpu_core[cpu] = (socket, core)
            stack.extend((child, socket, node, core, depth + 1) for child in reversed(el) if child.tag == "object")

    for info in root.iter("info"):
        if info.get("name") == "CPUModel" and info.get("value"):
            f.model = info.get("value")
            break
    for top in root.iter("object"):
        if top.get("type") == "Machine":
            walk(top)
            break
    # hwloc 2 puts NUMA nodes beside the CPUs they serve (memory children): map CPUs by cpuset.
    for el in root.iter("object"):
        if el.get("type") == "NUMANode" and el.get("cpuset") and el.get("os_index") is not None:
            node = _node(attr(el, "os_index"), source)
            for cpu in _cpuset(el.get("cpuset"), source):
                _put_node(f, cpu, node, source)
    for d in root.iter("distances2"):
        if d.get("type") == "NUMANode" and "Latency" in (d.get("name") or "NUMALatency"):
            n = attr(d, "nbobjs") if d.get("nbobjs") is not None else 0
            vals = [v for el in d.iter("u64values") for v in _ints(el.text or "", source, "a <u64values> distance")]
            if n and len(vals) == n * n:
                f.distances = [vals[i * n:(i + 1) * n] for i in range(n)]
    for d in root.iter("distances"):  # hwloc 1.x: relative latencies, base 10
        vals = [_number(el.get("value", "0"), source, "a <latency> attribute value") for el in d.iter("latency")]
        n = attr(d, "nbobjs") if d.get("nbobjs") is not None else 0
        base = _number(d.get("latency_base", "10"), source, "a <distances> attribute latency_base")
        if n and len(vals) == n * n:
            f.distances = [[int(round(v * base)) for v in vals[i * n:(i + 1) * n]] for i in range(n)]
    return f


def _cpuset(mask: str, source: str) -> list[int]:
    """hwloc's cpuset '0x000000ff,0xffffffff' -> CPU ids (32-bit words, most significant first)."""
    words = mask.split(",")
    out: list[int] = []
    for k, word in enumerate(reversed(words)):
        if not re.fullmatch(r"(0x)?[0-9a-fA-F]{1,8}", word.strip()):
            raise error(source, f"malformed cpuset {mask[:60]!r}: expected 32-bit hex words such as 0x000000ff,0xffffffff")
        value = int(word, 16)
        out += [_cpu_id(32 * k + b, source) for b in range(32) if value >> b & 1]
    return out


def _parse_sysfs(files: dict[str, str], source: str) -> Facts:
    """A copy of /sys/devices/system/{node,cpu}: relative path -> file text."""
    f = Facts(source, "sysfs")
    dist: dict[int, list[int]] = {}
    dist_file: dict[int, str] = {}
    files = {path: text.replace("\x00", "") for path, text in files.items()}  # some kernels end cpulist with a NUL
    for path, text in files.items():
        if m := re.search(r"node/node([0-9]+)/(cpulist|distance|meminfo)$", path):
            node, what = _node_id(m.group(1), source, path), m.group(2)
            if what == "cpulist":
                for cpu in _cpulist(text, source, path):
                    _put_node(f, cpu, node, source, path)
            elif what == "distance":
                dist[node] = _ints(text, source, "a node distance", path)
                dist_file[node] = path
            elif mm := re.search(r"MemTotal:\s+([0-9]+) kB", text):
                f.node_memory_mb[node] = _int(mm.group(1), source, "MemTotal", path) / 1024
        elif m := re.search(r"cpu/cpu([0-9]+)/topology/(physical_package_id|core_id)$", path):
            cpu = _cpu_id(_int(m.group(1), source, "a CPU id", path), source, path)
            if m.group(2) == "physical_package_id":
                f.cpu_socket[cpu] = _int(text, source, "the socket id", path, signed=True)
        elif (m := re.search(r"cpu/cpu([0-9]+)/cpufreq/cpuinfo_max_freq$", path)) and f.max_mhz is None:
            f.max_mhz = _int(text, source, "the frequency in kHz", path) / 1000
    for path, text in files.items():
        if m := re.search(r"cpu/cpu([0-9]+)/topology/core_id$", path):
            cpu = int(m.group(1))
            if cpu in f.cpu_socket:
                f.cpu_core[cpu] = (f.cpu_socket[cpu], _int(text, source, "the core id", path, signed=True))
    if dist:
        if sorted(dist) != list(range(len(dist))):
            raise error(source, f"distances of nodes {sorted(dist)[:10]}: expected node/nodeK/distance for every node "
                                f"0-{max(dist)}")
        for k in range(len(dist)):
            if len(dist[k]) != len(dist):
                raise error(source, f"{len(dist[k])} node distances, expected {len(dist)} (one per node)", dist_file[k])
        f.distances = [dist[k] for k in range(len(dist))]
    return f
