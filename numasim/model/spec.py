"""The base of every validated specification (machine, workload, pod, scenario, policy options)."""

from __future__ import annotations

import types
import typing
import unicodedata
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator

from ..units import (CPU_HELP, CPU_PATTERN, DURATION_HELP, DURATION_PATTERN, SIZE_HELP, SIZE_PATTERN, parse_cpu,
                     parse_duration, parse_size)

__all__ = ["Spec", "Text", "Size", "Duration", "Cpu", "Latency", "Bandwidth"]


def _accepts_bool(annotation: Any) -> bool:
    """Whether a field of this type may hold true/false."""
    if annotation is bool or annotation is Any:
        return True
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        return any(_accepts_bool(a) for a in typing.get_args(annotation) if not isinstance(a, (str, int, float)))
    return False


def _holds_bool(value: Any) -> bool:
    """A boolean, or a list or tuple holding one at any depth (mappings are their own models)."""
    if isinstance(value, bool):
        return True
    return isinstance(value, (list, tuple)) and any(_holds_bool(v) for v in value)


class Spec(BaseModel):
    """Frozen, unknown keys refused, NaN and infinities refused, and true/false never taken for a number.

    pydantic's lax mode reads ``true`` as 1 and ``false`` as 0 for a number field, so
    ``threads: true`` would give one thread; a YAML boolean where a number, size or
    duration is expected is almost always a mistake, and is refused here.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _booleans_are_not_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _holds_bool(value) and not _accepts_bool(field.annotation):
            raise ValueError("expected a number or text, not true/false")
        return value


def _printable(text: str) -> str:
    bad = next((ch for ch in text if unicodedata.category(ch) in ("Cc", "Cf", "Cs") and ch not in "\n\t"), None)
    if bad is not None and unicodedata.category(bad) == "Cs":
        raise ValueError(f"contains the lone surrogate {bad!r}, which is no character; use printable text")
    if bad is not None:
        raise ValueError(f"contains the control character {bad!r} (an ANSI escape?); use printable text")
    return text


Text = Annotated[str, AfterValidator(_printable)]
"""Free text shown to the user (names, labels, descriptions): printable characters only."""


@dataclass(frozen=True)
class _Quantity:
    """The JSON schema of a quantity with a unit, which a before-validator parses.

    The value is written as text with a unit (``pattern``), or as the bare number
    ``number`` allows; ``format`` names the quantity (``size``, ``duration``,
    ``cpu``). The field's bounds, on the parsed value (bytes, ns, CPUs), stay
    beside them: JSON Schema applies them to a bare number only.
    """

    format: str
    pattern: str
    help: str
    number: tuple[tuple[str, Any], ...]

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        inner = handler(core_schema)  # the number's schema, with the field's bounds
        bounds = {k: v for k, v in inner.items() if k != "type"}
        text = {"type": "string", "pattern": self.pattern, "description": self.help}
        return {"anyOf": [text, dict(self.number)], "format": self.format, **bounds}


Size = Annotated[int, BeforeValidator(parse_size), _Quantity("size", SIZE_PATTERN, SIZE_HELP, (("const", 0),))]
"""Bytes, written with a unit (``42GB``, ``42Gi``, ``512MiB``); a bare number only as 0."""

Duration = Annotated[int, BeforeValidator(parse_duration),
                     _Quantity("duration", DURATION_PATTERN, DURATION_HELP, (("const", 0),))]
"""Nanoseconds, written with a unit (``500ms``, ``2s``, ``1.5min``); a bare number only as 0."""

Cpu = Annotated[float, BeforeValidator(parse_cpu), _Quantity("cpu", CPU_PATTERN, CPU_HELP, (("type", "number"),))]
"""CPUs as Kubernetes writes them: a number (``2``, ``0.5``) or millicores (``'500m'``)."""


# Physical bounds: orders of magnitude past any machine, so that a typo or a hostile value is
# refused instead of reaching the arithmetic (a latency of 1e-300 ns, a bandwidth of 1e308).
Latency = Annotated[float, Field(ge=1, le=100_000)]  # ns
Bandwidth = Annotated[float, Field(ge=0.01, le=100_000)]  # GB/s
