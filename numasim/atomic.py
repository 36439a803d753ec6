"""Write an output file whole or not at all: a temporary file in the same folder, then a rename."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from .errors import NumasimError


def write_text(target: str | os.PathLike[str], text: str, name: str) -> None:
    """Write ``text`` to ``target`` atomically; ``name`` starts every error message (e.g. ``--json out.json``).

    The temporary file is created with the umask's permissions (not ``mkstemp``'s private
    0600): results and reports are made to be shared. On any failure it is removed, and
    ``target`` is left as it was.
    """
    target = Path(target)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise NumasimError(f"{name}: folder {folder} does not exist")
    tmp = folder / f".{target.name}.{secrets.token_hex(6)}.tmp"
    try:
        fh = open(tmp, "x", encoding="utf-8", newline="")
    except OSError as exc:
        raise NumasimError(f"{name}: cannot write in folder {folder}: {exc.strerror or exc}") from None
    try:
        with fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise NumasimError(f"{name}: cannot write: {exc.strerror or exc}") from None
        raise
