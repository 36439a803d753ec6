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

from .engine import Trace
from .metrics import Metrics

__all__ = ["RunResult", "SCHEMA"]

SCHEMA = "numasim.result/1"


@dataclass
class RunResult:
    """Results of one scenario run: one :class:`~numasim.metrics.Metrics` per policy variant."""

    scenario: dict[str, Any]
    baseline: str
    runs: list[Metrics]
    traces: dict[str, Trace] = field(default_factory=dict, repr=False)

    def run(self, label: str) -> Metrics:
        """The run with ``label``."""
        for r in self.runs:
            if r.label == label:
                return r
        raise KeyError(f"no run labelled {label!r}; labels: {', '.join(r.label for r in self.runs)}")

    def relative(self, label: str) -> float | None:
        """Throughput of ``label`` relative to the baseline run (``None`` without a baseline)."""
        base = next((r for r in self.runs if r.label == self.baseline), None)
        if base is None or base.throughput <= 0:
            return None
        return self.run(label).throughput / base.throughput

    def to_json(self) -> dict[str, Any]:
        """The results as JSON-ready data (schema ``numasim.result/1``)."""
        runs = []
        for r in self.runs:
            d = asdict(r)
            d["relative_throughput"] = self.relative(r.label)
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
                "cpu_utilisation": r.cpu_utilisation,
                "runqueue_wait": r.runqueue_wait,
                "migrations": r.migrations,
                "cross_node_migrations": r.cross_node_migrations,
                "pages_migrated_bytes": r.pages_migrated_bytes,
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
