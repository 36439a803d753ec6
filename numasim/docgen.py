"""Generate docs/scenarios.md from the scenario JSON schema, so the reference cannot drift.

The page is :func:`numasim.schema.scenario_schema` (pydantic's JSON schema of the validation
models) rendered through ``templates/scenarios.md.j2``: one table per object of the schema,
every ``$ref`` resolved.

Usage: ``python -m numasim.docgen > docs/scenarios.md`` and
``python -m numasim.docgen --schema > docs/scenario.schema.json`` (tests check both are current).
"""

from __future__ import annotations

import sys
from typing import Any

from .schema import INT_KEY_PATTERN, scenario_schema, schema_json

__all__ = ["scenario_reference"]

_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "null", "object": "mapping"}
_KINDS = {"size": "size", "duration": "duration", "cpu": "CPU quantity"}
_BOUNDS = (("exclusiveMinimum", ">"), ("minimum", ">="), ("exclusiveMaximum", "<"), ("maximum", "<="),
           ("minLength", "min length"), ("minItems", "min length"), ("maxLength", "max length"),
           ("maxItems", "max length"))


def _type(s: dict[str, Any]) -> str:
    """A schema's type in words: ``size``, ``list of PodSpec``, ``'p50' or 'p99'``, ``[float, float]``."""
    if "$ref" in s:
        return s["$ref"].rsplit("/", 1)[-1]
    if "title" in s:
        return s["title"]
    if s.get("format") in _KINDS:
        return _KINDS[s["format"]]
    if "enum" in s:
        return " or ".join(repr(v) for v in s["enum"])
    if "const" in s:
        return repr(s["const"])
    if "anyOf" in s:
        return " or ".join(dict.fromkeys(_type(b) for b in s["anyOf"]))
    if s.get("type") == "array":
        if "prefixItems" in s:
            return "[" + ", ".join(_type(b) for b in s["prefixItems"]) + "]"
        return f"list of {_type(s.get('items', {}))}"
    if s.get("type") == "object":
        keys = "int" if s.get("propertyNames", {}).get("pattern") == INT_KEY_PATTERN else "str"
        values = s.get("additionalProperties", True)
        return f"mapping of {keys} to {_type(values) if isinstance(values, dict) else 'any'}"
    return _TYPES.get(s.get("type"), "any")


def _bounds(s: dict[str, Any]) -> str:
    """The bounds on a field and on each alternative of it (not on a list's items), in words."""
    out: list[str] = []
    for part in [s] + [b for b in s.get("anyOf", ()) if "format" not in s]:
        for key, sym in _BOUNDS:
            if key in part and not (key in ("minItems", "maxItems") and "prefixItems" in part):
                out.append(f"{sym} {part[key]}")
        if "pattern" in part and "format" not in s:
            out.append(f"pattern `{part['pattern']}`")
    return ", ".join(dict.fromkeys(out))


def _kind(s: dict[str, Any]) -> str | None:
    return next((b.get("format") for b in [s] + s.get("anyOf", []) if b.get("format") in _KINDS), None)


def _default(name: str, s: dict[str, Any], required: list[str]) -> str:
    if name in required:
        return "required"
    if "default" not in s:
        return "none"
    value = s["default"]
    if isinstance(value, str) and _kind(s) in ("duration", "size"):  # as a scenario file writes it: `60s`
        return f"`{value}`"
    return "none" if value is None else "`''`" if value == "" else f"`{value!r}`"


def _rows(obj: dict[str, Any]) -> list[dict[str, str]]:
    rows = []
    for name, s in obj.get("properties", {}).items():
        typ = _type({k: v for k, v in s.items() if k != "title"})
        if bounds := _bounds(s):
            typ += f" ({bounds})"
        rows.append({"field": name, "type": typ.replace("|", "/"), "default": _default(name, s, obj.get("required", [])),
                     "meaning": s.get("description", "").replace("|", "/")})
    return rows


def scenario_reference() -> str:
    """The scenario reference as Markdown.

    Raises
    ------
    AssertionError
        If the template leaves out an object of the schema (a section nobody wrote).
    """
    import jinja2

    schema = scenario_schema()
    defs = schema["$defs"]
    shown: set[str] = set()

    def table(name: str) -> list[dict[str, str]]:
        shown.add(name)
        return _rows(defs[name] if name else schema)

    policies = [{"name": rule["if"]["properties"]["policy"]["const"],
                 "options": (ref := rule["then"]["properties"]["options"]["$ref"].rsplit("/", 1)[-1]),
                 "description": defs[ref]["description"]} for rule in defs["VariantSpec"]["allOf"]]
    machines = schema["properties"]["machine"]["anyOf"][0]["enum"]
    workloads = schema["properties"]["workloads"]["additionalProperties"]["anyOf"][1]["properties"]["base"]["enum"]
    env = jinja2.Environment(loader=jinja2.PackageLoader("numasim", "templates"), autoescape=False,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    page = env.get_template("scenarios.md.j2").render(table=table, policies=policies, machines=machines,
                                                      workloads=workloads)
    missing = sorted(set(defs) - shown)
    assert not missing, f"templates/scenarios.md.j2 has no table for {', '.join(missing)}"
    return page.rstrip() + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(schema_json() if sys.argv[1:] == ["--schema"] else scenario_reference(), end="")
