"""The rows a SuperNode holds (``fedqr flower supernode --data``), and a server's test file.

A SuperNode's file holds one client's rows, in the ``--data`` format of ``fedqr run``
(:mod:`fedqr.data.tabular`): ``.npz`` with ``x`` ``[n, ...]`` and ``y`` ``[n]`` (``client``,
``x_test``, ``y_test`` and ``num_classes`` may be there; the node trains on ``x`` and ``y``
only), or ``.csv`` / ``.parquet`` with a label column and the features (a client column may
be there). A client column must name one client: a file of several clients is refused.

Standardisation is local: with ``standardize`` every feature is standardised by this file's
own rows' mean and std, so no statistic leaves the node (pooled statistics, as ``fedqr run``
and ``fedqr flower simulate --data`` use, would themselves be a release); without it the
features are used as given.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedqr.data._build import sample_shape
from fedqr.data._prepare import apply_stats, feature_stats, image_channels

__all__ = ["NodeRows", "read_node_rows"]

_SUFFIXES = (".npz", ".csv", ".parquet")
_CACHE: dict[tuple[object, ...], NodeRows] = {}


@dataclass(frozen=True, eq=False)
class NodeRows:
    """One party's rows: ``x`` float32 ``(n, F)`` flattened, ``y`` int64 ``(n,)``."""

    x: NDArray[np.float32]
    y: NDArray[np.int64]
    input_shape: tuple[int, ...]
    num_classes: int | None  # the file's num_classes array (.npz), if any
    name: str
    client: str | None = None  # the one client id the file's client array or column holds


def read_node_rows(path: Path, *, option: str = "--data", client_column: str = "client",
                   label_column: str = "label", standardize: bool = False,
                   one_client: bool = True) -> NodeRows:
    """Read and check ``path`` (cached per file version and options).

    Raises
    ------
    ValueError
        Naming ``option``, the file, and the array or column at fault.
    """
    try:
        stat = path.stat()
    except OSError:
        raise ValueError(f"{option}: no such file: {path}") from None
    if path.suffix.lower() not in _SUFFIXES:
        raise ValueError(f"{option} must end in {', '.join(_SUFFIXES)}, got {option}={path}")
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, client_column, label_column,
           standardize, one_client)
    if key not in _CACHE:
        x, y, client, k = _read(path, option=option, client_column=client_column,
                                label_column=label_column)
        _CACHE[key] = _checked(path, x, y, client, k, option=option, standardize=standardize,
                               one_client=one_client)
    return _CACHE[key]


def _read(path: Path, *, option: str, client_column: str, label_column: str
          ) -> tuple[NDArray[Any], NDArray[Any], NDArray[Any] | None, int | None]:
    if path.suffix.lower() == ".npz":
        return _read_npz(path, option=option)
    from fedqr.data._columns import csv_size, parquet_size, read_csv, read_parquet
    from fedqr.data._memory import check_memory

    csv = path.suffix.lower() == ".csv"
    read = read_csv if csv else read_parquet
    try:
        check_memory(str(path), csv_size(path) if csv else parquet_size(path))
        cols = read(path, client_column=client_column, label_column=label_column,
                    need_client=False)
    except ValueError as e:
        raise ValueError(f"{option}: {e}") from None
    return cols.x, cols.y, cols.client, None


def _read_npz(path: Path, *, option: str
              ) -> tuple[NDArray[Any], NDArray[Any], NDArray[Any] | None, int | None]:
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {n: np.asarray(f[n]) for n in f.files if n in ("x", "y", "client",
                                                                      "num_classes")}
            names = sorted(f.files)
    except (OSError, EOFError, ValueError, AttributeError, zipfile.BadZipFile) as e:
        raise ValueError(f"{option}: {path} is not a NumPy .npz file ({e})") from None
    if "x" not in arrays or "y" not in arrays:
        raise ValueError(f"{option}: {path} must hold arrays 'x' and 'y', got {names}")
    k = arrays.get("num_classes")
    if k is not None and (k.ndim != 0 or not np.issubdtype(k.dtype, np.integer)):
        raise ValueError(f"{option}: num_classes in {path} must be a 0-d integer, got "
                         f"shape={k.shape}, dtype={k.dtype}")
    return arrays["x"], arrays["y"], arrays.get("client"), None if k is None else int(k)


def _checked(path: Path, x: NDArray[Any], y: NDArray[Any], client: NDArray[Any] | None,
             k: int | None, *, option: str, standardize: bool, one_client: bool) -> NodeRows:
    if x.ndim < 2 or y.ndim != 1 or x.shape[0] != y.shape[0] or x.shape[0] == 0 or (
            x.size == 0):
        raise ValueError(f"{option}: {path} must hold x of shape (n, p) and y of shape (n,) "
                         f"with n >= 1 (x may also be (n, C, H, W) images), got "
                         f"x.shape={x.shape}, y.shape={y.shape}")
    if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)):
        raise ValueError(f"{option}: x in {path} must be finite numbers, got dtype {x.dtype}")
    flat = np.ascontiguousarray(x.reshape(x.shape[0], -1), dtype=np.float32)
    if not np.isfinite(flat).all():
        row = int(np.flatnonzero(~np.isfinite(flat).all(axis=1))[0])
        raise ValueError(f"{option}: x in {path} must be finite numbers, got a NaN or "
                         f"infinite value in row {row}")
    if not np.issubdtype(y.dtype, np.integer) or int(y.min()) < 0:
        raise ValueError(f"{option}: y in {path} must be integer labels >= 0, got dtype "
                         f"{y.dtype}, min {y.min()}")
    if k is not None and int(y.max()) >= k:
        raise ValueError(f"{option}: y in {path} must lie in [0, num_classes - 1={k - 1}], "
                         f"got a label {int(y.max())}")
    if one_client and client is not None and client.size and len(np.unique(client)) > 1:
        ids = np.unique(client)
        raise ValueError(f"{option}: {path} holds the rows of {len(ids)} clients "
                         f"({', '.join(str(v) for v in ids[:5].tolist())}"
                         f"{', ...' if len(ids) > 5 else ''}): a SuperNode holds one "
                         "client's rows; give it a file of its own client only")
    shape = sample_shape(tuple(int(d) for d in x.shape[1:]))  # [n, H, W]: (1, H, W)
    if standardize:
        flat = apply_stats(flat, feature_stats(flat, channels=image_channels(shape)))
    one = np.unique(client) if client is not None and client.size else np.empty(0)
    return NodeRows(x=flat, y=y.astype(np.int64), input_shape=shape,
                    num_classes=k, name=path.stem,
                    client=str(one[0]) if len(one) == 1 else None)
