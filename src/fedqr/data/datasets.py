"""Normalised, flattened data sets ready for training: :func:`load_dataset`.

Images are scaled to ``[0, 1]`` (MNIST: ``/255``; digits: ``/16``; FEMNIST: ink-positive,
``(255 - x) / 255``, see :mod:`fedqr.data.femnist`), then
standardised with one scalar mean and one scalar standard deviation computed over
all pixels of the training set (for the full MNIST training set: mean 0.1307,
std 0.3081), the same affine map being applied to the test set.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedqr._enums import DatasetName as DatasetName
from fedqr.data._files import check_data_dir
from fedqr.data._validate import check_rng, check_writers, parse_enum
from fedqr.data.digits import DIGITS_MAX_VALUE, DIGITS_NUM_CLASSES, load_digits_arrays
from fedqr.data.femnist import FEMNIST_NUM_CLASSES, load_femnist_arrays
from fedqr.data.mnist import MNIST_NUM_CLASSES, load_mnist_arrays
from fedqr.data.raw import RawData

_STATS_CHUNK_ROWS = 8192


@dataclass(frozen=True, eq=False)
class Dataset:
    """A normalised data set with flattened features.

    Attributes
    ----------
    name : str
        Data set name (a :class:`DatasetName` value).
    x_train : numpy.ndarray
        ``float32 [n_train, num_features]``.
    y_train : numpy.ndarray
        ``int64 [n_train]`` in ``0..num_classes-1``.
    x_test : numpy.ndarray
        ``float32 [n_test, num_features]``.
    y_test : numpy.ndarray
        ``int64 [n_test]``.
    num_classes : int
        Number of classes.
    writer_train, writer_test : numpy.ndarray or None, optional
        ``int64`` writer index (into ``writer_ids``) of every sample, for data grouped by
        writer (FEMNIST; partition with ``make_partition("by-writer", writers=...)``).
    writer_ids : tuple of str or None, optional
        Writer names.
    image_shape : tuple of int or None, optional
        ``(channels, height, width)`` of one flattened row, for convolutional models.
    """

    name: str
    x_train: NDArray[np.float32]
    y_train: NDArray[np.int64]
    x_test: NDArray[np.float32]
    y_test: NDArray[np.int64]
    num_classes: int
    writer_train: NDArray[np.int64] | None = None
    writer_test: NDArray[np.int64] | None = None
    writer_ids: tuple[str, ...] | None = None
    image_shape: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got num_classes={self.num_classes}")
        for split in ("train", "test"):
            x: NDArray[Any] = getattr(self, f"x_{split}")
            y: NDArray[Any] = getattr(self, f"y_{split}")
            if x.ndim != 2 or x.dtype != np.float32:
                raise ValueError(
                    f"x_{split} must be 2-D float32, got shape={x.shape}, dtype={x.dtype}"
                )
            if y.ndim != 1 or y.dtype != np.int64 or y.shape[0] != x.shape[0]:
                raise ValueError(
                    f"y_{split} must be 1-D int64 of length {x.shape[0]}, "
                    f"got shape={y.shape}, dtype={y.dtype}"
                )
            if y.size and not 0 <= int(y.min()) <= int(y.max()) < self.num_classes:
                raise ValueError(f"y_{split} must lie in [0, {self.num_classes - 1}]")
            check_writers(f"writer_{split}", getattr(self, f"writer_{split}"),
                          length=y.shape[0], writer_ids=self.writer_ids)
        if self.x_train.shape[1] != self.x_test.shape[1]:
            raise ValueError(
                f"x_train and x_test must have the same number of features, "
                f"got {self.x_train.shape[1]} and {self.x_test.shape[1]}"
            )
        if self.image_shape is not None and math.prod(self.image_shape) != self.num_features:
            raise ValueError(f"image_shape must multiply to num_features={self.num_features}, "
                             f"got image_shape={self.image_shape}")

    @property
    def num_features(self) -> int:
        """Number of features per sample (``x_train.shape[1]``)."""
        return int(self.x_train.shape[1])

    @property
    def num_train(self) -> int:
        """Number of training samples."""
        return int(self.x_train.shape[0])

    @property
    def num_test(self) -> int:
        """Number of test samples."""
        return int(self.x_test.shape[0])


def scalar_mean_std(x: NDArray[Any]) -> tuple[float, float]:
    """Mean and (population) standard deviation over all elements of ``x``.

    Accumulates in float64, chunk by chunk along the first axis (two passes), so a
    large ``uint8`` or ``float32`` array is never copied whole to float64. The sum of
    squares is numpy's own loop (``einsum``), not BLAS: OpenBLAS's threaded ``ddot``,
    called while another thread of the process forks (Flower's simulation starts Ray's
    processes while its ServerApp loads the data in a thread), can wait forever for a
    worker thread that its fork handler stopped (seen once in about 15 simulations).
    """
    if x.size == 0:
        raise ValueError("x must hold at least one element, got x.size=0")
    rows = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(-1, 1)
    total = 0.0
    for start in range(0, rows.shape[0], _STATS_CHUNK_ROWS):
        total += float(rows[start : start + _STATS_CHUNK_ROWS].sum(dtype=np.float64))
    mean = total / x.size
    sq = 0.0
    for start in range(0, rows.shape[0], _STATS_CHUNK_ROWS):
        dev = rows[start : start + _STATS_CHUNK_ROWS].astype(np.float64) - mean
        sq += float(np.einsum("i,i->", dev.ravel(), dev.ravel()))
    return mean, math.sqrt(sq / x.size)


def _standardise(x: NDArray[Any], *, scale: float, mean: float, std: float) -> NDArray[np.float32]:
    """Return ``((x / scale) - mean) / std`` as float32 ``[n, features]``."""
    out = x.reshape(x.shape[0], -1).astype(np.float32)
    out *= np.float32(1.0 / (scale * std))
    out -= np.float32(mean / std)
    return out


def normalise(raw: RawData, *, name: str, scale: float, num_classes: int) -> Dataset:
    """Scale raw images by ``1/scale``, then standardise by the training mean and std.

    Parameters
    ----------
    raw : RawData
        Raw images and labels.
    name : str
        Name of the returned data set.
    scale : float
        Largest raw pixel value (255 for MNIST, 16 for digits).
    num_classes : int
        Number of classes.

    Returns
    -------
    Dataset
        Flattened, standardised float32 features; writers carried over from ``raw``;
        ``image_shape`` is ``(1, H, W)`` for ``[n, H, W]`` images.
    """
    mean, std = scalar_mean_std(raw.x_train)
    mean, std = mean / scale, std / scale
    if not std > 0.0:
        raise ValueError(f"training images are constant (std=0): cannot standardise {name}")
    return Dataset(
        name=name,
        x_train=_standardise(raw.x_train, scale=scale, mean=mean, std=std),
        y_train=raw.y_train,
        x_test=_standardise(raw.x_test, scale=scale, mean=mean, std=std),
        y_test=raw.y_test,
        num_classes=num_classes,
        writer_train=raw.writer_train,
        writer_test=raw.writer_test,
        writer_ids=raw.writer_ids,
        image_shape=(1, *raw.x_train.shape[1:]) if raw.x_train.ndim == 3 else None,
    )


def stratified_subset(
    labels: NDArray[np.int64], *, fraction: float, rng: np.random.Generator
) -> NDArray[np.int64]:
    """Pick ``round(fraction * n)`` (at least 1) indices, each class keeping its share.

    Class quotas are ``fraction * n_c`` rounded by largest remainder, so they sum to
    the target exactly; the members of each class are drawn with ``rng``.

    Returns
    -------
    numpy.ndarray
        Sorted ``int64`` indices into ``labels``.
    """
    classes, counts = np.unique(labels, return_counts=True)
    target = max(1, round(fraction * labels.size))
    quotas = fraction * counts
    take = np.floor(quotas).astype(np.int64)
    short = target - int(take.sum())
    if short > 0:
        order = np.argsort(-(quotas - take), kind="stable")
        take[order[:short]] += 1
    parts = [
        rng.choice(np.flatnonzero(labels == c), size=int(k), replace=False)
        for c, k in zip(classes, take, strict=True)
    ]
    return np.sort(np.concatenate(parts)).astype(np.int64)


def _check_fraction(fraction: object) -> float:
    if isinstance(fraction, bool) or not isinstance(fraction, int | float | np.number):
        raise TypeError(f"fraction must be a real number, got fraction={fraction!r}")
    value = float(fraction)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got fraction={value!r}")
    return value


def _mnist(data_dir: Path | None, download: bool) -> tuple[RawData, float, int]:
    return load_mnist_arrays(data_dir=data_dir, download=download), 255.0, MNIST_NUM_CLASSES


def _femnist(data_dir: Path | None, download: bool) -> tuple[RawData, float, int]:
    raw = load_femnist_arrays(data_dir=data_dir)  # uint8 (npz) or float in [0, 1] (JSON)
    return raw, 255.0 if raw.x_train.dtype == np.uint8 else 1.0, FEMNIST_NUM_CLASSES


def _digits(data_dir: Path | None, download: bool) -> tuple[RawData, float, int]:
    return load_digits_arrays(), DIGITS_MAX_VALUE, DIGITS_NUM_CLASSES


_LOADERS = {DatasetName.MNIST: _mnist, DatasetName.FEMNIST: _femnist,
            DatasetName.DIGITS: _digits}
"""Each built-in data set's loader: its raw arrays, pixel scale and number of classes."""


def load_dataset(
    name: DatasetName | str,
    *,
    data_dir: Path | None = None,
    download: bool = True,
    fraction: float = 1.0,
    rng: np.random.Generator | None = None,
) -> Dataset:
    """Load a data set, flattened and standardised by its training mean and std.

    Parameters
    ----------
    name : DatasetName or str
        ``"mnist"``, ``"digits"`` or ``"femnist"``.
    data_dir : Path or None, optional
        MNIST and FEMNIST: folder searched first (see :mod:`fedqr.data.mnist` and
        :mod:`fedqr.data.femnist`).
    download : bool, optional
        MNIST only: download missing files into the cache folder (FEMNIST has no download).
    fraction : float, optional
        Share of the training set kept, in ``(0, 1]``; below 1, a stratified random
        subset drawn with ``rng`` (the test set is always whole). Normalisation
        statistics are computed on the kept training samples.
    rng : numpy.random.Generator or None, optional
        Required when ``fraction < 1``.

    Returns
    -------
    Dataset
        The normalised data set.

    Raises
    ------
    ValueError
        If ``name`` is unknown, ``fraction`` is outside ``(0, 1]``, or ``rng`` is
        missing while ``fraction < 1``.
    DataNotFoundError
        If the MNIST files are missing and cannot be downloaded, or no FEMNIST data are found.
    FemnistFormatError
        If FEMNIST files are found but are not in a known layout.
    """
    kind = parse_enum(DatasetName, "name", name)
    check_data_dir(data_dir)  # an explicit folder that does not exist is an error
    frac = _check_fraction(fraction)
    subset_rng: np.random.Generator | None = None
    if frac < 1.0:
        if rng is None:
            raise ValueError(
                f"rng is required when fraction < 1 (got fraction={frac!r}, rng=None): "
                "pass e.g. rng=numpy.random.default_rng(0)"
            )
        subset_rng = check_rng(rng)
    raw, scale, num_classes = _LOADERS[kind](data_dir, download)
    if subset_rng is not None:
        keep = stratified_subset(raw.y_train, fraction=frac, rng=subset_rng)
        writers = None if raw.writer_train is None else raw.writer_train[keep]
        raw = dataclasses.replace(raw, x_train=raw.x_train[keep], y_train=raw.y_train[keep],
                                  writer_train=writers)
    return normalise(raw, name=kind.value, scale=scale, num_classes=num_classes)
