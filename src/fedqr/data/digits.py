"""scikit-learn's bundled 8x8 handwritten digits (1,797 images, no download).

The data are split once, deterministically, into train and test: a stratified
split (each class keeps its share) drawn with the fixed seed
:data:`DIGITS_SPLIT_SEED`, with test fraction :data:`DIGITS_TEST_FRACTION`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from fedqr.data.raw import RawData

DIGITS_SPLIT_SEED = 0
DIGITS_TEST_FRACTION = 0.2
DIGITS_NUM_CLASSES = 10
#: Largest pixel value of the digits images (16 grey levels, 0..16).
DIGITS_MAX_VALUE = 16.0


def stratified_split(
    labels: NDArray[np.int64], *, test_fraction: float, rng: np.random.Generator
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Split sample indices into train and test, keeping each class's share.

    Each class ``c`` with ``n_c`` samples sends ``round(test_fraction * n_c)`` of
    them, chosen with ``rng``, to the test set.

    Parameters
    ----------
    labels : numpy.ndarray
        1-D integer labels.
    test_fraction : float
        Share of each class sent to the test set, in ``(0, 1)``.
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    train_idx, test_idx : numpy.ndarray
        Sorted ``int64`` indices; together they cover every sample once.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got test_fraction={test_fraction!r}")
    test_parts: list[NDArray[np.int64]] = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        k = round(test_fraction * members.size)
        test_parts.append(rng.permutation(members)[:k])
    test_idx = np.sort(np.concatenate(test_parts)).astype(np.int64)
    mask = np.ones(labels.size, dtype=bool)
    mask[test_idx] = False
    return np.flatnonzero(mask).astype(np.int64), test_idx


def load_digits_arrays() -> RawData:
    """Load the 8x8 digits with their fixed train/test split.

    Returns
    -------
    RawData
        ``x_train`` ``float64 [1437, 8, 8]`` and ``x_test`` ``float64 [360, 8, 8]``
        with values in ``0..16``; ``int64`` labels in ``0..9``.
    """
    from sklearn.datasets import load_digits  # deferred: importing sklearn is slow

    bunch = load_digits()
    images = np.asarray(bunch.images, dtype=np.float64)
    labels = np.asarray(bunch.target, dtype=np.int64)
    train_idx, test_idx = stratified_split(
        labels,
        test_fraction=DIGITS_TEST_FRACTION,
        rng=np.random.default_rng(DIGITS_SPLIT_SEED),
    )
    return RawData(
        x_train=images[train_idx],
        y_train=labels[train_idx],
        x_test=images[test_idx],
        y_test=labels[test_idx],
    )
