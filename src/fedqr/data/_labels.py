"""Class labels of :meth:`fedqr.data.FederatedData.from_arrays`: their checks and the class count.

Labels are the integers ``0..k-1``. Without a given ``num_classes``, ``k`` is the largest
label plus one; then a test label that no training row has, above every training label, is an
error (no model trained on the rows could predict it), and a class of ``0..k-1`` without a
training row (labels coded ``1..k``, or a gap) draws one :class:`EmptyClassWarning`. The
model gets an output per class, so a ``k`` read off the labels may not exceed the number of
training rows: a huge label (a typo, an id in the label column) is refused before any model is
built. A given ``num_classes`` may keep classes without rows, as long as the model fits in
memory (:func:`check_model_fits`). Labels must fit int64.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedqr.data._validate import as_array

__all__ = ["EmptyClassWarning", "EmptyClasses", "LabelNames", "as_labels", "check_model_fits",
           "classes_of", "one_per_row", "resolve_num_classes", "warn_empty_classes"]

_SHOWN = 10  # labels listed in a message before "... (N in all)"
_INT64_MAX = int(np.iinfo(np.int64).max)


class EmptyClassWarning(UserWarning):
    """Some class in ``0..num_classes-1`` has no training row (labels not coded ``0..k-1``)."""


@dataclass(frozen=True)
class EmptyClasses:
    """Classes of ``0..k-1`` without a (training) row: the first few and their number."""

    first: tuple[int, ...]
    count: int
    in_test: tuple[int, ...]  # of ``first``, those a given test set has
    held_out: bool


def _listed(values: Sequence[int], count: int) -> str:
    head = ", ".join(str(v) for v in values[:_SHOWN])
    return head if count <= _SHOWN else f"{head}, ... ({count} in all)"


def one_per_row(name: str, values: ArrayLike, *, length: int, what: str,
                kinds: str) -> NDArray[Any]:
    """``values`` as a 1-D array of ``length`` (one ``what`` per row); floats that are
    exactly integral become int64, other floats are refused (``name`` must hold ``kinds``)."""
    arr: NDArray[Any] = as_array(name, values)
    if arr.ndim != 1 or arr.shape[0] != length:
        raise ValueError(f"{name} must be 1-D of length {length} (one {what} per row), "
                         f"got {name}.shape={arr.shape}")
    if np.issubdtype(arr.dtype, np.floating):
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(arr) & (arr == np.round(arr))
            fits = ~ok | (np.abs(arr) < 2.0 ** 63)
        _refuse_first(name, arr, ok, f"must hold {kinds}")
        _refuse_first(name, arr, fits, f"must hold {kinds} within the int64 range")
        arr = arr.astype(np.int64)
    return arr


def _refuse_first(name: str, arr: NDArray[Any], ok: NDArray[np.bool_], what: str) -> None:
    """``ValueError`` naming the first element of ``arr`` where ``ok`` is false."""
    if not bool(ok.all()):
        row = int(np.argmin(ok))
        raise ValueError(f"{name} {what}, got {name}[{row}]={arr[row].item()!r}")


def as_labels(name: str, y: ArrayLike, *, length: int) -> NDArray[np.int64]:
    """``y`` as 1-D int64 of ``length``: an int dtype, or floats that are exactly integral.

    Raises
    ------
    ValueError
        On a wrong shape or length, non-integral values or negative values.
    """
    arr = one_per_row(name, y, length=length, what="label", kinds="integer class labels")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must hold integer class labels, got {name}.dtype={arr.dtype}")
    if arr.dtype == np.uint64:
        _refuse_first(name, arr, arr <= _INT64_MAX,
                      "must hold integer class labels within the int64 range")
    out = arr.astype(np.int64, copy=False)
    if out.size and int(out.min()) < 0:
        row = int(np.argmin(out))
        raise ValueError(f"{name} must hold class labels >= 0, got {name}[{row}]={int(out[row])}")
    return out


def resolve_num_classes(num_classes: int | None, *labels: NDArray[np.int64]) -> int:
    """``num_classes`` checked against the labels, or ``max(label) + 1`` when ``None``."""
    top = max(int(y.max()) for y in labels if y.size)
    if num_classes is None:
        return top + 1
    if isinstance(num_classes, bool) or not isinstance(num_classes, int | np.integer):
        raise ValueError(f"num_classes must be an integer >= 2, got num_classes={num_classes!r}")
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got num_classes={num_classes}")
    if top >= num_classes:
        raise ValueError(f"labels must lie in [0, {num_classes - 1}] (num_classes="
                         f"{num_classes}), got a label {top}")
    return int(num_classes)


@dataclass(frozen=True)
class LabelNames:
    """How messages name the labels and the class count: ``y`` and ``num_classes`` of
    :meth:`~fedqr.data.FederatedData.from_arrays`, or a file's label column and array."""

    labels: str = "y"
    num_classes: str = "num_classes"


def _check_count(k: int, rows: int, *, names: LabelNames) -> None:
    """``ValueError`` if ``k`` classes implied by the largest label (a model output each)
    outnumber the training rows."""
    if k <= rows:
        return
    raise ValueError(f"{names.labels} must hold the class labels 0..k-1 with k at most the "
                     f"{rows} training rows (a model output per class), got a label {k - 1}, "
                     f"which makes {k} classes: number the classes 0..k-1")


def classes_of(num_classes: int | None, y: NDArray[np.int64], y_test: NDArray[np.int64], *,
               held_out: bool, names: LabelNames | None = None) -> tuple[int, EmptyClasses]:
    """The number of classes and the classes of ``0..k-1`` that no training row has.

    Parameters
    ----------
    num_classes : int or None
        The class count given (checked against the labels), or ``None``: the largest label
        plus one, after the checks below.
    y, y_test : numpy.ndarray
        ``int64`` labels (``>= 0``) of the training and the test rows.
    held_out : bool
        Whether the test rows were held out of the data (``test_share``); then a class counts
        as present when any row, training or test, has it, and the test labels need no check.
    names : LabelNames or None
        How messages name the labels and ``num_classes`` (a file's column or array);
        ``y`` and ``num_classes`` when ``None``.

    Returns
    -------
    num_classes : int
        The class count ``k``.
    empty : EmptyClasses
        The classes in ``0..k-1`` without a (training) row; none when ``num_classes`` is
        given, which keeps empty classes on purpose.

    Raises
    ------
    ValueError
        If ``num_classes`` is ``None`` and ``y_test`` (a given test set) holds labels above
        every training label (the message lists the labels found only in ``y_test``), or
        the class count exceeds the number of training rows (a huge label).
    """
    names = names if names is not None else LabelNames()
    k = resolve_num_classes(num_classes, y, y_test)
    if num_classes is not None or y.size == 0:  # a given count: see check_model_fits
        return k, EmptyClasses(first=(), count=0, in_test=(), held_out=held_out)
    if not held_out and y_test.size and int(y_test.max()) > int(y.max()):
        only = np.setdiff1d(y_test, y)
        raise ValueError(
            f"y_test (the test set) holds label(s) {_listed(only.tolist(), only.size)} that "
            f"no training row has, but the training labels y lie in {int(y.min())}.."
            f"{int(y.max())}: a model trained on these rows could never predict them. Label "
            f"the test rows like the training rows (integers 0..k-1), or give num_classes "
            f"({_NUM_CLASSES_WAYS}) to keep classes without training rows")
    _check_count(k, y.size, names=names)
    present = np.unique(np.concatenate([y, y_test]) if held_out else y)
    # the first _SHOWN missing classes lie below present.size + _SHOWN: no array of size k
    first = np.setdiff1d(np.arange(min(k, present.size + _SHOWN)), present)[:_SHOWN]
    in_test = () if held_out else tuple(int(c) for c in first[np.isin(first, y_test)])
    return k, EmptyClasses(first=tuple(int(c) for c in first), count=k - present.size,
                           in_test=in_test, held_out=held_out)


_NUM_CLASSES_WAYS = ("FederatedData.from_file(num_classes=K) or from_arrays in Python, an "
                     "array num_classes in an .npz file; a .csv or .parquet file has no "
                     "column for it")


def caller_level() -> int:
    """The ``stacklevel`` of the first frame outside ``fedqr.data`` (the user's call)."""
    level, frame = 1, sys._getframe(1)
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).startswith(
            "fedqr.data"):
        frame, level = frame.f_back, level + 1
    return level


def warn_empty_classes(empty: EmptyClasses, num_classes: int) -> None:
    """One :class:`EmptyClassWarning` naming the ``empty`` classes (none: no warning)."""
    if not empty.count:
        return
    rows = "row" if empty.held_out else "training row"
    note = (f" ({_listed(list(empty.in_test), len(empty.in_test))} only in y_test)"
            if empty.in_test else "")
    used = num_classes - empty.count
    warnings.warn(
        f"labels should be 0..k-1 with a row of every class, but class(es) "
        f"{_listed(list(empty.first), empty.count)} of 0..{num_classes - 1} have no {rows} "
        f"in the labels y{note}: the model gets {num_classes} outputs, {empty.count} of them "
        f"never trained. Relabel the {used} classes as 0..{used - 1}, or give num_classes "
        f"({_NUM_CLASSES_WAYS}) to keep empty classes on purpose",
        EmptyClassWarning, stacklevel=caller_level())


def check_model_fits(k: int, num_features: int, *, names: LabelNames) -> None:
    """``ValueError`` if a given class count ``k`` makes even the smallest model (softmax
    regression: ``k x (num_features + 1)`` float32 parameters, one copy) need more than half
    of the memory available."""
    from fedqr.data._memory import available_memory

    nbytes, avail = 4 * k * (num_features + 1), available_memory()
    if avail is not None and nbytes > avail // 2:
        raise ValueError(f"{names.num_classes} must leave a model with an output per class "
                         f"within memory (k x (features + 1) = {k} x {num_features + 1} "
                         f"parameters need {nbytes / 2**30:.3g} GiB, more than half of the "
                         f"{avail / 2**30:.3g} GiB available), got num_classes={k}")
