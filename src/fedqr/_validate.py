"""Input checks shared by the configs and the command line.

Each check raises ``ValueError`` naming the parameter, the allowed range and the value
given, e.g. ``eps must be > 0, got eps=-1.0``, and returns the value. Nothing here uses
``assert``. This module imports nothing from fedqr: every layer may use it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real

__all__ = [
    "SEED_MAX",
    "check_finite",
    "check_float",
    "check_in_range",
    "check_int_range",
    "check_nonnegative",
    "check_positive",
    "check_seed",
    "float_tuple",
    "int_or_auto",
    "rate_or_auto",
]

AUTO = "auto"
"""The word that leaves a value to the planner (``--rounds auto``)."""

SEED_MAX = 2**63 - 1
"""The largest seed (torch and NumPy seeds are 64-bit integers)."""


def check_float(name: str, value: object) -> float:
    """``value`` as a float if it is a real number (NumPy's included, a bool not): a string
    or ``None`` is refused by name rather than failing a comparison deep inside."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a number, got {name}={value!r}")
    return float(value)


def float_tuple(name: str, value: object) -> tuple[float, ...]:
    """One number, or a non-empty sequence (or 1-D array) of numbers, as a tuple of floats.

    A string is refused, never split into its characters (``eps="25"`` is not ``(2, 5)``).
    """
    if isinstance(value, str | bytes) or value is None:
        raise ValueError(f"{name} must be a number or a sequence of numbers, "
                         f"got {name}={value!r}")
    if getattr(value, "ndim", None) == 0:  # a 0-d array: its one value
        value = value.item()  # type: ignore[attr-defined]
    if isinstance(value, Real) and not isinstance(value, bool):
        return (float(value),)
    # an ordered sequence only: a dict's iteration gives its keys, a set's an arbitrary order
    # and a generator is spent once, so a per-client list could go to other clients
    if not (isinstance(value, Sequence) or getattr(value, "ndim", None) == 1):
        raise ValueError(f"{name} must be a number or a sequence of numbers (a list, tuple or "
                         f"1-D array, one per client), got {name}={value!r} "
                         f"({type(value).__name__})")
    items = [v.item() if getattr(v, "ndim", None) == 0 else v  # a tensor's 0-d items
             for v in value]  # type: ignore[attr-defined]
    if not items:
        raise ValueError(f"{name} must have at least one value, got {name}={value!r}")
    return tuple(check_float(name, v) for v in items)


def check_positive(name: str, value: float, *, allow_inf: bool = False) -> float:
    """``value`` if it is ``> 0`` (and finite unless ``allow_inf``)."""
    value = check_float(name, value)
    if not (value > 0) or math.isnan(value) or (math.isinf(value) and not allow_inf):
        bound = "> 0" if allow_inf else "> 0 and finite"
        raise ValueError(f"{name} must be {bound}, got {name}={value}")
    return value


def check_nonnegative(name: str, value: float) -> float:
    """``value`` if it is ``>= 0`` and finite."""
    value = check_float(name, value)
    if not (value >= 0) or math.isinf(value):
        raise ValueError(f"{name} must be >= 0 and finite, got {name}={value}")
    return value


def check_finite(name: str, value: float) -> float:
    """``value`` if it is a finite number."""
    value = check_float(name, value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {name}={value}")
    return value


def check_in_range(name: str, value: float, low: float, high: float, *,
                   low_open: bool = False, high_open: bool = False) -> float:
    """``value`` if it lies in the interval from ``low`` to ``high`` (ends as given)."""
    value = check_float(name, value)
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    if not (above and below):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ValueError(f"{name} must be in {interval}, got {name}={value}")
    return value


def check_int_range(name: str, value: int, low: int, high: int | None = None) -> int:
    """``value`` as an ``int`` if it is an integer (NumPy's included, a bool not) in
    ``[low, high]`` (no upper end when ``high`` is None)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{name} must be an integer, got {name}={value!r}")
    value = int(value)
    if high is None:
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {name}={value}")
    elif not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {name}={value}")
    return value


def check_shape(name: str, value: object) -> tuple[int, ...]:
    """One sample's shape as a tuple of integers >= 1 (one integer: a 1-D sample)."""
    def whole(v: object) -> int | None:
        return int(v) if isinstance(v, Integral) and not isinstance(v, bool) else None

    dims = [value] if whole(value) is not None else (
        list(value) if isinstance(value, Sequence) and not isinstance(value, str) else [])
    shape = [whole(d) for d in dims]
    if not shape or any(d is None or d < 1 for d in shape):
        raise ValueError(f"{name} must be one sample's shape, a tuple of integers >= 1 (e.g. "
                         f"(784,) or (1, 28, 28)), got {name}={value!r}")
    return tuple(d for d in shape if d is not None)


def parse_widths(name: str, text: str, *, most: int | None = None) -> tuple[int, ...]:
    """Comma-separated layer widths ``"64,32"`` as ``(64, 32)``: integers >= 1 (at most
    ``most``), no empty item (``"8,,4"`` is refused, not read as ``8,4``)."""
    parts = [v.strip() for v in text.split(",")]
    try:
        widths = tuple(int(v) for v in parts) if all(parts) else ()
    except ValueError:
        widths = ()
    if not widths or min(widths) < 1 or (most is not None and max(widths) > most):
        span = ">= 1" if most is None else f"in [1, {most}]"
        raise ValueError(f"{name} must be comma-separated widths {span}, got {name}={text!r}")
    return widths


def check_seed(name: str, value: int) -> int:
    """``value`` if it is a seed in ``[0, 2**63 - 1]``."""
    return check_int_range(name, value, 0, SEED_MAX)


MAX_ROUNDS = 10_000_000
"""The most rounds T a run or a plan takes (a larger T is a typo: at a millisecond a round it
would take three hours)."""
MAX_REPEATS = 1_000
"""The most repeats a run (or the twin) takes: repeats share each pass as columns of one
product, so their memory grows with them."""


MIN_SAMPLE_RATE = 1e-9
"""The least Poisson rate a command takes (below it no client of a billion rows samples a row;
1e-320 broke the accountant's arithmetic)."""


def int_or_auto(name: str, text: str | None, *, low: int, high: int | None = None,
                offer_auto: bool = True) -> int | None:
    """``None`` for ``auto`` (the planner chooses), else an integer in ``[low, high]``
    (``offer_auto=False``: a command that refuses ``auto`` later, whose message leaves it out)."""
    if text is None or text.strip().lower() == AUTO:
        return None
    allowed = (f">= {low}" if high is None else f"in [{low}, {high}]") + (
        " or 'auto'" if offer_auto else "")
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be an integer {allowed}, got {name}={text!r}") from None
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name} must be an integer {allowed}, got {name}={value}")
    return value


def rate_or_auto(text: str | None, *, default: float | None,
                 offer_auto: bool = True) -> float | None:
    """The sample rate: ``None`` for ``auto``, else a number in ``[MIN_SAMPLE_RATE, 1]``
    (``offer_auto``: as :func:`int_or_auto`)."""
    if text is None:
        return default
    if text.strip().lower() == AUTO:
        return None
    auto = " or 'auto'" if offer_auto else ""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"sample_rate must be a number in [{MIN_SAMPLE_RATE:g}, 1]{auto}, "
                         f"got sample_rate={text!r}") from None
    if not MIN_SAMPLE_RATE <= value <= 1:
        raise ValueError(f"sample_rate must be in [{MIN_SAMPLE_RATE:g}, 1]{auto}, got "
                         f"sample_rate={value}")
    return value
