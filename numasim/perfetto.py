"""Traces people can open: Chrome trace-event JSON (Perfetto, chrome://tracing) from a run's traces.

One process per policy variant (its first seed), with:

- a track per CPU, with a slice per thread that ran there in each sample interval:
  the threads placed on the CPU at the interval's end, one after the other, each
  as long as the CPU time it got in the interval (the trace is kept at the
  scenario's ``sample_interval``, so this is the resolution);
- instant events for cross-node thread migrations (per thread and interval) and
  for the policy's events (admissions, rejections);
- counters: DRAM traffic per node (GB/s), the busiest interconnect link's
  utilisation, and the memory on each node (GiB).

Format: the Trace Event Format's JSON object form
(https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU),
timestamps in microseconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .analysis.results import RunResult

__all__ = ["trace_events"]


def trace_events(result: RunResult) -> dict[str, Any]:
    """The Chrome trace-event document of ``result``'s traces."""
    events: list[dict[str, Any]] = []
    for pid, run in enumerate(result.runs, start=1):
        trace = result.traces.get(run.label)
        if trace is None:
            continue
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"{run.label}"}})
        s = trace.samples
        t_us = np.asarray(trace.sample_times, dtype=float) / 1e3
        m = trace.machine
        for cpu in range(m.n_cpus):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": cpu + 1,
                           "args": {"name": f"CPU {cpu} (node {int(m.cpu_node[cpu])})"}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": cpu + 1,
                           "args": {"sort_index": int(m.cpu_node[cpu]) * m.n_cpus + cpu}})
        pod_of, gc = {}, set()
        for pod in trace.pods:
            for tid in pod.all_tids:
                pod_of[tid] = pod.name
            gc.update(pod.all_tids[len(pod.tids):])
        cpu_ns = np.diff(np.asarray(s["cpu"], dtype=float), axis=0)  # [interval, thread]
        placed = np.asarray(s["thread_cpu"])[1:]  # where each thread is at the interval's end
        xmoves = np.diff(np.asarray(s["xmoves"]), axis=0)
        for k in range(len(t_us) - 1):
            start, end = t_us[k], t_us[k + 1]
            cursor: dict[int, float] = {}
            ran = np.flatnonzero(cpu_ns[k] > 0)
            for tid in ran.tolist():
                cpu = int(placed[k, tid])
                if cpu < 0:
                    continue
                dur = min(cpu_ns[k, tid] / 1e3, end - start)
                at = cursor.get(cpu, start)
                dur = max(0.0, min(dur, end - at))  # slices on one CPU never overlap
                if dur <= 0:
                    continue
                cursor[cpu] = at + dur
                kind = "collector thread" if tid in gc else "thread"
                events.append({"name": f"{pod_of.get(tid, '?')} {kind} {tid}", "cat": "cpu", "ph": "X",
                               "ts": round(at, 3), "dur": round(dur, 3), "pid": pid, "tid": cpu + 1,
                               "args": {"pod": pod_of.get(tid, "?"), "thread": tid}})
            for tid in np.flatnonzero(xmoves[k] > 0).tolist():
                cpu = int(placed[k, tid])
                events.append({"name": f"cross-node migration of thread {tid}", "cat": "migration", "ph": "i",
                               "s": "t", "ts": round(end, 3), "pid": pid, "tid": max(cpu, 0) + 1,
                               "args": {"count": int(xmoves[k, tid]), "pod": pod_of.get(tid, "?")}})
        for when_s, kind, text in run.events:
            events.append({"name": f"{kind}: {text}"[:200], "cat": "policy", "ph": "i", "s": "p",
                           "ts": round(when_s * 1e6, 3), "pid": pid, "tid": 0})
        node_load = np.asarray(s["node_load"], dtype=float)
        link = np.asarray(s["link_util"], dtype=float)
        memory = np.asarray(s["pod_memory"], dtype=float).sum(axis=1) / 2**30  # [sample, node]
        for k, ts in enumerate(t_us):
            events.append({"name": "DRAM traffic (GB/s)", "ph": "C", "ts": round(ts, 3), "pid": pid,
                           "args": {f"node {n}": round(float(v), 3) for n, v in enumerate(node_load[k])}})
            events.append({"name": "memory per node (GiB)", "ph": "C", "ts": round(ts, 3), "pid": pid,
                           "args": {f"node {n}": round(float(v), 3) for n, v in enumerate(memory[k])}})
            if link.shape[1]:
                events.append({"name": "busiest link (utilisation)", "ph": "C", "ts": round(ts, 3), "pid": pid,
                               "args": {"max": round(float(link[k].max()), 4)}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"numasim": (result.scenario.get("provenance") or {}).get("numasim_version"),
                          "scenario": result.scenario.get("name")}}
