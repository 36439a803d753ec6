"""The simulated machine: sockets, NUMA nodes, cores, SMT, memory system.

:class:`MachineSpec` is the validated description (from a preset file or a
scenario); :class:`Machine` is the frozen, derived form the engine and the
policies use, with numpy arrays indexed by OS CPU id and by node.
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import Field, model_validator

from .curve import LoadedLatencyCurve
from .interconnect import Interconnect, build_interconnect, route_entries
from .memory_nodes import MemoryNodeSpec, with_memory_nodes
from .spec import Bandwidth, Latency, Size, Spec, Text

__all__ = ["MachineSpec", "LinkSpec", "MemoryNodeSpec", "Machine", "LoadedLatencyCurve", "shared_machine"]

PositiveFloat = Annotated[float, Field(gt=0)]


# Lines one thread keeps in flight streaming where the machine does not say (thread_mlp): Little's law
# on about 12 GB/s per core at about 85 ns (a Skylake-like core; the v1 stream preset's mlp).
STREAM_MLP = 16.0
MAX_CPUS = 65_536  # 64 sockets x 1,024 cores: built in 35 s and 400 MB (docs/performance-history.md)
# Route entries (node pairs x links crossed): 64 sockets x 16 nodes all joined directly make 1.05 M,
# built in 2.6 s; a 64-socket ring of 16-node sockets would make 16.8 M (31 s, 1.15 GB).
MAX_ROUTE_ENTRIES = 2_097_152


class LinkSpec(Spec):
    """One interconnect link (UPI, xGMI, a node controller port) between two sockets."""

    sockets: tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]] = Field(description="the two sockets it joins")
    gbps: Bandwidth = Field(description="bandwidth per direction, GB/s; links listed twice between one pair add up")


class MachineSpec(Spec):
    """Validated description of a machine (see docs/scenario-reference.md)."""


    name: Text = Field(default="custom", max_length=200, description="a name for tables and reports")
    description: Text = Field(default="", max_length=4000, description="free text")
    sockets: int = Field(ge=1, le=64, description="CPU sockets")
    nodes_per_socket: int = Field(default=1, ge=1, le=16, description="NUMA nodes per socket (2 or 4 model SNC / NPS)")
    cores_per_node: int = Field(ge=1, le=1024, description="physical cores per NUMA node")
    smt: bool = Field(default=False, description="hyperthreading on")
    threads_per_core: int = Field(default=2, ge=2, le=8, description="hardware threads per core when smt is on")
    smt_yield: float = Field(default=1.25, ge=1.0, le=2.0, description="throughput of a core running two compute-bound threads, relative to one; threads that stall on memory gain more (docs/model.md)")
    cpu_numbering: Literal["block", "alternate"] | list[Annotated[int, Field(ge=0)]] = Field(
        default="block", description="OS CPU numbering: block, alternate, or the node of each OS CPU"
    )
    frequency_ghz: float = Field(ge=0.1, le=10, description="core frequency (base, the highest the governor selects), GHz")
    min_frequency_ghz: float | None = Field(
        default=None, ge=0.1, le=10, description="lowest frequency the cpufreq governor can select, GHz (default: no range)")
    governor: Literal["performance", "powersave", "schedutil"] = Field(
        default="performance",
        description="cpufreq governor: performance (highest), powersave (lowest, acpi-cpufreq), schedutil (from utilisation)")
    memory_per_node: Size = Field(gt=0, le=2**50, description="DRAM per node, e.g. 256GiB")
    local_latency_ns: Latency = Field(description="idle local DRAM latency, ns")
    remote_latency_ns: Latency | None = Field(default=None, description="idle remote DRAM latency, ns (all remote nodes)")
    latency_ns: list[list[Latency]] | None = Field(default=None, description="idle latency matrix, ns, CPU node x memory node")
    slit: list[list[Annotated[int, Field(ge=10, le=254)]]] | None = Field(default=None, description="ACPI SLIT distances (numactl --hardware); latencies = local x slit / 10 if no latency is given")
    hop_latency_ns: Latency | None = Field(default=None, description="with links and no latency matrix: latency each link crossed adds to the local latency, ns")
    memory_bandwidth_gbps: Bandwidth = Field(description="read bandwidth of one node's memory, GB/s")
    bandwidth_1to1_gbps: Bandwidth | None = Field(
        default=None,
        description="bandwidth of a 1:1 read/write mix (Intel MLC --max_bandwidth), measured like loaded_latency_peak_gbps; sets the cost of a write-back (default: a write costs a read)")
    interconnect_gbps: Bandwidth = Field(description="bandwidth between two sockets, per direction, GB/s")
    same_socket_interconnect_gbps: Bandwidth | None = Field(default=None, description="bandwidth between nodes of one socket (default: memory_bandwidth_gbps)")
    socket_link_budget: Literal["per_direction", "shared"] = Field(
        default="per_direction",
        description="how a link between sockets (or routers) spends its bandwidth: per_direction, each direction its "
                    "own (reads coming one way and write-backs going the other do not compete); shared, one budget "
                    "for both directions together (measured on Sapphire Rapids' UPI: mixed remote traffic totals "
                    "about the read-only rate; docs/model.md)")
    links: list[LinkSpec] | None = Field(
        default=None, max_length=65_536,
        description="the interconnect as a graph: one entry per link between two sockets (or a socket and a router); traffic takes the fewest hops (default: every pair of sockets linked directly at interconnect_gbps)")
    routers: int = Field(
        default=0, ge=0, le=1024,
        description="vertices of the link graph with neither CPUs nor memory (node controllers, switches), numbered "
                    "after the sockets in links: with 8 sockets, routers 8, 9, ...; traffic between sockets crosses them")
    memory_nodes: list[MemoryNodeSpec] = Field(
        default_factory=list, max_length=64,
        description="NUMA nodes with memory and no CPUs (CXL expanders, HBM), numbered after the CPU nodes")
    thread_mlp: float | None = Field(
        default=None, ge=1, le=1024,
        description="cache lines one hardware thread alone keeps in flight when it streams from memory (its share of "
                    "the fill buffers and prefetch streams), calibrated from a published one-thread bandwidth (see "
                    "calibration/thread_mlp.py): what a workload with mlp: hardware overlaps, and the most any thread "
                    "overlaps (default: no limit; mlp: hardware then means 16)")
    core_mlp: float | None = Field(
        default=None, ge=1, le=1024,
        description="cache lines one core keeps in flight with all its hardware threads busy (its fill buffers / L2 "
                    "miss queue): SMT siblings share it, each keeping at most thread_mlp (default: the siblings split "
                    "what one thread keeps)")
    cores_per_chiplet: int | None = Field(
        default=None, ge=1, le=1024,
        description="cores that reach the memory controllers through one link (an AMD EPYC CCD on its I/O die: "
                    "8 on Zen 2 to Zen 4); cores are numbered node by node, so chiplet k holds cores "
                    "k x cores_per_chiplet onwards; needs chiplet_gbps (default: no such link)")
    chiplet_gbps: Bandwidth | None = Field(
        default=None,
        description="what one chiplet's link to the memory controllers carries, reads and write-backs together, "
                    "GB/s, measured by streaming from all of one chiplet's cores (docs/model.md)")
    cores_per_llc: int | None = Field(
        default=None, ge=1, le=1024,
        description="cores that share one last-level cache (an AMD EPYC CCX: 4 on Zen 2, 8 on Zen 3 and Zen 4); "
                    "cores are numbered node by node, so LLC k holds cores k x cores_per_llc onwards. CFS's MC "
                    "domain, a move's cache refill and the cheaper cache-to-cache transfers follow it (default: "
                    "one LLC per NUMA node)")
    c2c_local_ns: Latency | None = Field(
        default=None, description="latency of a load that hits a line modified in another core's cache on the same socket (MLC --c2c_latency, HITM), ns")
    c2c_llc_ns: Latency | None = Field(
        default=None, description="the same between two cores that share a last-level cache, ns (default: c2c_local_ns)")
    c2c_smt_ns: Latency | None = Field(
        default=None, description="the same between two hardware threads of one core, ns (default: c2c_llc_ns)")
    c2c_remote_ns: Latency | None = Field(
        default=None, description="the same, from a core on the nearest other socket, the line homed in the writer's socket, ns (default for both: the DRAM latency to the writer's node)")
    c2c_remote_reader_homed_ns: Latency | None = Field(
        default=None, description="the same, the line homed in the reader's socket (a directory's extra trip; MLC reports both), ns (default: c2c_remote_ns)")
    c2c_ns: list[list[Latency | None]] | None = Field(
        default=None,
        description="measured cache-to-cache (HITM) latency between nodes, reader node x writer node, ns, one row per "
                    "NUMA node with CPUs; null where not measured (those pairs follow c2c_local_ns / c2c_remote_ns). "
                    "For machines whose nodes of one socket differ, such as two dies (default: none)")
    node_reclaim_distance: int = Field(
        default=30, ge=10, le=255,
        description="the kernel's node_reclaim_distance on this CPU: NUMA levels farther than this lose CFS's fork "
                    "balancing and wake_affine (RECLAIM_DISTANCE 30 in include/linux/topology.h; 32 on AMD Zen, "
                    "set by arch/x86/kernel/cpu/amd.c since 5.4)")
    loaded_latency: list[tuple[Bandwidth, Latency]] = Field(min_length=2, description="measured [GB/s, ns] points of latency under load (Intel MLC)")
    loaded_latency_peak_gbps: Bandwidth = Field(description="the peak bandwidth of that measurement, GB/s")
    l2_kib: float = Field(default=256, ge=1, le=2**20, description="L2 cache per core, KiB")
    llc_mib_per_socket: float = Field(default=32, gt=0, le=2**16, description="last-level cache per socket, MiB")
    context_switch_ns: float = Field(default=2000, ge=0, le=1e7, description="direct cost of a context switch, ns")
    sources: dict[Text, Text] = Field(default_factory=dict, description="where each constant comes from")

    @property
    def n_nodes(self) -> int:
        """NUMA nodes with CPUs (the CPU-less ``memory_nodes`` are numbered after them)."""
        return self.sockets * self.nodes_per_socket

    @property
    def n_cpus(self) -> int:
        return self.n_nodes * self.cores_per_node * (self.threads_per_core if self.smt else 1)

    @model_validator(mode="after")
    def _check(self) -> "MachineSpec":
        n = self.n_nodes
        if self.n_cpus > MAX_CPUS:
            raise ValueError(f"{self.n_cpus:,} CPUs: numasim models machines of up to {MAX_CPUS:,} CPUs")
        ways = [self.remote_latency_ns is not None, self.latency_ns is not None]
        derived = self.slit is not None or (self.links is not None and self.hop_latency_ns is not None)
        if n > 1 and (sum(ways) > 1 or (sum(ways) == 0 and not derived)):
            raise ValueError(
                "give the remote latency as remote_latency_ns or as latency_ns (an n_nodes x n_nodes "
                "matrix), not both; or give only slit, and latencies are local_latency_ns x slit / 10; "
                "or give links and hop_latency_ns, and each link crossed adds hop_latency_ns"
            )
        for k, mn in enumerate(self.memory_nodes):
            if mn.socket >= self.sockets:
                raise ValueError(f"memory_nodes[{k}] is attached to socket {mn.socket}, but the machine has "
                                 f"sockets 0-{self.sockets - 1}")
        if (self.cores_per_chiplet is None) != (self.chiplet_gbps is None):
            raise ValueError("give cores_per_chiplet and chiplet_gbps together (the cores behind one link and "
                             "what the link carries), or neither")
        if self.cores_per_chiplet is not None and self.cores_per_node % self.cores_per_chiplet:
            raise ValueError(f"cores_per_node ({self.cores_per_node}) must be a multiple of cores_per_chiplet "
                             f"({self.cores_per_chiplet}): a chiplet's cores are in one NUMA node")
        if self.cores_per_llc is not None and self.cores_per_node % self.cores_per_llc:
            raise ValueError(f"cores_per_node ({self.cores_per_node}) must be a multiple of cores_per_llc "
                             f"({self.cores_per_llc}): an LLC's cores are in one NUMA node")
        if self.routers and self.links is None:
            raise ValueError("routers need links: the links say which sockets and routers each router joins")
        per_socket = [self.nodes_per_socket + sum(mn.socket == s for mn in self.memory_nodes)
                      for s in range(self.sockets)]
        # Raises on a bad socket id or a disconnected graph; the count bounds the routes' build.
        entries = route_entries(self.sockets, self.links, self.routers, per_socket)
        if entries > MAX_ROUTE_ENTRIES:
            raise ValueError(
                f"the interconnect's routes cross {entries:,} links in all (each ordered pair of NUMA nodes "
                f"times the links between them); numasim builds at most {MAX_ROUTE_ENTRIES:,}: use fewer "
                "nodes, or links with fewer hops between sockets")
        if self.c2c_remote_reader_homed_ns is not None and self.c2c_remote_ns is None:
            raise ValueError("c2c_remote_reader_homed_ns needs c2c_remote_ns (the line homed in the writer's socket)")
        for where, points in [("loaded_latency", self.loaded_latency)] + [
                (f"memory_nodes[{k}].loaded_latency", mn.loaded_latency) for k, mn in enumerate(self.memory_nodes)]:
            if points is not None and points[-1][1] <= points[0][1]:
                raise ValueError(f"{where}: latency must rise with bandwidth (the last point's "
                                 f"{points[-1][1]:g} ns is not above the first's {points[0][1]:g} ns)")
        bws = [p[0] for p in self.loaded_latency]
        if any(b2 <= b1 for b1, b2 in zip(bws, bws[1:])):
            raise ValueError("loaded_latency points must have increasing bandwidth")
        if self.bandwidth_1to1_gbps is not None and self.bandwidth_1to1_gbps >= 2 * self.loaded_latency_peak_gbps:
            raise ValueError("bandwidth_1to1_gbps must be less than twice loaded_latency_peak_gbps "
                             "(a write-back cannot cost nothing)")
        for name in ("latency_ns", "slit", "c2c_ns"):
            mat = getattr(self, name)
            if mat is None:
                continue
            if n > 1 and (len(mat) != n or any(len(row) != n for row in mat)):
                raise ValueError(f"{name} must be a {n}x{n} matrix (one row per NUMA node)")
            if not mat or any(len(row) != len(mat) for row in mat):
                # One node uses neither matrix (a preset's stays when sockets is set to 1), but a
                # malformed one is still an error.
                raise ValueError(f"{name} must be a square matrix (one row per NUMA node)")
        if n > 1 and self.slit is not None and any(self.slit[i][i] != 10 for i in range(n)):
            raise ValueError("slit must have 10 on the diagonal (ACPI SLIT convention)")
        if n > 1 and self.slit is not None and any(self.slit[i][j] <= 10 for i in range(n) for j in range(n) if i != j):
            raise ValueError("slit distances between different nodes must be greater than 10 (the local distance)")
        if n > 1 and self.latency_ns is not None:
            for i, row in enumerate(self.latency_ns):
                if min(row) < row[i]:
                    raise ValueError(f"latency_ns row {i}: a node's own memory must be its nearest "
                                     f"(local {row[i]:g} ns, but {min(row):g} ns to another node)")
        if isinstance(self.cpu_numbering, list):
            per_node = self.n_cpus // n
            if len(self.cpu_numbering) != self.n_cpus:
                raise ValueError(
                    f"cpu_numbering lists the node of each OS CPU: expected {self.n_cpus} "
                    f"entries, got {len(self.cpu_numbering)}"
                )
            bad = next((i for i, x in enumerate(self.cpu_numbering) if x >= n), None)
            if bad is not None:
                raise ValueError(f"cpu_numbering[{bad}]: node {self.cpu_numbering[bad]} does not exist; "
                                 f"the nodes are 0-{n - 1}")
            counts = np.bincount(np.asarray(self.cpu_numbering, dtype=np.int64), minlength=n)
            if len(counts) > n or np.any(counts != per_node):
                raise ValueError(
                    f"cpu_numbering must name each node 0..{n - 1} exactly {per_node} times"
                )
        if self.min_frequency_ghz is not None and self.min_frequency_ghz > self.frequency_ghz:
            raise ValueError("min_frequency_ghz must not exceed frequency_ghz")
        if max(bws) > self.loaded_latency_peak_gbps * 1.0001:
            raise ValueError("loaded_latency bandwidths must not exceed loaded_latency_peak_gbps")
        return self


def _interconnect_of(spec: "MachineSpec", node_socket: NDArray[np.int64]) -> Interconnect:
    return build_interconnect(spec.sockets, spec.links, node_socket, spec.interconnect_gbps,
                              spec.same_socket_interconnect_gbps or spec.memory_bandwidth_gbps, spec.routers,
                              shared_budget=spec.socket_link_budget == "shared")


def _inflight_lines(node_bandwidth: NDArray[np.float64], latency: NDArray[np.float64], node_curve: "LoadedLatencyCurve",
                    node_cpus: tuple) -> NDArray[np.float64]:
    """Lines in flight a node's CPUs can keep in the memory system, by Little's law at the top of the node's own
    loaded-latency curve: at its peak bandwidth ``B`` the curve's latency is ``L0 (1 + a)``, so its cores then held
    ``B L0 (1 + a) / 64 B`` lines (docs/model.md, "Lines in flight per node"). inf for a node without CPUs."""
    a = np.broadcast_to(np.asarray(node_curve.a, dtype=float), node_bandwidth.shape)
    out = np.full(node_bandwidth.shape, np.inf)
    for j, cpus in enumerate(node_cpus):
        if len(cpus) and node_bandwidth[j] > 0.0:
            out[j] = node_bandwidth[j] / 64.0 * latency[j, j] * (1.0 + a[j])
    return out


def _c2c(spec: "MachineSpec", latency: NDArray[np.float64], node_socket: NDArray[np.int64]) -> NDArray[np.float64]:
    """Cache-to-cache (HITM) latency from a reader on node i to a writer's cache on node k, ns.

    Measured values (``c2c_local_ns``, ``c2c_remote_ns``) set the nearest cases; a farther
    node adds what its DRAM latency adds over the nearest of its kind (the same extra
    distance on the die or across the interconnect). Without them a HITM costs a DRAM
    access at the writer's node's distance. A measured pair in ``c2c_ns`` replaces the rule.
    """
    c2c = latency.copy()
    same = node_socket[:, None] == node_socket[None, :]
    for i in range(len(latency)):
        for mask, value in ((same[i], spec.c2c_local_ns), (~same[i], spec.c2c_remote_ns)):
            if value is not None and mask.any():
                c2c[i, mask] = value + latency[i, mask] - latency[i, mask].min()
    measured = spec.c2c_ns if spec.c2c_ns is not None and len(spec.c2c_ns) == spec.n_nodes else []
    for i, row in enumerate(measured):  # measured pairs replace the rule
        for k, value in enumerate(row):
            if value is not None:
                c2c[i, k] = value
    return c2c


@dataclass(frozen=True, eq=False)
class Machine:
    """A machine, derived from a :class:`MachineSpec`; all arrays are read-only.

    CPUs are indexed by their OS id. Bandwidths are in bytes per nanosecond
    (numerically equal to GB/s); latencies in nanoseconds.
    """

    spec: MachineSpec
    cpu_node: NDArray[np.int64]
    cpu_socket: NDArray[np.int64]
    cpu_core: NDArray[np.int64]
    core_cpus: tuple[tuple[int, ...], ...]
    node_cpus: tuple[NDArray[np.int64], ...]
    node_socket: NDArray[np.int64]
    latency: NDArray[np.float64]
    distance: NDArray[np.int64]
    node_memory: NDArray[np.int64]
    node_bandwidth: NDArray[np.float64]
    node_port: NDArray[np.float64]  # bytes/ns each way through a CPU-less node's port (inf: no port)
    interconnect: Interconnect
    c2c: NDArray[np.float64]  # HITM latency, reader node x writer node, ns (the line homed with the writer)
    c2c_not_writer_homed: NDArray[np.float64]  # extra ns, reader x writer, when the line's home is not the writer's node
    curve: LoadedLatencyCurve  # DRAM's, also the interconnect links'
    node_curve: LoadedLatencyCurve  # per memory node (arrays a, b): DRAM's, or a CPU-less node's own
    write_cost: float  # DRAM bandwidth one write-back uses, in reads
    thread_mlp: float  # lines one hardware thread keeps in flight (inf: no limit)
    core_mlp: float  # lines one core keeps in flight, its siblings together (inf: they split one thread's)
    cpu_chiplet: NDArray[np.int64] | None  # the chiplet (link to the memory controllers) of each CPU, or None
    cpu_llc: NDArray[np.int64]  # the last-level cache of each CPU (one per node unless cores_per_llc)
    chiplet_bandwidth: NDArray[np.float64]  # bytes/ns each chiplet's link carries (empty: no such links)
    inflight_lines: NDArray[np.float64]  # per node: lines its CPUs' misses hold in the memory system at most (inf: no limit)

    @property
    def stream_mlp(self) -> float:
        """Lines a prefetchable stream keeps in flight on one thread (``mlp: hardware``)."""
        return self.thread_mlp if math.isfinite(self.thread_mlp) else STREAM_MLP

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def n_nodes(self) -> int:
        return len(self.node_cpus)

    @property
    def n_cpus(self) -> int:
        return len(self.cpu_node)

    @property
    def n_cores(self) -> int:
        return len(self.core_cpus)

    @property
    def frequency_ghz(self) -> float:
        return self.spec.frequency_ghz

    @property
    def smt(self) -> bool:
        return self.spec.smt

    @functools.cached_property
    def cpu_nodes(self) -> tuple[int, ...]:
        """The nodes that have CPUs (the others are memory only: CXL, HBM)."""
        return tuple(k for k, cpus in enumerate(self.node_cpus) if len(cpus))

    def cpus_of_nodes(self, nodes: list[int] | tuple[int, ...]) -> frozenset[int]:
        """The OS CPU ids of the given nodes."""
        return frozenset(int(c) for n in nodes for c in self.node_cpus[n])

    def siblings(self, cpu: int) -> tuple[int, ...]:
        """The other hardware threads of ``cpu``'s core."""
        return tuple(c for c in self.core_cpus[int(self.cpu_core[cpu])] if c != cpu)

    @classmethod
    def from_spec(cls, spec: MachineSpec) -> "Machine":
        n = spec.n_nodes
        tpc = spec.threads_per_core if spec.smt else 1
        ncores = n * spec.cores_per_node
        ncpus = ncores * tpc
        # Node of each OS CPU id.
        if isinstance(spec.cpu_numbering, list):
            cpu_node = np.asarray(spec.cpu_numbering, dtype=np.int64)
        elif spec.cpu_numbering == "block":
            # cpus 0..C-1 on node 0, C..2C-1 on node 1, ...; SMT siblings follow all cores.
            cpu_node = np.tile(np.repeat(np.arange(n), spec.cores_per_node), tpc)
        else:
            # cpu0 on node 0, cpu1 on node 1, ... round-robin; SMT siblings follow.
            cpu_node = np.tile(np.tile(np.arange(n), spec.cores_per_node), tpc)
        # Cores fill in order within each node, then siblings are assigned in the same order.
        cpu_core = np.empty(ncpus, dtype=np.int64)
        seen = np.zeros(n, dtype=np.int64)
        for cpu in range(ncpus):
            node = int(cpu_node[cpu])
            k = int(seen[node])
            seen[node] += 1
            cpu_core[cpu] = node * spec.cores_per_node + (k % spec.cores_per_node)
        core_cpus = tuple(
            tuple(int(c) for c in np.flatnonzero(cpu_core == core)) for core in range(ncores)
        )
        node_socket = np.arange(n) // spec.nodes_per_socket
        cpu_socket = node_socket[cpu_node]
        node_cpus = tuple(np.flatnonzero(cpu_node == k) for k in range(n))

        local = spec.local_latency_ns
        if n == 1:
            latency = np.array([[local]])
        elif spec.latency_ns is not None:
            latency = np.asarray(spec.latency_ns, dtype=float)
        elif spec.remote_latency_ns is not None:
            latency = np.full((n, n), spec.remote_latency_ns)
            np.fill_diagonal(latency, local)
        elif spec.slit is not None:
            latency = local * np.asarray(spec.slit, dtype=float) / 10.0
        else:
            assert spec.hop_latency_ns is not None
            latency = local + spec.hop_latency_ns * _interconnect_of(spec, node_socket).socket_hops.astype(float)
        if spec.slit is not None and n > 1:
            distance = np.asarray(spec.slit, dtype=np.int64)
        else:
            distance = np.rint(10.0 * latency / np.diag(latency)[:, None]).astype(np.int64)
            np.fill_diagonal(distance, 10)

        node_memory = np.full(n, spec.memory_per_node, dtype=np.int64)
        node_bandwidth = np.full(n, spec.memory_bandwidth_gbps)
        node_port = np.full(n, np.inf)
        curve = LoadedLatencyCurve.fit(
            tuple((float(b), float(l)) for b, l in spec.loaded_latency), spec.loaded_latency_peak_gbps
        )
        node_curves = [curve] * n
        if spec.memory_nodes:
            latency, distance, node_socket = with_memory_nodes(spec, latency, distance, node_socket)
            node_memory = np.concatenate([node_memory, [mn.memory for mn in spec.memory_nodes]]).astype(np.int64)
            node_bandwidth = np.concatenate([node_bandwidth, [mn.bandwidth_gbps for mn in spec.memory_nodes]])
            node_port = np.concatenate([node_port, [mn.port_gbps or np.inf for mn in spec.memory_nodes]])
            node_cpus = node_cpus + tuple(np.zeros(0, dtype=np.int64) for _ in spec.memory_nodes)
            node_curves += [curve if mn.loaded_latency is None else LoadedLatencyCurve.fit(
                tuple((float(b), float(l)) for b, l in mn.loaded_latency), mn.loaded_latency_peak_gbps)
                for mn in spec.memory_nodes]
        node_curve = LoadedLatencyCurve(np.array([c.a for c in node_curves]), np.array([c.b for c in node_curves]))

        interconnect = _interconnect_of(spec, node_socket)
        for arr in (interconnect.ends, interconnect.bandwidth, interconnect.path_len, interconnect.socket_hops):
            arr.setflags(write=False)
        # MLC's 1:1 mix moves B11 bytes, half of them write-backs, in the time all-read moves
        # the peak: B11/2 * (1 + w) = peak gives the cost w of a write in reads.
        peak, mixed = spec.loaded_latency_peak_gbps, spec.bandwidth_1to1_gbps
        write_cost = 1.0 if mixed is None else 2.0 * peak / mixed - 1.0

        arrays = dict(
            cpu_node=cpu_node,
            cpu_socket=cpu_socket,
            cpu_core=cpu_core,
            node_socket=node_socket,
            latency=latency,
            distance=distance,
            node_memory=node_memory,
            node_bandwidth=node_bandwidth,
            node_port=node_port,
            cpu_chiplet=None if spec.cores_per_chiplet is None else cpu_core // spec.cores_per_chiplet,
            cpu_llc=cpu_node.copy() if spec.cores_per_llc is None else cpu_core // spec.cores_per_llc,
            chiplet_bandwidth=(np.full(ncores // spec.cores_per_chiplet, spec.chiplet_gbps)
                               if spec.cores_per_chiplet and spec.chiplet_gbps else np.zeros(0)),
            c2c=_c2c(spec, latency, node_socket),
            inflight_lines=_inflight_lines(node_bandwidth, latency, node_curve, node_cpus),
            c2c_not_writer_homed=np.where(
                node_socket[:, None] != node_socket[None, :],
                (spec.c2c_remote_reader_homed_ns or spec.c2c_remote_ns or 0.0) - (spec.c2c_remote_ns or 0.0), 0.0),
        )
        for arr in arrays.values():
            if arr is not None:
                arr.setflags(write=False)
        for arr in node_cpus:
            arr.setflags(write=False)
        return cls(spec=spec, core_cpus=core_cpus, node_cpus=node_cpus, curve=curve, node_curve=node_curve,
                   interconnect=interconnect,
                   write_cost=write_cost, thread_mlp=float(spec.thread_mlp or np.inf),
                   core_mlp=float(spec.core_mlp or np.inf), **arrays)


_RECENT: "OrderedDict[str, Machine]" = OrderedDict()  # the machines built last, by spec (read-only: shareable)
RECENT_MACHINES = 8
RECENT_MAX_CPUS = 4096  # larger machines are not kept once their scenario is done with them


def shared_machine(spec: MachineSpec, key: str) -> Machine:
    """The machine of ``spec`` (``key``: its JSON), from the few built last if it is one of them: the
    points of a sweep, and a scenario loaded again, mostly share one machine (1.8 ms of the 3.6 ms it
    takes to check a small point, session 31)."""
    machine = _RECENT.get(key)
    if machine is not None:
        _RECENT.move_to_end(key)
        return machine
    machine = Machine.from_spec(spec)
    if spec.n_cpus <= RECENT_MAX_CPUS:
        _RECENT[key] = machine
        if len(_RECENT) > RECENT_MACHINES:
            _RECENT.popitem(last=False)
    return machine
