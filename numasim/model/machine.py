"""The simulated machine: sockets, NUMA nodes, cores, SMT, memory system.

:class:`MachineSpec` is the validated description (from a preset file or a
scenario); :class:`Machine` is the frozen, derived form the engine and the
policies use, with numpy arrays indexed by OS CPU id and by node.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BeforeValidator, Field, model_validator
from .spec import Spec, Text
from scipy.optimize import curve_fit

from ..units import parse_size

__all__ = ["MachineSpec", "Machine", "LoadedLatencyCurve", "parse_cpulist"]

Size = Annotated[int, BeforeValidator(parse_size)]
PositiveFloat = Annotated[float, Field(gt=0)]


# Physical bounds: orders of magnitude past any machine, so that a typo or a hostile value is
# refused instead of reaching the arithmetic (a latency of 1e-300 ns, a bandwidth of 1e308).
Latency = Annotated[float, Field(ge=1, le=100_000)]  # ns
Bandwidth = Annotated[float, Field(ge=0.01, le=100_000)]  # GB/s

MAX_CPUS = 65_536  # 64 sockets x 1,024 cores: built in 35 s and 400 MB (docs/performance.md)


class MachineSpec(Spec):
    """Validated description of a machine (see docs/scenario-reference.md)."""


    name: Text = Field(default="custom", max_length=200, description="a name for tables and reports")
    description: Text = Field(default="", max_length=4000, description="free text")
    sockets: int = Field(ge=1, le=64, description="CPU sockets")
    nodes_per_socket: int = Field(default=1, ge=1, le=16, description="NUMA nodes per socket (2 or 4 model SNC / NPS)")
    cores_per_node: int = Field(ge=1, le=1024, description="physical cores per NUMA node")
    smt: bool = Field(default=False, description="hyperthreading on")
    threads_per_core: int = Field(default=2, ge=2, le=8, description="hardware threads per core when smt is on")
    smt_yield: float = Field(default=1.25, ge=1.0, le=2.0, description="throughput of a core running two threads, relative to one")
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
    memory_bandwidth_gbps: Bandwidth = Field(description="read bandwidth of one node's memory, GB/s")
    interconnect_gbps: Bandwidth = Field(description="bandwidth between two sockets, per direction, GB/s")
    same_socket_interconnect_gbps: Bandwidth | None = Field(default=None, description="bandwidth between nodes of one socket (default: memory_bandwidth_gbps)")
    loaded_latency: list[tuple[Bandwidth, Latency]] = Field(min_length=2, description="measured [GB/s, ns] points of latency under load (Intel MLC)")
    loaded_latency_peak_gbps: Bandwidth = Field(description="the peak bandwidth of that measurement, GB/s")
    l2_kib: float = Field(default=256, ge=1, le=2**20, description="L2 cache per core, KiB")
    llc_mib_per_socket: float = Field(default=32, gt=0, le=2**16, description="last-level cache per socket, MiB")
    context_switch_ns: float = Field(default=2000, ge=0, le=1e7, description="direct cost of a context switch, ns")
    sources: dict[str, str] = Field(default_factory=dict, description="where each constant comes from")

    @property
    def n_nodes(self) -> int:
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
        if n > 1 and (sum(ways) > 1 or (sum(ways) == 0 and self.slit is None)):
            raise ValueError(
                "give the remote latency as remote_latency_ns or as latency_ns (an n_nodes x n_nodes "
                "matrix), not both; or give only slit, and latencies are local_latency_ns x slit / 10"
            )
        for name in ("latency_ns", "slit"):
            mat = getattr(self, name)
            if n > 1 and mat is not None and (len(mat) != n or any(len(row) != n for row in mat)):
                raise ValueError(f"{name} must be a {n}x{n} matrix (one row per NUMA node)")
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
            counts = np.bincount(np.asarray(self.cpu_numbering), minlength=n)
            if len(counts) > n or np.any(counts != per_node):
                raise ValueError(
                    f"cpu_numbering must name each node 0..{n - 1} exactly {per_node} times"
                )
        bws = [p[0] for p in self.loaded_latency]
        if any(b2 <= b1 for b1, b2 in zip(bws, bws[1:])):
            raise ValueError("loaded_latency points must have increasing bandwidth")
        if self.min_frequency_ghz is not None and self.min_frequency_ghz > self.frequency_ghz:
            raise ValueError("min_frequency_ghz must not exceed frequency_ghz")
        if max(bws) > self.loaded_latency_peak_gbps * 1.0001:
            raise ValueError("loaded_latency bandwidths must not exceed loaded_latency_peak_gbps")
        return self


@dataclass(frozen=True)
class LoadedLatencyCurve:
    """Latency multiplier as a function of bandwidth utilisation.

    ``g(u) = 1 + a * u**b`` for utilisation ``u`` in [0, 1], fitted (least
    squares, scipy) to measured loaded-latency points normalised by their idle
    latency and peak bandwidth. At ``u = 1`` the multiplier is ``1 + a``.
    """

    a: float
    b: float

    def __call__(self, u: NDArray[np.float64]) -> NDArray[np.float64]:
        return 1.0 + self.a * np.clip(u, 0.0, 1.0) ** self.b

    @staticmethod
    @functools.lru_cache(maxsize=64)
    def fit(points: tuple[tuple[float, float], ...], peak_gbps: float) -> "LoadedLatencyCurve":
        bw = np.array([p[0] for p in points]) / peak_gbps
        ratio = np.array([p[1] for p in points]) / points[0][1]

        def g(u: NDArray[np.float64], a: float, b: float) -> NDArray[np.float64]:
            return 1.0 + a * u**b

        (a, b), _ = curve_fit(g, bw, ratio, p0=(2.0, 4.0), bounds=([0.0, 1.0], [20.0, 40.0]))
        return LoadedLatencyCurve(float(a), float(b))


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
    link_bandwidth: NDArray[np.float64]
    curve: LoadedLatencyCurve

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
        else:
            assert spec.slit is not None
            latency = local * np.asarray(spec.slit, dtype=float) / 10.0
        if spec.slit is not None and n > 1:
            distance = np.asarray(spec.slit, dtype=np.int64)
        else:
            distance = np.rint(10.0 * latency / np.diag(latency)[:, None]).astype(np.int64)
            np.fill_diagonal(distance, 10)

        link = np.full((n, n), spec.interconnect_gbps)
        same_socket = node_socket[:, None] == node_socket[None, :]
        link[same_socket] = spec.same_socket_interconnect_gbps or spec.memory_bandwidth_gbps
        np.fill_diagonal(link, np.inf)

        curve = LoadedLatencyCurve.fit(
            tuple((float(b), float(l)) for b, l in spec.loaded_latency), spec.loaded_latency_peak_gbps
        )
        arrays = dict(
            cpu_node=cpu_node,
            cpu_socket=cpu_socket,
            cpu_core=cpu_core,
            node_socket=node_socket,
            latency=latency,
            distance=distance,
            node_memory=np.full(n, spec.memory_per_node, dtype=np.int64),
            node_bandwidth=np.full(n, spec.memory_bandwidth_gbps),
            link_bandwidth=link,
        )
        for arr in arrays.values():
            arr.setflags(write=False)
        for arr in node_cpus:
            arr.setflags(write=False)
        return cls(spec=spec, core_cpus=core_cpus, node_cpus=node_cpus, curve=curve, **arrays)


_CPULIST_ITEM = re.compile(r"^(\d{1,9})(?:-(\d{1,9})(?::(\d{1,9}))?)?$")


def parse_cpulist(text: str | int | list[int], n_cpus: int) -> frozenset[int]:
    """Parse a Linux cpulist (``"0-7,16,18-30:2"``) into OS CPU ids.

    Raises
    ------
    ValueError
        If the list is malformed or names a CPU the machine does not have.
    """
    if isinstance(text, bool):
        raise ValueError(f"expected a cpulist such as '0-7,16', got {text!r}")
    if isinstance(text, int):
        items: list[str] = [str(text)]
    elif isinstance(text, list):
        items = [str(x) for x in text]
    else:
        items = [s.strip() for s in str(text).split(",") if s.strip()]
    cpus: set[int] = set()
    for item in items:
        m = _CPULIST_ITEM.match(item)
        if not m:
            raise ValueError(
                f"malformed cpulist item {item[:40]!r}: use ids and ranges like '0-7,16,18-30:2'"
            )
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        step = int(m.group(3)) if m.group(3) else 1
        if hi < lo or step < 1:
            raise ValueError(f"malformed cpulist range {item[:40]!r}")
        # The first id past the machine, found before the range is built ('0-999999999').
        first_out = lo if lo >= n_cpus else lo + -(-(n_cpus - lo) // step) * step
        if first_out <= hi:
            raise ValueError(f"CPU {first_out} is outside the machine: OS CPU ids are 0-{n_cpus - 1}")
        cpus.update(range(lo, hi + 1, step))
    if not cpus:
        raise ValueError("empty cpulist")
    return frozenset(cpus)
