"""run --trace: Chrome trace-event JSON, checked against the format's rules."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import yaml

import numasim
from numasim.cli import main

from .conftest import small_scenario

PHASES = {"X": {"name", "ph", "ts", "dur", "pid", "tid"}, "i": {"name", "ph", "ts", "pid", "tid", "s"},
          "C": {"name", "ph", "ts", "pid", "args"}, "M": {"name", "ph", "pid", "args"}}


def test_trace_is_valid_trace_event_json_and_accounts_for_cpu_time(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_scenario(duration="2s")))
    out, res_path = tmp_path / "t.json", tmp_path / "r.json"
    assert main(["run", str(path), "--trace", str(out), "--json", str(res_path), "--quiet", "--no-sla"]) == 0
    doc = json.loads(out.read_text())
    assert doc["displayTimeUnit"] == "ms" and isinstance(doc["traceEvents"], list)
    by_track = defaultdict(list)
    for e in doc["traceEvents"]:
        assert PHASES[e["ph"]] <= set(e), e  # the fields each phase requires
        if e["ph"] == "X":
            assert e["dur"] > 0 and e["ts"] >= 0
            by_track[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        if e["ph"] == "i":
            assert e["s"] in ("t", "p", "g")
        if e["ph"] == "C":
            assert all(isinstance(v, (int, float)) for v in e["args"].values())
    for spans in by_track.values():  # slices of one CPU never overlap (Perfetto would nest them)
        spans.sort()
        assert all(a_end <= b_start + 1e-3 for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    res = numasim.load_result(res_path)
    assert names == {r.label for r in res.runs}
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "memory per node (GiB)"]
    final = {k: v for e in counters if e["pid"] == 1 for k, v in e["args"].items()}
    assert np.isclose(sum(final.values()), 4.0, rtol=0.01)  # two pods of 2 GiB, all touched


def test_slices_add_up_to_each_threads_cpu_time():
    from numasim.perfetto import trace_events

    res = numasim.run(numasim.from_dict(small_scenario(duration="2s")), workers=1, quiet=True, with_sla=False)
    doc = trace_events(res)
    for pid, run in enumerate(res.runs, start=1):
        trace = res.traces[run.label]
        cpu_us = np.asarray(trace.samples["cpu"][-1], dtype=float) / 1e3
        sliced = np.zeros_like(cpu_us)
        for e in doc["traceEvents"]:
            if e["ph"] == "X" and e["pid"] == pid:
                sliced[e["args"]["thread"]] += e["dur"]
        # A thread's time in an interval goes to the CPU it is on at the interval's end; where two
        # threads land on one CPU, the later slice is cut at the interval's end, so a little is lost.
        assert np.all(sliced <= cpu_us * (1 + 1e-6) + 1e-3)
        assert sliced.sum() >= 0.95 * cpu_us.sum(), run.label
