"""RunResult: the results of a scenario run and their one documented schema.

``RunResult.to_json()`` is a stable contract (docs/results.md): a top-level
object with ``schema``, ``scenario``, ``baseline`` and ``runs``; each run has
``label``, ``policy``, ``throughput`` (ops/s), ``relative_throughput``,
``locality`` and ``pods`` (rows with ``name``, ``throughput``, ``locality``),
plus the other fields documented there. ``to_frame()`` gives the same numbers
as pandas DataFrames.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..sim.trace import Trace
from .metrics import Metrics

__all__ = ["RunResult", "SCHEMA"]

SCHEMA = "numasim.result/1"


@dataclass
class RunResult:
    """Results of one scenario run: one :class:`~numasim.analysis.metrics.Metrics` per policy variant."""

    scenario: dict[str, Any]
    baseline: str
    runs: list[Metrics]
    traces: dict[str, Trace] = field(default_factory=dict, repr=False)
    sla: dict[str, dict] = field(default_factory=dict)

    def run(self, label: str) -> Metrics:
        """The run with ``label``."""
        for r in self.runs:
            if r.label == label:
                return r
        raise KeyError(f"no run labelled {label!r}; labels: {', '.join(r.label for r in self.runs)}")

    def relative(self, label: str) -> float | None:
        """Throughput of ``label`` relative to the baseline run (``None`` without a baseline).

        With replications, the mean over seeds of the ratio to the baseline's run
        with the same seed (common random numbers).
        """
        ratios = self.relative_replicates(label)
        return float(np.mean(ratios)) if ratios else None

    def relative_replicates(self, label: str) -> list[float]:
        """Per-seed throughput of ``label`` relative to the baseline with the same seed."""
        base = next((r for r in self.runs if r.label == self.baseline), None)
        if base is None:
            return []
        run = self.run(label)
        if not run.replicates:
            return [run.throughput / base.throughput] if base.throughput > 0 else []
        b = {x["seed"]: x["throughput"] for x in base.replicates}
        return [x["throughput"] / b[x["seed"]] for x in run.replicates if b.get(x["seed"], 0) > 0]

    def spread(self, label: str) -> dict[str, float | None]:
        """Standard deviations over replications (``None`` with a single replication)."""
        run = self.run(label)
        if len(run.replicates) < 2:
            return {"throughput_sd": None, "relative_throughput_sd": None, "locality_sd": None}
        loc = [x["locality"] for x in run.replicates if x["locality"] is not None]
        rel = self.relative_replicates(label)
        return {
            "throughput_sd": float(np.std([x["throughput"] for x in run.replicates], ddof=1)),
            "relative_throughput_sd": float(np.std(rel, ddof=1)) if len(rel) > 1 else None,
            "locality_sd": float(np.std(loc, ddof=1)) if len(loc) > 1 else None,
        }

    def to_json(self) -> dict[str, Any]:
        """The results as JSON-ready data (schema ``numasim.result/1``)."""
        runs = []
        for r in self.runs:
            d = asdict(r)
            d["relative_throughput"] = self.relative(r.label)
            d["spread"] = self.spread(r.label)
            d["sla"] = self.sla.get(r.label)
            d["window_s"] = list(r.window_s)
            d["events"] = [{"time_s": t, "kind": k, "text": x} for t, k, x in r.events]
            runs.append(d)
        return {"schema": SCHEMA, "scenario": self.scenario, "baseline": self.baseline, "runs": runs}

    def to_frame(self):
        """One row per policy variant (pandas DataFrame)."""
        import pandas as pd

        rows = []
        for r in self.runs:
            rows.append({
                "label": r.label,
                "policy": r.policy,
                "throughput": r.throughput,
                "relative_throughput": self.relative(r.label),
                "locality": r.locality,
                **self.spread(r.label),
                "p99_ms": (r.latency or {}).get("p99_ms"),
                "critical_rate": (self.sla.get(r.label) or {}).get("critical"),
                "cpu_utilisation": r.cpu_utilisation,
                "runqueue_wait": r.runqueue_wait,
                "migrations": r.migrations,
                "cross_node_migrations": r.cross_node_migrations,
                "pages_migrated_bytes": r.pages_migrated_bytes,
                "hinting_faults": r.hinting_faults,
                "numa_task_moves": r.numa_task_moves,
                "kernel_cpu_seconds": r.kernel_cpu_seconds,
                "throttled_seconds": r.throttled_seconds,
                "rejected": sum(p.status == "rejected" for p in r.pods),
            })
        return pd.DataFrame(rows)

    def pods_frame(self):
        """One row per policy variant and pod (pandas DataFrame)."""
        import pandas as pd

        rows = []
        for r in self.runs:
            for p in r.pods:
                row = asdict(p)
                row.pop("memory_per_node_bytes")
                row.pop("placement")
                rows.append({"label": r.label, "policy": r.policy, **row})
        return pd.DataFrame(rows)

    def timeseries_frame(self):
        """Throughput and locality per sample interval, all variants (pandas DataFrame)."""
        import pandas as pd

        frames = []
        for r in self.runs:
            df = pd.DataFrame(r.timeseries)
            df.insert(0, "label", r.label)
            frames.append(df)
        return pd.concat(frames, ignore_index=True)
