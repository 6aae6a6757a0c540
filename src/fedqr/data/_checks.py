"""Consistency checks of :class:`fedqr.data.FederatedData` and of the arguments of its methods."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from fedqr.data._prepare import check_finite
from fedqr.data.partition import Partition

if TYPE_CHECKING:
    from fedqr.data.federated import FederatedData


def _check_array(name: str, arr: object, *, dtype: type[np.generic], ndim: int,
                 rows: int | None = None) -> NDArray[Any]:
    if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.ndim != ndim:
        got = (f"shape={arr.shape}, dtype={arr.dtype}" if isinstance(arr, np.ndarray)
               else f"{type(arr).__name__}")
        raise ValueError(f"{name} must be a {ndim}-D {np.dtype(dtype).name} numpy array, "
                         f"got {got}")
    if rows is not None and arr.shape[0] != rows:
        raise ValueError(f"{name} must have {rows} rows (one per row of "
                         f"{'x' if name in ('y', 'client') else 'x_test'}), "
                         f"got {name}.shape={arr.shape}")
    return arr


def _check_labels(name: str, y: NDArray[np.int64], num_classes: int) -> None:
    if y.size and not 0 <= int(y.min()) <= int(y.max()) < num_classes:
        raise ValueError(f"{name} must lie in [0, {num_classes - 1}] (num_classes="
                         f"{num_classes}), got values in [{int(y.min())}, {int(y.max())}]")


def _check_clients(d: FederatedData) -> None:
    if int(d.client.min()) < 0:
        raise ValueError(f"client must hold ids >= 0, got {int(d.client.min())}")
    sizes = np.bincount(d.client)
    empty = np.flatnonzero(sizes == 0)
    if empty.size:
        raise ValueError(f"every client 0..{sizes.size - 1} must hold at least 1 training row, "
                         f"got {empty.size} without (the first: client {int(empty[0])})")
    names = d.client_names
    if names is not None and (len(names) != sizes.size or len(set(names)) != len(names)):
        raise ValueError(f"client_names must name the {sizes.size} clients once each, got "
                         f"{len(names)} name(s), {len(set(names))} distinct")


def check_federated(d: FederatedData) -> None:
    """``ValueError`` unless the fields of ``d`` are consistent (see its docstring)."""
    x = _check_array("x", d.x, dtype=np.float32, ndim=2)
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"x must hold at least 1 row and 1 feature, got x.shape={x.shape}")
    if not x.flags.c_contiguous:
        raise ValueError("x must be C-contiguous (numpy.ascontiguousarray)")
    _check_array("y", d.y, dtype=np.int64, ndim=1, rows=x.shape[0])
    _check_array("client", d.client, dtype=np.int64, ndim=1, rows=x.shape[0])
    xt = _check_array("x_test", d.x_test, dtype=np.float32, ndim=2)
    _check_array("y_test", d.y_test, dtype=np.int64, ndim=1, rows=xt.shape[0])
    if xt.shape[0] == 0:
        raise ValueError("x_test must hold at least 1 row, got 0 (empty test set)")
    if xt.shape[1] != x.shape[1]:
        raise ValueError(f"x_test must have {x.shape[1]} features like x, got {xt.shape[1]}")
    present = np.unique(d.y)
    if present.size < 2:
        raise ValueError(f"the training rows must hold at least 2 classes, got only class "
                         f"{int(present[0])} (y)")
    k = d.num_classes
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got num_classes={k!r}")
    _check_labels("y", d.y, k)
    _check_labels("y_test", d.y_test, k)
    _check_clients(d)
    if math.prod(d.input_shape) != x.shape[1] or min(d.input_shape, default=0) < 1:
        raise ValueError(f"input_shape must be positive and multiply to num_features="
                         f"{x.shape[1]}, got input_shape={d.input_shape}")
    check_finite("x", x)
    check_finite("x_test", xt)
    s = d.standardization
    if s is not None and not (s.mean.shape == s.std.shape == (x.shape[1],)):
        raise ValueError(f"standardization must hold {x.shape[1]} means and stds, got "
                         f"{s.mean.shape} and {s.std.shape}")
    if d.feature_names is not None:
        names = d.feature_names
        if len(names) != x.shape[1]:
            raise ValueError(f"feature_names must name the {x.shape[1]} features, got "
                             f"{len(names)} name(s)")
        odd = [n for n in names if not isinstance(n, str) or not n]
        if odd:
            raise ValueError(f"feature_names must be non-empty strings, got {odd[0]!r}")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:  # a public proxy's columns are matched by name: one name, one column
            raise ValueError(f"feature_names must not repeat a name (columns are matched by "
                             f"name), got {', '.join(map(repr, twice[:10]))} more than once")


def coverage(partition: Partition, num_rows: int) -> NDArray[np.int64]:
    """The client of every row under ``partition``, checking each row has exactly one."""
    client = np.full(num_rows, -1, dtype=np.int64)
    for i, ix in enumerate(partition.indices):
        if ix.size and (int(ix[0]) < 0 or int(ix[-1]) >= num_rows):
            raise ValueError(f"partition.indices[{i}] must lie in [0, {num_rows - 1}] (the "
                             f"training rows), got values in [{int(ix[0])}, {int(ix[-1])}]")
        client[ix] = i
    assigned = int(partition.sizes.sum())
    missing = np.flatnonzero(client < 0)
    if missing.size or assigned != num_rows:
        first = f" (the first: row {int(missing[0])})" if missing.size else ""
        raise ValueError(f"partition must assign each of the {num_rows} training rows to "
                         f"exactly one client, got {assigned} assignments and {missing.size} "
                         f"row(s) without a client{first}")
    return client


def check_mapping(mapping: Mapping[Any, Any], num_classes: int
                  ) -> tuple[NDArray[np.int64], int]:
    """A lookup table ``old label -> new label`` (``-1``: dropped) and the new class count.

    Raises
    ------
    ValueError
        On an empty mapping, keys that are not classes ``0..num_classes-1``, or values that
        are not exactly the integers ``0..k-1``.
    """
    if not mapping:
        raise ValueError("the selection of classes must not be empty, got none")

    def is_int(v: object) -> bool:
        return isinstance(v, int | np.integer) and not isinstance(v, bool)

    unknown = [c for c in mapping if not (is_int(c) and 0 <= int(c) < num_classes)]
    if unknown:
        shown = ", ".join(map(repr, unknown[:10])) + (
            f", ... ({len(unknown)} in all)" if len(unknown) > 10 else "")
        raise ValueError(f"classes must be integers in [0, {num_classes - 1}] (num_classes="
                         f"{num_classes}), got unknown class(es) [{shown}]")
    values = list(mapping.values())
    k = len(set(values))
    if k < 2:
        raise ValueError(f"the selection must keep at least 2 classes, got {k} "
                         f"(mapping={dict(mapping)})")
    if not all(is_int(v) for v in values) or {int(v) for v in values} != set(range(k)):
        raise ValueError(f"the new labels must be the classes 0..{k - 1} without a gap ({k} "
                         f"distinct new labels given), got {sorted(set(values), key=str)}: a "
                         f"label map names every class of the deployment, 0..K-1, for at least "
                         f"one proxy class")
    lut = np.full(num_classes, -1, dtype=np.int64)
    for c, v in mapping.items():
        lut[int(c)] = int(v)
    return lut, k
