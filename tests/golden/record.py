"""Record every shipped scenario's headline figures, per seed, as tests/golden/results.json.

Run from the repository root: ``python tests/golden/record.py``. The golden test
(tests/test_golden.py) compares a fresh run against this file within each
figure's seed noise, so an engine change that moves a figure by accident fails.
Re-record only when a figure moves for a reason written in docs/validation.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numasim

FIGURES = ("throughput", "locality")


def record(path: Path) -> dict:
    scenario = numasim.load(path)
    result = numasim.run(scenario, workers=0, with_sla=False)
    out: dict = {}
    for run in result.runs:
        out[run.label] = {
            "seeds": run.seeds,
            **{f: [rep.get(f) for rep in run.replicates] for f in FIGURES},
            "relative": result.relative_replicates(run.label),
            "mean": {
                "cpu_utilisation": run.cpu_utilisation,
                "cross_node_migrations": run.cross_node_migrations,
                "p99_ms": (run.latency or {}).get("p99_ms"),
                "running_pods": sum(p.status == "running" for p in run.pods),
            },
        }
    return out


def main() -> None:
    root = Path(__file__).resolve().parents[2]
    names = sys.argv[1:] or sorted(p.stem for p in (root / "scenarios").glob("*.yaml"))
    target = root / "tests" / "golden" / "results.json"
    data = json.loads(target.read_text()) if target.exists() else {}
    for name in names:
        data[name] = record(root / "scenarios" / f"{name}.yaml")
        print(name, "recorded", flush=True)
    target.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
