"""Column files (CSV, Parquet) for :mod:`fedqr.data.tabular`: a client, a label, features.

Errors name the file, the column and the line (CSV, 1-based, the header being line 1) or
row (Parquet, 0-based) of the first bad value.
"""

from __future__ import annotations

import csv
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedqr._atomic import write_file_atomic


@dataclass(frozen=True, eq=False)
class Columns:
    """The columns of one file: features ``x``, labels ``y``, client ids (or ``None``)."""

    x: NDArray[np.float32]
    y: NDArray[np.int64]
    client: NDArray[Any] | None
    feature_names: tuple[str, ...]


@dataclass(frozen=True)
class _Layout:
    label: int
    client: int | None
    features: tuple[int, ...]
    names: tuple[str, ...]


def _layout(p: Path, header: Sequence[str], *, client_column: str, label_column: str,
            need_client: bool) -> _Layout:
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
    return _Layout(label=li, client=ci, features=feats,
                   names=tuple(names[j] for j in feats))


def labels_from(p: Path, column: str, values: NDArray[Any], where: str) -> NDArray[np.int64]:
    """Integer labels ``>= 0`` from strings or numbers; ``where`` is ``"line"`` or ``"row"``."""
    offset = 2 if where == "line" else 0
    if values.dtype.kind in "US":
        num = np.full(values.shape, np.nan)
        for r, v in enumerate(values.tolist()):
            try:
                num[r] = float(v)
            except ValueError:
                raise ValueError(f"{p}: column {column!r} must hold integer class labels, "
                                 f"got {v!r} on {where} {r + offset} (number the classes 0 to "
                                 f"k - 1 first, the same way in every file: the test file, "
                                 f"each Flower node's)") from None
        values = num
    ok = np.isfinite(values) & (values == np.round(values)) & (values >= 0)
    if not bool(ok.all()):
        r = int(np.flatnonzero(~ok)[0])
        raise ValueError(f"{p}: column {column!r} must hold integer class labels >= 0, got "
                         f"{values[r].item()!r} on {where} {r + offset}")
    return values.astype(np.int64)


def clients_from(values: NDArray[Any]) -> NDArray[Any]:
    """Client ids read as text: integers where every id is one (``"7"``, not ``"07"``)."""
    text = values.astype(str)
    try:
        ints = text.astype(np.int64)
    except (ValueError, OverflowError):
        return text
    return ints if np.array_equal(ints.astype(str), text) else text


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


def _check_widths(p: Path, lay: _Layout, width: int) -> None:
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


def _first_bad_cell(p: Path, lay: _Layout, width: int) -> str | None:
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


def read_csv(p: Path, *, client_column: str, label_column: str, need_client: bool) -> Columns:
    """Read a comma-separated file with a header row."""
    try:
        with p.open(newline="", encoding="utf-8-sig") as f:
            header = next(csv.reader(f), None)
        if header is None:
            raise ValueError(f"{p} is empty: a CSV data file needs a header row")
        lay = _layout(p, header, client_column=client_column, label_column=label_column,
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
    y = labels_from(p, label_column, ids[:, 0], "line")
    client = None if lay.client is None else clients_from(ids[:, 1])
    return Columns(x=np.ascontiguousarray(x), y=y, client=client, feature_names=lay.names)


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(".parquet data files need pyarrow: pip install pyarrow") from None
    return pa, pq


def parquet_size(p: Path) -> int:
    """Uncompressed bytes of a Parquet file's row groups, from its footer."""
    _, pq = _pyarrow()
    try:
        md = pq.ParquetFile(p).metadata
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ...
        raise ValueError(f"{p} is not a readable Parquet file ({e})") from None
    return int(sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups)))


def _numpy(p: Path, table: Any, name: str, *, kinds: str) -> NDArray[Any]:
    """Column ``name`` as NumPy, refusing nulls and types outside ``kinds`` (i, f, s)."""
    pa, _ = _pyarrow()
    col = table.column(name)
    t = col.type
    ok = (((pa.types.is_integer(t) or pa.types.is_boolean(t)) and "i" in kinds)
          or (pa.types.is_floating(t) and "f" in kinds)
          or ((pa.types.is_string(t) or pa.types.is_large_string(t)) and "s" in kinds))
    if not ok:
        want = {"if": "numeric", "i": "integer"}.get(kinds, "integer or string")
        raise ValueError(f"{p}: column {name!r} must be {want}, got type {t}")
    if col.null_count:
        raise ValueError(f"{p}: column {name!r} must have no missing values, got "
                         f"{col.null_count}")
    out: NDArray[Any] = col.to_numpy()
    return out.astype(str) if out.dtype == np.object_ else out


def read_parquet(p: Path, *, client_column: str, label_column: str,
                 need_client: bool) -> Columns:
    """Read a Parquet file."""
    _, pq = _pyarrow()
    try:
        table = pq.read_table(p)
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ...
        raise ValueError(f"{p} is not a readable Parquet file ({e})") from None
    lay = _layout(p, table.column_names, client_column=client_column,
                  label_column=label_column, need_client=need_client)
    if table.num_rows == 0:
        raise ValueError(f"{p} has no data rows")
    x = np.empty((table.num_rows, len(lay.names)), dtype=np.float32)
    for j, name in enumerate(lay.names):
        x[:, j] = _numpy(p, table, name, kinds="if")
    y = labels_from(p, label_column, _numpy(p, table, label_column, kinds="if"), "row")
    client = None
    if lay.client is not None:
        client = _numpy(p, table, client_column, kinds="ifs")
        client = clients_from(client) if client.dtype.kind == "U" else client
    return Columns(x=x, y=y, client=client, feature_names=lay.names)


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


def write_parquet(p: Path, ids: Mapping[str, NDArray[Any]], names: Sequence[str],
                  x: NDArray[np.float32]) -> None:
    """Write the ``ids`` columns then one float32 column per feature."""
    pa, pq = _pyarrow()
    cols = {k: pa.array(v.tolist() if v.dtype.kind == "U" else v) for k, v in ids.items()}
    cols.update({n: pa.array(np.ascontiguousarray(x[:, j])) for j, n in enumerate(names)})
    write_file_atomic(p, lambda tmp: pq.write_table(pa.table(cols), tmp))
