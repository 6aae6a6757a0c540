"""Values of Flower's run configuration (flat ``bool | int | float | str``) and their parsers."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import TypeVar

from fedqr._validate import parse_widths as _parse_widths

__all__ = ["parse_floats", "parse_value", "parse_widths"]

_E = TypeVar("_E", bound=StrEnum)


def parse_floats(name: str, text: str) -> tuple[float, ...]:
    """``"1,2.5"`` as ``(1.0, 2.5)``; a clear error naming ``name`` otherwise."""
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"{name} must be a number or comma-separated per-client numbers, "
                         f"got {name}={text!r}") from None


def _enum(kind: type[_E], name: str, value: object) -> _E:
    try:
        return kind(str(value))
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise ValueError(f"{name} must be one of {allowed}, got {name}={value!r}") from None


def parse_widths(text: str) -> tuple[int, ...]:
    """Hidden widths ``"64,32"`` as ``(64, 32)``.

    Raises
    ------
    ValueError
        Naming ``hidden`` unless they are comma-separated integers >= 1.
    """
    return _parse_widths("hidden", text)


def parse_value(key: str, value: object, default: object) -> object:
    """One run-config value, converted to the type of its default."""
    if isinstance(default, StrEnum):
        return _enum(type(default), key, value)
    if isinstance(default, tuple):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return (float(value),)
        if isinstance(value, str):
            return parse_floats(key, value)
    elif isinstance(default, bool):
        if isinstance(value, bool):
            return value
    elif default is None:
        pass
    elif isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(default, float):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if value == "inf":
            return math.inf
    elif isinstance(default, str) and isinstance(value, str):
        return value
    kind = "number list" if isinstance(default, tuple) else type(default).__name__
    raise ValueError(f"{key} must be a {kind}, got {key}={value!r}")
