"""The one module that knows every policy: the built-ins and the ``numasim.policies`` entry points.

The built-ins are listed here by name; a policy of the user's registers with
:func:`register` (a notebook) or through an entry point (a package). No policy
imports this module, and the engine names no policy: dependencies point one way,
registry -> built-in policies -> contract (:mod:`numasim.policies.api`).
"""

from __future__ import annotations

from importlib.metadata import entry_points

from ..errors import Problem, ScenarioError, safe_str
from .api import Policy, PolicyOptions
from .cfs import CFS
from .esxi import ESXi
from .k8s import K8s
from .numactl import Numactl
from .taskset import Taskset

__all__ = ["register", "get_policy", "load_policy_ref", "available_policies", "broken_policies", "plugin_files",
           "listed_names", "class_problem", "BUILTINS"]

BUILTINS: tuple[type[Policy], ...] = (CFS, ESXi, K8s, Numactl, Taskset)

_REGISTRY: dict[str, type[Policy]] = {cls.name: cls for cls in BUILTINS}
_ENTRY_POINTS_LOADED = False
_BROKEN: dict[str, str] = {}


MAX_PLUGIN_BYTES = 4 * 2**20  # a policy file, as a scenario file (model/yamlfile.MAX_BYTES)


def class_problem(cls: object, what: str, need_name: bool = True) -> str | None:
    """Why ``cls`` cannot be a policy (``what`` names it in the message), or None: a Policy subclass,
    every abstract method implemented, a ``name`` of printable text (at most 80 characters: it labels
    the variant) and ``Options`` a PolicyOptions subclass. Reading the user's attributes may raise:
    that is the answer, not a traceback."""
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        return f"{what} is not a numasim Policy subclass"
    try:
        name, options = cls.name, cls.Options
        missing = sorted(getattr(cls, "__abstractmethods__", ()) or ())
    except Exception as exc:
        return f"{what}: reading its name or Options raised {type(exc).__name__}: {safe_str(exc)}"
    if not name and need_name:
        return f"{what} has no name"
    if name and (not isinstance(name, str) or len(name) > 80 or not name.isprintable()):
        return (f"{what}.name must be printable text of at most 80 characters (it labels the variant), "
                f"got {safe_str(repr(name), 60)}")
    if missing:
        return f"{what} does not implement " + ", ".join(f"{m}()" for m in missing) + ", which every policy must"
    if not (isinstance(options, type) and issubclass(options, PolicyOptions)):
        return f"{what}.Options must be a subclass of numasim's PolicyOptions, got {safe_str(repr(options), 60)}"
    return _signature_problem(cls, what)


def _signature_problem(cls: type, what: str) -> str | None:
    """A contract method the class overrides that cannot take the arguments the engine passes (positionally,
    as many as the contract's): said now, not as a TypeError at the first call, which a traceback would
    blame on numasim's line that made it. The override is taken as the engine calls it: a plain function
    on an instance (self given), a staticmethod without self, a classmethod with the class, a callable
    object as it is; a property or another descriptor is left to the call."""
    import functools
    import inspect

    for name, contract in vars(Policy).items():
        if name.startswith("_") or not inspect.isfunction(getattr(contract, "__func__", contract)):
            continue  # (Options, name, description: not methods)
        raw = inspect.getattr_static(cls, name)
        if raw is contract:
            continue
        wants = list(inspect.signature(getattr(Policy, name)).parameters)
        if not isinstance(contract, (classmethod, staticmethod)):
            wants = wants[1:]  # the engine calls it on an instance: self is given
        try:
            if isinstance(contract, (classmethod, staticmethod)):  # called on the class
                target = getattr(cls, name)
            elif isinstance(raw, staticmethod):
                target = raw.__func__
            elif isinstance(raw, classmethod):
                target = raw.__get__(None, cls)
            elif inspect.isfunction(raw):
                target = functools.partial(raw, None)
            elif callable(raw) and not hasattr(type(raw), "__get__"):
                target = raw
            else:
                continue
            sig = inspect.signature(target)
        except (TypeError, ValueError):  # not introspectable (a builtin): left to the call
            continue
        except Exception as exc:  # the plug-in's own descriptor or __signature__
            return f"{what}.{name}: reading it raised {type(exc).__name__}: {safe_str(exc)}"
        try:
            sig.bind(*([None] * len(wants)))
        except TypeError:
            on_instance = inspect.isfunction(raw) and not isinstance(contract, (classmethod, staticmethod))
            shown = inspect.signature(raw) if on_instance else sig
            given = ", ".join((["self"] if on_instance else []) + wants)
            return f"{what}.{name}{shown} cannot take the arguments the engine passes it ({given})"
    return None


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make a policy available by its ``name``."""
    why = class_problem(cls, getattr(cls, "__name__", None) or safe_str(repr(cls), 60))
    if why is not None:
        raise ScenarioError(Problem("register", why))
    _REGISTRY[cls.name] = cls
    return cls


def plugin_files(classes) -> list[str]:
    """The source files of policy classes that are not numasim's own (a command's inputs: never its outputs)."""
    import os
    import sys

    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    files = (getattr(sys.modules.get(cls.__module__), "__file__", None) for cls in classes)
    return sorted({f for f in files if f and not os.path.abspath(f).startswith(own)})


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
            _BROKEN[ep.name] = f"{where} failed to load: {type(exc).__name__}: {safe_str(exc, 200)}"
            continue
        why = class_problem(cls, where, need_name=False)
        if why is not None:
            _BROKEN[ep.name] = why
            continue
        _REGISTRY.setdefault(cls.name or ep.name, cls)  # a class with no name of its own goes by the entry point's


def broken_policies() -> dict[str, str]:
    """Entry points that could not be used, by name, with the reason."""
    _load_entry_points()
    return dict(_BROKEN)


def listed_names(known: dict[str, type[Policy]]) -> list[str]:
    """The policies' names for a message: numasim's own first, then plug-ins (a long list is cut: the built-ins stay)."""
    return sorted(known, key=lambda n: (not known[n].__module__.startswith("numasim."), n))


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

    if not isinstance(ref, str):
        raise ScenarioError(Problem("policy", f"expected path/to/file.py:ClassName or package.module:ClassName, got "
                                              f"{safe_str(repr(ref), 80)}"))
    where, _, attr = ref.rpartition(":")
    if not where or not attr.isidentifier():
        raise ScenarioError(Problem("policy", f"{ref[:200]!r}: write path/to/file.py:ClassName or package.module:ClassName"))
    try:
        if where.endswith(".py") or os.sep in where or "/" in where:
            path = where
            if base_dir and not os.path.isabs(path) and os.path.exists(os.path.join(base_dir, path)):
                path = os.path.join(base_dir, path)
            path = os.path.abspath(path)
            if not path.endswith(".py"):
                raise ScenarioError(Problem("policy", f"{ref[:200]!r}: a policy file is Python source, its name "
                                                      "ending .py"))
            if not os.path.exists(path):
                raise ScenarioError(Problem("policy", f"{ref[:200]!r}: no file {path}"))
            if not os.path.isfile(path):
                raise ScenarioError(Problem("policy", f"{ref[:200]!r}: {path} is not a regular file"))
            if os.path.getsize(path) > MAX_PLUGIN_BYTES:
                raise ScenarioError(Problem("policy", f"{ref[:200]!r}: {path} is {os.path.getsize(path):,} bytes; a "
                                                      f"policy file is at most {MAX_PLUGIN_BYTES:,}"))
            modname = "numasim_policy_" + hashlib.sha256(path.encode()).hexdigest()[:12]
            module = sys.modules.get(modname)
            if module is None:
                spec = importlib.util.spec_from_file_location(modname, path)
                if spec is None or spec.loader is None:
                    raise ScenarioError(Problem("policy", f"{ref[:200]!r}: {path} cannot be loaded as Python"))
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
        raise ScenarioError(Problem("policy", f"{ref[:200]!r} failed to load: {type(exc).__name__}: {safe_str(exc)}")) from exc
    try:
        cls = getattr(module, attr, None)
    except Exception as exc:  # a module's __getattr__
        raise ScenarioError(Problem("policy", f"{ref[:200]!r}: reading {attr} raised {type(exc).__name__}: "
                                              f"{safe_str(exc)}")) from None
    why = class_problem(cls, attr)
    if why is not None:
        raise ScenarioError(Problem("policy", f"{ref[:200]!r}: {why}"))
    if getattr(module, "__file__", None) and cls.__module__ == module.__name__ and "_numasim_file" not in vars(cls):
        cls._numasim_file = module.__file__  # errors name it, in a worker too (a class sent by value loses it)
    _REGISTRY[ref] = cls
    return cls


def get_policy(name: str, base_dir: str | None = None) -> type[Policy]:
    """Look up a policy by name, or load ``file.py:ClassName`` / ``module:ClassName``.

    Raises
    ------
    ScenarioError
        Naming the known policies when ``name`` is unknown.
    """
    if not isinstance(name, str):
        raise ScenarioError(Problem("policy", f"expected a policy name or FILE.py:CLASS, got {safe_str(repr(name), 80)}"))
    if ":" in name:
        return load_policy_ref(name, base_dir)
    known = available_policies()
    if name not in known and name in _BROKEN:
        raise ScenarioError(Problem("policy", _BROKEN[name]))
    if name not in known:
        raise ScenarioError(
            Problem("policy", f"unknown policy {name!r}; known policies: {', '.join(listed_names(known))}")
        )
    return known[name]
