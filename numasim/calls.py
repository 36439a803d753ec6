"""Checks of the Python API's arguments, so that ``run()``, ``sweep()`` and ``calibrate()`` refuse
what the command line would, with the flag's name and one wording, instead of failing deep inside.
Each returns the argument in the plain form the rest uses: numpy scalars as Python numbers, tuples
and arrays as lists, one string as a list of one.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import Problem, ScenarioError
from .model.yamlfile import MAX_DEPTH  # nesting of one value, as a file's (a machine's matrix is 3 deep)

__all__ = ["plain", "text_list", "grid_map", "span_map", "whole", "check_seed", "as_duration_ns", "path_or_none",
           "callback", "flag"]


def _array(value: Any) -> bool:
    """A numpy array of one dimension or more (not a numpy scalar, whose shape is ())."""
    return hasattr(value, "tolist") and bool(getattr(value, "shape", ()))


def _bad(flag: str, what: str, got: Any) -> ScenarioError:
    return ScenarioError(Problem(flag, f"expected {what}, got {repr(got)[:80]}"))


def plain(value: Any, flag: str, depth: int = 0) -> Any:
    """``value`` as scenario data: None, bool, int, float, str, lists and str-keyed mappings of them."""
    if depth > MAX_DEPTH:
        raise _bad(flag, f"a value nested at most {MAX_DEPTH} deep", "a deeper one")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # a numpy scalar of another kind
        return plain(value.item(), flag, depth + 1)
    if isinstance(value, (list, tuple)) or _array(value):
        return [plain(v, flag, depth + 1) for v in (value.tolist() if _array(value) else value)]
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise _bad(flag, "a mapping with text keys", value)
        return {k: plain(v, flag, depth + 1) for k, v in value.items()}
    raise _bad(flag, "a number, text, true/false, null, a list or a mapping", value)


def text_list(value: Any, flag: str, what: str) -> list[str]:
    """One string (taken whole, not letter by letter) or a list or tuple of strings."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise _bad(flag, f"{what}: a string or a list of strings", value)


def grid_map(value: Any, flag: str = "--grid") -> dict[str, list[Any]] | None:
    """``{path: values}``: text paths, each with a list (or tuple, or array) of plain values."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _bad(flag, "a mapping {path: [values]}", value)
    out: dict[str, list[Any]] = {}
    for path, values in value.items():
        if not isinstance(path, str):
            raise _bad(flag, "text paths (pods.0.replicas)", path)
        if not (isinstance(values, (list, tuple)) or _array(values)):
            raise _bad(f"{flag} {path}", "a list of values", values)
        out[path] = plain(values, f"{flag} {path}")
    return out


def span_map(value: Any, flag: str) -> dict[str, tuple[float, float]] | None:
    """``{path: (lo, hi)}`` with real-number bounds."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _bad(flag, "a mapping {path: (lo, hi)}", value)
    out: dict[str, tuple[float, float]] = {}
    for path, span in value.items():
        if not isinstance(path, str):
            raise _bad(flag, "text paths (workloads.w.mlp)", path)
        if _array(span):
            span = span.tolist()
        if (not isinstance(span, (list, tuple)) or len(span) != 2
                or not all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in span)):
            raise _bad(f"{flag} {path}", "a pair of numbers (lo, hi)", span)
        out[path] = (float(span[0]), float(span[1]))
    return out


def whole(value: Any, flag: str, lo: int, hi: int, meaning: str = "") -> int:
    """A whole number from ``lo`` to ``hi`` (numpy integers too); ``meaning`` says what a value means."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not lo <= value <= hi:
        raise _bad(flag, f"a whole number from {lo:,} to {hi:,}{meaning}", value)
    return int(value)


MAX_SEED = 2**63 - 1


def check_seed(value: Any, flag: str = "--seed") -> int | None:
    """A seed: a whole number from 0 to 2**63-1, or None (the scenario's own)."""
    return None if value is None else whole(value, flag, 0, MAX_SEED, " (2**63-1)")


def as_duration_ns(value: Any, flag: str) -> int:
    """A duration given as text with a unit (``"30s"``) or as whole nanoseconds (numpy integers too)."""
    from .units import parse_duration

    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ScenarioError(Problem(flag, str(exc))) from None


def path_or_none(value: Any, flag: str) -> str | None:
    """A file name (text or a path object), or None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise _bad(flag, "a file name", value)


def callback(value: Any, name: str) -> Any:
    """A function to call (or None), refused before any work rather than at its first call."""
    if value is not None and not callable(value):
        raise _bad(name, "a function (or None)", value)
    return value


def flag(value: Any, name: str) -> bool:
    """True or False (numpy's too): ``"no"`` is not taken as true."""
    if not isinstance(value, (bool, np.bool_)):
        raise _bad(name, "True or False", value)
    return bool(value)
