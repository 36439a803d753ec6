"""The report: figures from a run, the HTML page in a real (headless, offline) browser, the CSV export."""

from __future__ import annotations

import csv
import dataclasses
import errno
import io
import json
import os
import re
from pathlib import Path

import numpy as np
import plotly.offline
import pytest
import yaml
from PIL import Image
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

import numasim
import numasim.cli
from numasim import report
from numasim.analysis.timeline import pod_cpu_time

from .conftest import run_small, small_scenario

KEYS = ["summary", "pods", "timeline", "memory", "memory_system", "limits", "over_time", "latency"]
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
GIB = 2**30


SLA = {"targets_ms": [50, 100], "levels": [0.5, 0.9]}


@pytest.fixture(scope="module")
def result() -> numasim.RunResult:
    """The small scenario (request-driven Java pods) with a small SLA search."""
    return run_small(small_scenario(sla=SLA))


def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(small_scenario(), sort_keys=False), encoding="utf-8")
    return path


def test_figures_show_the_results(result):
    figs = report.figures(result)
    assert list(figs) == KEYS
    for key in KEYS:
        assert figs[key].data, key
        for trace in figs[key].data:
            values = trace.z if trace.type == "heatmap" else trace.y
            assert values is not None and len(values) > 0, (key, trace.name)

    labels = [r.label for r in result.runs]
    rel, loc = figs["summary"].data
    assert list(rel.x) == labels == list(loc.x)
    assert list(rel.y) == [result.relative(label) for label in labels]
    assert rel.y[labels.index(result.baseline)] == 1.0
    assert list(loc.y) == [r.locality for r in result.runs]
    assert rel.error_y.visible is False  # one seed: no interval to show
    assert list(rel.text) == [f"{result.relative(label):.3f}" for label in labels]  # value labels on the bars

    # The memory system over time: throughput, then one line per node (GB/s), per link (GB/s), latencies.
    ms = figs["memory_system"].data
    run0 = result.runs[0]
    assert list(ms[0].y) == run0.timeseries["throughput"]
    per_node = [t for t in ms if t.name and t.name.startswith(f"{run0.label} node ")]
    assert len(per_node) == 2 and list(per_node[1].y) == [row[1] for row in run0.timeseries["node_gbps"]]
    assert max(max(row) for row in run0.timeseries["node_gbps"]) > 0
    remote, local = run0.timeseries["latency_remote_ns"][-1], run0.timeseries["latency_local_ns"][-1]
    assert remote > local > 0  # a remote access costs more than a local one
    sentences = report.why(result)
    assert any(s.startswith(f"{run0.label}: ") and "DRAM accesses local" in s and "remote access costs +" in s
               for s in sentences)

    for bars, run in zip(figs["pods"].data, result.runs):
        assert bars.name == run.label
        assert list(bars.x) == [p.name for p in run.pods] == ["app-0", "app-1"]
        assert list(bars.y) == [p.throughput for p in run.pods]
        assert all(y > 0 for y in bars.y)
        assert bars.texttemplate == "%{y:.3s}" and bars.error_y.visible is False  # labels; one seed: no interval

    # Memory: stacked per node, and the stack of each variant's pod is all of its memory (2 GiB, touched).
    nodes = figs["memory"].data
    assert [t.name for t in nodes] == ["node 0", "node 1"]
    totals = np.sum([t.y for t in nodes], axis=0)
    expected = [sum(p.memory_per_node_bytes) / GIB for r in result.runs for p in r.pods]
    np.testing.assert_allclose(totals, expected)
    np.testing.assert_allclose(totals, 2.0, rtol=0.01)

    # What limits each variant: one bar per variant and resource, the window's mean of its series.
    limits = figs["limits"].data
    assert [t.name for t in limits] == labels
    names = list(limits[0].x)
    assert names[:3] == ["CPUs", "memory node", "interconnect link"] and "chiplet link" not in names  # none here
    for bars, run in zip(limits, result.runs):
        w0, w1 = run.window_s
        idx = [i for i, t in enumerate(run.timeseries["time_s"]) if w0 < t <= w1 + 1e-9]
        assert bars.y[0] == run.cpu_utilisation
        assert bars.y[1] == pytest.approx(np.mean([run.timeseries["node_util_max"][i] for i in idx]))
        assert bars.y[names.index("lines in flight")] == pytest.approx(
            np.mean([run.timeseries["lines_demand_max"][i] for i in idx]))
        assert all(0.0 <= y for y in bars.y)

    # Over time: each pod's throughput, then each variant's locality and migrations.
    over = figs["over_time"].data
    for run in result.runs:
        pods = [t for t in over if t.name and t.name.startswith(f"{run.label} ") and t.name[len(run.label) + 1:]
                in {p.name for p in run.pods}]
        assert [t.name for t in pods] == [f"{run.label} {p.name}" for p in run.pods]
        for j, line in enumerate(pods):
            assert list(line.y) == [row[j] for row in run.timeseries["pod_throughput"]]
        line = next(t for t in over if t.name == run.label)
        assert list(line.x) == run.timeseries["time_s"]
        assert list(line.y) == run.timeseries["locality"]
    # and each interconnect link's traffic, by name
    links = [t for t in ms if t.name and t.name.startswith(f"{run0.label} socket ")]
    assert [t.name for t in links] == [f"{run0.label} {name}" for name in run0.links]
    assert [list(t.y) for t in links] == [[row[k] for row in run0.timeseries["link_gbps"]] for k in range(len(links))]


def test_a_label_with_markup_is_shown_as_written_not_as_a_link(result):
    # plotly draws a subset of HTML in names and axis labels: a label's '<a href>' must not become a link.
    label = '<a href="http://x">y</a> & z'
    marked = dataclasses.replace(result, runs=[dataclasses.replace(result.runs[-1], label=label), *result.runs[:-1]],
                                 traces={label: result.traces.get(result.runs[-1].label), **result.traces},
                                 sla={})
    figs = report.figures(marked)
    names = {t.name for f in figs.values() for t in f.data if t.name}
    assert any(n.startswith("&lt;a href=\"http://x\"&gt;y&lt;/a&gt; &amp; z") for n in names)
    assert not any("<a" in n for n in names)
    assert list(figs["summary"].data[0].x)[0] == "&lt;a href=\"http://x\"&gt;y&lt;/a&gt; &amp; z"
    assert report.figures(result)["summary"].data[0].x[0] == result.runs[0].label  # plain labels as they are


def test_latency_figure_shows_percentiles_and_the_sla_search(result):
    fig = report.figures(result)["latency"]
    assert [a.text for a in fig.layout.annotations][:3] == [
        "latency percentiles as run (ms)", "p99 vs offered request rate", "highest request rate meeting each target"]
    n = len(result.runs)
    percentiles, curves, rates = fig.data[:n], fig.data[n:2 * n], fig.data[2 * n:]
    assert len(rates) == n
    for bars, curve, best, run in zip(percentiles, curves, rates, result.runs):
        assert bars.name == curve.name == best.name == run.label
        assert list(bars.x) == ["p50", "p90", "p99", "p99.9"]
        assert list(bars.y) == [run.latency[k] for k in ("p50_ms", "p90_ms", "p99_ms", "p999_ms")]
        sla = result.sla[run.label]
        assert list(curve.x) == [c["rate"] for c in sla["curve"]]
        assert list(curve.y) == [c["latency_ms"] for c in sla["curve"]]
        assert list(best.x) == ["p99 ≤ 50 ms", "p99 ≤ 100 ms"]
        assert list(best.y) == [sla["max_rate"]["50"], sla["max_rate"]["100"]]
    # The targets, dashed, on the two latency panels.
    assert sorted((s.y0, s.yref) for s in fig.layout.shapes) == [(50.0, "y"), (50.0, "y2"), (100.0, "y"), (100.0, "y2")]


def test_latency_figure_reads_partial_data(result):
    runs = [dataclasses.replace(r, latency={"p999_ms": 40.0, "p50_ms": 1.0, "requests": 10.0}) for r in result.runs]
    res = dataclasses.replace(result, runs=runs, sla={runs[0].label: {"targets_ms": [5], "max_rate": {"5": None}}})
    fig = report.figures(res)["latency"]
    assert [a.text for a in fig.layout.annotations][:2] == [
        "latency percentiles as run (ms)", "highest request rate meeting each target"]
    assert [(list(b.x), list(b.y)) for b in fig.data[:-1]] == [(["p50", "p99.9"], [1.0, 40.0])] * len(runs)
    unmet = fig.data[-1]  # the one variant with SLA data met no target: an empty slot, not a failure
    assert (unmet.name, list(unmet.x), list(unmet.y)) == (runs[0].label, ["latency ≤ 5 ms"], [None])
    assert [s.y0 for s in fig.layout.shapes] == [5.0]


def test_latency_figure_without_requests_says_so():
    data = small_scenario(policies=[{"label": "cfs", "policy": "cfs"}])
    data["workloads"]["java"]["requests"] = None
    res = run_small(data)
    assert res.runs[0].latency is None and not res.sla
    fig = report.figures(res)["latency"]
    assert len(fig.data) == 0
    assert [a.text for a in fig.layout.annotations] == [report.NO_REQUESTS]


def test_timeline_shows_which_pod_ran_on_each_cpu(result):
    timeline = report.figures(result)["timeline"]
    maps = {h.name: np.asarray(h.z, dtype=float) for h in timeline.data}
    assert list(maps) == [r.label for r in result.runs]
    names = list(timeline.layout.coloraxis.colorbar.ticktext)
    assert names == ["app-0", "app-1"]
    # taskset pins app-0 to the even CPUs and app-1 to the odd ones (cpus: ["0-7:2", "1-7:2"]); with
    # alternate numbering those are node 0's and node 1's, and the rows are grouped by node.
    z = maps["taskset"]
    assert z.shape == (8, 12)  # 8 CPUs x 12 sample intervals of 250 ms
    assert set(np.unique(z[:4][~np.isnan(z[:4])])) == {names.index("app-0")}
    assert set(np.unique(z[4:][~np.isnan(z[4:])])) == {names.index("app-1")}
    assert list(timeline.layout.yaxis.ticktext) == ["node 0", "node 1"]
    for column in z.T:  # both pods ran in every interval
        assert set(column[~np.isnan(column)]) == {0.0, 1.0}
    for z in maps.values():  # in every variant, some CPU ran a pod in every interval
        assert (~np.isnan(z)).any(axis=0).all()


def test_timeline_accounts_for_all_cpu_time(result):
    for trace in result.traces.values():
        edges, time_ns = pod_cpu_time(trace)
        np.testing.assert_array_equal(edges, trace.sample_times)
        per_column = np.diff(trace.samples["cpu"], axis=0).sum(axis=1)
        np.testing.assert_allclose(time_ns.sum(axis=(1, 2)), per_column, rtol=1e-9)
        assert (time_ns.sum(axis=1) <= np.diff(edges)[:, None] * (1 + 1e-9)).all()  # a CPU runs one thread at a time


def test_html_is_self_contained_and_deterministic(result, tmp_path):
    a, b = tmp_path / "a.html", tmp_path / "b.html"
    report.write_html(result, a)
    report.write_html(result, b)
    page = a.read_text(encoding="utf-8")
    assert page == b.read_text(encoding="utf-8")
    assert page.count(plotly.offline.get_plotlyjs()[:300]) == 1  # plotly.js inlined once
    assert "<script src" not in page and "<link" not in page
    assert "<title>numasim report: small</title>" in page
    assert "seed 1;" in page and "measurement window 1-3 s" in page and "pacific-broadwell" in page
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.html", "b.html"]  # no temporary file left


def test_failed_html_write_leaves_nothing(result, tmp_path, monkeypatch):
    def refuse(src, dst):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(dst))

    monkeypatch.setattr(report.os, "replace", refuse)
    target = tmp_path / "report.html"
    with pytest.raises(numasim.NumasimError, match=f"^{re.escape(str(target))}: cannot write: Permission denied$"):
        report.write_html(result, target)
    assert list(tmp_path.iterdir()) == []


def _browser() -> webdriver.Chrome:
    for exe in (CHROMIUM, CHROMEDRIVER):
        if not exe.exists():
            pytest.fail(f"{exe} is missing: install Debian's chromium and chromium-driver (CI does)")
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--window-size=1400,1000", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
                # No network: every host name fails to resolve and any proxied request goes nowhere.
                "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9"):
        options.add_argument(arg)
    options.binary_location = str(CHROMIUM)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:  # and the page itself is offline
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.emulateNetworkConditions",
                               {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0})
    except BaseException:
        driver.quit()
        raise
    return driver


PLOTS = "[...document.querySelectorAll('.js-plotly-plot')]"
RENDERED = f"return {PLOTS}.filter(p => p.querySelector('svg.main-svg')).length"


def test_cli_report_renders_offline_in_chromium(tmp_path, capsys):
    out = tmp_path / "report.html"
    assert numasim.cli.main(["run", str(scenario_file(tmp_path)), "--report", str(out), "--workers", "1"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    driver = _browser()
    try:
        driver.get(out.as_uri())
        # A ceiling for a hung browser, not a timing assertion.
        WebDriverWait(driver, 120).until(lambda d: d.execute_script(RENDERED) == len(KEYS))
        assert driver.execute_script(f"return {PLOTS}.length") == len(KEYS)
        assert driver.execute_script(RENDERED) == len(KEYS)
        ids = driver.execute_script(f"return {PLOTS}.map(p => p.id)")
        assert ids == [f"figure-{key}" for key in KEYS]
        requested = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        assert [u for u in requested if not u.startswith(("file:", "data:", "blob:"))] == []
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert severe == []
        # A screenshot of each figure: drawn, not blank. Each of these covers 12-52 % of its
        # area with marks darker than the white background; axes, grid and titles alone
        # (a plot without data) cover a few per cent, a failed plot nothing.
        for key, element in zip(KEYS, driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")):
            shot = Image.open(io.BytesIO(element.screenshot_as_png)).convert("L")
            drawn = sum(shot.histogram()[:245])
            assert shot.width > 300 and shot.height > 200, key
            assert drawn > 0.08 * shot.width * shot.height, (key, drawn)
    finally:
        driver.quit()


def test_cli_writes_csv_one_row_per_variant_and_pod(tmp_path, capsys):
    out, doc = tmp_path / "pods.csv", tmp_path / "result.json"
    argv = ["run", str(scenario_file(tmp_path)), "--csv", str(out), "--json", str(doc), "--workers", "1"]
    assert numasim.cli.main(argv) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    with out.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    header = list(rows[0])
    pod_cols = ["label", "policy", "name", "group", "status", "reason", "throughput", "locality", "cpu_seconds",
                "runqueue_wait", "migrations", "cross_node_migrations", "pages_migrated_bytes", "throttled_seconds"]
    lat_cols = [f"latency_{k}" for k in ("requests_per_s", "p50_ms", "p90_ms", "p99_ms", "p999_ms")]
    run_cols = [f"run_{k}" for k in ("throughput", "relative_throughput", "locality", "throughput_sd", "p99_ms",
                                     "cpu_utilisation", "migrations", "cross_node_migrations", "rejected")]
    assert header[:2] == ["label", "policy"]
    assert set(pod_cols + lat_cols + run_cols) <= set(header)
    assert "latency" not in header  # expanded into latency_* columns
    first_run = min(header.index(c) for c in header if c.startswith("run_"))
    assert all(c.startswith("run_") for c in header[first_run:])
    assert max(header.index(c) for c in pod_cols + lat_cols) < first_run
    runs = json.loads(doc.read_text(encoding="utf-8"))["runs"]
    assert [(r["label"], r["name"]) for r in rows] == [(r["label"], p["name"]) for r in runs for p in r["pods"]]
    for row in rows:
        run = next(r for r in runs if r["label"] == row["label"])
        pod = next(p for p in run["pods"] if p["name"] == row["name"])
        assert float(row["throughput"]) == pod["throughput"]
        assert float(row["run_throughput"]) == run["throughput"]
        assert float(row["run_relative_throughput"]) == run["relative_throughput"]
        assert row["run_throughput_sd"] == ""  # one seed: no spread
        assert float(row["latency_p99_ms"]) == pod["latency"]["p99_ms"]
    assert {float(r["run_relative_throughput"]) for r in rows if r["label"] == "cfs"} == {1.0}


@pytest.mark.parametrize("flag", ["--report", "--csv"])
def test_unwritable_output_is_refused_before_simulating(tmp_path, capsys, monkeypatch, flag):
    target = tmp_path / "missing" / "out"
    monkeypatch.setattr(numasim.cli, "run", lambda *a, **k: pytest.fail("simulated although the output is unusable"))
    rc = numasim.cli.main(["run", str(scenario_file(tmp_path)), flag, str(target), "--workers", "1"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip() == f"error: {flag} {target}: folder {target.parent} does not exist"


def test_why_without_relative_throughputs(result):
    """A baseline that did no work in the window (a window inside the start-up) gives no
    relative throughputs: the report still explains each variant, and names no leader."""
    runs = [dataclasses.replace(r, throughput=0.0, replicates=[]) if r.label == result.baseline else r
            for r in result.runs]
    res = dataclasses.replace(result, runs=runs)
    assert all(res.relative(r.label) is None for r in res.runs)
    lines = report.why(res)
    assert lines and not any("leads" in line or "the throughput of" in line for line in lines)
    assert any("of DRAM accesses local" in line for line in lines)
