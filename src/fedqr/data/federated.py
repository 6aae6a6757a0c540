"""Federated data from any source: :class:`FederatedData`, rows with a client id each.

A :class:`FederatedData` holds flattened float32 training rows, their labels and the client
of every row, and a test set. It is built from arrays (:meth:`FederatedData.from_arrays`), a
data file (:meth:`FederatedData.from_file`: ``.npz``, ``.csv``, ``.parquet``, see
:mod:`fedqr.data.tabular`) or a built-in recipe (:meth:`FederatedData.from_client_data` of
:meth:`fedqr.data.DataSpec.build`), and converts back to :class:`fedqr.data.ClientData`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedqr.data import _prepare as prep
from fedqr.data._build import build
from fedqr.data._checks import check_federated, check_mapping, coverage
from fedqr.data._labels import LabelNames
from fedqr.data._prepare import Standardization
from fedqr.data.datasets import Dataset
from fedqr.data.partition import Partition
from fedqr.data.spec import ClientData

__all__ = ["FederatedData", "Standardization"]


@dataclass(frozen=True, eq=False)
class FederatedData:
    """Training rows with the client of each row, and a test set.

    Attributes
    ----------
    x : numpy.ndarray
        ``float32 [n, num_features]`` training rows, flattened, C-contiguous.
    y : numpy.ndarray
        ``int64 [n]`` labels in ``0..num_classes-1``.
    client : numpy.ndarray
        ``int64 [n]`` client ``0..N-1`` of every row; every client holds at least one row.
    x_test, y_test : numpy.ndarray
        ``float32 [n_test, num_features]`` and ``int64 [n_test]`` (at least one row).
    num_classes : int
        Number of classes (at least 2 of them occur in the training rows).
    input_shape : tuple of int
        Shape of one sample before flattening, e.g. ``(1, 28, 28)`` or ``(p,)``.
    name : str
        A label for reports.
    client_names : tuple of str or None
        The original id of every client (from a file or array), ``None`` when they were
        ``0..N-1``.
    standardization : Standardization or None
        The per-feature statistics the features were standardised with, if any.
    feature_names : tuple of str or None
        Column names of the features (from a CSV or Parquet file).

    The arrays are not copied on construction and must not be modified afterwards.
    """

    x: NDArray[np.float32]
    y: NDArray[np.int64]
    client: NDArray[np.int64]
    x_test: NDArray[np.float32]
    y_test: NDArray[np.int64]
    num_classes: int
    input_shape: tuple[int, ...]
    name: str = "data"
    client_names: tuple[str, ...] | None = None
    standardization: Standardization | None = None
    feature_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_shape", tuple(int(d) for d in self.input_shape))
        check_federated(self)

    @property
    def num_clients(self) -> int:
        """Number of clients N."""
        return int(self.client.max()) + 1

    @property
    def num_features(self) -> int:
        """Number of features per row."""
        return int(self.x.shape[1])

    @property
    def num_train(self) -> int:
        """Number of training rows."""
        return int(self.x.shape[0])

    @property
    def num_test(self) -> int:
        """Number of test rows."""
        return int(self.x_test.shape[0])

    @property
    def sizes(self) -> NDArray[np.int64]:
        """Training rows of every client, ``int64 [N]``."""
        return np.bincount(self.client, minlength=self.num_clients).astype(np.int64)

    def partition(self) -> Partition:
        """The clients' rows: ``indices[i] = np.flatnonzero(client == i)`` (ascending)."""
        return Partition(indices=tuple(prep.client_rows(self.client, self.num_clients)))

    def to_client_data(self) -> ClientData:
        """The data as the simulator's :class:`~fedqr.data.ClientData` (arrays not copied)."""
        image_shape = self.input_shape if len(self.input_shape) == 3 else None
        ds = Dataset(name=self.name, x_train=self.x, y_train=self.y, x_test=self.x_test,
                     y_test=self.y_test, num_classes=self.num_classes, image_shape=image_shape)
        return ClientData(dataset=ds, partition=self.partition())

    @classmethod
    def from_client_data(cls, data: ClientData) -> FederatedData:
        """The exact inverse of :meth:`to_client_data` (the same arrays, bit for bit).

        Raises
        ------
        ValueError
            If the partition does not assign every training row to exactly one client, or a
            client holds no row.
        """
        ds = data.dataset
        client = coverage(data.partition, ds.num_train)
        shape = ds.image_shape if ds.image_shape is not None else (ds.num_features,)
        return cls(x=np.ascontiguousarray(ds.x_train), y=ds.y_train, client=client,
                   x_test=np.ascontiguousarray(ds.x_test), y_test=ds.y_test,
                   num_classes=ds.num_classes, input_shape=shape, name=ds.name)

    @classmethod
    def from_arrays(cls, *, x: ArrayLike, y: ArrayLike, client: ArrayLike,
                    x_test: ArrayLike | None = None, y_test: ArrayLike | None = None,
                    test_share: float | None = None, standardize: bool = True,
                    num_classes: int | None = None, input_shape: Sequence[int] | None = None,
                    name: str = "arrays", seed: int = 0,
                    feature_names: Sequence[str] | None = None) -> FederatedData:
        """Build from rows ``x [n, ...]``, labels ``y [n]`` and client ids ``client [n]``.

        Parameters
        ----------
        x, y, client : array_like
            Features (int or float; stored flattened as float32), integer labels and client
            ids (any integers or strings, mapped to ``0..N-1`` by sorted unique value; the
            originals are kept in ``client_names``). Rows keep their order.
        x_test, y_test : array_like or None
            A test set; or else ``test_share``.
        test_share : float or None
            Share in ``(0, 1)`` of each client's rows held out for testing, stratified by
            label within the client and drawn from ``numpy.random.default_rng(seed)``; every
            client keeps at least one training row.
        standardize : bool
            Standardise every feature by the training rows' mean and population std (float64;
            a constant feature is only centred), train and test alike; images (an
            ``input_shape`` ``(C, H, W)``) every channel by the mean and std of its pixels, as
            the built-in sets are. Warns (:class:`~fedqr.data.FeatureScaleWarning`) where
            standardised test features lie far outside the training rows' (``|z|`` above 100
            and 10 times the training rows' largest: a feature nearly constant on the training
            rows, divided by its tiny std).
        num_classes : int or None
            Number of classes (labels must lie in ``0..num_classes-1``); ``max(label) + 1``
            when ``None``, and then a given test set must have no label above every training
            label, which may not exceed the number of training rows (a model output per
            class: a huge label is refused). A given ``num_classes`` may exceed them (classes
            without rows kept on purpose), as long as the model fits in memory.
        input_shape : sequence of int or None
            Shape of one sample (its product is the number of features); ``x.shape[1:]``,
            where a 3-D ``x`` ``[n, H, W]`` holds 1-channel images ``(1, H, W)`` (as the
            built-in MNIST), the shape image models such as ``cnn`` need.
        name : str
            A label for reports.
        seed : int
            Seed of the hold-out draw.
        feature_names : sequence of str or None
            Names of the features.

        Raises
        ------
        ValueError
            On any inconsistent input; the message names the parameter and the value.

        Warns
        -----
        fedqr.data.EmptyClassWarning
            Once, if ``num_classes`` is ``None`` and a class of ``0..k-1`` has no training row.
        """
        return build(cls, x=x, y=y, client=client, x_test=x_test, y_test=y_test,
                     test_share=test_share, standardize=standardize, num_classes=num_classes,
                     input_shape=input_shape, name=name, seed=seed, feature_names=feature_names)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, client_column: str = "client",
                  label_column: str = "label", test_path: str | os.PathLike[str] | None = None,
                  test_share: float | None = None, standardize: bool = True, seed: int = 0,
                  name: str | None = None, num_classes: int | None = None) -> FederatedData:
        """Read a ``.npz``, ``.csv`` or ``.parquet`` file (see :mod:`fedqr.data.tabular`).

        The test set comes from the file (``.npz`` arrays ``x_test``, ``y_test``), from
        ``test_path`` (a file of the same format; its client column is ignored), or from
        ``test_share`` (see :meth:`from_arrays`). ``name`` defaults to the file's stem;
        ``num_classes`` to the file's (``.npz`` array ``num_classes``), else the largest label
        plus one. ``client_column`` and ``label_column`` name the columns of a ``.csv`` or
        ``.parquet`` file.

        Raises
        ------
        fedqr.data.DataNotFoundError
            If a file does not exist.
        ValueError
            If a file is malformed, too large for the available memory, or its contents fail
            the checks of :meth:`from_arrays`; the message names the file and the column.
        """
        from fedqr.data.tabular import read_table

        t = read_table(path, client_column=client_column, label_column=label_column,
                       test_path=test_path)
        if t.x_test is not None and test_share is not None:
            where = (f"test_path={str(test_path)!r}" if test_path is not None
                     else f"the arrays x_test and y_test of {path}")
            raise ValueError(f"give a test set (in the file or test_path) or test_share, not "
                             f"both (--test-data or --test-share); got test_share="
                             f"{test_share!r} and a test set: {where}")
        k = num_classes if num_classes is not None else t.num_classes
        names = LabelNames(labels=t.labels, num_classes="num_classes" if num_classes is not None
                           else "num_classes (the file's array num_classes)")
        try:
            return build(cls, x=t.x, y=t.y, client=t.client, x_test=t.x_test,
                         y_test=t.y_test, test_share=test_share, standardize=standardize,
                         num_classes=k, input_shape=None, seed=seed,
                         name=name if name is not None else t.stem,
                         feature_names=t.feature_names, names=names)
        except ValueError as e:
            raise ValueError(f"{t.source}: {e}") from None

    def to_npz(self, path: str | os.PathLike[str]) -> None:
        """Write the data as a ``.npz`` file :meth:`from_file` reads back, atomically."""
        from fedqr.data.tabular import write_npz

        write_npz(path, self)

    @cached_property
    def digest(self) -> str:
        """sha256 of the arrays, ``num_classes`` and ``input_shape`` (hex)."""
        h = hashlib.sha256()
        h.update(json.dumps({"num_classes": self.num_classes,
                             "input_shape": list(self.input_shape)}).encode())
        for key in ("x", "y", "client", "x_test", "y_test"):
            arr: NDArray[Any] = np.ascontiguousarray(getattr(self, key))
            h.update(f"|{key}|{arr.dtype.str}|{arr.shape}|".encode())
            h.update(arr.data)
        return h.hexdigest()

    def identity(self) -> dict[str, Any]:
        """A JSON-ready description: sizes, standardisation statistics, and ``sha256``."""
        return {"name": self.name, "num_clients": self.num_clients,
                "num_classes": self.num_classes, "num_features": self.num_features,
                "input_shape": list(self.input_shape), "num_train": self.num_train,
                "num_test": self.num_test,
                "standardization": (None if self.standardization is None
                                    else self.standardization.identity()),
                "sha256": self.digest}

    def relabel(self, mapping: Mapping[int, int]) -> FederatedData:
        """Keep the rows whose label is a key of ``mapping`` and relabel them by it.

        The new labels (the values) must be exactly ``0..k-1`` (several classes may merge).
        Clients left without training rows are dropped and the others renumbered in order;
        ``client_names`` then keeps their original ids. Features are not re-standardised.

        Raises
        ------
        ValueError
            On an empty mapping, a key that is no class, values that are not ``0..k-1``, or
            a selection without training or test rows.
        """
        lut, k = check_mapping(mapping, self.num_classes)
        keep, keep_test = lut[self.y] >= 0, lut[self.y_test] >= 0
        if not keep.any() or not keep_test.any():
            split = "training" if not keep.any() else "test"
            raise ValueError(f"mapping selects no {split} row: no row has a label in "
                             f"{sorted(int(c) for c in mapping)}")
        kept_clients = np.unique(self.client[keep])
        new_id = np.full(self.num_clients, -1, dtype=np.int64)
        new_id[kept_clients] = np.arange(kept_clients.size)
        names = self.client_names
        if kept_clients.size < self.num_clients:
            old = names if names is not None else tuple(str(i) for i in range(self.num_clients))
            names = tuple(old[i] for i in kept_clients.tolist())
        return replace(self, x=np.ascontiguousarray(self.x[keep]), y=lut[self.y[keep]],
                       client=new_id[self.client[keep]],
                       x_test=np.ascontiguousarray(self.x_test[keep_test]),
                       y_test=lut[self.y_test[keep_test]], num_classes=k, client_names=names)

    def select_classes(self, classes: Sequence[int]) -> FederatedData:
        """Keep the rows of ``classes`` and relabel ``classes[i]`` as ``i`` (see :meth:`relabel`).

        Raises
        ------
        ValueError
            On an empty or repeated selection or a class outside ``0..num_classes-1``.
        """
        chosen = list(classes)
        if len(set(chosen)) != len(chosen):
            raise ValueError(f"classes must not repeat a class, got classes={chosen}")
        return self.relabel({c: i for i, c in enumerate(chosen)})
