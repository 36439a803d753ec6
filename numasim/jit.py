"""numasim's compiled functions: how they are compiled, and their on-disk cache kept true to the source.

:func:`kernel` compiles a function of the event path: numba's ``njit(cache=True)`` without
its reference counting of arrays (``_nrt=False``). numba counts references to every array a
compiled function receives, at its entry and at each exit, with atomic instructions and a
call each; the event path's functions take 20 to 30 arrays and call one another several
times an event, and this counting was 40 % of the compiled code's time (perf, pacific's
``taskset-naive``). The arrays belong to the Python side, which outlives every call, so
the counts are never needed; the price is that a kernel can't allocate an array (numba
refuses to compile one that does: scratch comes from :class:`numasim.sim.layout.Scratch`).
numba's maintainers use the same option for the same reason
(https://github.com/numba/numba/issues/2345, https://github.com/numba/numba/issues/2350);
it is underscored, so a numba without it gets plain ``njit(cache=True)``: the same
results, slower.


numba's ``cache=True`` checks only the file that defines a function: code it calls from
another file, and constants it imports, are frozen into the cached machine code. Each
module with compiled functions therefore calls :func:`fresh` when it is imported,
naming the files it is built from; if any of them changed since its cache was written,
that module's cached code is dropped and compiled again on first use. (An installed
release never changes its files; this matters in a working copy.)
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from numba import njit

__all__ = ["fresh", "kernel"]


def _has_nrt_option() -> bool:
    """Whether this numba takes ``_nrt`` (a private option: checked, not assumed)."""
    try:
        from numba.core.options import DefaultOptions
    except ImportError:
        return False
    return hasattr(DefaultOptions, "_nrt")


kernel = njit(cache=True, _nrt=False) if _has_nrt_option() else njit(cache=True)


def fresh(module_file: str, *deps: str) -> None:
    """Drop the cached compiled code of ``module_file`` unless it and ``deps`` (file names in
    the same package, or paths) are what it was compiled from."""
    here = Path(module_file)
    digest = hashlib.sha256()
    for path in (here, *(here.parent / d for d in deps)):
        digest.update(path.read_bytes())
    cache = here.parent / "__pycache__"
    stamp = cache / f"{here.stem}.jitstamp"
    try:
        if stamp.exists() and stamp.read_text() == digest.hexdigest():
            return
        for old in cache.glob(f"{here.stem}.*.nb[ic]"):
            old.unlink()
        cache.mkdir(exist_ok=True)
        stamp.write_text(digest.hexdigest())
    except OSError:
        pass  # a read-only installation: numba keeps its cache elsewhere, and its files do not change
