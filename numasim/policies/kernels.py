"""One kernel version for CFS's era options: ``kernel: "5.4"`` sets every option that changed with it.

The CFS model's behaviour by kernel release is spread over several options, each read from the
commits that changed it (docs/model.md): the load balancer's era (``numa_imbalance_kernel``),
NUMA balancing's (``numa_balancing_kernel``), ``imbalance_pct`` at NUMA levels and
``busy_factor`` (125 and 32 until v5.10, 117 and 16 from it: Vincent Guittot's "sched/fair:
reduce minimal imbalance threshold" and "sched/fair: reduce busy load balance interval"),
the page-migration rate limit of NUMA balancing (128 MB per 100 ms into a node, v3.8-v4.18),
the busiest of equal fully busy groups (v6.5) and EEVDF (v6.6). :func:`settings` maps a mainline version to all of them; an option the
scenario sets itself wins. Distribution kernels backport: name the mainline release whose
scheduler they run, which their changelogs tell, not the number in ``uname -r``.
"""

from __future__ import annotations

import re

__all__ = ["settings", "version", "version_text"]

_VERSION = re.compile(r"^([2-9])\.([0-9]{1,2})(?:\.([0-9]{1,3}))?$")


def _parse(text: object) -> tuple[int, int, int | None]:
    if isinstance(text, float) and re.fullmatch(r"[2-9]\.[0-9][0-9]", repr(text)):
        text = repr(text)  # 4.18 or 5.15 read as numbers are unambiguous; 5.1 could be 5.10
    if not isinstance(text, str):
        raise ValueError(f"kernel must be a version written as a string, such as \"5.10\" or \"5.15.33\" (YAML reads "
                         f"5.10 as the number 5.1), got {str(text)[:40]!r}")
    m = _VERSION.match(text.strip())
    if m is None:
        raise ValueError(f"kernel must be a mainline version such as \"4.18\", \"5.10\" or \"5.15.33\", got {text[:40]!r}")
    return int(m.group(1)), int(m.group(2)), None if m.group(3) is None else int(m.group(3))


# (first release of the next era, this era's name), oldest first; the last era has no end.
_BALANCER = [((4, 17), "3.10"), ((5, 5), "5.4"), ((5, 11), "5.10"), ((5, 18), "5.11"), ((6, 0), "5.18"), (None, "6.1")]
_NUMA_BALANCING = [((3, 13), "3.8"), ((3, 15), "3.13"), ((4, 19), "4.4"), ((5, 7), "5.6"), (None, "6.1")]


def _era(v: tuple[int, int, int], table: list[tuple[tuple[int, int] | None, str]]) -> str:
    return next(name for end, name in table if end is None or v < end)


def version(value: object) -> tuple[int, int, int]:
    """The (major, minor, patch) ``value`` names (patch 0 when not given); ValueError if it names none."""
    major, minor, patch = _parse(value)
    return major, minor, patch or 0


def version_text(value: object) -> str:
    """The version ``value`` names, as text ("4.18"); ValueError, saying what is allowed, if it names none."""
    major, minor, patch = _parse(value)
    return f"{major}.{minor}" + ("" if patch is None else f".{patch}")


def settings(text: object) -> dict[str, object]:
    """The era options of CFS for mainline kernel ``text`` ("X.Y" or "X.Y.Z")."""
    major, minor, patch = _parse(text)
    v = (major, minor, patch or 0)
    # The load balancer: before the v5.5 rework, 3.x-4.10's fork path (4.11-4.16, two loads without the
    # NUMA clause, spread forks as it did) or 4.17-5.4's; v5.5 had the rework without the v5.6 allowance
    # (nearest: 5.10); 5.15.33 on took the 5.18 fork rule without imb_numa_nr.
    # NUMA balancing: 3.8-3.12 moved pages only (no task placement; its scan periods follow the era:
    # CFSOptions); before 3.8 there was none (nearest: 3.8).
    lb = _era(v, _BALANCER)
    if (major, minor) == (5, 15) and (patch is None or patch >= 33):
        lb = "5.15"  # "5.15" alone: the LTS as most of its users run it (5.15.33 on)
    numab = _era(v, _NUMA_BALANCING)
    old = v < (5, 10)
    return {
        "numa_imbalance_kernel": lb,
        "numa_balancing_kernel": numab,
        "imbalance_pct_numa": 125 if old else 117,
        "busy_factor": 32 if old else 16,
        "migrate_rate_limit_mbps": 1280.0 if v < (4, 19) else None,
        "eevdf": v >= (6, 6),
        "fully_busy_last": v >= (6, 5),
    }
