"""``numasim machine import``: a machine file from what the machine already reports.

The inputs are read by :mod:`numasim.importers.inputs` and parsed by
:mod:`numasim.importers.tool_outputs` (numactl -H, lscpu, hwloc XML, sysfs, Intel MLC),
each into :class:`Facts`, what it says. Here the
facts are merged (a later input fills what an earlier one left out, and a
disagreement is an error) and turned into a machine spec whose ``sources`` say where
every value came from. What no input gives is taken from the closest preset and
marked ``guessed``, with a warning.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import Problem, ScenarioError
from .inputs import parse
from .tool_outputs import Facts, error as _error

__all__ = ["Facts", "parse", "import_machine", "to_yaml"]


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


def _closest_preset(sockets: int, cores_per_socket: int, nodes_per_socket: int) -> tuple[str, dict[str, Any]]:
    """The preset nearest in sockets, then cores per socket, then NUMA nodes per socket."""
    from ..model.presets import load_preset, preset_names

    best = None
    for name in preset_names("machines"):
        p = load_preset("machines", name)
        nps = p.get("nodes_per_socket", 1)
        score = (abs(p["sockets"] - sockets), abs(p["cores_per_node"] * nps - cores_per_socket),
                 abs(nps - nodes_per_socket))
        if best is None or score < best[0]:
            best = (score, name, p)
    assert best is not None
    return best[1], best[2]


_FAMILIES = (("AMD EPYC", ("epyc",)), ("HiSilicon Kunpeng", ("kunpeng",)),
             ("Intel Xeon", ("xeon", "e5-", "e7-", "westmere", "haswell", "broadwell", "skylake", "cascade lake",
                             "sapphire rapids")))


def _family(text: str) -> str | None:
    """The server CPU family a model name (or a preset's name and description) belongs to, if known."""
    low = text.lower()
    return next((family for family, keys in _FAMILIES if any(k in low for k in keys)), None)


def import_machine(paths: list[str], name: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """Build a machine spec (plain data, with ``sources``) from ``paths``; also return the warnings."""
    from pydantic import ValidationError

    from ..model.machine import MachineSpec
    from ..model.problems import validation_problems

    facts = [parse(p) for p in paths]
    m, origin = _merge(facts)
    src: dict[str, str] = {}
    warnings: list[str] = []
    where = ", ".join(paths)
    cpu_node: dict[int, int] = m.get("cpu_node", {})
    if not cpu_node:
        raise _error(where, "no input says which CPUs belong to which NUMA node "
                            "(give numactl -H, lscpu, lscpu -p/-e, hwloc XML or a sysfs copy)")
    cpus = sorted(cpu_node)  # the parsers keep CPU and node ids below MAX_CPUS
    if cpus != list(range(len(cpus))):
        missing = [c for a, b in zip([-1] + cpus, cpus) for c in range(a + 1, min(b, a + 6))][:5]
        raise _error(where, f"CPUs {missing} are missing (offline?): numasim needs every CPU 0-{max(cpus)}")
    dist = m.get("distances")
    cpu_nodes = sorted(set(cpu_node.values()))
    if cpu_nodes != list(range(len(cpu_nodes))):
        raise _error(where, f"nodes with CPUs are {cpu_nodes[:10]}{' ...' if len(cpu_nodes) > 10 else ''}: numasim "
                            "numbers them first (0, 1, ...), then memory-only nodes")
    n = len(cpu_nodes)
    if dist and len(dist) < n:
        raise _error(where, f"the node distances cover {len(dist)} nodes, but {n} nodes have CPUs")
    n_all = len(dist) if dist else n
    memory_only = list(range(n, n_all))
    count = Counter(cpu_node.values())
    per_node = [count[k] for k in range(n)]
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

    preset_name, preset = _closest_preset(sockets, n // sockets * cores_per_node, n // sockets)

    def guess(field_name: str, value: Any, why: str = "") -> Any:
        src[field_name] = f"guessed: from the {preset_name} preset{why}; no input gives it"
        warnings.append(f"{field_name}: {src[field_name]}")
        return value

    base = re.search(r"@\s*([0-9.]+)\s*GHz", m.get("model") or "")
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
            if "remote_latency_ns" in preset:
                spec["remote_latency_ns"] = guess("remote_latency_ns", preset["remote_latency_ns"])
            else:  # a preset with a latency matrix or a SLIT instead: the mean of its built remote latencies
                from ..model.presets import machine_preset

                mat = machine_preset(preset_name).latency
                far = float(mat[~np.eye(len(mat), dtype=bool)].mean())
                spec["remote_latency_ns"] = guess("remote_latency_ns", round(far, 1), " (the mean of its remote latencies)")
        elif n > 1:
            src["slit"] += "; remote latencies are local_latency_ns x slit / 10"
            warnings.append("latency_ns: remote latencies are derived as local x SLIT / 10, but SLIT is the "
                            "firmware's relative distance, not a measured latency (AMD EPYC reports 32 for a remote "
                            "socket at well under 3.2x the local latency); give Intel MLC --latency_matrix output")
    bw = m.get("bandwidth")
    if bw and len(bw) >= n and all(len(r) >= n for r in bw[:n]):
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
    # A core's lines in flight and an EPYC chiplet's link are the CPU family's, not the board's: taken
    # from the nearest preset only when it is of the same family (a guess, said so, like the others).
    family = _family(m.get("model") or "")
    if family is not None and family == _family(f"{preset_name} {preset.get('description', '')}"):
        for key in ("thread_mlp", "core_mlp"):
            if preset.get(key) is not None:
                spec[key] = guess(key, preset[key], f" (a {family} core's)")
        if preset.get("cores_per_chiplet") and spec["cores_per_node"] % preset["cores_per_chiplet"] == 0:
            spec["cores_per_chiplet"] = guess("cores_per_chiplet", preset["cores_per_chiplet"], f" (a {family} chiplet)")
            spec["chiplet_gbps"] = guess("chiplet_gbps", preset["chiplet_gbps"], f" (a {family} chiplet's link)")
    if family == "AMD EPYC":  # every EPYC is a Zen core, on which the kernel raises the reclaim distance
        spec["node_reclaim_distance"] = 32
        src["node_reclaim_distance"] = ("the kernel's for an AMD Zen CPU (arch/x86/kernel/cpu/amd.c, init_amd_zn: "
                                        "node_reclaim_distance = 32, since v5.4)")
    # Last-level caches smaller than a node (an EPYC's CCX): measured where lscpu counts them.
    n_cores = n * spec["cores_per_node"]
    inst = m.get("l3_instances")
    if inst and n_cores % inst == 0 and n_cores // inst < spec["cores_per_node"] and spec["cores_per_node"] % (n_cores // inst) == 0:
        spec["cores_per_llc"] = n_cores // inst
        src["cores_per_llc"] = f"imported: {origin['l3_instances']} ({inst} L3 caches for {n_cores} cores)"
    elif (not inst and family is not None and preset.get("cores_per_llc")
          and family == _family(f"{preset_name} {preset.get('description', '')}")
          and spec["cores_per_node"] % preset["cores_per_llc"] == 0):
        spec["cores_per_llc"] = guess("cores_per_llc", preset["cores_per_llc"], f" (a {family} core complex)")
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
        siblings: dict[tuple[int, int], set[int]] = {}
        for c in cpus:
            siblings.setdefault(cores[c], set()).add(c)
        real = {frozenset(v) for v in siblings.values()}
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
    except ValidationError as exc:
        problems = validation_problems(exc, MachineSpec)
        raise ScenarioError([Problem(p.path, f"{p.message} (in the imported machine)")
                             for p in problems], source=where) from None
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
