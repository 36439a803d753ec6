"""The interconnect: links between sockets and between the nodes of a socket, and the route of every flow.

A machine's sockets are joined by the links of ``MachineSpec.links`` (a graph; all pairs
directly without it); traffic between two nodes takes the fewest hops and loads every
link on its way. :class:`Interconnect` is the frozen form the memory-system solve uses
(docs/model.md, section 4).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from .machine import LinkSpec

__all__ = ["Interconnect", "build_interconnect", "route_entries", "socket_routes"]


def socket_routes(sockets: int, links: list[LinkSpec] | None,
                  routers: int = 0) -> tuple[dict[tuple[int, int], float], list[list[list[int]]]]:
    """The link graph's directed edges with their bandwidth, and the fewest-hop path between every pair of sockets.

    The graph's vertices are the sockets ``0 .. sockets - 1`` and, after them, ``routers``
    vertices with neither CPUs nor memory (node controllers, switches), which traffic
    crosses. ``paths[a][b]`` lists the vertices from socket ``a`` to socket ``b`` (both
    included). Without ``links`` every pair of sockets is joined directly (the v1 model).
    Among paths of equal length the one through the lowest vertex ids is taken, so routes
    are deterministic. Raises ValueError on a vertex id outside the graph, a link from a
    vertex to itself, or a graph that leaves a socket or a router unreachable.
    """
    if links is None:
        return {}, [[[a] if a == b else [a, b] for b in range(sockets)] for a in range(sockets)]
    edges, nbrs = _graph(sockets, links, routers)
    paths: list[list[list[int]]] = []
    for src in range(sockets):
        prev = _breadth_first(src, nbrs, sockets)
        row = []
        for dst in range(sockets):
            path = [dst]
            while path[-1] != src:
                path.append(prev[path[-1]])
            row.append(path[::-1])
        paths.append(row)
    return edges, paths


def route_entries(sockets: int, links: list[LinkSpec] | None, routers: int, nodes_of_socket: list[int]) -> int:
    """How many (link, flow) pairs :func:`build_interconnect` would make for a machine with
    ``nodes_of_socket[s]`` nodes on socket ``s``: every ordered pair of nodes times the links its
    flow crosses. It bounds the build's time and memory and is counted from hop distances alone,
    without building a route. Raises ValueError as :func:`socket_routes` does."""
    cnt = np.asarray(nodes_of_socket, dtype=np.int64)
    hops = 1 - np.eye(sockets, dtype=np.int64)
    if links is not None:
        _, nbrs = _graph(sockets, links, routers)
        for src in range(sockets):
            dist = {src: 0}
            for v, u in _breadth_first(src, nbrs, sockets).items():  # in the order found: u before v
                if v != src:
                    dist[v] = dist[u] + 1
            hops[src] = [dist[d] for d in range(sockets)]
    return int(np.sum(cnt * (cnt - 1))) + int(cnt @ hops @ cnt)  # within a socket: one on-die link a pair


def _name(v: int, sockets: int) -> str:
    return f"socket {v}" if v < sockets else f"router {v - sockets}"


def _graph(sockets: int, links: list[LinkSpec], routers: int) -> tuple[dict[tuple[int, int], float], list[list[int]]]:
    """The directed edges with their bandwidth and each vertex's neighbours (sorted); raises on a bad link."""
    n = sockets + routers
    edges: dict[tuple[int, int], float] = {}
    for k, link in enumerate(links):
        a, b = link.sockets
        if a >= n or b >= n:
            raise ValueError(f"links[{k}] joins vertex {max(a, b)}, but the machine has sockets 0-{sockets - 1}"
                             + (f" and routers {sockets}-{n - 1}" if routers else " (and no routers)"))
        if a == b:
            raise ValueError(f"links[{k}] joins {_name(a, sockets)} to itself")
        for e in ((a, b), (b, a)):
            edges[e] = edges.get(e, 0.0) + link.gbps
    nbrs: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        nbrs[a].append(b)
    return edges, [sorted(v) for v in nbrs]


def _breadth_first(src: int, nbrs: list[list[int]], sockets: int) -> dict[int, int]:
    """Each vertex's predecessor on the fewest-hop path from ``src`` (through the lowest ids among
    equals), in the order found. Raises ValueError when a vertex is unreachable."""
    prev = {src: src}
    frontier = [src]
    while frontier:  # breadth first: the first path found to a vertex has the fewest hops
        nxt = []
        for u in frontier:
            for v in nbrs[u]:
                if v not in prev:
                    prev[v] = u
                    nxt.append(v)
        frontier = nxt
    if len(prev) < len(nbrs):
        missing = min(set(range(len(nbrs))) - set(prev))
        raise ValueError(f"links leave {_name(missing, sockets)} unreachable from socket {src}")
    return prev


@dataclass(frozen=True, eq=False)
class Interconnect:
    """The directed links between NUMA nodes and the route of each node-to-node flow over them.

    Nodes of one socket talk over one on-die link per ordered pair; nodes of different
    sockets over the socket graph's links (``MachineSpec.links``), which all the node
    pairs of two sockets share. ``route`` is a sparse (links x nodes**2) incidence
    matrix: column ``i * n + j`` (the flow from memory node ``j`` to CPU node ``i``) has
    a 1 for each link that flow crosses. ``path_len[i, j]`` counts them (0 on the diagonal).
    """

    ends: NDArray[np.int64]  # (links, 2): the sockets or nodes a link goes from and to, for reports
    bandwidth: NDArray[np.float64]  # (links,) bytes/ns per direction
    route: object  # scipy.sparse.csr_array (links, nodes**2)
    path_len: NDArray[np.int64]  # (nodes, nodes)
    socket_hops: NDArray[np.int64]  # (nodes, nodes): socket links crossed
    kinds: tuple[str, ...] = ()  # per link: "socket" (between sockets) or "node" (within a socket)
    n_sockets: int = 0  # the graph's vertices from this id on are routers (node controllers): "r0", "r1", ...
    # Per link, the link of the other direction whose traffic shares its bandwidth (a socket link
    # with one budget for both directions), or -1; None when every direction has its own.
    partner: NDArray[np.int64] | None = None

    def budget_load(self, load: NDArray[np.float64]) -> NDArray[np.float64]:
        """The traffic each link's bandwidth must carry: its own, plus its partner's when they share a budget."""
        if self.partner is None:
            return load
        return load + np.where(self.partner >= 0, load[np.maximum(self.partner, 0)], 0.0)

    @property
    def names(self) -> list[str]:
        """A name per link and direction, for tables and reports: ``socket 0 -> 1``, ``socket 0 -> r1`` (a router)."""
        kinds = self.kinds or ("node",) * len(self.ends)

        def label(kind: str, v: int) -> str:
            return f"r{v - self.n_sockets}" if kind == "socket" and 0 < self.n_sockets <= v else str(v)

        return [f"{k} {label(k, a)} -> {label(k, b)}" for k, (a, b) in zip(kinds, self.ends.tolist())]

    @functools.cached_property
    def one_hop(self) -> NDArray[np.int64] | None:
        """When every link carries exactly one node pair's flow (every 2-socket machine, the
        default all-pairs graph): the flow column of each link, so that the fixed point can
        index instead of multiplying by ``route``. Otherwise None."""
        route = self.route
        counts = np.diff(route.indptr)
        if np.any(counts != 1) or np.any(self.path_len > 1):
            return None
        return route.indices.astype(np.int64)

    @functools.cached_property
    def arrays(self) -> tuple[NDArray, ...]:
        """What the compiled fixed point (:func:`numasim.sim.fixed_point.fixed_point`) reads of the
        links, made once: ``one_hop`` (empty if None), the route's CSR arrays, each pair's number
        of links crossed (at least 1, flat), each link's partner (-1 for none) and bandwidth."""
        route, n_links = self.route, len(self.bandwidth)
        return (np.zeros(0, dtype=np.int64) if self.one_hop is None else self.one_hop,
                route.indptr.astype(np.int64), route.indices.astype(np.int64), route.data.astype(float),
                np.maximum(self.path_len, 1).astype(float).ravel(),
                np.full(n_links, -1, dtype=np.int64) if self.partner is None else self.partner.astype(np.int64),
                np.asarray(self.bandwidth, dtype=float))

    @staticmethod
    def direct(bandwidth: NDArray[np.float64]) -> "Interconnect":
        """Every ordered pair of nodes ``(j -> i)`` joined by its own link of ``bandwidth[i, j]`` bytes/ns."""
        from scipy.sparse import csr_array

        n = len(bandwidth)
        pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
        route = csr_array((np.ones(len(pairs)), (np.arange(len(pairs)), [i * n + j for i, j in pairs])),
                          shape=(len(pairs), n * n))
        hops = 1 - np.eye(n, dtype=np.int64)
        return Interconnect(ends=np.asarray([(j, i) for i, j in pairs], dtype=np.int64).reshape(-1, 2),
                            bandwidth=np.asarray([bandwidth[i, j] for i, j in pairs], dtype=float),
                            route=route, path_len=hops, socket_hops=hops)


def build_interconnect(sockets: int, links: "list[LinkSpec] | None", node_socket: NDArray[np.int64],
                       socket_gbps: float, same_socket_gbps: float, routers: int = 0,
                       shared_budget: bool = False) -> Interconnect:
    """The links and routes of a machine whose node ``k`` sits on socket ``node_socket[k]``: sockets (and
    ``routers``) joined by ``links`` (all pairs directly at ``socket_gbps`` when None), nodes of one socket
    at ``same_socket_gbps``. With ``shared_budget`` the two directions of a socket link share its bandwidth."""
    from scipy.sparse import csr_array

    n = len(node_socket)
    edges, paths = socket_routes(sockets, links, routers)
    same = same_socket_gbps
    ends: list[tuple[int, int]] = []
    bw: list[float] = []
    kinds: list[str] = []
    ids: dict[tuple[str, int, int], int] = {}

    def link(kind: str, a: int, b: int, gbps: float) -> int:
        if (kind, a, b) not in ids:
            ids[(kind, a, b)] = len(ends)
            ends.append((a, b))
            bw.append(gbps)
            kinds.append(kind)
        return ids[(kind, a, b)]

    rows: list[int] = []
    cols: list[int] = []
    path_len = np.zeros((n, n), dtype=np.int64)
    socket_hops = np.zeros((n, n), dtype=np.int64)
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            si, sj = int(node_socket[i]), int(node_socket[j])
            if si == sj:
                crossed = [link("node", j, i, same)]
            else:
                p = paths[sj][si]
                crossed = [link("socket", a, b, edges.get((a, b), socket_gbps)) for a, b in zip(p, p[1:])]
                socket_hops[i, j] = len(crossed)
            rows += crossed
            cols += [i * n + j] * len(crossed)
            path_len[i, j] = len(crossed)
    route = csr_array((np.ones(len(rows)), (rows, cols)), shape=(len(ends), n * n))
    partner = None
    if shared_budget:
        partner = np.asarray([ids.get(("socket", b, a), -1) if k == "socket" else -1
                              for k, (a, b) in zip(kinds, ends)], dtype=np.int64)
    return Interconnect(
        ends=np.asarray(ends, dtype=np.int64).reshape(-1, 2),
        bandwidth=np.asarray(bw, dtype=float),
        route=route,
        path_len=path_len,
        socket_hops=socket_hops,
        kinds=tuple(kinds),
        n_sockets=sockets if routers else 0,
        partner=partner,
    )
