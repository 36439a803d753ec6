"""CPU-less memory nodes (CXL expanders, HBM, persistent memory): their description, and the latency and
distance matrices extended by them. A part of :mod:`numasim.model.machine` (docs/model.md, "Memory without CPUs").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, model_validator

from .spec import Bandwidth, Latency, Size, Spec

if TYPE_CHECKING:
    from .machine import MachineSpec

__all__ = ["MemoryNodeSpec", "with_memory_nodes"]


class MemoryNodeSpec(Spec):
    """A NUMA node with memory and no CPUs: a CXL memory expander, HBM, persistent memory."""

    kind: Literal["cxl", "hbm", "pmem", "dram"] = Field(default="cxl", description="what the memory is (for tables)")
    socket: int = Field(ge=0, description="the socket it is attached to")
    memory: Size = Field(gt=0, le=2**50, description="its capacity, e.g. 256GiB")
    latency_ns: Latency = Field(description="idle latency from the CPUs of the socket it is attached to, ns")
    bandwidth_gbps: Bandwidth = Field(description="read bandwidth, GB/s (with port_gbps: its memory's, behind the port)")
    port_gbps: Bandwidth | None = Field(
        default=None, description="bandwidth of its link to the socket in each direction, GB/s (a CXL device's "
        "port: read data comes back one way, write-backs go the other, so a mix of both can move more than "
        "reads alone; default: no limit besides bandwidth_gbps)")
    slit: int | None = Field(default=None, ge=11, le=254, description="ACPI SLIT distance from its socket's nodes (default: 10 x latency ratio)")
    loaded_latency: list[tuple[Bandwidth, Latency]] | None = Field(
        default=None, min_length=2, description="its own measured [GB/s, ns] loaded-latency points (default: the DRAM curve)")
    loaded_latency_peak_gbps: Bandwidth | None = Field(default=None, description="the peak bandwidth of that measurement")

    @model_validator(mode="after")
    def _check(self) -> "MemoryNodeSpec":
        if (self.loaded_latency is None) != (self.loaded_latency_peak_gbps is None):
            raise ValueError("give loaded_latency and loaded_latency_peak_gbps together")
        if self.loaded_latency is not None:
            bws = [p[0] for p in self.loaded_latency]
            if any(b2 <= b1 for b1, b2 in zip(bws, bws[1:])) or max(bws) > self.loaded_latency_peak_gbps * 1.0001:
                raise ValueError("loaded_latency points must have increasing bandwidth, up to loaded_latency_peak_gbps")
        return self


def with_memory_nodes(spec: "MachineSpec", latency, distance, node_socket):
    """Latency and distance matrices and node sockets extended by the CPU-less ``memory_nodes``.

    A memory node's latency from a CPU node is its latency from its own socket plus what
    the CPU node's DRAM latency to the nearest node of that socket adds over that node's
    local latency (the same extra hops); its SLIT distance likewise. Rows of memory nodes
    (no CPU reads from them) mirror their columns.
    """
    c = len(latency)
    total = c + len(spec.memory_nodes)
    lat = np.zeros((total, total))
    dist = np.zeros((total, total), dtype=np.int64)
    lat[:c, :c] = latency
    dist[:c, :c] = distance
    sock = np.concatenate([node_socket, [mn.socket for mn in spec.memory_nodes]]).astype(np.int64)
    for k, mn in enumerate(spec.memory_nodes):
        m = c + k
        near = [j for j in range(c) if sock[j] == mn.socket]
        own = mn.slit if mn.slit is not None else max(11, int(round(10.0 * mn.latency_ns / latency[near[0], near[0]])))
        for i in range(c):
            j = min(near, key=lambda j: (latency[i, j], j))
            lat[i, m] = mn.latency_ns + latency[i, j] - latency[j, j]
            dist[i, m] = own + distance[i, j] - 10
        lat[m, m], dist[m, m] = mn.latency_ns, 10
    for m in range(c, total):
        anchor = min((j for j in range(c) if sock[j] == sock[m]), key=lambda j: j)
        for i in range(total):
            if i != m:
                lat[m, i] = lat[i, m] if i < c else lat[anchor, i]
                dist[m, i] = dist[i, m] if i < c else dist[anchor, i]
    return lat, dist, sock
