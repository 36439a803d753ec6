"""Sampling: the counters and the memory system's state at each sample time, into arrays.

A part of :class:`numasim.sim.kernel.Simulation`, which holds the state these
methods share (see docs/architecture.md). The arrays are allocated at the first
sample, one row per sample time, so memory is the machine and pods times the
samples, not the events.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Sampling"]


class Sampling:
    def _sampler(self):
        times = sorted(set(range(0, self.duration_ns + 1, self.sample_ns)) | {self.warmup_ns, self.duration_ns})
        self._sample_times = np.array(times, dtype=np.int64)
        for t in times:
            if t > self.env.now:
                yield self.env.timeout(t - self.env.now)
            self._snapshot()
            if self.progress is not None:
                self.progress(t / self.duration_ns)

    def _snapshot(self) -> None:
        everyone = range(len(self.t_cpu))
        self._integrate(everyone)
        self._flush_miss_node(everyone)
        snap = {
            "ops": self.c_ops,
            "cpu": self.c_cpu,
            "wait": self.c_wait,
            "miss": self.c_miss,
            "miss_local": self.c_miss_local,
            "miss_node": self.c_miss_node,
            "moves": self.c_moves,
            "xmoves": self.c_xmoves,
            "wakeups": self.c_wakeups,
            "faults": self.c_faults,
            "numa_moves": self.c_numa_moves,
            "kernel": self.c_kernel_ns,
            "cpu_busy": self.c_cpu_busy,
            "pages_moved": self.c_pages_moved,
            "promoted": self.c_promoted,
            "demoted": self.c_demoted,
            "throttled": self.c_throttled,
            "pod_memory": self.memory.pod_bytes(len(self.pods)),
            "thread_cpu": self.v_thread_cpu,
            "thread_active": self.v_thread_active,
            "thread_local": self.r_local,
            "node_load": self.r_node_load,
            "node_util": self.r_node_util,
            "link_load": self.r_link_load,
            "link_util": self.r_link_util,
            "link_traffic": self.r_link_traffic,
            "chiplet_util": self.r_chiplet_util,
            "lock_util": self.r_lock_util,
            # Mean loaded latency of a node's own memory and of the others', at the last solve (ns).
            "lat_local": float(np.mean(np.diag(self._lmat))),
            "lat_remote": float(self._lmat[~np.eye(len(self._lmat), dtype=bool)].mean()) if len(self._lmat) > 1 else np.nan,
        }
        i = self._n_samples
        if i == 0:
            n = len(self._sample_times)
            for k, v in snap.items():
                v = np.asarray(v)
                self._samples[k] = np.zeros((n,) + v.shape, dtype=v.dtype)
        for k, v in snap.items():
            self._samples[k][i] = v
        self._n_samples = i + 1
