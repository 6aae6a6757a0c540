"""Column files (CSV, Parquet) for :mod:`fedqr.data.tabular`: a client, a label, features.

Errors name the file, the column and the line (CSV, 1-based, the header being line 1) or
row (Parquet, 0-based, said so) of the first bad value. The CSV reader lives in
:mod:`fedqr.data._csv`, the checks of the values in :mod:`fedqr.data._cells`; both are
re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedqr._atomic import write_file_atomic
from fedqr.data._cells import Columns, Where, check_feature, clients_from, labels_from, layout
from fedqr.data._csv import csv_size, read_csv, write_csv

__all__ = ["Columns", "csv_size", "parquet_size", "read_csv", "read_parquet", "write_csv",
           "write_parquet"]


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
    """Column ``name`` as NumPy, refusing nulls and types outside ``kinds`` (i, f, s); a
    dictionary-encoded column (a pandas categorical) is read as its values."""
    pa, _ = _pyarrow()
    col = table.column(name)
    given = col.type
    if pa.types.is_dictionary(given):
        col = col.cast(given.value_type)
    t = col.type
    ok = (((pa.types.is_integer(t) or pa.types.is_boolean(t)) and "i" in kinds)
          or (pa.types.is_floating(t) and "f" in kinds)
          or ((pa.types.is_string(t) or pa.types.is_large_string(t)) and "s" in kinds))
    if not ok:
        want = {"if": "numeric", "i": "integer"}.get(kinds, "integer or string")
        hint = (" (number a label's classes 0 to k - 1, one-hot encode a categorical feature)"
                if pa.types.is_string(t) or pa.types.is_large_string(t) else "")
        raise ValueError(f"{p}: column {name!r} must be {want}, got type {given}{hint}")
    if col.null_count:
        first = int(np.argmax(col.is_null().to_numpy(zero_copy_only=False)))
        raise ValueError(f"{p}: column {name!r} must have no missing values, got "
                         f"{col.null_count}, the first in {_row(first)}")
    out: NDArray[Any] = col.to_numpy()
    return out.astype(str) if out.dtype == np.object_ else out


def _row(r: int) -> str:
    return f"row {r} (0-based)"


def read_parquet(p: Path, *, client_column: str, label_column: str,
                 need_client: bool) -> Columns:
    """Read a Parquet file."""
    _, pq = _pyarrow()
    try:
        table = pq.read_table(p)
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ...
        raise ValueError(f"{p} is not a readable Parquet file ({e})") from None
    lay = layout(p, table.column_names, client_column=client_column,
                 label_column=label_column, need_client=need_client)
    if table.num_rows == 0:
        raise ValueError(f"{p} has no data rows")
    where: Where = _row
    x = np.empty((table.num_rows, len(lay.names)), dtype=np.float32)
    for j, name in enumerate(lay.names):
        values = _numpy(p, table, name, kinds="if")
        with np.errstate(over="ignore"):  # an overflow is reported by check_feature
            x[:, j] = values
        check_feature(p, name, values, x[:, j], where)
    y = labels_from(p, label_column, _numpy(p, table, label_column, kinds="if"), where)
    client = None
    if lay.client is not None:
        client = _numpy(p, table, client_column, kinds="ifs")
        client = clients_from(client) if client.dtype.kind == "U" else client
    return Columns(x=x, y=y, client=client, feature_names=lay.names)


def write_parquet(p: Path, ids: Mapping[str, NDArray[Any]], names: Sequence[str],
                  x: NDArray[np.float32]) -> None:
    """Write the ``ids`` columns then one float32 column per feature."""
    pa, pq = _pyarrow()
    cols = {k: pa.array(v.tolist() if v.dtype.kind == "U" else v) for k, v in ids.items()}
    cols.update({n: pa.array(np.ascontiguousarray(x[:, j])) for j, n in enumerate(names)})
    write_file_atomic(p, lambda tmp: pq.write_table(pa.table(cols), tmp))
