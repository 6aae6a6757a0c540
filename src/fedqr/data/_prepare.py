"""The array work behind :class:`fedqr.data.FederatedData`: checks, client ids, hold-out, scaling.

Every check raises ``ValueError`` naming the parameter, the allowed range and the value given.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedqr.data._cells import clients_from
from fedqr.data._labels import as_labels, caller_level, one_per_row
from fedqr.data._validate import as_array

_CHUNK_ROWS = 8192


class FeatureScaleWarning(UserWarning):
    """Standardised test features lie far outside the training rows' (a feature nearly
    constant on the training rows, divided by its tiny std)."""


@dataclass(frozen=True, eq=False)
class Standardization:
    """Statistics of the training rows used to standardise the features, one per feature.

    Attributes
    ----------
    mean : numpy.ndarray
        ``float64 [num_features]``: the training rows' mean of every feature (of images: of
        its channel's pixels, the same for every pixel of a channel).
    std : numpy.ndarray
        ``float64 [num_features]``: their population standard deviation; ``0`` for a constant
        feature (or channel), which is only centred.
    """

    mean: NDArray[np.float64]
    std: NDArray[np.float64]

    @property
    def scale(self) -> NDArray[np.float64]:
        """The divisor applied: ``std``, or ``1`` where ``std`` is ``0``."""
        return np.where(self.std > 0.0, self.std, 1.0)

    def identity(self) -> dict[str, Any]:
        """JSON-ready statistics: ``mean``, ``std`` and the number of constant features."""
        return {"mean": [float(v) for v in self.mean], "std": [float(v) for v in self.std],
                "constant_features": int(np.count_nonzero(self.std == 0.0))}


def as_features(name: str, x: ArrayLike) -> tuple[NDArray[np.float32], tuple[int, ...]]:
    """``x`` ``[n, ...]`` as C-contiguous float32 ``[n, prod(...)]`` and the sample shape.

    Raises
    ------
    ValueError
        If ``x`` is not numeric, has fewer than 2 dimensions, no rows or no features.
    """
    arr: NDArray[Any] = as_array(name, x)
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
            or arr.dtype == np.bool_):
        raise ValueError(f"{name} must hold real numbers (an int or float dtype), "
                         f"got {name}.dtype={arr.dtype}")
    if arr.ndim < 2:
        raise ValueError(f"{name} must have shape (n, features...) (at least 2-D: one row "
                         f"per sample), got {name}.shape={arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} must hold at least 1 row, got {name}.shape={arr.shape} (empty)")
    shape = tuple(int(d) for d in arr.shape[1:])
    if math.prod(shape) == 0:
        raise ValueError(f"{name} must hold at least 1 feature, got {name}.shape={arr.shape}")
    with np.errstate(over="ignore"):  # reported below, without numpy's RuntimeWarning
        flat = np.ascontiguousarray(arr.reshape(arr.shape[0], -1), dtype=np.float32)
    if arr.dtype.itemsize > 4 and np.issubdtype(arr.dtype, np.floating):
        _check_float32_range(name, arr.reshape(arr.shape[0], -1), flat)
    return flat, shape


def _check_float32_range(name: str, arr: NDArray[Any], flat: NDArray[np.float32]) -> None:
    """``ValueError`` if a finite value of ``arr`` became infinite as float32 (overflow)."""
    inf = np.isinf(flat)
    if not inf.any():
        return
    over = inf & np.isfinite(arr)
    count = int(np.count_nonzero(over))
    if count:
        row, col = divmod(int(np.argmax(over)), over.shape[1])
        big = float(np.finfo(np.float32).max)
        raise ValueError(f"{name} must lie within the float32 range [-{big:.4g}, {big:.4g}], "
                         f"got {count} value(s) beyond it, the first in row {row}, feature "
                         f"{col}: {arr[row, col].item()!r} (rescale that feature)")


def check_input_shape(input_shape: Sequence[int], num_features: int) -> tuple[int, ...]:
    """``input_shape`` as a tuple of positive ints whose product is ``num_features``."""
    shape = tuple(int(d) for d in input_shape)
    if math.prod(shape) != num_features or min(shape, default=0) < 1:
        raise ValueError(f"input_shape must be positive and multiply to the {num_features} "
                         f"features of x, got input_shape={shape}")
    return shape


def check_finite(name: str, x: NDArray[np.float32]) -> None:
    """``ValueError`` saying how many entries of ``x`` are NaN or infinite and the first row."""
    bad = ~np.isfinite(x)
    count = int(np.count_nonzero(bad))
    if count:
        row = int(np.flatnonzero(bad.any(axis=1))[0])
        raise ValueError(f"{name} must be finite, got {count} NaN or infinite value(s), "
                         f"the first in row {row} (0-based, {name}[{row}])")


def map_clients(name: str, client: ArrayLike, *, length: int
                ) -> tuple[NDArray[np.int64], tuple[str, ...] | None]:
    """Client ids (any integers or strings) mapped to ``0..N-1`` by sorted unique value.

    Returns
    -------
    ids : numpy.ndarray
        ``int64 [length]`` in ``0..N-1``.
    names : tuple of str or None
        The original id of each client, or ``None`` when the ids already were ``0..N-1``.
    """
    arr = one_per_row(name, client, length=length, what="client id",
                      kinds="integer or string client ids")
    if arr.dtype == np.object_:
        arr = arr.astype(str)
    elif not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.str_)):
        raise ValueError(f"{name} must hold integer or string client ids, "
                         f"got {name}.dtype={arr.dtype}")
    if np.issubdtype(arr.dtype, np.str_):  # "10", "2": integers, sorted as a CSV's ids are
        arr = clients_from(arr)
    uniq, ids = np.unique(arr, return_inverse=True)
    ids = ids.astype(np.int64).reshape(-1)
    if np.issubdtype(uniq.dtype, np.integer) and np.array_equal(uniq, np.arange(uniq.size)):
        return ids, None
    return ids, tuple(str(v) for v in uniq.tolist())


def client_rows(client: NDArray[np.int64], num_clients: int) -> list[NDArray[np.int64]]:
    """The ascending rows of every client (``np.flatnonzero(client == i)``), in O(n log n)."""
    order: NDArray[np.int64] = np.argsort(client, kind="stable").astype(np.int64)
    bounds = np.cumsum(np.bincount(client, minlength=num_clients))[:-1]
    return list(np.split(order, bounds))


def _largest_remainder(total: int, counts: NDArray[np.int64],
                       rng: np.random.Generator) -> NDArray[np.int64]:
    """Split ``total`` in proportion to ``counts``: floors, then the largest remainders.

    Equal remainders are ordered at random (a fixed order would always favour one class).
    """
    quotas = total * counts / counts.sum()
    take: NDArray[np.int64] = np.floor(quotas).astype(np.int64)
    short = total - int(take.sum())
    if short > 0:
        order = np.lexsort((rng.random(counts.size), -(quotas - take)))
        take[order[:short]] += 1
    return take


def holdout(y: NDArray[np.int64], client: NDArray[np.int64], *, num_clients: int,
            share: float, rng: np.random.Generator) -> NDArray[np.bool_]:
    """Mark ``round(share * n_i)`` rows of every client as test rows, stratified by label.

    Each client keeps at least one training row; within a client, every label gets its
    largest-remainder share of the client's test rows (ties broken at random), drawn with
    ``rng`` (clients in order).

    Returns
    -------
    numpy.ndarray
        ``bool [n]``, ``True`` for a held-out (test) row.
    """
    test = np.zeros(y.shape[0], dtype=np.bool_)
    for rows in client_rows(client, num_clients):
        target = min(math.floor(share * rows.size + 0.5), rows.size - 1)
        if target <= 0:
            continue
        labels = y[rows]
        classes, counts = np.unique(labels, return_counts=True)
        take = _largest_remainder(target, counts.astype(np.int64), rng)
        for c, k in zip(classes, take, strict=True):
            if k:
                test[rng.choice(rows[labels == c], size=int(k), replace=False)] = True
    return test


def test_set(xf: NDArray[np.float32], yf: NDArray[np.int64], cf: NDArray[np.int64], *,
             x_test: ArrayLike | None, y_test: ArrayLike | None, test_share: float | None,
             seed: int) -> tuple[NDArray[np.float32], NDArray[np.int64], NDArray[np.int64],
                                 NDArray[np.float32], NDArray[np.int64]]:
    """The training rows, labels, clients and the test rows and labels.

    The test set is ``(x_test, y_test)``, or ``test_share`` of each client's rows (see
    :func:`holdout`, drawn from ``numpy.random.default_rng(seed)``); giving neither or both
    is an error.
    """
    if x_test is not None or y_test is not None:
        if test_share is not None:
            raise ValueError(f"give x_test and y_test, or test_share (--test-share), not "
                             f"both; got test_share={test_share!r} and a test set")
        if x_test is None or y_test is None:
            missing = "x_test" if x_test is None else "y_test"
            raise ValueError(f"give x_test and y_test together, got {missing}=None")
        xt, _ = as_features("x_test", x_test)
        if xt.shape[1] != xf.shape[1]:
            raise ValueError(f"x_test must have {xf.shape[1]} features like x, got "
                             f"{xt.shape[1]} (x_test.shape={np.shape(x_test)})")
        yt = as_labels("y_test", y_test, length=xt.shape[0])
        check_finite("x_test", xt)
        return xf, yf, cf, xt, yt
    if test_share is None:
        raise ValueError("give a test set or test_share (--test-share), the share of each "
                         "client's rows held out for testing: a test set is a test file, "
                         "test_path (--test-data), or the arrays x_test and y_test (of an .npz "
                         "data file, or passed with x and y); got neither")
    share = check_share(test_share)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got seed={seed!r}")
    held = holdout(yf, cf, num_clients=int(cf.max()) + 1, share=share,
                   rng=np.random.default_rng(int(seed)))
    if not held.any():
        raise ValueError(f"test_share (--test-share) {share} holds out no row (each client "
                         f"keeps at least 1 training row); give a larger test_share")
    kept = np.unique(yf[~held])
    if kept.size < 2 <= np.unique(yf).size:
        raise ValueError(f"test_share (--test-share) {share} leaves the training rows only "
                         f"class {int(kept[0])}: it held out every row of the others (seed="
                         f"{seed}'s draw; the smallest client has {np.bincount(cf).min()} "
                         "row(s)): give a smaller test_share, or a test set (--test-data)")
    return xf[~held], yf[~held], cf[~held], xf[held], yf[held]


def check_share(share: object) -> float:
    """``test_share`` as a float in ``(0, 1)``."""
    if isinstance(share, bool) or not isinstance(share, int | float | np.integer | np.floating):
        raise ValueError(f"test_share (--test-share) must be a number in (0, 1), got "
                         f"test_share={share!r}")
    value = float(share)
    if not 0.0 < value < 1.0:
        raise ValueError(f"test_share (--test-share) must be in (0, 1), got "
                         f"test_share={value!r}")
    return value


def feature_stats(x: NDArray[np.float32], *, channels: int | None = None) -> Standardization:
    """Mean and population std of every feature of ``x``, accumulated in float64 chunk by chunk.

    With ``channels`` (images, ``x`` ``[n, C H W]`` flattened channel by channel), every pixel
    of a channel gets the channel's mean and std over all its pixels, as the built-in image
    sets are standardised by one mean and std: a pixel that is nearly constant on the
    training images (ink in one corner of one image) is not divided by its own tiny std,
    which would blow up the test images that have ink there. Two passes; a constant feature
    (or channel) gets a std of exactly ``0`` (its values equal the float64 mean exactly, for
    fewer than 2**29 rows).
    """
    n = x.shape[0]
    total = np.zeros(x.shape[1], dtype=np.float64)
    for start in range(0, n, _CHUNK_ROWS):
        total += x[start : start + _CHUNK_ROWS].sum(axis=0, dtype=np.float64)
    mean = _per_channel(total, channels) / n
    sq = np.zeros(x.shape[1], dtype=np.float64)
    for start in range(0, n, _CHUNK_ROWS):
        dev = x[start : start + _CHUNK_ROWS].astype(np.float64) - mean
        sq += np.einsum("ij,ij->j", dev, dev)
    return Standardization(mean=mean, std=np.sqrt(_per_channel(sq, channels) / n))


def _per_channel(sums: NDArray[np.float64], channels: int | None) -> NDArray[np.float64]:
    """Per-feature ``sums`` as they are (``channels`` ``None``), else each channel's mean over
    its pixels, repeated for every pixel of the channel."""
    if channels is None:
        return sums
    by_channel = sums.reshape(channels, -1)
    return np.repeat(by_channel.mean(axis=1), by_channel.shape[1])


def image_channels(sample_shape: Sequence[int]) -> int | None:
    """The number of channels of image samples ``(C, H, W)``, else ``None`` (rows of features,
    standardised feature by feature)."""
    return int(sample_shape[0]) if len(sample_shape) == 3 else None


def far_outside(train: NDArray[np.float32], test: NDArray[np.float32]
                ) -> list[tuple[int, float, float]]:
    """Standardised features whose test values lie far outside the training rows'
    (``|z|`` above both 100 and 10 times the training rows' largest): ``(feature, largest
    |z| on the test rows, on the training rows)``, largest first."""
    top_train, top_test = _abs_max(train), _abs_max(test)
    far = np.flatnonzero(top_test > np.maximum(100.0, 10.0 * top_train))
    order = far[np.argsort(-top_test[far], kind="stable")]
    return [(int(j), float(top_test[j]), float(top_train[j])) for j in order]


def warn_far_outside(train: NDArray[np.float32], test: NDArray[np.float32],
                     stats: Standardization, names: Sequence[str] | None) -> None:
    """One :class:`FeatureScaleWarning` naming the features of :func:`far_outside` (none: no
    warning)."""
    far = far_outside(train, test)
    if not far:
        return
    j, top_test, top_train = far[0]
    name = f" ({names[j]!r})" if names is not None else ""
    more = f" and {len(far) - 1} more" if len(far) > 1 else ""
    warnings.warn(
        f"after standardisation {len(far)} feature(s) of the test rows lie far outside the "
        f"training rows: feature {j}{name}{more}, |z| up to {top_test:.3g} on the test rows "
        f"against {top_train:.3g} on the training rows, whose std is {stats.std[j]:.3g}. A "
        f"feature nearly constant on the training rows is divided by its tiny std, and the "
        f"model sees test values it never trained on; scale such features yourself and turn "
        f"standardisation off (--no-standardize, or the standardize argument), or drop them "
        f"(images [n, H, W] or [n, C, H, W] are standardised per channel instead)",
        FeatureScaleWarning, stacklevel=caller_level())


def _abs_max(x: NDArray[np.float32]) -> NDArray[np.float64]:
    top = np.zeros(x.shape[1], dtype=np.float64)
    for start in range(0, x.shape[0], _CHUNK_ROWS):
        chunk = x[start : start + _CHUNK_ROWS]
        np.maximum(top, np.abs(chunk).max(axis=0, initial=0.0), out=top)
    return top


def apply_stats(x: NDArray[np.float32], stats: Standardization) -> NDArray[np.float32]:
    """``(x - mean) / scale`` as a new float32 array, computed in float64 chunk by chunk."""
    out = np.empty_like(x, dtype=np.float32)
    scale = stats.scale
    for start in range(0, x.shape[0], _CHUNK_ROWS):
        chunk = x[start : start + _CHUNK_ROWS].astype(np.float64)
        chunk -= stats.mean
        chunk /= scale
        out[start : start + _CHUNK_ROWS] = chunk
    return out
