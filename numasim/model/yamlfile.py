"""Reading YAML from untrusted files in bounded time and memory.

What a scenario file may not do, and why it is refused rather than read:

- be larger than ``MAX_BYTES`` (4 MiB; the largest shipped scenario is under 4 KiB), or
  be a device (``/dev/zero`` never ends): only so many bytes are ever read;
- nest deeper than ``MAX_DEPTH`` levels (deep nesting exhausts Python's recursion);
- hold more than ``MAX_NODES`` values, counted as they are read (4 MiB of ``[0,0,...]``
  would take minutes and gigabytes to build), or use aliases that expand to more than
  that (``*a`` repeated inside anchors multiplies one value into millions: the "billion
  laughs");
- give one key twice in a mapping (YAML says keys are unique; PyYAML would keep the
  last one silently);
- use tags (``!!python/object`` and the like): only plain data is read (safe_load).
"""

from __future__ import annotations

import os
import select
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..errors import Problem, ScenarioError

__all__ = ["read_yaml", "read_yaml_text", "check_data", "MAX_BYTES", "MAX_DEPTH", "MAX_NODES"]

MAX_BYTES = 4 * 2**20
MAX_DEPTH = 64
MAX_NODES = 100_000


class _Refused(Exception):
    def __init__(self, node: Node | None, message: str):
        self.node = node
        super().__init__(message)


class _StrictLoader(yaml.SafeLoader):
    """safe_load, refusing duplicate keys and documents of more than MAX_NODES written values.

    The count is kept while the document is composed, so a file of millions of small
    values stops at the first value past the limit instead of being built whole first.
    """

    _written = 0

    def _count(self) -> None:
        self._written += 1
        if self._written > MAX_NODES:
            raise _Refused(None, f"more than {MAX_NODES:,} values: a scenario or machine file holds at most that many")

    def compose_scalar_node(self, anchor):
        self._count()
        return super().compose_scalar_node(anchor)

    def compose_sequence_node(self, anchor):
        self._count()
        return super().compose_sequence_node(anchor)

    def compose_mapping_node(self, anchor):
        self._count()
        return super().compose_mapping_node(anchor)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # '<<: *anchor' merges; explicit keys may override merged ones
            key = self.construct_object(key_node, deep=True)
            try:
                dup = key in seen
            except TypeError:  # an unhashable key: the base class reports it
                break
            if dup:
                raise _Refused(key_node, f"duplicate key {str(key)[:80]!r} (each key may appear once in a mapping)")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def check_data(data: Any, source: str) -> None:
    """Refuse data given from Python (not read from a file) nested deeper than MAX_DEPTH or holding more
    than MAX_NODES values, as a file is: before anything copies it or walks it recursively."""
    stack, seen = [(data, 0)], 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if depth > MAX_DEPTH or seen > MAX_NODES:
            what = f"nested more than {MAX_DEPTH} levels deep" if depth > MAX_DEPTH else f"more than {MAX_NODES:,} values"
            raise ScenarioError(Problem("", f"the data is {what}"), source=source)
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend((v, depth + 1) for v in value)


def _check_size(root: Node) -> None:
    """Refuse a document nested deeper than MAX_DEPTH or expanding to more than MAX_NODES values.

    Each node is measured once (its expanded size and height), so an alias costs a lookup,
    and a document of millions of values by aliases is refused in time linear in its text.
    """
    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (values it expands to, levels below it)
    open_nodes: set[int] = set()  # the nodes being measured: the path from the root

    def measure(node: Node, depth: int) -> tuple[int, int]:
        if depth > MAX_DEPTH:
            raise _Refused(node, f"nested more than {MAX_DEPTH} levels deep")
        if id(node) in open_nodes:
            raise _Refused(node, "an alias refers to a node that contains it (an endless value)")
        known = measured.get(id(node))
        if known is not None:
            if depth + known[1] > MAX_DEPTH:
                raise _Refused(node, f"nested more than {MAX_DEPTH} levels deep")
            return known
        open_nodes.add(id(node))
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        total, height = 1, 0
        for child in children:
            n, h = measure(child, depth + 1)
            total += n
            height = max(height, h + 1)
            if total > MAX_NODES:
                raise _Refused(node, f"expands to more than {MAX_NODES:,} values (aliases repeated inside anchors?)")
        open_nodes.discard(id(node))
        measured[id(node)] = (total, height)
        return total, height

    if not isinstance(root, ScalarNode):
        measure(root, 0)


def read_yaml_text(text: str, source: str) -> Any:
    """Parse one YAML document from ``text``, within the limits above."""
    if len(text) > MAX_BYTES:
        raise ScenarioError(Problem("", f"larger than {MAX_BYTES // 2**20} MiB"), source=source)
    try:  # the reader refuses control characters as it is made: a YAMLError like the parser's
        loader = _StrictLoader(text)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise ScenarioError(Problem("", f"malformed YAML at line {line}: character #x{exc.character:04x} is not "
                                        f"allowed ({exc.reason}); YAML takes printable Unicode, tabs and newlines"),
                            source=source) from None
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check_size(root)
        return loader.construct_document(root)
    except _Refused as exc:
        mark = exc.node.start_mark if exc.node is not None else loader.get_mark()
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ScenarioError(Problem("", f"{where}{exc}"), source=source) from None
    except RecursionError:
        raise ScenarioError(Problem("", f"nested more than {MAX_DEPTH} levels deep"), source=source) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(Problem("", f"malformed YAML at {where}{problem}"), source=source) from None
    finally:
        loader.dispose()


def read_text(path: str | Path, kind: str, max_bytes: int = MAX_BYTES, encoding: str = "utf-8") -> str:
    """The text of the file ``path``: a regular file or a pipe, at most ``max_bytes``, UTF-8.

    ``kind`` names what was expected ("a YAML file"); every problem is a ScenarioError
    whose source is ``path``.
    """
    source = str(path)
    try:
        st = os.stat(path)
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            raise ScenarioError(Problem("", f"is a directory, expected {kind}"), source=source)
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise ScenarioError(Problem("", f"is a device or socket, expected {kind}"), source=source)
        if stat.S_ISFIFO(mode):
            raw = _read_pipe(path, max_bytes + 1)
        elif st.st_size > max_bytes:  # refused without reading it
            raise ScenarioError(Problem("", f"larger than {max_bytes // 2**20} MiB"), source=source)
        else:
            with open(path, "rb") as f:
                raw = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise ScenarioError(Problem("", "file not found"), source=source) from None
    except OSError as exc:
        raise ScenarioError(Problem("", f"cannot read: {exc.strerror or exc}"), source=source) from None
    if len(raw) > max_bytes:
        raise ScenarioError(Problem("", f"larger than {max_bytes // 2**20} MiB"), source=source)
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError:
        raise ScenarioError(Problem("", "not a UTF-8 text file"), source=source) from None


def _read_pipe(path: str | Path, limit: int) -> bytes:
    """Up to ``limit`` bytes of the pipe ``path``, to its end. Opened without waiting for a writer: a named
    pipe nobody writes to reads as empty at once (a blocking open would wait for ever), while a pipe whose
    writer is there (``<(cmd)``) is read as the writer goes, until it closes."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks: list[bytes] = []
    size = 0
    try:
        while size < limit:
            try:  # with no writer, the end at once; with one that has not written yet, wait for it
                chunk = os.read(fd, min(1 << 20, limit - size))
            except BlockingIOError:
                select.select([fd], [], [])
                continue
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_yaml(path: Path) -> Any:
    """Read and parse the YAML file ``path``: at most MAX_BYTES of a regular file or a pipe."""
    return read_yaml_text(read_text(path, "a YAML file"), str(path))
