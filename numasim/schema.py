"""The scenario file's JSON schema, from the validation models, for editors and for docs/scenarios.md.

``numasim schema -o scenario.schema.json`` writes it; a scenario file whose first line is
``# yaml-language-server: $schema=scenario.schema.json`` is then checked and completed by
editors that read JSON Schema (VS Code's YAML extension). The schema is pydantic's
``ScenarioSpec.model_json_schema()`` with what a scenario file takes as free mappings
spelled out: the machine (a preset name, a full machine, or a preset with overrides), the
workload profiles (full, or a preset given as ``base`` with overrides) and each built-in
policy's options.

Its keywords are draft-07's but for ``prefixItems`` (pydantic's tuples), which a draft-07
validator skips, and ``$defs``, which ``$ref`` reaches as a plain JSON pointer; so an editor
that validates as draft-07 (VS Code's YAML extension: yaml-language-server issue 856) checks
everything but the items of a tuple.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, models_json_schema

from .model.machine import MachineSpec
from .model.presets import preset_names
from .model.scenario import ScenarioSpec
from .model.workload import WorkloadProfile
from .policies.registry import BUILTINS
from .units import format_duration, format_exact_size

__all__ = ["scenario_schema", "schema_json", "INT_KEY_PATTERN"]

DRAFT = "https://json-schema.org/draft/2020-12/schema"
INT_KEY_PATTERN = "^-?[0-9]+$"
"""``propertyNames`` of a mapping whose keys are integers (JSON and YAML editors see them as text)."""

_BOUNDS = {"gt": "exclusiveMinimum", "ge": "minimum", "lt": "exclusiveMaximum", "le": "maximum"}
_SUBSCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SUBSCHEMA = ("items", "additionalProperties", "not", "if", "then", "else", "propertyNames")


class _Generator(GenerateJsonSchema):
    """pydantic's generator, with three additions for a scenario file's writer.

    A default made by a factory (``[]``, ``{}``) is shown; a size's or a duration's
    default is written as the file would write it (``60s``, not nanoseconds); a mapping
    with integer keys says so in ``propertyNames``.
    """

    def get_default_value(self, schema: Any) -> Any:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            return factory()
        return super().get_default_value(schema)

    def default_schema(self, schema: Any) -> dict[str, Any]:
        out = super().default_schema(schema)
        value = out.get("default")
        kind = next((b.get("format") for b in [out, *out.get("anyOf", ())] if "format" in b), None)
        if isinstance(value, int) and not isinstance(value, bool) and kind in ("size", "duration"):
            out["default"] = format_duration(value) if kind == "duration" else format_exact_size(value)
        return out

    def dict_schema(self, schema: Any) -> dict[str, Any]:
        out = super().dict_schema(schema)
        if schema.get("keys_schema", {}).get("type") == "int":
            out["propertyNames"] = {"pattern": INT_KEY_PATTERN}
        return out


def _normalise(schema: Any) -> Any:
    """Rename the bounds pydantic leaves in its own words (``ge`` on an optional quantity) to JSON Schema's."""
    if not isinstance(schema, dict):
        return schema
    for ours, theirs in _BOUNDS.items():
        if isinstance(schema.get(ours), (int, float)) and not isinstance(schema.get(ours), bool):
            schema[theirs] = schema.pop(ours)
    for key in _SUBSCHEMA_LISTS:
        for sub in schema.get(key, ()):
            _normalise(sub)
    for key in _SUBSCHEMA:
        _normalise(schema.get(key))
    for key in ("properties", "$defs"):
        for sub in schema.get(key, {}).values():
            _normalise(sub)
    return schema


def _with_preset(def_name: str, key: str, names: list[str], fields: dict[str, Any], what: str) -> dict[str, Any]:
    """A mapping that names a preset under ``key`` and overrides any of the model's fields."""
    props = {key: {"enum": names, "description": f"the {what} preset to start from"}}
    props.update({name: {"$ref": f"#/$defs/{def_name}/properties/{name}"} for name in fields})
    return {"title": f"{def_name} with {key}", "type": "object", "required": [key], "properties": props,
            "additionalProperties": False}


def scenario_schema() -> dict[str, Any]:
    """The JSON schema (draft 2020-12) of a scenario file.

    Returns
    -------
    dict
        ``ScenarioSpec.model_json_schema()`` with ``$schema`` and a ``title``, and in
        ``$defs`` the machine, the workload profile and the built-in policies' options,
        with the machine, the workloads and each variant's options tied to them.
    """
    models = [ScenarioSpec, MachineSpec, WorkloadProfile] + [cls.Options for cls in BUILTINS]
    _, top = models_json_schema([(m, "validation") for m in models], schema_generator=_Generator)
    defs = _normalise({"$defs": top["$defs"]})["$defs"]
    top_level = {k: v for k, v in defs.pop("ScenarioSpec").items() if k != "title"}
    schema = {"$schema": DRAFT, "title": "numasim scenario", **top_level, "$defs": defs}
    machines, workloads = list(preset_names("machines")), list(preset_names("workloads"))
    props = schema["properties"]
    props["machine"] = {
        "description": props["machine"]["description"],
        "anyOf": [{"title": "preset name", "enum": machines},
                  {"$ref": "#/$defs/MachineSpec"},
                  _with_preset("MachineSpec", "preset", machines, defs["MachineSpec"]["properties"], "machine")],
    }
    profile = {"anyOf": [{"$ref": "#/$defs/WorkloadProfile"},
                         _with_preset("WorkloadProfile", "base", workloads, defs["WorkloadProfile"]["properties"],
                                      "workload")]}
    props["workloads"] = {**props["workloads"], "additionalProperties": profile}
    variant = defs["VariantSpec"]
    variant["properties"]["policy"]["examples"] = [cls.name for cls in BUILTINS]
    variant["allOf"] = []
    for cls in BUILTINS:
        options = defs[cls.Options.__name__]
        options["description"] = cls.description
        variant["allOf"].append({
            "if": {"properties": {"policy": {"const": cls.name}}, "required": ["policy"]},
            "then": {"properties": {"options": {"$ref": f"#/$defs/{cls.Options.__name__}"}}},
        })
    return schema


def schema_json() -> str:
    """:func:`scenario_schema` as the text of docs/scenario.schema.json."""
    return json.dumps(scenario_schema(), indent=2, ensure_ascii=False) + "\n"
