"""CSV column files for :mod:`fedqr.data.tabular`: comma-separated, a header row, ``"`` quotes.

Every error names the file, the column and the line of the first bad value (1-based, the
header being line 1, as an editor numbers them).
"""

from __future__ import annotations

import csv
import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedqr._atomic import write_file_atomic
from fedqr.data._cells import (
    Columns,
    Layout,
    Where,
    clients_from,
    labels_from,
    layout,
    non_finite,
    out_of_range,
)


def csv_size(p: Path) -> int:
    """Bytes a CSV file needs in memory, estimated by its size."""
    return p.stat().st_size


def _loadtxt(p: Path, cols: Sequence[int], dtype: Any) -> NDArray[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "input contained no data"
        out: NDArray[Any] = np.loadtxt(p, delimiter=",", skiprows=1, usecols=list(cols),
                                       dtype=dtype, ndmin=2, comments=None, quotechar='"',
                                       encoding="utf-8")
    return out


def _check_widths(p: Path, lay: Layout, width: int) -> None:
    """``ValueError`` naming the first line whose number of fields is not the header's.

    Lines without quotes are checked by counting commas; a file with quotes is parsed.
    """
    with p.open(newline="", encoding="utf-8-sig") as f:
        f.readline()
        for lineno, line in enumerate(f, start=2):
            if '"' in line:
                where = _first_bad_cell(p, lay, width)
                if where is not None:
                    raise ValueError(f"{p}: {where}")
                return
            fields = line.count(",") + 1
            if line.strip() and fields != width:
                raise ValueError(f"{p}: line {lineno} has {fields} fields, the header {width}")


def _first_bad_cell(p: Path, lay: Layout, width: int) -> str | None:
    """Where the first malformed line or non-numeric feature of ``p`` is, if found."""
    with p.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        next(reader, None)
        for row in reader:
            if not row:
                continue
            if len(row) != width:
                return f"line {reader.line_num} has {len(row)} fields, the header {width}"
            for j, name in zip(lay.features, lay.names, strict=True):
                try:
                    float(row[j])
                except ValueError:
                    return (f"feature column {name!r} must be numeric, got {row[j]!r} on "
                            f"line {reader.line_num}")
    return None


def _data_row(p: Path, r: int) -> tuple[int, list[str]]:
    """The first line and the fields of data row ``r`` (0-based; empty lines skipped, as
    :func:`numpy.loadtxt` skips them)."""
    with p.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        next(reader, None)
        seen, start = 0, reader.line_num + 1
        for row in reader:
            if row:
                if seen == r:
                    return start, row
                seen += 1
            start = reader.line_num + 1
    return r + 2, []  # not reached: the file held row r when it was read


def _line(p: Path) -> Where:
    return lambda r: f"line {_data_row(p, r)[0]}"


def _check_features(p: Path, lay: Layout, x: NDArray[np.float32]) -> None:
    """``ValueError`` on the first NaN, infinite or (as float32) overflowing feature value."""
    bad = ~np.isfinite(x)
    if not bool(bad.any()):
        return
    r, j = divmod(int(np.argmax(bad)), x.shape[1])
    line, row = _data_row(p, r)
    text = row[lay.features[j]].strip() if row else repr(x[r, j].item())
    try:
        finite = math.isfinite(float(text))
    except ValueError:
        finite = False
    if finite:  # e.g. 1e300: finite as written, infinite as float32
        out_of_range(p, lay.names[j], text, f"line {line}", None)
    non_finite(p, lay.names[j], text, f"line {line}", None)


def _check_filled(p: Path, column: str, ids: NDArray[Any]) -> None:
    """``ValueError`` on an empty client id (``""`` would become a client of its own) or a
    missing one as pandas writes it into a float column (``nan``, ``NaN``)."""
    cells = np.char.strip(ids.astype(str))
    empty = (cells == "") | (np.char.lower(cells) == "nan")
    if bool(empty.any()):
        where = _line(p)(int(np.argmax(empty)))
        raise ValueError(f"{p}: column {column!r} must have no missing values (a client id "
                         f"on every line), got {int(empty.sum())} empty or NaN cell(s), the "
                         f"first on {where}")


def read_csv(p: Path, *, client_column: str, label_column: str, need_client: bool) -> Columns:
    """Read a comma-separated file with a header row."""
    try:
        with p.open(newline="", encoding="utf-8-sig") as f:
            header = next(csv.reader(f), None)
        if header is None:
            raise ValueError(f"{p} is empty: a CSV data file needs a header row")
        lay = layout(p, header, client_column=client_column, label_column=label_column,
                     need_client=need_client)
        try:
            x = _loadtxt(p, lay.features, np.float32)
            ids = _loadtxt(p, [lay.label] if lay.client is None else [lay.label, lay.client],
                           str)
        except ValueError as e:
            where = _first_bad_cell(p, lay, len(header))
            raise ValueError(f"{p}: {where or e}") from None
        _check_widths(p, lay, len(header))
    except (UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"{p} is not a readable CSV file ({e})") from None
    if x.shape[0] == 0:
        raise ValueError(f"{p} has a header but no data rows")
    _check_features(p, lay, x)
    y = labels_from(p, label_column, ids[:, 0], _line(p))
    client = None
    if lay.client is not None:
        if need_client:
            _check_filled(p, client_column, ids[:, 1])
        client = clients_from(ids[:, 1])
    return Columns(x=np.ascontiguousarray(x), y=y, client=client, feature_names=lay.names)


def write_csv(p: Path, header: Sequence[str], ids: Sequence[NDArray[Any]],
              x: NDArray[np.float32]) -> None:
    """Write ``ids`` columns then ``x`` (``%.9g``: float32 values read back exactly)."""

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(header)
            id_lists = [col.tolist() for col in ids]
            for i, row in enumerate(x.tolist()):
                w.writerow([*(col[i] for col in id_lists), *(f"{v:.9g}" for v in row)])

    write_file_atomic(p, write)
