"""A sweep's files: each finished point's rows in ``OUT.parts/KEY.parquet``, the rows of a
sweep's points read back to resume it, and the result ``OUT`` written whole or not at all (by
:func:`numasim.atomic.replace_with`, never through a file or link already there).

Part of :mod:`numasim.sweep`, which runs the points.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from .atomic import NAME_MAX, PATH_MAX, replace_with
from .errors import NumasimError

__all__ = ["check_parts", "one_kind_per_column", "read_done", "write_part", "write_result"]


def write_part(parts: Path, key: str, rows: list[dict[str, Any]]) -> None:
    """A point's rows as ``parts/KEY.parquet``: there whole, or not at all."""
    import pandas as pd

    # A temporary file of its own (a point retried elsewhere may overlap), then renamed.
    replace_with(parts / f"{key}.parquet", lambda fh: pd.DataFrame(rows).to_parquet(fh, index=False))


def write_result(frame: "Any", target: Path, name: str) -> None:
    """``frame`` as the Parquet file ``target``, whole or not at all: written to a new file of a
    random name beside it (never through a link or a file that is there already), then renamed."""
    try:
        replace_with(target, lambda fh: frame.to_parquet(fh, index=False))
    except OSError as exc:
        raise NumasimError(f"{name}: cannot write: {exc.strerror or exc} (the finished points stay in "
                           f"{target.name}.parts; run the sweep again to write it)") from None


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def one_kind_per_column(frame: "Any") -> "Any":
    """A swept column whose values are of more than one kind (``warmup: [0, 0.1s]``, ``cpu_limit: [1, 500m]``:
    numbers and text) as text throughout: Parquet holds one type a column."""
    for col in frame.columns:
        if frame[col].dtype != object:
            continue
        kinds = {"number" if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v).__name__
                 for v in frame[col] if not _missing(v)}
        if len(kinds) > 1:
            frame[col] = [None if _missing(v) else v if isinstance(v, str) else json.dumps(v) for v in frame[col]]
    return frame


def read_done(out: Path, parts: Path, keys: set[str]) -> dict[str, "Any"]:
    """Rows of finished points by key: from the parts of an interrupted sweep and a previous result.

    ``OUT`` and ``OUT.parts`` must hold points of this sweep only (``keys``): the result is
    written over them, so the points of another sweep there would be lost.
    """
    import pandas as pd

    done: dict[str, Any] = {}
    old_keys: list[str] = []
    if out.exists():
        try:
            old = pd.read_parquet(out)
        except Exception as exc:
            raise NumasimError(f"--out {out}: exists but is not a readable Parquet file of a sweep ({exc}); "
                               "move it away or choose another --out") from None
        if "point" not in old.columns and len(old.columns):  # (no columns: numasim <= 4e7e02d after every point failed)
            raise NumasimError(f"--out {out}: exists and is not a sweep's result (no 'point' column); "
                               "move it away or choose another --out")
        for key, rows in (old.groupby("point", sort=False) if len(old) else ()):
            done[str(key)] = rows
        old_keys = list(done)
    if parts.is_dir():
        for f in parts.glob("*.parquet"):
            try:
                done[f.stem] = pd.read_parquet(f)
            except Exception:
                f.unlink()  # a part cut short by a crash: the point runs again
    other = set(done) - keys
    if other:
        where = out if out.exists() and not (set(old_keys) <= keys) else parts
        count = f"{len(other):,} point{'s' if len(other) != 1 else ''}"
        raise NumasimError(
            f"--out {out}: {where} holds {count} of another sweep (another grid, sample, --set, --seed, --policy "
            "or numasim version), which this sweep would overwrite; move it away or choose another --out")
    return done


def check_parts(out: Path) -> Path:
    """``OUT.parts``, the folder of a sweep's finished points beside ``OUT``, if it (and a temporary file) can be made there."""
    parts = out.with_name(out.name + ".parts")  # (.OUT.<random>.tmp takes at most 200 bytes of OUT's name)
    if len(os.fsencode(parts.name)) > NAME_MAX or len(os.fsencode(os.path.abspath(parts))) + 64 > PATH_MAX:
        raise NumasimError(f"--out {str(out)[:60]}...: the path is too long for a sweep, which also writes "
                           f"NAME.parts/ (with its points' files) and a temporary .NAME.*.tmp beside it "
                           f"({NAME_MAX - 6} bytes per name, {PATH_MAX - 70} in all)")
    if parts.is_symlink():
        raise NumasimError(f"--out {out}: {parts} is a symbolic link (a sweep keeps its finished points in a "
                           "directory of its own there and removes it at the end); move it away or choose another --out")
    if (parts.exists() or parts.is_symlink()) and not parts.is_dir():
        raise NumasimError(f"--out {out}: {parts} exists and is not a directory (a sweep keeps its finished points "
                           "there); move it away or choose another --out")
    return parts
