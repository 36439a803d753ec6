"""The base of every validated specification (machine, workload, pod, scenario, policy options)."""

from __future__ import annotations

import types
import typing
import unicodedata
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, field_validator

__all__ = ["Spec", "Text"]


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
    bad = next((ch for ch in text if unicodedata.category(ch) in ("Cc", "Cf") and ch not in "\n\t"), None)
    if bad is not None:
        raise ValueError(f"contains the control character {bad!r} (an ANSI escape?); use printable text")
    return text


Text = Annotated[str, AfterValidator(_printable)]
"""Free text shown to the user (names, labels, descriptions): printable characters only."""
