"""Output files: checked before any work starts, then written whole, all together, or not at all.

Each file goes to a temporary file in its own folder first; only when every one of them
is written are they renamed over their targets, so a failure while writing leaves every
target as it was and no temporary file behind.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from .errors import NumasimError

__all__ = ["check_target", "write_all", "write_text"]

NAME_MAX = 255  # bytes in one path component (Linux, macOS)
PATH_MAX = 4096
# numasim's own files (its presets, validation cases and templates) are inputs of every command.
PACKAGE = os.path.join(os.path.dirname(os.path.realpath(__file__)), "")


def _refuse_package(path: str | os.PathLike[str], name: str) -> None:
    if os.path.normcase(os.path.realpath(path)).startswith(os.path.normcase(PACKAGE)):
        raise NumasimError(f"{name}: is inside numasim's installation ({PACKAGE.rstrip(os.sep)}), whose presets and "
                           "validation cases every command reads; write it elsewhere")


def check_target(target: str, name: str, inputs: tuple[str | os.PathLike[str], ...] = (),
                 folders: bool = False) -> Path:
    """Refuse an output path that cannot or should not be written; ``name`` starts the message.

    Refused: an empty path; a path or file name too long for the system; a folder that does
    not exist or cannot be written; an existing directory, device, FIFO or socket; a symbolic
    link (numasim replaces files, and would replace the link, not write where it points);
    a path inside numasim's installation (its presets and validation cases are every command's inputs);
    any of ``inputs`` (the files the command reads: the scenario, a machine file, policy files); with
    ``folders`` (a command that reads whole folders: ``machine import`` of a sysfs copy), any path inside
    an input that is a folder.
    """
    if not str(target).strip():
        raise NumasimError(f"{name}: the file name is empty")
    path = Path(target)
    if len(os.fsencode(str(path))) > PATH_MAX or len(os.fsencode(path.name)) > NAME_MAX:
        raise NumasimError(f"{name[:60]}...: the path is too long ({NAME_MAX} bytes per name, {PATH_MAX} in all)")
    folder = path.parent if str(path.parent) else Path(".")
    _refuse_package(path, name)
    if folders:
        real = os.path.realpath(path)
        for other in inputs:
            if os.path.isdir(other) and real.startswith(os.path.join(os.path.realpath(other), "")):
                raise NumasimError(f"{name}: is inside {other}, an input folder of this command; write it elsewhere")
    if not folder.is_dir():
        raise NumasimError(f"{name}: {folder} is not a folder" if folder.exists() or folder.is_symlink()
                           else f"{name}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise NumasimError(f"{name}: folder {folder} is not writable")
    try:
        st = path.lstat()
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise NumasimError(f"{name}: cannot check: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise NumasimError(f"{name}: is a symbolic link; give the file it points to ({os.path.realpath(path)})")
    if stat.S_ISDIR(st.st_mode):
        raise NumasimError(f"{name}: is a directory, expected a file name")
    if not stat.S_ISREG(st.st_mode):
        raise NumasimError(f"{name}: is a device, FIFO or socket, not a regular file")
    for other in inputs:
        try:
            if os.path.samefile(path, other):
                raise NumasimError(f"{name}: is an input of this command ({other}); it would be overwritten")
        except OSError:
            continue
    return path


def temporary_name(target: str | os.PathLike[str]) -> Path:
    """A new name beside ``target`` for the file that will replace it: hidden, random (nobody can
    plant a link there beforehand), at most 200 bytes of the target's name."""
    target = Path(target)
    stem = os.fsencode(target.name)[:200].decode("utf-8", errors="ignore")  # bytes, not characters
    return target.with_name(f".{stem}.{secrets.token_hex(6)}.tmp")


def replace_with(target: str | os.PathLike[str], write: Callable[[BinaryIO], None]) -> None:
    """Write ``target`` whole or not at all: ``write`` fills a new file of a :func:`temporary_name`
    (opened exclusively: never through a link or a file already there), which then replaces it."""
    tmp = temporary_name(target)
    try:
        with open(tmp, "xb") as fh:
            write(fh)
        os.replace(tmp, target)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def write_all(files: list[tuple[str | os.PathLike[str], str, str]]) -> None:
    """Write each ``(target, text, name)`` whole, and none unless all can be written.

    Every file is written to its temporary file first; only then are they renamed over
    their targets, one after another. A failure while writing leaves every target as it
    was; the renames themselves are the only step that can fail between two files (a
    rename within one folder fails only on a concurrent change to that folder).
    Temporary files get the umask's permissions (not ``mkstemp``'s private 0600):
    results and reports are made to be shared.
    """
    for target, _text, name in files:  # (check_target said so before any work; a caller of the API may not have)
        _refuse_package(target, name)
    written: list[tuple[Path, Path, str]] = []
    try:
        for target, text, name in files:
            target = Path(target)
            folder = target.parent if str(target.parent) else Path(".")
            tmp = temporary_name(target)
            try:
                fh = open(tmp, "x", encoding="utf-8", newline="")
            except OSError as exc:
                raise NumasimError(f"{name}: cannot write in folder {folder}: {exc.strerror or exc}") from None
            written.append((tmp, target, name))
            try:
                with fh:
                    fh.write(text)
            except OSError as exc:
                raise NumasimError(f"{name}: cannot write: {exc.strerror or exc}") from None
        for tmp, target, name in written:
            try:
                os.replace(tmp, target)
            except OSError as exc:
                raise NumasimError(f"{name}: cannot write: {exc.strerror or exc}") from None
    finally:
        for tmp, _target, _name in written:
            if os.path.exists(tmp):
                os.unlink(tmp)


def write_text(target: str | os.PathLike[str], text: str, name: str) -> None:
    """Write one file atomically (see :func:`write_all`)."""
    write_all([(target, text, name)])
