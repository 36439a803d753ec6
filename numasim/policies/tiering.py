"""Memory tiering: NUMA balancing's promotion of hot pages from CPU-less nodes, and demotion by reclaim.

Part of the NUMA balancing model (:mod:`numasim.policies.numab`), enabled by the CFS
option ``numa_balancing_tiering`` (``kernel.numa_balancing`` bit 2). docs/model.md,
"Memory tiering", gives the kernel sources and what is simplified.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .api import CHUNK, Decision, MoveChunks

if TYPE_CHECKING:
    from .api import View
    from ..model.machine import Machine

__all__ = ["Tiering"]

MS = 1_000_000
ADJUST_STEPS = 16  # NUMA_MIGRATION_ADJUST_STEPS: the threshold moves by 2 x default / 16


class Tiering:
    """Promotion and demotion state of one simulation: the slow tier, rate windows, this scan's free memory."""

    def __init__(self, machine: "Machine", opts, rng: np.random.Generator):
        self.m = machine
        self.o = opts
        self.rng = rng
        self.slow = frozenset(range(machine.n_nodes)) - frozenset(machine.cpu_nodes)
        # Each top-tier node demotes to its nearest slow node (node_demotion targets by distance).
        self.demote_to = {n: [int(j) for j in np.argsort(machine.distance[n], kind="stable") if int(j) in self.slow]
                          for n in machine.cpu_nodes}
        self.promo_window: dict[int, tuple[int, float]] = {}  # node -> (1 s window, candidate bytes in it)
        # numa_promotion_adjust_threshold, per promotion target node: the candidates so far, and
        # the start, candidate count and hot threshold (ms) of the current adjustment period.
        self.candidates: dict[int, float] = {}
        self.th_period: dict[int, tuple[int, float]] = {}
        self.threshold: dict[int, float] = {}
        self.free = np.zeros(machine.n_nodes, dtype=np.int64)
        self.proc_rate = self.proc_bytes = 0.0  # of the process being scanned (begin_scan)
        # Per node, this tick's chunks there coldest first (regions, indices) and how many are demoted.
        self.cold: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.demoted: dict[int, int] = {}

    def begin_tick(self, sim: "View") -> None:
        """Free memory as this tick's promotions and demotions will change it; nothing demoted yet.

        What a tick decides applies when it ends, so every scan of the tick sees the same memory:
        one account of free memory and one coldest-first order per node serve all of them."""
        self.free = np.array(sim.node_free(), dtype=np.int64)
        self.cold = {}
        self.demoted = {}

    def begin_scan(self, rate: float, proc_bytes: float) -> None:
        """The process this scan marks: its threads' DRAM misses per ns, and its bytes placed."""
        self.proc_rate = rate
        self.proc_bytes = proc_bytes

    def promote(self, tid: int, rid: int, i: int, src: int, sim: "View", out: list) -> int | None:
        """Memory tiering on a hinting fault of a slow-tier chunk: promote it to the faulting CPU's
        node if it is hot (touched within ``hot_threshold_ms`` of its scan), within the promotion
        rate limit, and the node has room above its watermark, after reclaim demoted cold chunks
        if ``demotion_enabled`` (should_numa_migrate_memory, numa_promotion_rate_limit,
        migrate_balanced_pgdat)."""
        dst = int(self.m.cpu_node[sim.thread_cpu[tid]])
        threshold = self._threshold(dst, sim.now)
        # The fault's latency since the scan is exponential with the chunk's access rate.
        proc_bytes, rate = self.proc_bytes, self.proc_rate
        weights = sim.region_weights(rid)
        share = CHUNK * (1.0 if weights is None else float(weights[i])) / proc_bytes if proc_bytes > 0 else 0.0
        if self.rng.random() >= -math.expm1(-rate * share * threshold * MS):
            return None
        self.candidates[dst] = self.candidates.get(dst, 0.0) + CHUNK  # PGPROMOTE_CANDIDATE
        window = sim.now // (1000 * MS)
        start, used = self.promo_window.get(dst, (window, 0.0))
        used = used if start == window else 0.0
        self.promo_window[dst] = (window, used + CHUNK)
        if used + CHUNK > self.o.promote_rate_limit_mbps * 2**20:
            return None
        free = self.free
        if free[dst] - CHUNK < self._reserve(dst):
            if not self.o.demotion_enabled:
                return None
            # Reclaim (kswapd, woken by the failed promotion) demotes up to the promotion watermark.
            out += self._demote(dst, 2 * self._reserve(dst) + CHUNK - int(free[dst]), sim)
            if free[dst] - CHUNK < self._reserve(dst):
                return None
        free[dst] -= CHUNK
        free[src] += CHUNK
        return dst

    def _threshold(self, node: int, now: int) -> float:
        """The hot threshold (ms) of promotions into ``node`` (``numa_promotion_adjust_threshold``, v6.0+).

        Once every ``scan_period_max_ms``, the candidates of the period past are compared
        with what the rate limit lets through in that time: more than 110 % lowers the
        threshold by an eighth of the default, fewer than 90 % raises it, between one
        eighth and twice the default. Without ``hot_threshold_adjust``, the default."""
        ref = self.o.hot_threshold_ms
        if not self.o.hot_threshold_adjust:
            return ref
        period = self.o.scan_period_max_ms * MS
        start, base = self.th_period.setdefault(node, (now, self.candidates.get(node, 0.0)))
        if now - start > period:
            ref_cand = self.o.promote_rate_limit_mbps * 2**20 * self.o.scan_period_max_ms / 1000
            diff = self.candidates.get(node, 0.0) - base
            unit = ref * 2 / ADJUST_STEPS
            th = self.threshold.get(node, ref)
            if diff > ref_cand * 11 / 10:
                th = max(th - unit, unit)
            elif diff < ref_cand * 9 / 10:
                th = min(th + unit, ref * 2)
            self.threshold[node] = th
            self.th_period[node] = (now, self.candidates.get(node, 0.0))
        return self.threshold.get(node, ref)

    def _reserve(self, node: int) -> int:
        """Free memory a node keeps: its high watermark, two watermark gaps of its memory (simplified)."""
        return int(2 * self.m.node_memory[node] * self.o.watermark_scale_factor / 10_000)

    def _demote(self, node: int, nbytes: int, sim: "View") -> list[Decision]:
        """kswapd with demotion: move the coldest chunks of ``node`` (any pod's) to its nearest slow node with room."""
        free = self.free
        target = next((t for t in self.demote_to.get(node, []) if free[t] >= nbytes + self._reserve(t)), None)
        if target is None or nbytes <= 0:
            return []
        if node not in self.cold:
            self.cold[node] = self._coldest(node, sim)
        rids, idx = self.cold[node]
        start = self.demoted.get(node, 0)
        stop = min(start + -(-nbytes // CHUNK), rids.size)
        if stop <= start:
            return []
        self.demoted[node] = stop
        by_region: dict[int, list[int]] = {}
        for rid, k in zip(rids[start:stop].tolist(), idx[start:stop].tolist()):
            by_region.setdefault(rid, []).append(k)
        free[node] += CHUNK * (stop - start)
        free[target] -= CHUNK * (stop - start)
        return [MoveChunks(rid, tuple(chunks), target, -1, self.o.migrate_copy_gbps) for rid, chunks in by_region.items()]

    @staticmethod
    def _coldest(node: int, sim: "View") -> tuple[np.ndarray, np.ndarray]:
        """The chunks on ``node`` (any pod's), coldest first (by access weight, then region and index):
        their regions and indices."""
        cands = []
        for pod in sim.pods:
            for rid, _owner, nodes in sim.pod_regions(pod.index):
                idx = np.flatnonzero(nodes == node)
                if idx.size:
                    w = sim.region_weights(rid)
                    cands.append((np.ones(idx.size) if w is None else w[idx], np.full(idx.size, rid), idx))
        if not cands:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        w = np.concatenate([c[0] for c in cands])
        rids = np.concatenate([c[1] for c in cands]).astype(np.int64)
        idx = np.concatenate([c[2] for c in cands]).astype(np.int64)
        order = np.lexsort((idx, rids, w))
        return rids[order], idx[order]
