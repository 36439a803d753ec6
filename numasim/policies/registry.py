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

__all__ = ["register", "get_policy", "load_policy_ref", "available_policies", "broken_policies", "BUILTINS"]

BUILTINS: tuple[type[Policy], ...] = (CFS, ESXi, K8s, Numactl, Taskset)

_REGISTRY: dict[str, type[Policy]] = {cls.name: cls for cls in BUILTINS}
_ENTRY_POINTS_LOADED = False
_BROKEN: dict[str, str] = {}


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make a policy available by its ``name``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no name")
    _REGISTRY[cls.name] = cls
    return cls


def _load_entry_points() -> None:
    """Load the ``numasim.policies`` entry points once; a broken one is kept aside, not fatal.

    A package whose entry point fails to import, or names something that is not a
    :class:`Policy` subclass, must not stop every command: it is listed by
    :func:`broken_policies` (the CLI warns), and only using it by name is an error.
    """
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED = True
    for ep in entry_points(group="numasim.policies"):
        where = f"entry point {ep.name!r} ({getattr(ep, 'value', '?')})"
        try:
            cls = ep.load()
        except Exception as exc:  # a third party's import error, whatever it is
            _BROKEN[ep.name] = f"{where} failed to load: {type(exc).__name__}: {str(exc)[:200]}"
            continue
        if not (isinstance(cls, type) and issubclass(cls, Policy)):
            _BROKEN[ep.name] = f"{where} is not a numasim Policy subclass"
            continue
        if getattr(cls, "__abstractmethods__", None):
            _BROKEN[ep.name] = f"{where} does not implement " + ", ".join(sorted(cls.__abstractmethods__))
            continue
        _REGISTRY.setdefault(cls.name or ep.name, cls)


def broken_policies() -> dict[str, str]:
    """Entry points that could not be used, by name, with the reason."""
    _load_entry_points()
    return dict(_BROKEN)


def available_policies() -> dict[str, type[Policy]]:
    """All registered policies by name (built-in and from entry points)."""
    _load_entry_points()
    return dict(sorted(_REGISTRY.items()))


def load_policy_ref(ref: str, base_dir: str | None = None) -> type[Policy]:
    """The policy class of ``path/to/file.py:ClassName`` or ``package.module:ClassName``.

    A file is loaded as a module of its own (relative paths from ``base_dir`` if the
    file is there, else from the current directory) and pickled by value, so worker
    processes run it without importing it. The class is registered under its ``name``.

    Raises
    ------
    ScenarioError
        When the file or module cannot be loaded or the name is not a Policy subclass.
    """
    import hashlib
    import importlib
    import importlib.util
    import os
    import sys

    where, _, attr = ref.rpartition(":")
    if not where or not attr.isidentifier():
        raise ScenarioError(Problem("policy", f"{ref[:200]!r}: write path/to/file.py:ClassName or package.module:ClassName"))
    try:
        if where.endswith(".py") or os.sep in where or "/" in where:
            path = where
            if base_dir and not os.path.isabs(path) and os.path.exists(os.path.join(base_dir, path)):
                path = os.path.join(base_dir, path)
            path = os.path.abspath(path)
            if not os.path.isfile(path):
                raise ScenarioError(Problem("policy", f"{ref[:200]!r}: no file {path}"))
            modname = "numasim_policy_" + hashlib.sha256(path.encode()).hexdigest()[:12]
            module = sys.modules.get(modname)
            if module is None:
                spec = importlib.util.spec_from_file_location(modname, path)
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                sys.modules[modname] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules[modname]
                    raise
                import cloudpickle

                cloudpickle.register_pickle_by_value(module)  # workers get the class, not an import
        else:
            module = importlib.import_module(where)
    except ScenarioError:
        raise
    except (Exception, SystemExit) as exc:  # the user's code, whatever it raises (sys.exit() too)
        raise ScenarioError(Problem("policy", f"{ref[:200]!r} failed to load: {type(exc).__name__}: {str(exc)[:300]}")) from exc
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise ScenarioError(Problem("policy", f"{ref[:200]!r}: {attr} is not a numasim Policy subclass"))
    if not cls.name:
        raise ScenarioError(Problem("policy", f"{ref[:200]!r}: {attr} has no name"))
    if not isinstance(cls.name, str) or len(cls.name) > 80 or not cls.name.isprintable():
        raise ScenarioError(Problem("policy", f"{ref[:200]!r}: {attr}.name must be printable text of at most 80 "
                                              f"characters (it labels the variant), got {repr(cls.name)[:60]}"))
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise ScenarioError(Problem("policy", f"{ref[:200]!r}: {attr} does not implement "
                                    + ", ".join(f"{m}()" for m in missing) + ", which every policy must"))
    _REGISTRY[ref] = cls
    return cls


def get_policy(name: str, base_dir: str | None = None) -> type[Policy]:
    """Look up a policy by name, or load ``file.py:ClassName`` / ``module:ClassName``.

    Raises
    ------
    ScenarioError
        Naming the known policies when ``name`` is unknown.
    """
    if ":" in name:
        return load_policy_ref(name, base_dir)
    known = available_policies()
    if name not in known and name in _BROKEN:
        raise ScenarioError(Problem("policy", _BROKEN[name]))
    if name not in known:  # numasim's own first, then plug-ins (a long list is cut, the built-ins stay)
        listed = sorted(known, key=lambda n: (not known[n].__module__.startswith("numasim."), n))
        raise ScenarioError(
            Problem("policy", f"unknown policy {name!r}; known policies: {', '.join(listed)}")
        )
    return known[name]
