"""The runtime's per-thread and per-CPU numbers, in three flat buffers shared by Python and numpy.

Each field is a row of a buffer of one type (float64, int64 or a flag byte). The
event path reads and writes one value at a time through a ``memoryview`` of its row,
which returns plain Python numbers at close to a list's cost (a numpy scalar costs
several times more: docs/performance-history.md); code that works on many threads at once,
the policies' View and compiled kernels see the same memory as numpy arrays
(:attr:`Store.f`, :attr:`Store.i`, :attr:`Store.b`), with no copy to keep in step.
"""

from __future__ import annotations

from array import array

import numpy as np
from numpy.typing import NDArray

__all__ = ["Store"]


class Store:
    """Rows of ``n`` values each, by name: ``floats`` (float64), ``ints`` (int64) and ``flags`` (bool)."""

    def __init__(self, n: int, floats: tuple[str, ...], ints: tuple[str, ...], flags: tuple[str, ...]):
        self.n = n
        self._buffers = {}
        self.views: dict[str, memoryview] = {}
        self.rows: dict[str, int] = {}
        for code, names in (("d", floats), ("q", ints), ("b", flags)):
            buf = array(code, bytes(array(code).itemsize * n * len(names)))
            self._buffers[code] = buf
            whole = memoryview(buf)
            for k, name in enumerate(names):
                self.views[name] = whole[k * n:(k + 1) * n]
                self.rows[name] = k
        self.f: NDArray[np.float64] = np.frombuffer(self._buffers["d"], dtype=np.float64).reshape(len(floats), n)
        self.i: NDArray[np.int64] = np.frombuffer(self._buffers["q"], dtype=np.int64).reshape(len(ints), n)
        self.b: NDArray[np.bool_] = np.frombuffer(self._buffers["b"], dtype=np.bool_).reshape(len(flags), n)

    def array(self, name: str) -> NDArray:
        """The field as a numpy array (the same memory: writes show both ways)."""
        view = self.views[name]
        k = self.rows[name]
        return {"d": self.f, "q": self.i, "b": self.b}[view.format][k]

    def fill(self, name: str, values) -> memoryview:
        """Set the field's values and return its memoryview."""
        self.array(name)[:] = values
        return self.views[name]
