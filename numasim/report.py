"""Plotly figures and a self-contained HTML page from a :class:`~numasim.analysis.results.RunResult`.

Library code: it returns figures and writes files; it never shows a figure or
prints (house rule 10).
"""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from . import __version__
from .atomic import write_text
from .analysis.results import RunResult
from .analysis.timeline import pod_cpu_time

__all__ = ["figures", "render_html", "write_html", "why", "NO_REQUESTS"]

NO_REQUESTS = "no request-driven workloads in this scenario"
_PCT = re.compile(r"^p(\d+)_ms$")
_LAYOUT = {"template": "plotly_white", "margin": {"l": 60, "r": 30, "t": 50, "b": 50}}
_BY_NAME = "<extra>%{fullData.name}</extra>"


def _cycle(palette: list[str], n: int) -> list[str]:
    return [palette[i % len(palette)] for i in range(n)]


def _empty(message: str, title: str) -> go.Figure:
    fig = go.Figure(layout={**_LAYOUT, "title": title, "height": 260})
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font={"size": 16})
    return fig.update_xaxes(visible=False).update_yaxes(visible=False)


def _summary(result: RunResult, colours: dict[str, str]) -> go.Figure:
    labels = [r.label for r in result.runs]
    cis = [result.ci(label) for label in labels]
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        f"throughput relative to {result.baseline}", "locality (local share of DRAM misses)"))
    columns = (([result.relative(label) for label in labels], "relative_throughput_ci"),
               ([r.locality for r in result.runs], "locality_ci"))
    for col, (values, key) in enumerate(columns, start=1):
        half = [c[key] for c in cis]
        text = [("" if v is None else f"{v:.3f}" + ("" if h is None else f" ± {h:.3f}")) for v, h in zip(values, half)]
        fig.add_trace(go.Bar(
            x=labels, y=values, marker_color=[colours[label] for label in labels], showlegend=False,
            text=text, textposition="outside", cliponaxis=False,
            error_y={"type": "data", "array": half, "visible": any(h is not None for h in half)},
            hovertemplate="%{x}: %{text}<extra></extra>"), row=1, col=col)
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey", row=1, col=1)
    fig.update_yaxes(range=[0, 1.15], row=1, col=2)
    return fig.update_layout(**_LAYOUT, height=440, uniformtext_minsize=9)


def _memory_system(result: RunResult, colours: dict[str, str]) -> go.Figure:
    """Throughput, DRAM traffic per node, the busiest link and the loaded latencies over time."""
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.07, subplot_titles=(
        "throughput (ops/s)", "DRAM traffic per node (GB/s, reads and write-backs)",
        "interconnect traffic per link and direction (GB/s)",
        "mean loaded latency (ns): own node solid, other nodes dotted"))
    for r in result.runs:
        ts = r.timeseries
        t = np.asarray(ts["time_s"], dtype=float)
        style = {"line_color": colours[r.label], "legendgroup": r.label}
        fig.add_trace(go.Scatter(x=t, y=ts["throughput"], mode="lines", name=r.label, **style), row=1, col=1)
        per_node = np.asarray(ts.get("node_gbps") or [], dtype=float)
        for node in range(per_node.shape[1] if per_node.ndim == 2 else 0):
            fig.add_trace(go.Scatter(x=t, y=per_node[:, node], mode="lines", showlegend=False,
                                     name=f"{r.label} node {node}", line={"width": 1}, **style,
                                     hovertemplate="%{x} s: %{y:.1f} GB/s<extra>%{fullData.name}</extra>"), row=2, col=1)
        per_link = np.asarray(ts.get("link_gbps") or [], dtype=float)
        for k in range(per_link.shape[1] if per_link.ndim == 2 else 0):
            name = r.links[k] if k < len(r.links) else f"link {k}"
            fig.add_trace(go.Scatter(x=t, y=per_link[:, k], mode="lines", showlegend=False,
                                     name=f"{r.label} {name}", line={"width": 1}, **style,
                                     hovertemplate="%{x} s: %{y:.1f} GB/s<extra>%{fullData.name}</extra>"), row=3, col=1)
        if ts.get("latency_local_ns"):
            fig.add_trace(go.Scatter(x=t, y=ts["latency_local_ns"], mode="lines", showlegend=False, **style,
                                     name=f"{r.label} own node"), row=4, col=1)
            fig.add_trace(go.Scatter(x=t, y=ts["latency_remote_ns"], mode="lines", showlegend=False,
                                     line_dash="dot", name=f"{r.label} other nodes", **style), row=4, col=1)
    warmup = result.runs[0].window_s[0] if result.runs else 0.0
    if warmup > 0:
        fig.add_vrect(x0=0, x1=warmup, fillcolor="grey", opacity=0.12, line_width=0, row="all", col=1)
    fig.update_xaxes(title_text="time (s)", row=4, col=1)
    return fig.update_layout(**_LAYOUT, height=900, hovermode="x unified")


def _window(r) -> list[int]:
    """The indices of a run's time series samples inside its measurement window."""
    w0, w1 = r.window_s
    return [i for i, t in enumerate(r.timeseries.get("time_s", [])) if w0 < t <= w1 + 1e-9]


def _window_mean(r, key: str, idx: list[int]) -> float | None:
    """The mean of a per-sample series over the samples ``idx`` (None if it has no values there)."""
    ts = r.timeseries
    vals = [ts[key][i] for i in idx if key in ts and ts[key][i] is not None]
    return float(np.mean(vals)) if vals else None


# What can limit a variant, as the time series name it (docs/results.md): label, series, what 1.0 means.
_LIMITS = (("CPUs", None, "every CPU busy"),
           ("memory node", "node_util_max", "the busiest memory node at its bandwidth"),
           ("interconnect link", "link_util_max", "the busiest link at its bandwidth"),
           ("chiplet link", "chiplet_util_max", "the busiest chiplet link at its bandwidth"),
           ("lock", "lock_util_max", "the busiest process-wide lock always held"),
           ("lines in flight", "lines_demand_max", "the busiest node's threads want all its lines"))


def _limits(result: RunResult, colours: dict[str, str]) -> go.Figure:
    """Each resource that can limit throughput, its use over the measurement window, per variant."""
    rows = []
    windows = [_window(r) for r in result.runs]
    for name, key, meaning in _LIMITS:
        vals = [r.cpu_utilisation if key is None else _window_mean(r, key, idx) for r, idx in zip(result.runs, windows)]
        if key is None or any(v for v in vals):  # a resource no variant uses is left out
            rows.append((name, meaning, [0.0 if v is None else v for v in vals]))
    fig = go.Figure(layout={**_LAYOUT, "height": 420, "barmode": "group",
                            "yaxis": {"title": "use (1: saturated; lines: wanted over the limit)"}})
    for j, r in enumerate(result.runs):
        fig.add_trace(go.Bar(x=[name for name, _, _ in rows], y=[vals[j] for _, _, vals in rows], name=r.label,
                             marker_color=colours[r.label], customdata=[meaning for _, meaning, _ in rows],
                             hovertemplate="%{x}: %{y:.2f} (1: %{customdata})" + _BY_NAME))
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    return fig


def why(result: RunResult) -> list[str]:
    """Sentences that explain the figures, derived from them: locality, latency, bandwidth per variant."""
    out: list[str] = []
    rows = []
    for r in result.runs:
        ts = r.timeseries
        idx = _window(r)
        def mean(key):
            return _window_mean(r, key, idx)
        node = np.asarray([ts["node_gbps"][i] for i in idx], dtype=float) if ts.get("node_gbps") and idx else None
        rows.append((r, mean("latency_local_ns"), mean("latency_remote_ns"), mean("link_util_max"),
                     float(node.max()) if node is not None and node.size else None, mean("chiplet_util_max"),
                     mean("lock_util_max"), mean("node_util_max"), mean("lines_demand_max")))
    base = next((x for x in rows if x[0].label == result.baseline), None)
    for r, lat_l, lat_r, link, node_peak, chiplet, lock, node_util, lines in rows:
        parts = []
        rel = result.relative(r.label)
        if rel is not None and r.label != result.baseline:
            parts.append(f"{rel:.2f}x the throughput of {result.baseline}")
        if r.locality is not None:
            parts.append(f"{r.locality:.0%} of DRAM accesses local")
        if r.locality is not None and lat_l is not None and lat_r is not None:  # only with DRAM traffic
            parts.append(f"a remote access costs +{lat_r - lat_l:.0f} ns over a local one at this load "
                         f"({lat_l:.0f} ns local)")
        if node_peak is not None and node_peak >= 0.05:
            parts.append(f"the busiest node moves {node_peak:.1f} GB/s")
        if node_util is not None and node_peak is not None and node_peak >= 0.05:
            parts.append(f"the most utilised memory node is at {node_util:.0%}")  # (a CPU-less node's port counts)
        if link is not None and link > 0:
            parts.append(f"the busiest interconnect link is {link:.0%} utilised")
        if chiplet is not None and chiplet > 0:
            parts.append(f"the busiest chiplet link is {chiplet:.0%} utilised")
        if lines is not None and lines > 1:
            parts.append(f"the busiest node's threads would keep {lines:.2f}x the lines in flight its memory "
                         "system holds, so they wait for lines (the limit binds)")
        if lock is not None and lock > 0:
            parts.append(f"the busiest process-wide lock is held {lock:.0%} of the time")
        if parts:
            out.append(f"{r.label}: " + "; ".join(parts) + ".")
    ranked = [x for x in rows if result.relative(x[0].label) is not None]
    if base is not None and len(rows) > 1 and ranked:  # no relative throughput when the baseline did no work
        best = max(ranked, key=lambda x: result.relative(x[0].label))
        if best[0].label != result.baseline and best[0].locality is not None and base[0].locality is not None:
            out.append(f"{best[0].label} leads: it keeps {best[0].locality:.0%} of accesses local against "
                       f"{base[0].locality:.0%} for {result.baseline}, so fewer of its misses pay the remote latency.")
    return out


def _pods(result: RunResult, colours: dict[str, str]) -> go.Figure:
    fig = go.Figure(layout={**_LAYOUT, "barmode": "group", "height": 420,
                            "xaxis_title": "pod", "yaxis_title": "throughput (ops/s)"})
    for r in result.runs:
        half = [p.throughput_ci for p in r.pods]
        fig.add_trace(go.Bar(
            name=r.label, x=[p.name for p in r.pods], y=[p.throughput for p in r.pods],
            marker_color=colours[r.label], textposition="outside", cliponaxis=False, texttemplate="%{y:.3s}",
            error_y={"type": "data", "array": [h or 0.0 for h in half], "visible": any(h is not None for h in half)},
            customdata=[p.status + ("" if p.locality is None else f", locality {p.locality:.2f}")
                        + ("" if h is None else f", ± {h:,.0f} ops/s (95 % CI)") for p, h in zip(r.pods, half)],
            hovertemplate="%{x}: %{y:,.0f} ops/s<br>%{customdata}" + _BY_NAME))
    # Value labels show where they fit; with many pods and variants plotly hides the ones that do not.
    return fig.update_layout(uniformtext_minsize=8, uniformtext_mode="hide")


def _timeline(result: RunResult) -> go.Figure:
    traces = [(r.label, result.traces[r.label]) for r in result.runs if result.traces.get(r.label) is not None]
    traces = [(label, tr) for label, tr in traces if tr.pods]
    if not traces:
        return _empty("no traces recorded in this result", "which pod ran on each CPU")
    names = list(dict.fromkeys(p.name for _, tr in traces for p in tr.pods))
    n = len(names)
    scale = [[k / n, c] for i, c in enumerate(_cycle(qualitative.Alphabet, n)) for k in (i, i + 1)]
    row_px = int(np.clip(3 * max(tr.machine.n_cpus for _, tr in traces), 160, 360))
    fig = make_subplots(rows=len(traces), cols=1, shared_xaxes=True, subplot_titles=[label for label, _ in traces],
                        vertical_spacing=min(60 / (row_px * len(traces)), 0.3))
    for row, (label, tr) in enumerate(traces, start=1):
        edges, time_ns = pod_cpu_time(tr)
        top = time_ns.argmax(axis=1)  # [columns, cpus]: the pod with the most CPU time there
        busy = time_ns.sum(axis=1) > 0
        codes = np.array([names.index(p.name) for p in tr.pods], dtype=float)
        pods = np.array([p.name for p in tr.pods], dtype=object)
        share = np.take_along_axis(time_ns, top[:, None, :], axis=1)[:, 0, :] / np.diff(edges)[:, None]
        # Rows grouped by NUMA node (then OS CPU id), so that a pod's node shows as a band at any CPU count.
        node_of = tr.machine.cpu_node
        order = np.lexsort((np.arange(tr.machine.n_cpus), node_of))
        cpu_label = np.array([f"CPU {c} (node {node_of[c]})" for c in range(tr.machine.n_cpus)], dtype=object)
        text = np.where(busy, pods[top], "").T[order]
        fig.add_trace(go.Heatmap(
            x=edges / 1e9, y=np.arange(tr.machine.n_cpus), z=np.where(busy, codes[top], np.nan).T[order],
            text=np.char.add(np.char.add(cpu_label[order][:, None].astype(str), ": "), text.astype(str)),
            customdata=np.round(share, 3).T[order],
            coloraxis="coloraxis", hoverongaps=False, name=label,
            hovertemplate="%{text}, %{x:.2f} s: %{customdata:.0%} of the interval" + _BY_NAME,
        ), row=row, col=1)
        starts = [int(i) for i in np.flatnonzero(np.diff(node_of[order], prepend=-1))]
        for k in starts[1:]:
            fig.add_hline(y=k - 0.5, line_color="black", line_width=1, row=row, col=1)
        fig.update_yaxes(title_text="CPUs by node", range=[tr.machine.n_cpus - 0.5, -0.5],
                         tickvals=[k + (e - k) / 2 - 0.5 for k, e in zip(starts, starts[1:] + [tr.machine.n_cpus])],
                         ticktext=[f"node {node_of[order[k]]}" for k in starts], row=row, col=1)
    fig.update_xaxes(title_text="time (s)", row=len(traces), col=1)
    return fig.update_layout(**_LAYOUT, height=row_px * len(traces) + 120, coloraxis={
        "colorscale": scale, "cmin": -0.5, "cmax": n - 0.5,
        "colorbar": {"title": {"text": "pod"}, "tickvals": list(range(n)), "ticktext": names}})


def _memory(result: RunResult) -> go.Figure:
    rows = [(r.label, p.name, p.memory_per_node_bytes) for r in result.runs for p in r.pods]
    if not rows:
        return _empty("no pods in this result", "memory per node")
    n_nodes = max(len(m) for _, _, m in rows)
    gib = np.array([list(m) + [0] * (n_nodes - len(m)) for _, _, m in rows], dtype=float) / 2**30
    x = [[label for label, _, _ in rows], [pod for _, pod, _ in rows]]  # a two-level axis: variant, pod
    fig = go.Figure(layout={**_LAYOUT, "barmode": "stack", "height": 440, "yaxis_title": "GiB",
                            "legend_title_text": "NUMA node"})
    for node, colour in enumerate(_cycle(qualitative.Set2, n_nodes)):
        fig.add_trace(go.Bar(name=f"node {node}", x=x, y=gib[:, node], marker_color=colour,
                             hovertemplate="%{x}: %{y:.2f} GiB" + _BY_NAME))
    return fig


def _over_time(result: RunResult, colours: dict[str, str]) -> go.Figure:
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.08, subplot_titles=(
        "throughput per pod (ops/s)", "locality (local share of DRAM misses)", "cross-node thread migrations per second"))
    for r in result.runs:
        per_pod = np.asarray(r.timeseries.get("pod_throughput") or [], dtype=float)
        t = np.asarray(r.timeseries["time_s"], dtype=float)
        for j in range(per_pod.shape[1] if per_pod.ndim == 2 else 0):
            name = r.pods[j].name if j < len(r.pods) else f"pod {j}"
            fig.add_trace(go.Scatter(x=t, y=per_pod[:, j], mode="lines", showlegend=False, line={"width": 1},
                                     line_color=colours[r.label], legendgroup=r.label, name=f"{r.label} {name}",
                                     hovertemplate="%{x} s: %{y:.0f} ops/s<extra>%{fullData.name}</extra>"),
                          row=1, col=1)
    for r in result.runs:
        t = np.asarray(r.timeseries["time_s"], dtype=float)  # each sample interval's end
        dt = np.diff(t, prepend=0.0)
        moves = np.asarray(r.timeseries["cross_node_migrations"], dtype=float)
        style = {"mode": "lines", "line_color": colours[r.label], "legendgroup": r.label, "name": r.label}
        fig.add_trace(go.Scatter(x=t, y=r.timeseries["locality"], **style), row=2, col=1)
        fig.add_trace(go.Scatter(x=t, y=np.divide(moves, dt, out=np.zeros_like(moves), where=dt > 0),
                                 showlegend=False, **style), row=3, col=1)
    warmup = result.runs[0].window_s[0] if result.runs else 0.0
    if warmup > 0:
        fig.add_vrect(x0=0, x1=warmup, fillcolor="grey", opacity=0.12, line_width=0, row="all", col=1)
    fig.update_yaxes(range=[0, 1.05], row=2, col=1)
    fig.update_xaxes(title_text="time (s)", row=3, col=1)
    return fig.update_layout(**_LAYOUT, height=800, hovermode="x unified")


def _percentile(key: str) -> tuple[float, str]:
    digits = _PCT.match(key).group(1)  # type: ignore[union-attr]
    value = digits if len(digits) <= 2 else f"{digits[:2]}.{digits[2:]}"  # p999_ms -> 99.9
    return float(value), f"p{value}"


def _latency(result: RunResult, colours: dict[str, str]) -> go.Figure:
    lat = [(r.label, d) for r in result.runs if (d := getattr(r, "latency", None))]
    sla = {label: v for label, v in (getattr(result, "sla", None) or {}).items() if v}
    keys = sorted({k for _, d in lat for k in d if _PCT.match(k)}, key=lambda k: _percentile(k)[0])
    # A missing value (None) is a gap in the figure: a target not met, a rung without requests.
    curves = {label: sorted(c, key=lambda p: p.get("rate") or 0) for label, v in sla.items() if (c := v.get("curve"))}
    rates = {label: v.get("max_rate") or {} for label, v in sla.items()}
    rate_keys = list(dict.fromkeys(k for r in rates.values() for k in r))
    pct = next((str(v["percentile"]) for v in sla.values() if v.get("percentile")), "latency")
    panels = [(kind, title) for kind, title, on in (
        ("percentiles", "latency percentiles as run (ms)", keys),
        ("curve", f"{pct} vs offered request rate", curves),
        ("rates", "highest request rate meeting each target", rate_keys)) if on]
    if not panels:
        return _empty(NO_REQUESTS, "request latency and SLA targets")
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[title for _, title in panels])
    targets = sorted({float(x) for v in sla.values() for x in v.get("targets_ms") or []})
    shown: set[str] = set()
    for col, (kind, _) in enumerate(panels, start=1):
        traces: list[tuple[str, go.Bar | go.Scatter]]
        if kind == "percentiles":
            traces = [(label, go.Bar(x=[_percentile(k)[1] for k in keys], y=[d.get(k) for k in keys],
                                     hovertemplate="%{x}: %{y:.3g} ms" + _BY_NAME)) for label, d in lat]
        elif kind == "curve":
            traces = [(label, go.Scatter(x=[p.get("rate") for p in c], y=[p.get("latency_ms") for p in c],
                                         mode="lines+markers",
                                         line_color=colours.get(label),
                                         hovertemplate="%{x:,.0f} requests/s: %{y:.3g} ms" + _BY_NAME))
                      for label, c in curves.items()]
            fig.update_xaxes(title_text="offered requests/s", row=1, col=col)
        else:
            traces = [(label, go.Bar(x=[f"{pct} ≤ {k} ms" for k in rate_keys], y=[r.get(k) for k in rate_keys],
                                     hovertemplate="%{x}: %{y:,.0f} requests/s" + _BY_NAME))
                      for label, r in rates.items()]
        for label, trace in traces:
            trace.update(name=label, legendgroup=label, marker_color=colours.get(label), showlegend=label not in shown)
            fig.add_trace(trace, row=1, col=col)
            shown.add(label)
        fig.update_yaxes(title_text="requests/s" if kind == "rates" else "ms", rangemode="tozero", row=1, col=col)
        for target in targets if kind != "rates" else []:
            fig.add_hline(y=target, line_dash="dash", line_color="firebrick", row=1, col=col,
                          annotation_text=f"SLA {target:g} ms", annotation_position="top left",
                          annotation_font_color="firebrick")
    return fig.update_layout(**_LAYOUT, barmode="group", height=420)


def _as_plotly_text(result: RunResult) -> RunResult:
    """The result with its variant labels as plotly text: plotly draws a subset of HTML in names and
    axis labels (links, styles), so ``&``, ``<`` and ``>`` become entities and a label reads as written.
    (Pod names are letters, digits, ``_``, ``.`` and ``-`` only.)"""
    def esc(text: str) -> str:
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    if all(esc(r.label) == r.label for r in result.runs):
        return result
    return dataclasses.replace(result, baseline=esc(result.baseline),
                               runs=[dataclasses.replace(r, label=esc(r.label)) for r in result.runs],
                               traces={esc(k): v for k, v in result.traces.items()},
                               sla={esc(k): v for k, v in result.sla.items()})


def figures(result: RunResult) -> dict[str, go.Figure]:
    """The report's figures, in page order.

    Parameters
    ----------
    result
        A run's results; the ``timeline`` uses ``result.traces`` (each variant's
        first seed). Request latencies are read from ``run.latency`` and SLA data
        from ``result.sla`` when they exist.

    Returns
    -------
    dict of str to plotly.graph_objects.Figure
        ``summary``, ``pods``, ``timeline``, ``memory``, ``memory_system``, ``limits``, ``over_time`` and
        ``latency`` (a figure annotated with :data:`NO_REQUESTS` when there are
        neither latencies nor SLA data).
    """
    result = _as_plotly_text(result)
    labels = [r.label for r in result.runs]
    colours = dict(zip(labels, _cycle(qualitative.Plotly, len(labels))))
    return {"summary": _summary(result, colours), "pods": _pods(result, colours), "timeline": _timeline(result),
            "memory": _memory(result), "memory_system": _memory_system(result, colours),
            "limits": _limits(result, colours), "over_time": _over_time(result, colours), "latency": _latency(result, colours)}


_CAPTIONS = {
    "summary": ("Summary", "Throughput of each policy variant relative to the baseline ({baseline}), and locality: "
                "the share of DRAM misses served by the node the thread ran on, over the measurement window. "
                "Labels and error bars: the mean ± the 95 % confidence interval over seeds, when there are several."),
    "pods": ("Throughput per pod", "Operations per second of each pod over the measurement window, per variant, "
             "with the 95 % confidence interval over seeds when there are several; a rejected or failed pod has none "
             "(hover for status and locality)."),
    "timeline": ("Which pod ran where", "Per CPU (grouped by NUMA node; hover for the OS CPU id) and sample "
                 "interval, the pod with the most CPU time there (each variant's first seed); blank is idle. "
                 "Drag to zoom, double-click to reset. A thread's CPU time in an interval is split over the "
                 "CPUs it was placed on in proportion to the time it was placed there."),
    "memory": ("Memory per node", "Where each pod's memory is at the end of the run: GiB on each NUMA node, "
               "stacked, per variant and pod."),
    "memory_system": ("Memory system over time", "Throughput, DRAM traffic on each node (one line per node and "
                      "variant), the traffic on each interconnect link in each direction (one line per link and "
                      "variant; hover for its name), and the mean loaded latency of a "
                      "node's own memory (solid) and of the other nodes' (dotted), at the end of each sample "
                      "interval; the shaded band is the warm-up."),
    "limits": ("What limits each variant", "The use of each resource that can hold throughput back, as the mean "
               "over the measurement window: the CPUs' utilisation, the busiest memory node's and interconnect "
               "link's (and chiplet link's, on machines with them), the share of the time the busiest "
               "process-wide lock is held, and the lines in flight the busiest node's threads would keep over "
               "the node's limit (docs/model.md). Near 1 (dotted) a resource is saturated; lines above 1 mean the "
               "threads wait for lines. A resource no variant uses is left out."),
    "over_time": ("Over time", "Each pod's throughput (one line per pod and variant; hover for its name), locality "
                  "and cross-node thread migrations per second in each sample interval of the whole run; the shaded "
                  "band is the warm-up, outside the measurement window."),
    "latency": ("Request latency", "Response-time percentiles of each variant's request-driven pods as run; from "
                "the SLA search, when the scenario has one, the percentile against the offered request rate and the "
                "highest rate that meets each target (dashed: the SLA targets)."),
}


def _facts(result: RunResult) -> str:
    s = result.scenario
    machine = str(s.get("machine", "?"))
    trace = next((t for t in result.traces.values() if t is not None), None)
    if trace is not None:
        machine += f" ({trace.machine.n_nodes} NUMA nodes, {trace.machine.n_cpus} CPUs)"
    seeds = (result.runs[0].seeds if result.runs else []) or [s.get("seed")]
    w0, w1 = result.runs[0].window_s if result.runs else (0.0, 0.0)
    return (f"machine {machine}; measurement window {w0:g}-{w1:g} s of the run; "
            f"seed{'s' if len(seeds) > 1 else ''} {', '.join(str(x) for x in seeds)}; "
            f"baseline {result.baseline}; numasim {__version__}")


def write_html(result: RunResult, path: str | os.PathLike[str]) -> None:
    """Write the report as one self-contained HTML page: plotly.js inlined once, no network needed.

    Written atomically: to a temporary file in the same folder, then renamed over ``path``.

    Raises
    ------
    NumasimError
        If the folder does not exist or the file cannot be written.
    """
    write_text(path, render_html(result), str(path))


def render_html(result: RunResult) -> str:
    """The report as one self-contained HTML page (see :func:`write_html`), from ``templates/report.html.j2``."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("numasim", "templates"), autoescape=True,
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    sections = []
    for i, (key, fig) in enumerate(figures(result).items()):
        heading, caption = _CAPTIONS[key]
        figure = pio.to_html(fig, full_html=False, include_plotlyjs=i == 0, div_id=f"figure-{key}",
                             config={"displaylogo": False, "responsive": True})
        sections.append({"key": key, "heading": heading, "caption": caption.format(baseline=result.baseline),
                         "figure": figure})
    return env.get_template("report.html.j2").render(
        title=f"numasim report: {result.scenario.get('name', '?')}", facts=_facts(result),
        description=str(result.scenario.get("description") or "").strip(), reasons=why(result), sections=sections)
