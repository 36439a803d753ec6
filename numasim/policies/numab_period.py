"""NUMA balancing's scan period (kernel/sched/fair.c: ``task_scan_min``, ``task_scan_start``,
``task_scan_max``, ``update_task_scan_period``).

A part of :class:`numasim.policies.numab.NumaBalancing`, which holds the state these
methods share: the options (``o``), per-task statistics (``tasks``, ``t_loc``), the numa
groups (``groups``, ``group_of``). The period scales with the process's memory (in
``scan_size_mb`` windows), is at least the scan-rate cap allows, and adapts between its
bounds in 10 slots: slower when the task's faults are mostly private or local, faster
otherwise, doubled when a migration failed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .api import View

__all__ = ["ScanPeriod"]

PERIOD_SLOTS = 10
PERIOD_THRESHOLD = 7
MAX_SCAN_WINDOW_MB_S = 2560


class ScanPeriod:
    """The scan period of each task (the mixin part of :class:`NumaBalancing`)."""

    def _windows(self, rss: int) -> int:
        return max(1, math.ceil(rss / (self.o.scan_size_mb * 2**20)))

    def _scan_min(self, rss: int) -> float:
        floor = 1000.0 / (MAX_SCAN_WINDOW_MB_S / self.o.scan_size_mb)
        return max(floor, self.o.scan_period_min_ms / self._windows(rss))

    def _scan_start(self, rss: int, tid: int) -> float:
        """task_scan_start: the first period after the initial delay."""
        smin = self._scan_min(rss)
        g = self.groups.get(self.group_of.get(tid, -1))
        if g is None:
            return smin
        t = self.tasks[tid]
        shared, private = t.mem[:, 0].sum(), t.mem[:, 1].sum()
        return max(smin, smin * len(g.tasks) * (shared + 1) / (private + shared + 1))

    def _scan_max(self, rss: int, tid: int) -> float:
        smin = self._scan_min(rss)
        smax = self.o.scan_period_max_ms / self._windows(rss)
        g = self.groups.get(self.group_of.get(tid, -1))
        if g is not None:
            t = self.tasks[tid]
            shared, private = t.mem[:, 0].sum(), t.mem[:, 1].sum()
            smax = max(smax, smax * len(g.tasks) * (shared + 1) / (private + shared + 1))
        return max(smin, smax)

    def _update_period(self, tid: int, sim: "View", shared: float, private: float) -> None:
        """update_task_scan_period: slow down when mostly local or private, speed up otherwise."""
        rss = sim.process_memory(int(sim.thread_process[tid]))
        remote, local, failed = self.t_loc[tid].tolist()
        if local + shared == 0 or failed:
            self.t_period[tid] = min(self._scan_max(rss, tid), self.t_period[tid] * 2)
            return
        period = float(self.t_period[tid])
        slot = math.ceil(period / PERIOD_SLOTS)
        lr = int(local * PERIOD_SLOTS / (local + remote)) if local + remote else 0
        ps = int(private * PERIOD_SLOTS / (private + shared)) if private + shared else 0
        if ps >= PERIOD_THRESHOLD:
            diff = max(1, ps - PERIOD_THRESHOLD) * slot
        elif lr >= PERIOD_THRESHOLD:
            diff = max(1, lr - PERIOD_THRESHOLD) * slot
        else:
            diff = -(PERIOD_THRESHOLD - max(lr, ps)) * slot
        self.t_period[tid] = float(np.clip(period + diff, self._scan_min(rss), self._scan_max(rss, tid)))
        self.t_loc[tid] = 0.0
