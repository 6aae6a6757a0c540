"""The values of a column file (CSV, Parquet): its layout, labels, client ids and features.

Every check names the file, the column and where the first bad value is: ``where(r)`` turns
the 0-based data row ``r`` into the file's own words (``"line 5"`` for a CSV file, the header
being line 1; ``"row 3 (0-based)"`` for a Parquet file).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from numpy.typing import NDArray

#: Turns a 0-based data row into a place in the file, e.g. ``"line 5"``.
Where = Callable[[int], str]

_INT64_MAX = int(np.iinfo(np.int64).max)
_FLOAT32_MAX = float(np.finfo(np.float32).max)
# a header cell without a name: empty, or a saved row index (pandas' to_csv and to_parquet)
_UNNAMED = re.compile(r"|Unnamed: \d+|__index_level_\d+__")


@dataclass(frozen=True, eq=False)
class Columns:
    """The columns of one file: features ``x``, labels ``y``, client ids (or ``None``)."""

    x: NDArray[np.float32]
    y: NDArray[np.int64]
    client: NDArray[Any] | None
    feature_names: tuple[str, ...]


@dataclass(frozen=True)
class Layout:
    """Positions of the label, the client (``None``: absent) and the feature columns."""

    label: int
    client: int | None
    features: tuple[int, ...]
    names: tuple[str, ...]


def layout(p: Path, header: Sequence[str], *, client_column: str, label_column: str,
           need_client: bool) -> Layout:
    """The columns of ``header``; ``ValueError`` on a repeated, missing or unnamed column."""
    names = [str(h).strip() for h in header]
    dup = sorted({c for c in names if names.count(c) > 1})
    if dup:
        raise ValueError(f"{p} repeats the column name(s) {dup}")
    for option, col, needed in (("label_column", label_column, True),
                                ("client_column", client_column, need_client)):
        if needed and col not in names:
            raise ValueError(f"{p} has no column {col!r} ({option}={col!r}); its columns: "
                             f"{names}")
    ci = names.index(client_column) if client_column in names else None
    li = names.index(label_column)
    feats = tuple(j for j in range(len(names)) if j not in (ci, li))
    if not feats:
        raise ValueError(f"{p} has no feature column (every column other than "
                         f"{client_column!r} and {label_column!r}); its columns: {names}")
    for j in feats:
        if _UNNAMED.fullmatch(names[j]):
            raise ValueError(f"{p}: column {j + 1} of the header has no name (got "
                             f"{names[j]!r}), probably a saved row index (pandas writes one "
                             f"unless index=False), which would be used as a feature: drop "
                             f"that column or give it a name")
    return Layout(label=li, client=ci, features=feats, names=tuple(names[j] for j in feats))


def _bad_label(p: Path, column: str, shown: str, where: str, *, big: bool = False) -> ValueError:
    what = f"in [0, {_INT64_MAX}] (int64)" if big else ">= 0"
    return ValueError(f"{p}: column {column!r} must hold integer class labels {what}, got "
                      f"{shown} on {where}")


def _parse_label(p: Path, column: str, text: str, where: Where, r: int) -> int:
    """One label written as text: an integer, or a float that is exactly one (``"2.0"``)."""
    try:
        value = int(text)
    except ValueError:
        try:
            f = float(text)
        except ValueError:
            raise ValueError(f"{p}: column {column!r} must hold integer class labels, got "
                             f"{text!r} on {where(r)} (number the classes 0 to k - 1 first, "
                             f"the same way in every file: the test file, each Flower "
                             f"node's)") from None
        if not (math.isfinite(f) and f == round(f)):
            raise _bad_label(p, column, text.strip(), where(r)) from None
        value = int(f)
    if not 0 <= value <= _INT64_MAX:
        raise _bad_label(p, column, text.strip(), where(r), big=value > 0)
    return value


def labels_from(p: Path, column: str, values: NDArray[Any], where: Where) -> NDArray[np.int64]:
    """Integer labels ``>= 0`` (int64) from text or numbers; a bad one is shown as written."""
    if values.dtype.kind in "US":
        try:
            ints = values.astype(np.int64)
        except (ValueError, OverflowError):
            return np.array([_parse_label(p, column, v, where, r)
                             for r, v in enumerate(values.tolist())], dtype=np.int64)
        if ints.size and int(ints.min()) < 0:
            r = int(np.argmax(ints < 0))
            raise _bad_label(p, column, str(values[r]).strip(), where(r))
        return ints
    if values.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(values) & (values == np.round(values)) & (values >= 0)
            small = ~ok | (values < 2.0 ** 63)
    else:
        ok = values >= 0
        small = (values <= _INT64_MAX if values.dtype.kind == "u"
                 else np.ones(values.shape, dtype=np.bool_))
    for good, big in ((ok, False), (small, True)):
        if not bool(good.all()):
            r = int(np.argmin(good))
            raise _bad_label(p, column, repr(values[r].item()), where(r), big=big)
    return values.astype(np.int64)


def clients_from(values: NDArray[Any]) -> NDArray[Any]:
    """Client ids read as text: integers where every id is one (``"7"``, not ``"07"``),
    written as an integer or as a float with a zero fraction (``"7.0"``: a float column, as
    pandas writes one), so that the same ids in a CSV and in an ``.npz`` sort alike."""
    text = values.astype(str)
    try:
        ints: NDArray[np.int64] | None = text.astype(np.int64)
    except (ValueError, OverflowError):
        ints = _integral_floats(text)
    if ints is None:
        return text
    canonical = ints.astype(str)
    return ints if np.all((canonical == text) | (np.char.add(canonical, ".0") == text)) else text


def _integral_floats(text: NDArray[np.str_]) -> NDArray[np.int64] | None:
    """``text`` as int64 where every entry is a float with an integral value below 2^53."""
    try:
        floats = text.astype(np.float64)
    except (ValueError, OverflowError):
        return None
    if not bool((np.isfinite(floats) & (floats == np.round(floats))
                 & (np.abs(floats) < 2.0**53)).all()):
        return None
    return floats.astype(np.int64)


def check_feature(p: Path, name: str, values: NDArray[Any], column: NDArray[np.float32],
                  where: Where) -> None:
    """``ValueError`` on a NaN or infinite value of the feature column ``name``, or a finite
    one beyond the float32 range (``values`` as read, ``column`` as float32)."""
    if bool(np.isfinite(column).all()):
        return
    if values.dtype.kind == "f":
        over = np.isfinite(values) & ~np.isfinite(column)
        if bool(over.any()):
            r = int(np.argmax(over))
            out_of_range(p, name, repr(values[r].item()), where(r), int(over.sum()))
    r = int(np.argmin(np.isfinite(column)))
    non_finite(p, name, repr(values[r].item()), where(r), int((~np.isfinite(column)).sum()))


def out_of_range(p: Path, name: str, shown: str, where: str, count: int | None) -> NoReturn:
    """Raise: ``shown`` in feature column ``name`` lies beyond the float32 range."""
    many = "" if count is None else f", {count} value(s) beyond it in the column"
    raise ValueError(f"{p}: feature column {name!r} must lie within the float32 range "
                     f"[-{_FLOAT32_MAX:.4g}, {_FLOAT32_MAX:.4g}], got {shown} on {where}"
                     f"{many} (rescale that feature)")


def non_finite(p: Path, name: str, shown: str, where: str, count: int | None) -> NoReturn:
    """Raise: ``shown`` in feature column ``name`` is NaN or infinite."""
    many = "" if count is None else f" ({count} NaN or infinite value(s) in the column)"
    raise ValueError(f"{p}: feature column {name!r} must be finite, got {shown} on {where}"
                     f"{many}")


def column_difference(want: tuple[str, ...] | list[str], have: tuple[str, ...] | list[str]
                      ) -> str:
    """What ``have`` lacks of ``want`` and holds beyond it, in words (``""``: the same
    columns): ``"lacks ['a'] and has unexpected ['b']"``, either part alone where the other
    is empty."""
    missing = [c for c in want if c not in have]
    extra = [c for c in have if c not in want]
    return " and ".join(part for part in (f"lacks {missing}" if missing else "",
                                          f"has unexpected {extra}" if extra else "") if part)
