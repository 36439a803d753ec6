"""Many simulations over one pool of worker processes, the longest first.

A run of a scenario is a set of independent simulations (variants x seeds, the
first seed of each going on to climb the SLA ladder). They go to one
pool of worker processes (loky's reusable executor, see docs/architecture.md),
never more than there are workers at a time, so the next one is chosen when a
worker frees up: the job expected to take longest, judged by how long the jobs
of the same group (a variant) took so far. A group not seen yet counts as the
longest, so that every group is measured early. The order only changes how soon
the last job ends, never a result: every job is a pure function of its inputs.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any

from .errors import NumasimError

__all__ = ["Job", "run_jobs", "worker_count"]


@dataclass
class Job:
    """One call of ``fn(*args)`` in a worker; ``group`` names jobs of a similar cost."""

    key: Hashable
    fn: Callable[..., Any]
    args: tuple
    group: str
    name: str = ""  # for messages, e.g. "variant cfs, seed 2"
    order: int = field(default=0, compare=False)  # submission order, to break ties


def worker_count(workers: int) -> int:
    """``workers``, with 0 meaning one per CPU this process may use."""
    if workers > 0:
        return workers
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _timed(fn: Callable[..., Any], args: tuple) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


class _Queue:
    """Jobs waiting for a worker, handed out longest-expected first.

    Jobs wait in one queue per group, in submission order, and each group keeps the
    total and count of its finished jobs' times, so choosing the next job costs one
    pass over the groups, not over the jobs.
    """

    def __init__(self) -> None:
        self.groups: dict[str, deque[Job]] = {}
        self.spent: dict[str, list[float]] = {}  # group -> [total seconds, finished jobs]
        self._n = 0

    def add(self, jobs: Iterable[Job]) -> None:
        for job in jobs:
            job.order = self._n
            self._n += 1
            self.groups.setdefault(job.group, deque()).append(job)

    def __bool__(self) -> bool:
        return any(self.groups.values())

    def record(self, group: str, seconds: float) -> None:
        tally = self.spent.setdefault(group, [0.0, 0])
        tally[0] += seconds
        tally[1] += 1

    def _expected(self, group: str) -> float:
        tally = self.spent.get(group)
        return math.inf if not tally else tally[0] / tally[1]

    def pop(self) -> Job:
        """The oldest job of the group expected to take longest (an unseen group counts as longest)."""
        group = max((g for g, q in self.groups.items() if q), key=lambda g: (self._expected(g), -self.groups[g][0].order))
        return self.groups[group].popleft()


def run_jobs(
    jobs: Iterable[Job],
    workers: int,
    on_result: Callable[[Job, Any], Iterable[Job]],
    on_start: Callable[[Job], None] | None = None,
) -> None:
    """Run ``jobs``; ``on_result(job, result)`` is called as each finishes and returns follow-up jobs.

    ``on_start(job)``, if given, is called as each job is handed to a worker.

    With ``workers == 1`` everything runs in this process, in the same order a pool
    of one would use. On an interrupt the pool's workers are killed, not waited for.
    """
    queue = _Queue()
    queue.add(jobs)
    if workers <= 1:
        while queue:
            job = queue.pop()
            if on_start:
                on_start(job)
            seconds, out = _timed(job.fn, job.args)
            queue.record(job.group, seconds)
            queue.add(on_result(job, out))
        return

    from loky import get_reusable_executor  # imported here: a serial run never starts a pool
    from loky.process_executor import TerminatedWorkerError

    # Idle workers stay for an hour (loky's default is 5 minutes): a worker that times out just as
    # a job is handed to it makes loky warn and resubmit, which a long session would hit now and then.
    pool = get_reusable_executor(max_workers=workers, timeout=3600)
    running: dict[Future, Job] = {}
    try:
        while queue or running:
            while queue and len(running) < workers:
                job = queue.pop()
                running[pool.submit(_timed, job.fn, job.args)] = job
                if on_start:
                    on_start(job)
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            if any(isinstance(f.exception(), TerminatedWorkerError) for f in done):
                # The pool cannot tell which of the jobs in flight killed its worker: name them all.
                names = sorted(j.name or str(j.key) for j in running.values())
                which = names[0] if len(names) == 1 else "one of: " + "; ".join(names)
                raise NumasimError(f"a worker process died (a crash or the out-of-memory killer) while simulating {which}")
            for fut in sorted(done, key=lambda f: running[f].order):
                job = running.pop(fut)
                seconds, out = fut.result()
                queue.record(job.group, seconds)
                queue.add(on_result(job, out))
    except BaseException:
        for fut in running:
            fut.cancel()
        pool.shutdown(wait=False, kill_workers=True)
        raise
