"""Container for a dataset's raw (un-normalised) train/test arrays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedqr.data._validate import check_writers


@dataclass(frozen=True, eq=False)
class RawData:
    """Raw train/test arrays as read from disk.

    Attributes
    ----------
    x_train : numpy.ndarray
        Training images ``[n_train, height, width]`` (``uint8`` for MNIST, float for digits).
    y_train : numpy.ndarray
        Training labels ``[n_train]``, ``int64``.
    x_test : numpy.ndarray
        Test images ``[n_test, height, width]``.
    y_test : numpy.ndarray
        Test labels ``[n_test]``, ``int64``.
    writer_train, writer_test : numpy.ndarray or None
        Per-sample writer (``int64`` index into ``writer_ids``) for data grouped by writer
        (FEMNIST), else ``None``.
    writer_ids : tuple of str or None
        Writer names, e.g. LEAF's ``"f0005_26"``.
    """

    x_train: NDArray[Any]
    y_train: NDArray[np.int64]
    x_test: NDArray[Any]
    y_test: NDArray[np.int64]
    writer_train: NDArray[np.int64] | None = None
    writer_test: NDArray[np.int64] | None = None
    writer_ids: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            x = getattr(self, f"x_{split}")
            y = getattr(self, f"y_{split}")
            if y.ndim != 1 or y.dtype != np.int64:
                raise ValueError(
                    f"y_{split} must be 1-D int64, got shape={y.shape}, dtype={y.dtype}"
                )
            if x.ndim < 2 or x.shape[0] != y.shape[0]:
                raise ValueError(
                    f"x_{split} must have shape [n, ...] with n = len(y_{split}) = {y.shape[0]}, "
                    f"got x_{split}.shape={x.shape}"
                )
            check_writers(f"writer_{split}", getattr(self, f"writer_{split}"),
                          length=y.shape[0], writer_ids=self.writer_ids)
