"""Reading one input of ``numasim machine import`` and recognising it by its content.

A file (at most MAX_INPUT_BYTES), a directory or a tarball holding a copy of
``/sys/devices/system/{node,cpu}`` (read in memory, its size and member count capped);
the parsers are :mod:`numasim.importers.tool_outputs`'.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import re
import tarfile
import zlib
from pathlib import Path
from typing import BinaryIO

from .tool_outputs import (Facts, _parse_hwloc, _parse_lscpu, _parse_lscpu_e, _parse_lscpu_p, _parse_mlc,
                           _parse_numactl, _parse_sysfs, error)

__all__ = ["parse", "MAX_INPUT_BYTES", "MAX_TAR_MEMBERS", "MAX_TAR_BYTES", "MAX_TAR_STREAM_BYTES"]

MAX_INPUT_BYTES = 16 * 2**20  # an hwloc XML of a 1,000-CPU machine is about 2 MB
MAX_TAR_MEMBERS = 200_000
MAX_TAR_BYTES = 64 * 2**20  # of the sysfs files kept
# Of the whole tarball decompressed: a copy of /sys/devices/system of a 256-CPU machine, every file
# of it, is about 50 MiB of tar (1 KiB a file: header and one block).
MAX_TAR_STREAM_BYTES = 256 * 2**20
# Entries walked in a directory (below its first two levels only node/, cpu/ and their sysfs folders are
# entered): a full copy has about 200 a CPU, 1.6 million for 8,192 CPUs.
MAX_WALK_ENTRIES = 2_000_000
_COMPRESSED = ((b"\x1f\x8b", gzip.open), (b"BZh", bz2.open), (b"\xfd7zXZ", lzma.open))


def _read_text(path: Path) -> str:
    try:
        if not path.is_file():
            raise error(str(path), "not a regular file, a directory or a tarball")
        size = path.stat().st_size
        if size > MAX_INPUT_BYTES:
            raise error(str(path), f"larger than {MAX_INPUT_BYTES // 2**20} MiB")
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise error(str(path), f"cannot be read: {exc.strerror or exc}") from None


# The directories a copy of /sys (or of /sys/devices/system) holds the files above in.
_SYSFS_DIR = re.compile(r"sys|devices|system|node|cpu|node[0-9]+|cpu[0-9]+|topology|cpufreq")
_SYSFS = re.compile(r"(node/node[0-9]+/(cpulist|distance|meminfo)|cpu/cpu[0-9]+/(topology/(physical_package_id|core_id)"
                    r"|cpufreq/cpuinfo_max_freq))$")


def _sysfs_files_dir(root: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    total = seen = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        if os.path.relpath(dirpath, root).count(os.sep) >= 1:  # below the root's own folders: only where
            dirnames[:] = [d for d in dirnames if _SYSFS_DIR.fullmatch(d)]  # sysfs files can be
        seen += len(dirnames) + len(filenames)
        if seen > MAX_WALK_ENTRIES:  # bounds the walk of a hostile directory
            raise error(str(root), f"more than {MAX_WALK_ENTRIES:,} files and directories under node/ and cpu/: "
                                   "not a copy of /sys/devices/system")
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            if _SYSFS.search(rel.replace(os.sep, "/")):
                p = Path(dirpath, name)
                if p.is_symlink() or not p.is_file():
                    continue
                try:
                    with open(p, "rb") as fh:
                        text = fh.read(65536).decode("utf-8", errors="replace")
                except OSError as exc:
                    raise error(str(root), f"cannot be read: {exc.strerror or exc}", rel) from None
                total += len(text)
                if total > MAX_TAR_BYTES:
                    raise error(str(root), "too many or too large files for a copy of /sys/devices/system")
                files[rel.replace(os.sep, "/")] = text
    return files


class _Capped(io.RawIOBase):
    """A read-only stream that raises once more than ``cap`` bytes were read through it: the
    decompressed size of a tarball, which a small compressed file can make enormous."""

    def __init__(self, raw: BinaryIO, cap: int, source: str) -> None:
        self.raw, self.left, self.source = raw, cap, source

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[override]
        n = self.raw.readinto(buf)
        self.left -= n
        if self.left < 0:
            raise error(self.source, f"holds more than {MAX_TAR_STREAM_BYTES // 2**20} MiB of tar (decompressed): "
                                     "not a copy of /sys/devices/system")
        return n


def _sysfs_files_tar(path: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    total = 0
    with open(path, "rb") as head:
        magic = head.read(6)
    opener = next((op for sig, op in _COMPRESSED if magic.startswith(sig)), None)
    try:
        with (opener(path, "rb") if opener else open(path, "rb")) as raw, \
                tarfile.open(fileobj=io.BufferedReader(_Capped(raw, MAX_TAR_STREAM_BYTES, str(path))),
                             mode="r|") as tar:
            for k, member in enumerate(tar):  # a stream: skipping a member reads it, and is counted
                if k >= MAX_TAR_MEMBERS:
                    raise error(str(path), f"more than {MAX_TAR_MEMBERS:,} members")
                if not member.isfile() or not _SYSFS.search(member.name):
                    continue
                total += member.size
                if member.size > 65536 or total > MAX_TAR_BYTES:
                    raise error(str(path), "a member is too large for a sysfs file")
                fh = tar.extractfile(member)
                files[member.name] = fh.read().decode("utf-8", errors="replace") if fh else ""
    except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise error(str(path), f"not a readable tarball: {exc}") from None
    return files


def _looks_like_tar(path: Path) -> bool:
    """A compressed file (read as a tarball, capped), or a plain one with a POSIX or GNU tar header.
    (tarfile.is_tarfile would read a first member's long-name header whole, however large.)"""
    try:
        with open(path, "rb") as fh:
            head = fh.read(512)
    except OSError as exc:
        raise error(str(path), f"cannot be read: {exc.strerror or exc}") from None
    return any(head.startswith(sig) for sig, _ in _COMPRESSED) or head[257:262] == b"ustar"


def parse(path: str | os.PathLike[str]) -> Facts:
    """Read one input and say what it is by its content."""
    p = Path(path)
    if not p.exists():
        raise error(str(p), "no such file or directory")
    if p.is_dir():
        files = _sysfs_files_dir(p)
        if not files:
            raise error(str(p), "a directory, but no copy of /sys/devices/system/{node,cpu} in it")
        return _parse_sysfs(files, str(p))
    if p.is_file() and _looks_like_tar(p):
        files = _sysfs_files_tar(p)
        if not files:
            raise error(str(p), "a tarball, but no copy of /sys/devices/system/{node,cpu} in it")
        return _parse_sysfs(files, str(p))
    text = _read_text(p)
    source = str(p)
    head = text.lstrip()[:4000]
    if head.startswith("<?xml") or "<topology" in head:
        return _parse_hwloc(text, source)
    if "Intel(R) Memory Latency Checker" in text or "Measuring idle latencies" in text:
        return _parse_mlc(text, source)
    if re.search(r"^available: [0-9]+ nodes", text, re.M) or "node distances:" in text:
        return _parse_numactl(text, source)
    if re.search(r"^# CPU,", text, re.M):
        return _parse_lscpu_p(text, source)
    first = text.strip().splitlines()[0].split() if text.strip() else []
    if first and first[0] == "CPU" and ("NODE" in first or "SOCKET" in first):
        return _parse_lscpu_e(text, source)
    if re.search(r"^(Architecture|CPU\(s\)|Socket\(s\)):", text, re.M):
        return _parse_lscpu(text, source)
    raise error(source, "not recognised: expected the output of numactl -H, lscpu (plain, -p or -e), "
                         "lstopo --of xml, Intel MLC, or a copy of /sys/devices/system (directory or tarball)")
