"""Parsing of sizes and durations, done once at the edge.

Inside numasim time is integer nanoseconds and memory is integer bytes.
"""

from __future__ import annotations

import math
import re

__all__ = ["parse_duration", "parse_size", "parse_cpu", "format_duration", "format_size", "format_exact_size", "NS_PER_S",
           "DURATION_PATTERN", "SIZE_PATTERN", "CPU_PATTERN"]

NS_PER_S = 1_000_000_000

_DURATION_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": NS_PER_S,
    "m": 60 * NS_PER_S,
    "min": 60 * NS_PER_S,
    "h": 3600 * NS_PER_S,
}

_SIZE_UNITS = {
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "ki": 2**10,
    "kib": 2**10,
    "m": 10**6,
    "mb": 10**6,
    "mi": 2**20,
    "mib": 2**20,
    "g": 10**9,
    "gb": 10**9,
    "gi": 2**30,
    "gib": 2**30,
    "t": 10**12,
    "tb": 10**12,
    "ti": 2**40,
    "tib": 2**40,
}

# A number is digits with an optional fraction, or a fraction alone: written so that no two ways of
# matching one string exist, so a long run of digits that fails to match fails in linear time
# ('[0-9]*\\.?[0-9]+' tried every split of the digits: quadratic). Quantities are also refused past
# MAX_CHARS before any pattern runs.
_NUMBER = r"(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_NUMBER_UNIT = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-zµ]+)\s*$")
MAX_CHARS = 64

# The same rules as JSON Schema (ECMA-262) patterns, for the scenario JSON schema (numasim schema):
# a number, then a unit of the table above (sizes in any case, as parse_size lowers them).
DURATION_PATTERN = rf"^\s*{_NUMBER}\s*(?:{'|'.join(sorted(_DURATION_UNITS, key=len, reverse=True))})\s*$"
SIZE_PATTERN = rf"^\s*{_NUMBER}\s*(?:[Bb]|[KkMmGgTt][Ii]?[Bb]?)\s*$"
CPU_PATTERN = rf"^\s*{_NUMBER}\s*m?\s*$"

DURATION_HELP = "a duration with a unit, e.g. '500ms', '2s', '1.5min' (units: ns, us, ms, s, min, h)"
SIZE_HELP = "a size with a unit, e.g. '42GB', '42GiB', '512Mi' (units: B, KB, KiB, MB, MiB, GB, GiB, TB, TiB; k8s Ki/Mi/Gi/Ti and K/M/G/T)"


def parse_duration(value: object) -> int:
    """Parse a duration such as ``"500ms"`` into integer nanoseconds.

    Raises
    ------
    ValueError
        With a message that says what is allowed.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected {DURATION_HELP}, got {value!r}")
    if isinstance(value, (int, float)):
        if value == 0:
            return 0
        raise ValueError(f"expected {DURATION_HELP}, got the bare number {value!r} (add a unit)")
    _check_sign(value, "duration", DURATION_HELP)
    m = _NUMBER_UNIT.match(value) if len(value) <= MAX_CHARS else None
    if not m or m.group(2) not in _DURATION_UNITS:
        raise ValueError(f"expected {DURATION_HELP}, got {_shown(value)}")
    ns = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    if not math.isfinite(ns):
        raise ValueError(f"expected {DURATION_HELP}, got {value!r}, which is too large")
    return int(round(ns))


def parse_size(value: object) -> int:
    """Parse a size such as ``"42GB"`` or ``"42Gi"`` into integer bytes."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected {SIZE_HELP}, got {value!r}")
    if isinstance(value, (int, float)):
        if value == 0:
            return 0
        raise ValueError(f"expected {SIZE_HELP}, got the bare number {value!r} (add a unit)")
    _check_sign(value, "size", SIZE_HELP)
    m = _NUMBER_UNIT.match(value) if len(value) <= MAX_CHARS else None
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"expected {SIZE_HELP}, got {_shown(value)}")
    nbytes = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    if not math.isfinite(nbytes):
        raise ValueError(f"expected {SIZE_HELP}, got {value!r}, which is too large")
    return int(round(nbytes))


CPU_HELP = "a number of CPUs, e.g. 2, 0.5 or '500m' (Kubernetes millicores)"
_CPU = re.compile(rf"^\s*({_NUMBER})\s*(m?)\s*$")


def parse_cpu(value: object) -> object:
    """Parse a CPU quantity as Kubernetes writes it (``2``, ``"1.5"``, ``"500m"``) into CPUs.

    Numbers pass through unchanged (the field's own bounds check them); a string with
    the ``m`` suffix is in thousandths of a CPU.
    """
    if isinstance(value, str):
        _check_sign(value, "CPU quantity", CPU_HELP)
        m = _CPU.match(value) if len(value) <= 40 else None
        if not m:
            raise ValueError(f"expected {CPU_HELP}, got {value[:40]!r}")
        return float(m.group(1)) / (1000.0 if m.group(2) else 1.0)
    return value


def _check_sign(value: str, what: str, help_text: str) -> None:
    """Reject ``'-4GB'`` with a message that says why, not just that it did not parse."""
    if value.strip().startswith("-"):
        raise ValueError(f"a {what} cannot be negative, got {_shown(value)}; expected {help_text}")


def _shown(value: str) -> str:
    """``value`` quoted for a message, cut after :data:`MAX_CHARS` characters."""
    if len(value) <= MAX_CHARS:
        return repr(value)
    return f"{value[:MAX_CHARS]!r}... ({len(value):,} characters; a quantity has at most {MAX_CHARS})"


def format_duration(ns: int) -> str:
    """Format nanoseconds for people (``'1.5s'``, ``'250ms'``)."""
    if ns % NS_PER_S == 0:
        return f"{ns // NS_PER_S}s"
    if ns >= NS_PER_S:
        return f"{ns / NS_PER_S:.12g}s"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.12g}ms"
    if ns >= 1_000:
        return f"{ns / 1e3:.12g}us"
    return f"{ns}ns"


def format_exact_size(nbytes: int) -> str:
    """Bytes exactly, as a file would write them: the largest binary unit that divides them ('8704MiB'), else bytes."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes and nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    return f"{nbytes}B"


def format_size(nbytes: int | float) -> str:
    """Format bytes in binary units (``'42.0GiB'``)."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= factor:
            return f"{nbytes / factor:.1f}{unit}"
    return f"{int(nbytes)}B"
