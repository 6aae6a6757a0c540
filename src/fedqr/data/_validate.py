"""Input checks shared by the data modules: clear messages naming the parameter."""

from __future__ import annotations

import enum
import math
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

E = TypeVar("E", bound=enum.Enum)


def as_array(name: str, value: object) -> NDArray[Any]:
    """``value`` as a NumPy array, refusing by name what NumPy cannot read as one.

    A torch tensor is read through ``detach().cpu()`` (one that requires grad, or lives on a
    GPU, is read as its values; bfloat16, which NumPy has no type for, as float32); a tensor
    on the ``meta`` device holds no values and is refused, and so is a ragged sequence
    (rows of different lengths).
    """
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        tensor: Any = value
        if tensor.device.type == "meta":
            raise ValueError(f"{name} is a tensor on the meta device, which holds shapes but "
                             f"no values; give its values, got {name}.shape="
                             f"{tuple(tensor.shape)} on device 'meta'")
        tensor = tensor.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":
            tensor = tensor.float()
        return np.asarray(tensor.resolve_conj().resolve_neg().numpy())
    try:
        return np.asarray(value)
    except ValueError as e:  # numpy: "setting an array element with a sequence ..."
        raise ValueError(f"{name} must be a rectangular array (every row of the same length), "
                         f"got a ragged sequence ({e})") from None


def check_int(name: str, value: object, *, low: int, high: int | None = None) -> int:
    """Return ``value`` as an ``int`` after checking ``low <= value <= high``.

    Parameters
    ----------
    name : str
        Parameter name used in the error message.
    value : object
        The value given by the caller (a Python or NumPy integer; ``bool`` is rejected).
    low : int
        Smallest allowed value.
    high : int or None, optional
        Largest allowed value; no upper bound when ``None``.

    Returns
    -------
    int
        The checked value.

    Raises
    ------
    TypeError
        If ``value`` is not an integer.
    ValueError
        If ``value`` lies outside ``[low, high]``.
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an integer, got {name}={value!r}")
    ivalue = int(value)
    if high is None and ivalue < low:
        raise ValueError(f"{name} must be >= {low}, got {name}={ivalue}")
    if high is not None and not low <= ivalue <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {name}={ivalue}")
    return ivalue


def check_positive_float(name: str, value: object) -> float:
    """Return ``value`` as a finite ``float > 0``, else raise ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{name} must be a real number, got {name}={value!r}")
    fvalue = float(value)
    if not (math.isfinite(fvalue) and fvalue > 0.0):
        raise ValueError(f"{name} must be a finite number > 0, got {name}={fvalue!r}")
    return fvalue


def check_rng(rng: object, *, name: str = "rng") -> np.random.Generator:
    """Return ``rng`` if it is a :class:`numpy.random.Generator`, else raise ``TypeError``."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"{name} must be a numpy.random.Generator (e.g. numpy.random.default_rng(0)), "
            f"got {name}={rng!r}"
        )
    return rng


def check_labels(labels: object, *, name: str = "labels") -> NDArray[np.int64]:
    """Return ``labels`` as a 1-D ``int64`` array, checking shape and dtype.

    Raises
    ------
    ValueError
        If the array is not 1-D, is empty, or does not hold integers.
    """
    arr = as_array(name, labels)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got {name}.shape={arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must hold at least 1 sample, got {name}.size=0")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got {name}.dtype={arr.dtype}")
    return arr.astype(np.int64, copy=False)


def parse_enum(enum_type: type[E], name: str, value: object) -> E:
    """Convert ``value`` (a member or its string value) to a member of ``enum_type``.

    Raises
    ------
    ValueError
        If ``value`` names no member; the message lists the allowed values.
    """
    if isinstance(value, enum_type):
        return value
    try:
        return enum_type(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in enum_type)
        raise ValueError(f"{name} must be one of {allowed}, got {name}={value!r}") from None


def check_writers(
    name: str, writers: object, *, length: int, writer_ids: tuple[str, ...] | None
) -> None:
    """Check optional per-sample writer indices: ``None``, or 1-D ``int64`` of ``length``.

    Indices must lie in ``[0, len(writer_ids))`` when ``writer_ids`` is given, else be
    ``>= 0``.

    Raises
    ------
    ValueError
        On a wrong dtype, shape or range; the message names ``name``.
    """
    if writers is None:
        return
    if not isinstance(writers, np.ndarray) or writers.dtype != np.int64 or writers.ndim != 1:
        raise ValueError(f"{name} must be a 1-D int64 array or None, got {name}={writers!r}")
    if writers.shape[0] != length:
        raise ValueError(f"{name} must have length {length}, got {name}.shape={writers.shape}")
    if writers.size == 0:
        return
    high = None if writer_ids is None else len(writer_ids) - 1
    lo, hi = int(writers.min()), int(writers.max())
    if lo < 0 or (high is not None and hi > high):
        bound = "[0, inf)" if high is None else f"[0, {high}]"
        raise ValueError(f"{name} must lie in {bound}, got values in [{lo}, {hi}]")
