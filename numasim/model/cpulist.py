"""Linux cpulists ("0-7,16,18-30:2"): the OS CPU ids that taskset and the kubelet name."""

from __future__ import annotations

import re

__all__ = ["parse_cpulist", "distinct_cpulists"]

_CPULIST_ITEM = re.compile(r"^([0-9]{1,9})(?:-([0-9]{1,9})(?::([0-9]{1,9}))?)?$")  # ASCII digits only, as the kernel


def parse_cpulist(text: str | int | list[int], n_cpus: int) -> frozenset[int]:
    """Parse a Linux cpulist (``"0-7,16,18-30:2"``) into OS CPU ids.

    Raises
    ------
    ValueError
        If the list is malformed or names a CPU the machine does not have.
    """
    if isinstance(text, bool):
        raise ValueError(f"expected a cpulist such as '0-7,16', got {text!r}")
    if isinstance(text, int):
        items: list[str] = [str(text)]
    elif isinstance(text, list):
        items = [str(x) for x in text]
    else:
        items = [s.strip() for s in str(text).split(",") if s.strip()]
    cpus: set[int] = set()
    named = 0  # ids the items name, repeats counted: bounded before any range is built
    for item in items:
        m = _CPULIST_ITEM.match(item)
        if not m:
            raise ValueError(
                f"malformed cpulist item {item[:40]!r}: use ids and ranges like '0-7,16,18-30:2'"
            )
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        step = int(m.group(3)) if m.group(3) else 1
        if hi < lo or step < 1:
            raise ValueError(f"malformed cpulist range {item[:40]!r}")
        # The first id past the machine, found before the range is built ('0-999999999').
        first_out = lo if lo >= n_cpus else lo + -(-(n_cpus - lo) // step) * step
        if first_out <= hi:
            raise ValueError(f"CPU {first_out} is outside the machine: OS CPU ids are 0-{n_cpus - 1}")
        named += len(range(lo, hi + 1, step))
        if named > 2 * n_cpus:
            raise ValueError(f"the cpulist names more than {2 * n_cpus:,} CPU ids (ranges that repeat?): the machine "
                             f"has {n_cpus:,} CPUs")
        cpus.update(range(lo, hi + 1, step))
    if not cpus:
        raise ValueError("empty cpulist")
    return frozenset(cpus)


def distinct_cpulists(cpulists: list, n_cpus: int) -> dict[str, frozenset[int]]:
    """Each distinct cpulist of ``cpulists`` (by how it is written) and its CPU ids: a list written twice
    is parsed once and is one set."""
    sets: dict[str, frozenset[int]] = {}
    for c in cpulists:
        if repr(c) not in sets:
            sets[repr(c)] = parse_cpulist(c, n_cpus)
    return sets
