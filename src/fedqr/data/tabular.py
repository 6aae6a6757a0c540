"""Data files of :meth:`fedqr.data.FederatedData.from_file`: ``.npz``, ``.csv``, ``.parquet``.

``.npz``
    Arrays ``x`` ``[n, ...]`` (numbers; ``[n, H, W]`` are 1-channel images ``(1, H, W)``),
    ``y`` ``[n]`` (integer labels), ``client`` ``[n]`` (integer or string client ids),
    optionally ``x_test`` and ``y_test`` (together), and ``num_classes`` (a 0-d integer). No
    other array is allowed; object arrays are refused.
``.csv`` (comma-separated, a header row, ``"`` quotes) and ``.parquet``
    A column of client ids (``client``; no empty or missing id), one of integer labels
    (``label``), and the features: every other column, numeric, finite, within the float32
    range, and named (an unnamed column, such as the row index pandas writes, is refused). A
    Parquet column may be dictionary-encoded (a pandas categorical). A test file
    (``test_path``) has the same columns; its client column is optional and ignored. Errors
    name the file line of a CSV file (the header is line 1) and the 0-based row of a Parquet
    file.

Every file is measured before it is read: one needing more than half of the available memory
is refused (:class:`DataTooLargeError`). :func:`write_npz`, :func:`write_csv` and
:func:`write_parquet` write these formats atomically.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from fedqr._atomic import write_file_atomic
from fedqr.data._cells import column_difference
from fedqr.data._columns import Columns, csv_size, parquet_size, read_csv, read_parquet
from fedqr.data._columns import write_csv as _write_csv
from fedqr.data._columns import write_parquet as _write_parquet
from fedqr.data._files import DataNotFoundError
from fedqr.data._memory import DataTooLargeError, available_memory, check_memory

if TYPE_CHECKING:
    from fedqr.data.federated import FederatedData

__all__ = ["SUFFIXES", "DataTooLargeError", "TableData", "available_memory", "check_columns",
           "read_table", "write_csv", "write_npz", "write_parquet"]

#: File suffixes :func:`read_table` reads.
SUFFIXES = (".npz", ".csv", ".parquet")
_NPZ_REQUIRED = ("x", "y", "client")
_NPZ_OPTIONAL = ("x_test", "y_test", "num_classes", "feature_names")


@dataclass(frozen=True, eq=False)
class TableData:
    """The raw contents of a data file (and its test file), before any check of values."""

    x: NDArray[Any]
    y: NDArray[Any]
    client: NDArray[Any]
    x_test: NDArray[Any] | None
    y_test: NDArray[Any] | None
    source: str
    stem: str
    num_classes: int | None = None
    feature_names: tuple[str, ...] | None = None
    labels: str = "y"  # how messages name the labels: the array y, or the label column


def _check_path(name: str, flag: str, path: str | os.PathLike[str]) -> Path:
    """``path`` checked; messages name the parameter ``name`` and the CLI option ``flag``."""
    p = Path(path).expanduser()
    if not p.exists():
        raise DataNotFoundError(f"{name} ({flag}) must be an existing data file, got {name}="
                                f"{str(p)!r} (no such file)")
    if not p.is_file():
        what = "a folder, not a file" if p.is_dir() else "not a regular file"
        raise ValueError(f"{name} ({flag}) must be a data file, got {name}={str(p)!r} ({what})")
    if p.suffix.lower() not in SUFFIXES:
        raise ValueError(f"{name} ({flag}) must end in {', '.join(SUFFIXES)}, got {name}="
                         f"{str(p)!r}")
    if not os.access(p, os.R_OK):
        raise ValueError(f"{name} ({flag}) must be a readable file, got {name}={str(p)!r} "
                         f"(permission denied)")
    return p


def _npz_size(p: Path) -> int:
    try:
        with zipfile.ZipFile(p) as z:
            return sum(info.file_size for info in z.infolist())
    except (zipfile.BadZipFile, OSError) as e:
        raise ValueError(f"{p} is not a readable .npz file ({e})") from None


def _size(p: Path) -> int:
    suffix = p.suffix.lower()
    if suffix == ".npz":
        return _npz_size(p)
    return csv_size(p) if suffix == ".csv" else parquet_size(p)


def _read_npz(p: Path, *, test: bool, need_client: bool = True) -> dict[str, NDArray[Any]]:
    required = ("x", "y") if test or not need_client else _NPZ_REQUIRED
    allowed = set(_NPZ_REQUIRED) if test else {*_NPZ_REQUIRED, *_NPZ_OPTIONAL}
    try:
        with np.load(p, allow_pickle=False) as npz:
            found = list(npz.files)
            missing = [k for k in required if k not in found]
            extra = [k for k in found if k not in allowed]
            if missing or extra:
                what = (f"lacks array(s) {missing}" if missing else "")
                what += (" and " if missing and extra else "")
                what += (f"holds unexpected array(s) {extra}" if extra else "")
                raise ValueError(f"{p} {what}: a .npz data file holds {sorted(allowed)} "
                                 f"(required: {list(required)}), found {found}")
            return {k: npz[k] for k in found}
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise ValueError(f"{p} is not a readable .npz file ({e})") from None
    except ValueError as e:
        if str(e).startswith(str(p)):
            raise
        raise ValueError(f"{p} is not a valid .npz data file ({e})") from None


def _npz_table(p: Path, tp: Path | None, source: str, *, need_client: bool) -> TableData:
    a = _read_npz(p, test=False, need_client=need_client)
    k = a.get("num_classes")
    if k is not None and (k.ndim != 0 or not np.issubdtype(k.dtype, np.integer)):
        raise ValueError(f"{p}: array num_classes must be a 0-d integer, got shape={k.shape}, "
                         f"dtype={k.dtype}")
    if ("x_test" in a) != ("y_test" in a):
        have = "x_test" if "x_test" in a else "y_test"
        raise ValueError(f"{p} holds {have} alone: give x_test and y_test together")
    xt, yt = a.get("x_test"), a.get("y_test")
    if tp is not None:
        if xt is not None:
            raise ValueError(f"{p} holds a test set (x_test, y_test): give no test_path "
                             f"(--test-data) with it, got test_path={str(tp)!r}")
        t = _read_npz(tp, test=True)
        xt, yt = t["x"], t["y"]
    client = a["client"] if "client" in a else np.zeros(a["y"].shape[:1], dtype=np.int64)
    return TableData(x=a["x"], y=a["y"], client=client, x_test=xt, y_test=yt,
                     source=source, stem=p.stem, num_classes=None if k is None else int(k),
                     feature_names=_feature_names(p, a.get("feature_names")))


def _feature_names(p: Path, names: NDArray[Any] | None) -> tuple[str, ...] | None:
    """A ``.npz`` file's optional array ``feature_names`` (1-D strings) as a tuple."""
    if names is None:
        return None
    if names.ndim != 1 or names.dtype.kind != "U":
        raise ValueError(f"{p}: array feature_names must be a 1-D array of strings, got "
                         f"shape={names.shape}, dtype={names.dtype}")
    return tuple(str(n) for n in names)


def _column_table(p: Path, tp: Path | None, source: str, *, client_column: str,
                  label_column: str, need_client: bool) -> TableData:
    read = read_csv if p.suffix.lower() == ".csv" else read_parquet
    train: Columns = read(p, client_column=client_column, label_column=label_column,
                          need_client=need_client)
    xt = yt = None
    if tp is not None:
        test = read(tp, client_column=client_column, label_column=label_column,
                    need_client=False)
        xt, yt = _align(test, train.feature_names, tp), test.y
    client = (train.client if train.client is not None  # no column: one client
              else np.zeros(train.y.size, dtype=np.int64))
    return TableData(x=train.x, y=train.y, client=client, x_test=xt, y_test=yt,
                     source=source, stem=p.stem, feature_names=train.feature_names,
                     labels=f"column {label_column!r}")


def _align(test: Columns, names: tuple[str, ...], tp: Path) -> NDArray[np.float32]:
    """The test file's feature columns in the training file's order."""
    if test.feature_names == names:
        return test.x
    differ = column_difference(names, test.feature_names)
    if differ:
        raise ValueError(f"{tp} must have the feature columns of the training file; it "
                         f"{differ}")
    order = [test.feature_names.index(c) for c in names]
    return np.ascontiguousarray(test.x[:, order])


def check_columns(*, client_column: str, label_column: str) -> None:
    """The client and label columns of a data file must be two columns (one named for both
    would make the clients' ids the labels, and the labels a feature)."""
    if client_column == label_column:
        raise ValueError(f"client_column (--client-column) and label_column (--label-column) "
                         f"must name different columns, got both {client_column!r}")


def read_table(path: str | os.PathLike[str], *, client_column: str = "client",
               label_column: str = "label",
               test_path: str | os.PathLike[str] | None = None,
               option: tuple[str, str] = ("path", "--data"),
               need_client: bool = True) -> TableData:
    """Read a data file (and a test file of the same format), after a memory check.

    ``option`` names ``path`` in messages: the parameter and the command-line option (the test
    file is ``test_path``, ``--test-data``). With ``need_client=False`` a file may lack
    ``client_column`` (an ``.npz`` file its array ``client``): its rows are then one
    client's.

    Raises
    ------
    fedqr.data.DataNotFoundError
        If ``path`` or ``test_path`` does not exist.
    ValueError
        On an unknown suffix, an unreadable or malformed file (the message names the file,
        and the column or array), or a file too large (:class:`DataTooLargeError`).
    """
    check_columns(client_column=client_column, label_column=label_column)
    p = _check_path(*option, path)
    tp = None if test_path is None else _check_path("test_path", "--test-data", test_path)
    suffix = p.suffix.lower()
    if tp is not None and tp.suffix.lower() != suffix:
        raise ValueError(f"test_path (--test-data) must be a {suffix} file like {option[0]} "
                         f"({option[1]}) {str(p)!r}, got test_path={str(tp)!r}")
    source = str(p) if tp is None else f"{p} (test: {tp})"
    check_memory(source, _size(p) + (0 if tp is None else _size(tp)))
    if suffix == ".npz":
        if (client_column, label_column) != ("client", "label"):
            raise ValueError(f"client_column and label_column apply to .csv and .parquet "
                             f"files, not to {p} (its arrays are named client and y)")
        return _npz_table(p, tp, source, need_client=need_client)
    return _column_table(p, tp, source, client_column=client_column,
                         label_column=label_column, need_client=need_client)


def _original_clients(data: FederatedData) -> NDArray[Any]:
    """The clients' original ids (integers where they all are), one per training row."""
    if data.client_names is None:
        return data.client
    names = np.asarray(data.client_names)
    try:
        ints = names.astype(np.int64)
    except ValueError:
        return names[data.client]
    if np.array_equal(ints.astype(str), names):
        return ints[data.client]
    return names[data.client]


def write_npz(path: str | os.PathLike[str], data: FederatedData) -> None:
    """Write ``data`` as an uncompressed ``.npz`` data file, atomically.

    ``x`` and ``x_test`` keep ``data.input_shape``; ``client`` holds the original client ids
    (``data.client_names``) when there are any and ``feature_names`` the features' names when
    there are any, so :meth:`FederatedData.from_file` with ``standardize=False`` gives back
    the same arrays and names.
    """
    p = Path(path)
    if p.suffix.lower() != ".npz":
        raise ValueError(f"path must end in .npz, got path={str(p)!r}")
    shape = data.input_shape

    arrays: dict[str, NDArray[Any]] = {
        "x": data.x.reshape(data.num_train, *shape), "y": data.y,
        "client": _original_clients(data), "x_test": data.x_test.reshape(-1, *shape),
        "y_test": data.y_test, "num_classes": np.asarray(data.num_classes, dtype=np.int64)}
    if data.feature_names is not None:
        arrays["feature_names"] = np.asarray(data.feature_names, dtype=str)

    def write(tmp: Path) -> None:
        np.savez(tmp, **arrays)  # type: ignore[arg-type]  # numpy types **kwds as allow_pickle

    write_file_atomic(p, write)


def _names(data: FederatedData, columns: Sequence[str]) -> tuple[str, ...]:
    names = data.feature_names or tuple(f"x{j}" for j in range(data.num_features))
    clash = sorted(set(names) & set(columns))
    if clash:
        raise ValueError(f"feature names must differ from the columns {list(columns)}, "
                         f"got feature(s) named {clash}")
    return names


def write_csv(path: str | os.PathLike[str], data: FederatedData, *,
              test_path: str | os.PathLike[str], client_column: str = "client",
              label_column: str = "label") -> None:
    """Write the training rows to ``path`` and the test rows to ``test_path`` (CSV)."""
    names = _names(data, (client_column, label_column))
    _write_csv(Path(path), [client_column, label_column, *names],
               [_original_clients(data), data.y], data.x)
    _write_csv(Path(test_path), [label_column, *names], [data.y_test], data.x_test)


def write_parquet(path: str | os.PathLike[str], data: FederatedData, *,
                  test_path: str | os.PathLike[str], client_column: str = "client",
                  label_column: str = "label") -> None:
    """Write the training rows to ``path`` and the test rows to ``test_path`` (Parquet)."""
    names = _names(data, (client_column, label_column))
    _write_parquet(Path(path), {client_column: _original_clients(data), label_column: data.y},
                   names, data.x)
    _write_parquet(Path(test_path), {label_column: data.y_test}, names, data.x_test)
