"""Errors numasim raises on purpose.

Every problem with user input is a :class:`ScenarioError` that names the file,
the path of the field, what was wrong and what is allowed. The CLI prints a
:class:`NumasimError` as one clear message and exits with status 2; any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

__all__ = ["NumasimError", "Problem", "ScenarioError", "PolicyError", "safe_str", "inert"]

MAX_MESSAGE = 500  # characters of one problem's message shown (a value echoed back can be huge)
MAX_PROBLEMS = 20  # problems listed; the rest are counted


class NumasimError(Exception):
    """Base class of the errors numasim raises deliberately."""


@dataclass(frozen=True)
class Problem:
    """One problem in user input: where it is and what is wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        message = self.message if len(self.message) <= MAX_MESSAGE else self.message[:MAX_MESSAGE] + "... (cut)"
        return f"{self.path[:200]}: {message}" if self.path else message


class ScenarioError(NumasimError):
    """Invalid user input: a scenario file, a ``--set`` override or an option.

    Parameters
    ----------
    problems
        One or more problems, each with the dotted path of the field.
    source
        The file (or other origin, such as ``--set``) the input came from.
    """

    def __init__(self, problems: list[Problem] | Problem | str, source: str | None = None):
        if isinstance(problems, str):
            problems = [Problem("", problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: list[Problem] = list(problems)
        self.source = source
        super().__init__(self._format())

    def with_source(self, source: str) -> "ScenarioError":
        """Return the same error attributed to ``source``."""
        return ScenarioError(self.problems, source=self.source or source)

    def _format(self) -> str:
        head = f"{self.source}: " if self.source else ""
        if len(self.problems) == 1:
            return f"{head}{self.problems[0]}"
        lines = [f"{head}{len(self.problems)} problems:"]
        lines += [f"  - {p}" for p in self.problems[:MAX_PROBLEMS]]
        if len(self.problems) > MAX_PROBLEMS:
            lines.append(f"  ... and {len(self.problems) - MAX_PROBLEMS} more")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self._format()


class PolicyError(NumasimError):
    """A policy made a decision the engine cannot carry out.

    Names the policy, the simulated time and the decision, so that the author
    of a policy can find the bug.
    """

    def __init__(self, policy: str, time_ns: int, decision: object, reason: str):
        self.policy = policy
        self.time_ns = time_ns
        self.decision = decision
        self.reason = reason
        # args are the constructor's, so that simpy can re-raise a copy of the error.
        super().__init__(policy, time_ns, decision, reason)

    def __str__(self) -> str:
        return f"policy {self.policy!r} at t={self.time_ns / 1e9:.6f}s: {self.reason} (decision: {self.decision!r})"


def safe_str(value: object, limit: int = 300) -> str:
    """``str(value)`` cut to ``limit`` characters; for an object of the user's whose ``__str__`` raises
    (an exception a plug-in raised), a word on what it is instead of a second exception."""
    try:
        return str(value)[:limit]
    except Exception:
        return f"<{type(value).__name__} whose str() raised>"


def inert(text: str) -> str:
    """``text`` with any character a terminal would act on (an escape, a carriage return) or could not
    encode (a lone surrogate) written as its escape: an error may quote what the user typed, and a
    plug-in's description is the plug-in's to write."""
    return "".join(ch.encode("unicode_escape").decode() if ch not in "\n\t" and unicodedata.category(ch) in
                   ("Cc", "Cf", "Cs") else ch for ch in text)
