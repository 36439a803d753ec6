"""The one module that knows every policy: the built-ins and the ``numasim.policies`` entry points.

The built-ins are listed here by name; a policy of the user's registers with
:func:`register` (a notebook) or through an entry point (a package). No policy
imports this module, and the engine names no policy: dependencies point one way,
registry -> built-in policies -> contract (:mod:`numasim.policies.api`).
"""

from __future__ import annotations

from importlib.metadata import entry_points

from ..errors import Problem, ScenarioError
from .api import Policy
from .cfs import CFS
from .esxi import ESXi
from .k8s import K8s
from .numactl import Numactl
from .taskset import Taskset

__all__ = ["register", "get_policy", "available_policies", "BUILTINS"]

BUILTINS: tuple[type[Policy], ...] = (CFS, ESXi, K8s, Numactl, Taskset)

_REGISTRY: dict[str, type[Policy]] = {cls.name: cls for cls in BUILTINS}
_ENTRY_POINTS_LOADED = False


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make a policy available by its ``name``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no name")
    _REGISTRY[cls.name] = cls
    return cls


def _load_entry_points() -> None:
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED = True
    for ep in entry_points(group="numasim.policies"):
        cls = ep.load()
        if isinstance(cls, type) and issubclass(cls, Policy):
            _REGISTRY.setdefault(cls.name or ep.name, cls)


def available_policies() -> dict[str, type[Policy]]:
    """All registered policies by name (built-in and from entry points)."""
    _load_entry_points()
    return dict(sorted(_REGISTRY.items()))


def get_policy(name: str) -> type[Policy]:
    """Look up a policy by name.

    Raises
    ------
    ScenarioError
        Naming the known policies when ``name`` is unknown.
    """
    known = available_policies()
    if name not in known:
        raise ScenarioError(
            Problem("policy", f"unknown policy {name!r}; known policies: {', '.join(known)}")
        )
    return known[name]
