"""Progress of a run, on the error stream: a live bar on a terminal, plain lines otherwise.

On a terminal (or in Jupyter) a rich progress bar shows the scenario, the variants
being simulated, simulations done / total, elapsed time and the time left. (There is no
count of failed simulations: the first failure stops the run with its error.)
When the stream is a file or a pipe, one plain line is printed per finished variant
(all its seeds; the first goes on to the SLA ladder), so a log shows what finished and when.
"""

from __future__ import annotations

import time
from collections import Counter

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

__all__ = ["RunProgress"]


class RunProgress:
    """Reports simulations as they finish; use as a context manager around the run.

    Parameters
    ----------
    title
        What is run (the scenario's name).
    jobs_per_variant
        How many simulations each variant label needs (one per seed).
    quiet
        Report nothing.
    console
        Where to report (default: standard error).
    """

    def __init__(self, title: str, jobs_per_variant: dict[str, int], quiet: bool = False,
                 console: Console | None = None):
        self.title = title
        self.left = Counter(jobs_per_variant)
        self.total = sum(jobs_per_variant.values())
        self.quiet = quiet
        self.console = console or Console(stderr=True)
        self.live = not quiet and (self.console.is_terminal or self.console.is_jupyter)
        self.done = 0
        self.running: Counter[str] = Counter()
        self._start = time.perf_counter()
        self._bar: Progress | None = None
        self._task = None

    def __enter__(self) -> "RunProgress":
        if self.live:
            self._bar = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                console=self.console, transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self._description(), total=self.total)
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def _description(self) -> str:
        now = ", ".join(sorted(k for k, v in self.running.items() if v > 0))
        return escape(f"{self.title}" + (f": {now}" if now else ""))

    def started(self, label: str) -> None:
        self.running[label] += 1
        if self._bar is not None:
            self._bar.update(self._task, description=self._description())

    def finished(self, label: str) -> None:
        self.running[label] -= 1
        self.done += 1
        self.left[label] -= 1
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=self._description())
        elif not self.quiet and self.left[label] == 0:
            elapsed = time.perf_counter() - self._start
            self.console.print(Text(f"finished {label} ({self.done}/{self.total} simulations, {elapsed:.1f} s)"),
                               highlight=False, soft_wrap=True)
