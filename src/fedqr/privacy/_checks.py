"""Input validation shared by the privacy modules.

Every check raises ``ValueError`` naming the parameter, the allowed range and the value,
e.g. ``ValueError: eps must be > 0, got eps=-1``. Nothing here uses ``assert``.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

__all__ = [
    "check_int",
    "check_positive",
    "check_probability",
    "check_unit_open",
    "is_hashable",
]


def _is_real(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def check_int(name: str, value: object, *, minimum: int) -> int:
    """Return ``value`` as ``int`` if it is an integer ``>= minimum``.

    Floats are refused even when integral (a reply count of ``2.0`` is a bug upstream).
    """
    if not isinstance(value, Integral) or isinstance(value, bool) or int(value) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {name}={value!r}")
    return int(value)


def check_positive(name: str, value: object, *, allow_zero: bool = False) -> float:
    """Return ``value`` as ``float`` if it is finite and ``> 0`` (``>= 0`` with allow_zero)."""
    ok = _is_real(value) and math.isfinite(float(value))  # type: ignore[arg-type]
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = v >= 0.0 if allow_zero else v > 0.0
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound} and finite, got {name}={value!r}")
    return float(value)  # type: ignore[arg-type]


def check_probability(name: str, value: object) -> float:
    """Return ``value`` as ``float`` if it lies in ``(0, 1]`` (a sampling rate)."""
    if not (_is_real(value) and 0.0 < float(value) <= 1.0):  # type: ignore[arg-type]
        raise ValueError(f"{name} must be in (0, 1], got {name}={value!r}")
    return float(value)  # type: ignore[arg-type]


def check_unit_open(name: str, value: object, *, allow_zero: bool = False) -> float:
    """Return ``value`` as ``float`` if it lies in ``(0, 1)`` (``[0, 1)`` with allow_zero)."""
    ok = _is_real(value)
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = (0.0 <= v < 1.0) if allow_zero else (0.0 < v < 1.0)
    if not ok:
        interval = "[0, 1)" if allow_zero else "(0, 1)"
        raise ValueError(f"{name} must be in {interval}, got {name}={value!r}")
    return float(value)  # type: ignore[arg-type]


def is_hashable(obj: object) -> bool:
    """Whether ``hash(obj)`` works (a ``ComposedDpEvent`` holds a list and does not)."""
    try:
        hash(obj)
    except TypeError:
        return False
    return True
