"""Policy decisions carried out: each kind checked in one place, applied and charged.

A part of :class:`numasim.sim.kernel.Simulation`, which holds the state these
methods share (see docs/architecture.md).
"""

from __future__ import annotations


import json
import math
import numbers
import unicodedata
from typing import NoReturn

import numpy as np

from ..errors import PolicyError
from ..policies.api import (Admission, Charge, Decision, MemPolicy, MigratePages, Move, MoveChunks, Overhead, SetAffinity,
                           SetMemPolicy)
from . import layout

__all__ = ["Decisions", "MEMPOLICY_KINDS"]


MEMPOLICY_KINDS = ("local", "preferred", "bind", "interleave")
MAX_OVERHEAD = 100.0  # an overhead of 100 is 101 times longer
MIN_COPY_GBPS, MAX_COPY_GBPS = 1e-3, 1e4  # a page copy's rate: 1 MB/s to 10 TB/s, as the policies' options
MAX_REASON_CHARS = 1_000  # an Admission's reason, printed in the table
MAX_INFO_CHARS = 65_536  # an Admission's info, as JSON: what a placement note needs, bounded for the results


def _real(value: object) -> bool:
    """Whether ``value`` is a finite real number (not a bool)."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and math.isfinite(value)


def _copy_rate(value: object) -> bool:
    return _real(value) and MIN_COPY_GBPS <= value <= MAX_COPY_GBPS


def _int(value: object) -> int | None:
    """``value`` as an int if it is an integer (Python or numpy; not a bool), else None."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return None
    return int(value)


class Decisions:
    def _id(self, value: object, what: str, decision: object) -> int:
        """A thread or CPU id a policy returned, checked to be an integer."""
        if type(value) is int:
            return value
        out = _int(value)
        if out is None:
            raise PolicyError(self.policy.name, self.now, decision,
                              f"{what} must be an integer id, got {str(value)[:50]!r} ({type(value).__name__})")
        return out

    def _index(self, value: object, n: int, what: str, decision: object) -> int:
        """An id checked to be an integer in ``range(n)`` (a negative one would index from the end)."""
        out = self._id(value, what, decision)
        if not 0 <= out < n:
            raise PolicyError(self.policy.name, self.now, decision, f"{what} {out} does not exist (0-{n - 1})")
        return out

    def _check_cpus(self, cpus: frozenset[int] | None, decision: object) -> None:
        if cpus is None:
            return
        if not isinstance(cpus, (frozenset, set)) or any(_int(c) is None for c in cpus):
            raise PolicyError(self.policy.name, self.now, decision, "CPU set must be a set of integer CPU ids")
        if not cpus or min(cpus) < 0 or max(cpus) >= self.machine.n_cpus:
            raise PolicyError(self.policy.name, self.now, decision,
                              f"CPU set must be non-empty and within 0-{self.machine.n_cpus - 1}")

    def _check_mempolicy(self, mp: object, decision: object) -> None:
        fail = self._fail(decision)
        if not isinstance(mp, MemPolicy):
            fail(f"mempolicy must be a MemPolicy, got {type(mp).__name__}")
        if not isinstance(mp.kind, str) or mp.kind not in MEMPOLICY_KINDS:
            fail(f"memory policy kind {str(mp.kind)[:40]!r}: expected one of {', '.join(MEMPOLICY_KINDS)}")
        if not isinstance(mp.nodes, (tuple, list)) or any(_int(n) is None for n in mp.nodes):
            fail("memory policy nodes must be a tuple of integer node ids")
        if not isinstance(mp.weights, (tuple, list)):
            fail("memory policy weights must be a tuple of integers 1-255 (or empty)")
        if any(n < 0 or n >= self.machine.n_nodes for n in mp.nodes):
            fail(f"memory policy names a node outside 0-{self.machine.n_nodes - 1}")
        if mp.kind in ("bind", "interleave") and not mp.nodes:
            fail(f"memory policy {mp.kind} needs nodes")
        if mp.weights and (mp.kind != "interleave" or len(mp.weights) != len(mp.nodes)
                           or any(_int(w) is None or not 1 <= w <= 255 for w in mp.weights)):
            fail("memory policy weights: one per interleaved node, each an integer 1-255")
        if mp.numa_balancing is not None and not isinstance(mp.numa_balancing, (bool, np.bool_)):
            fail("memory policy numa_balancing must be None, True or False")

    def _check_admission(self, adm: object) -> Admission:
        """What admit() returned, checked before anything of it is used."""
        fail = self._fail(adm)
        if not isinstance(adm, Admission):
            fail(f"admit() must return an Admission, got {type(adm).__name__}")
        if not isinstance(adm.accepted, (bool, np.bool_)) or not isinstance(adm.reason, str):
            fail("accepted must be True or False and reason a string")
        if len(adm.reason) > MAX_REASON_CHARS or any(unicodedata.category(ch) in ("Cc", "Cf", "Cs") for ch in adm.reason):
            fail(f"reason must be printable text (no control characters) of at most {MAX_REASON_CHARS:,} characters")
        if not isinstance(adm.info, dict):
            fail("info must be a dict")
        try:  # the results carry it into JSON: plain data only, and not without bound
            size = len(json.dumps(adm.info, allow_nan=False))
        except (TypeError, ValueError, RecursionError) as exc:
            fail(f"info must hold plain JSON data (str keys; str, finite numbers, bools, None, lists, dicts): {exc}")
        if size > MAX_INFO_CHARS:
            fail(f"info is {size:,} characters as JSON; at most {MAX_INFO_CHARS:,} a pod")
        if not adm.accepted:
            return adm
        if adm.affinity is not None and not isinstance(adm.affinity, (tuple, list)):
            fail("affinity must be None or one CPU set per thread")
        self._check_mempolicy(adm.mempolicy, adm)
        o = adm.overhead
        if not isinstance(o, Overhead) or not all(_real(x) and 0 <= x <= MAX_OVERHEAD for x in (o.cpu, o.memory)):
            fail(f"overhead must be an Overhead whose cpu and memory are fractions 0-{MAX_OVERHEAD:g} "
                 "(0.02: 2 % longer)")
        if adm.cpu_quota is not None and not (_real(adm.cpu_quota) and adm.cpu_quota > 0):
            fail("cpu_quota must be None or a finite number of CPUs > 0")
        return adm

    def _fail(self, decision: object):
        def fail(why: str) -> NoReturn:
            raise PolicyError(self.policy.name, self.now, decision, why)
        return fail

    def _check_place(self, tid: int, cpu: int, decision: object) -> None:
        if not 0 <= cpu < len(self.nr):
            raise PolicyError(self.policy.name, self.now, decision, f"CPU {cpu} does not exist")
        aff = self.t_affinity[tid]
        if aff is not None and cpu not in aff:
            raise PolicyError(self.policy.name, self.now, decision,
                              f"thread {tid} may not run on CPU {cpu} (affinity {sorted(aff)})")

    def _decisions(self, value, method: str):
        """What a policy's ``tick()`` or ``idle()`` returned, as an iterator of decisions (None: none)."""
        if value is None:
            return iter(())
        if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
            raise PolicyError(self.policy.name, self.now, method,
                              f"{method}() must return a list of decisions, got {type(value).__name__}")
        return iter(value)

    def _apply_all(self, decisions) -> None:
        """Apply ``decisions`` in order; a run of charges brings its threads up to now together (one
        call into the compiled integration instead of one each: a thread's progress does not depend on
        another's debt, so the result is the one of charging them one by one)."""
        batch: list[Charge] = []
        for d in decisions:
            if type(d) is Charge:
                batch.append(d)
                continue
            if batch:
                self._charge(batch)
                batch = []
            self._apply(d)
        if batch:
            self._charge(batch)

    def _charge(self, charges: list[Charge]) -> None:
        tids = [self._charged(d) for d in charges]
        self._integrate(tids)
        for tid, d in zip(tids, charges):
            self.t_debt[tid] += d.ns
            self.c_faults[tid] += int(d.faults)
            self.c_kernel_ns[tid] += d.ns

    def _charged(self, d: Charge) -> int:
        """The thread a charge names, once the charge is checked."""
        tid, ns, faults = d.tid, d.ns, d.faults
        if (type(tid) is int and type(ns) is float and type(faults) is int and 0 <= tid < len(self.t_cpu)
                and 0.0 <= ns < math.inf and faults >= 0):
            return tid  # (the usual case, checked quickly)
        tid = self._index(d.tid, len(self.t_cpu), "thread", d)
        if (not isinstance(d.ns, numbers.Real) or isinstance(d.ns, bool) or not 0 <= d.ns < math.inf
                or _int(d.faults) is None or d.faults < 0):
            raise PolicyError(self.policy.name, self.now, d, "time must be a finite number >= 0, faults an integer >= 0")
        return tid

    def _apply(self, d: Decision) -> None:
        if isinstance(d, Move):
            tid = self._id(d.tid, "the thread", d)
            cpu = self._id(d.cpu, "the CPU", d)
            if d.numa and 0 <= tid < len(self.t_cpu) and self.t_active[tid] and self.t_cpu[tid] != cpu:
                self.c_numa_moves[tid] += 1
            self._move(tid, cpu, d)
        elif isinstance(d, MoveChunks):
            self._move_chunks(d)
        elif isinstance(d, Charge):
            self._charge([d])
        elif isinstance(d, SetAffinity):
            self._check_cpus(d.cpus, d)
            tids = [self._index(t, len(self.t_cpu), "thread", d) for t in d.tids]
            for tid in tids:
                self._set_affinity(tid, d.cpus)
                self.affinity_log.append((self.now, tid, d.cpus))
                if self.t_active[tid] and self.t_cpu[tid] not in d.cpus:
                    self._move(tid, self._id(self.policy.place(tid, self.view), "place()'s CPU", d), d)
            # A process's collector threads follow its workers' CPUs (Drivers._follow_affinity).
            for proc in sorted({self.t_proc[t] for t in tids if t < self.n_workers}):
                for h in self.proc_helpers[proc]:
                    self._follow_affinity(h)
        elif isinstance(d, MigratePages):
            self._index(d.pod, len(self.pods), "pod", d)
            self._index(d.dst, self.machine.n_nodes, "node", d)
            if _int(d.nbytes) is None or d.nbytes < 0 or not _copy_rate(d.rate_gbps):
                raise PolicyError(self.policy.name, self.now, d, "nbytes must be an integer >= 0 and rate_gbps "
                                  f"a number of GB/s from {MIN_COPY_GBPS:g} to {MAX_COPY_GBPS:g}")
            self._start_flow(d)
        elif isinstance(d, SetMemPolicy):
            pod = self._index(d.pod, len(self.pods), "pod", d)
            self._check_mempolicy(d.mempolicy, d)
            self.pods[pod].mempolicy = d.mempolicy
            self._set_touch_policy(self.pods[pod])
        else:
            raise PolicyError(self.policy.name, self.now, d, "unknown decision type")

    def _move(self, tid: int, cpu: int, decision: object) -> None:
        if not 0 <= tid < len(self.t_cpu) or not self.t_active[tid]:
            raise PolicyError(self.policy.name, self.now, decision, f"thread {tid} is not on a runqueue")
        self._check_place(tid, cpu, decision)
        if self.t_cpu[tid] == cpu:
            return
        self._run_core(layout.MOVE_BEGIN, tid, cpu)  # numasim.sim.events._move
