"""Pydantic's validation errors as :class:`numasim.errors.Problem` lists: each with the path of
the field in the file (``pods[0].memory``), what was wrong and, for an unknown key, the keys
allowed there (the closest first). Used by :mod:`numasim.model.scenario` for every part of a
scenario it validates (house rule 5).
"""

from __future__ import annotations

import typing
from typing import Annotated, Any

from pydantic import BaseModel, ValidationError

from ..errors import Problem

__all__ = ["fmt_path", "validation_problems"]


def fmt_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _unwrap(tp: Any) -> Any:
    """The model class reached through Optional / list / dict / Annotated, if any."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (list, tuple, dict) or origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        for arg in typing.get_args(tp):
            found = _unwrap(arg)
            if isinstance(found, type) and issubclass(found, BaseModel):
                return found
        return None
    return tp


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            return None
        current = _unwrap(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


_BOUNDS = {"greater_than": "more than", "greater_than_equal": "at least", "less_than": "less than",
           "less_than_equal": "at most"}


def _unit_format(model: type[BaseModel], loc: tuple):
    """How to print the value of the field at ``loc`` when it is a duration or a size, else None."""
    from ..units import format_duration, format_size

    parent = _model_at(model, loc[:-1]) if loc else None
    field = parent.model_fields.get(str(loc[-1])) if parent is not None else None
    if field is None:
        return None
    for meta in field.metadata:
        kind = getattr(meta, "format", None)
        if kind == "duration":
            return lambda v: format_duration(int(v))
        if kind == "size":
            return format_size
    return None


# Names pydantic puts in an error's location for the member of a union that failed.
_UNION_TAGS = frozenset({"str", "int", "float", "bool", "bytes", "none", "dict", "list", "tuple"})


def _is_tag(part: Any) -> bool:
    return isinstance(part, str) and ("[" in part or part.startswith(("function-", "constrained-"))
                                      or part in _UNION_TAGS)


def _allowed(model: type[BaseModel], key: str) -> str:
    """The keys ``model`` allows, its own before those it inherits, after the closest to ``key``."""
    import difflib

    inherited = {k for base in model.__mro__[1:] if isinstance(base, type) and issubclass(base, BaseModel)
                 for k in getattr(base, "model_fields", {})}
    names = list(model.model_fields)
    ordered = [k for k in names if k not in inherited] + [k for k in names if k in inherited]
    close = difflib.get_close_matches(key, names, n=3)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return f"{hint}allowed keys: {', '.join(ordered)}"


def validation_problems(exc: ValidationError, model: type[BaseModel], prefix: tuple = ()) -> list[Problem]:
    """Every error of ``exc`` (raised validating ``model``) as a Problem at ``prefix`` + its location."""
    out: list[Problem] = []
    seen: set[str] = set()
    last_union = False
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not _is_tag(p)) or tuple(err["loc"])
        if err["type"] == "extra_forbidden" and err["loc"]:  # the last is the unknown key itself, even 'x[0]'
            loc = tuple(p for p in err["loc"][:-1] if not _is_tag(p)) + (err["loc"][-1],)
        path = fmt_path(prefix + loc)
        kind = err["type"]
        inp = err.get("input")
        if kind == "extra_forbidden":
            parent = _model_at(model, loc[:-1])
            msg = f"unknown key {loc[-1]!r}; " + (_allowed(parent, str(loc[-1])) if parent else
                                                   "allowed keys: see docs/scenarios.md")
        elif kind == "missing":
            msg = "required field is missing"
        elif kind in _BOUNDS and "ctx" in err and (fmt := _unit_format(model, loc)) is not None:
            # A duration or a size: the bound and the value in the units they are written in.
            bound = next(iter(err["ctx"].values()))
            msg = f"must be {_BOUNDS[kind]} {fmt(bound)}, got {fmt(inp) if isinstance(inp, (int, float)) else inp!r}"
        else:
            msg = err["msg"]
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, "):]
            if not isinstance(inp, (dict, list)) and "got" not in msg:
                msg += f", got {inp!r}"
        key = f"{path}: {msg}"
        if key in seen:
            continue
        seen.add(key)
        union = len(loc) < len(err["loc"])
        if union and last_union and out[-1].path == path and out[-1].message.startswith("Input should be ") \
                and msg.startswith("Input should be "):
            # Alternatives of one union ("a valid string" / "a valid dictionary"): say it once.
            prev = out[-1].message.split(", got ")[0]
            out[-1] = Problem(path, f"{prev} or {msg[len('Input should be '):]}")
        else:
            out.append(Problem(path, msg))
        last_union = union
    return out


def policy_problems(cls: type, opts: Any, machine: Any, pods: list, where: str) -> list[Problem]:
    """A policy class's own ``check()`` of its options, as problems at ``where`` (its options' path): a
    check that raises, or returns anything but Problems, is the policy's error, named as such."""
    name = getattr(cls, "name", cls.__name__)
    try:
        found = list(cls.check(opts, machine, pods))
    except (Exception, SystemExit) as exc:
        return [Problem(where, f"policy {name!r}: its check() raised {type(exc).__name__}: {str(exc)[:200]}")]
    bad = next((p for p in found if not isinstance(p, Problem) or not isinstance(p.path, str)
                or not isinstance(p.message, str)), None)
    if bad is not None:
        return [Problem(where, f"policy {name!r}: check() must return a list of Problem, got {str(bad)[:60]!r}")]
    return [Problem(where + (("." + p.path) if p.path else ""), p.message) for p in found]
