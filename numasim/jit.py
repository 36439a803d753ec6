"""Keep numba's on-disk cache of numasim's compiled functions true to the source.

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

__all__ = ["fresh"]


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
