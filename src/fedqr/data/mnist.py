"""MNIST from the four canonical IDX ``.gz`` files.

Lookup order for each file (the first folder holding it wins):

1. ``data_dir`` and ``data_dir/mnist`` when ``data_dir`` is given;
2. ``$FEDQR_DATA/mnist`` and ``$FEDQR_DATA`` when that variable is set;
3. the cache folder ``$XDG_CACHE_HOME/fedqr/mnist`` (``~/.cache/fedqr/mnist`` when
   ``XDG_CACHE_HOME`` is unset).

Every file found is checked against its canonical md5. A file found nowhere is,
when ``download=True``, fetched from the first working mirror of
:data:`MNIST_MIRRORS` into the cache folder.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedqr.data._files import (
    DOWNLOAD_TIMEOUT_S,
    RemoteFile,
    cache_root,
    check_data_dir,
    locate,
    unique_dirs,
)
from fedqr.data.idx import IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC, IdxFormatError, read_idx
from fedqr.data.raw import RawData

#: Environment variable naming the folder that holds ``mnist/`` (and other data sets).
DATA_ENV_VAR = "FEDQR_DATA"

TRAIN_IMAGES = RemoteFile("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873")
TRAIN_LABELS = RemoteFile("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432")
TEST_IMAGES = RemoteFile("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3")
TEST_LABELS = RemoteFile("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c")
#: The four canonical files with their md5 digests.
MNIST_FILES: tuple[RemoteFile, ...] = (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS)

#: Public mirrors, tried in order.
MNIST_MIRRORS: tuple[str, ...] = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
)

MNIST_NUM_CLASSES = 10
MNIST_IMAGE_SHAPE = (28, 28)


def mnist_cache_dir() -> Path:
    """The folder downloads go to: ``$XDG_CACHE_HOME/fedqr/mnist`` or ``~/.cache/fedqr/mnist``."""
    return cache_root() / "mnist"


def mnist_search_dirs(*, data_dir: Path | None = None) -> tuple[Path, ...]:
    """Folders searched for the MNIST files, in order (the cache folder last).

    Parameters
    ----------
    data_dir : Path or None, optional
        Explicit folder, searched first (itself, then its ``mnist`` subfolder).

    Returns
    -------
    tuple of Path
        The folders, without repeats.
    """
    dirs: list[Path] = []
    if data_dir is not None:
        dirs += [Path(data_dir), Path(data_dir) / "mnist"]
    env = os.environ.get(DATA_ENV_VAR)
    if env:
        dirs += [Path(env) / "mnist", Path(env)]
    dirs.append(mnist_cache_dir())
    return unique_dirs(dirs)


def _fix_hint(cache_dir: Path) -> str:
    names = ", ".join(f.filename for f in MNIST_FILES)
    return (
        f"To fix: set {DATA_ENV_VAR} to a folder holding mnist/ with the four files "
        f"({names}), e.g. `export {DATA_ENV_VAR}=/path/to/data`; or pass data_dir=...; "
        f"or put the files into the cache folder {cache_dir}/"
    )


def locate_mnist_files(
    *,
    data_dir: Path | None = None,
    download: bool = True,
    mirrors: Sequence[str] = MNIST_MIRRORS,
    timeout: float = DOWNLOAD_TIMEOUT_S,
) -> dict[str, Path]:
    """Find (or download) the four MNIST files, each verified against its canonical md5.

    Parameters
    ----------
    data_dir : Path or None, optional
        Explicit folder searched first (see the module docstring for the full order).
    download : bool, optional
        Download missing files from ``mirrors`` into :func:`mnist_cache_dir`.
    mirrors : sequence of str, optional
        Base URLs, tried in order (``file://`` URLs work too).
    timeout : float, optional
        Seconds to wait for each mirror.

    Returns
    -------
    dict of str to Path
        File name to verified path, for the four names in :data:`MNIST_FILES`.

    Raises
    ------
    DataNotFoundError
        If a file is missing and cannot be downloaded; the message lists every folder
        searched and every URL tried.
    ChecksumError
        If a file on disk has the wrong md5.
    """
    check_data_dir(data_dir)
    cache_dir = mnist_cache_dir()
    search = mnist_search_dirs(data_dir=data_dir)
    return {
        f.filename: locate(
            f,
            search_dirs=search,
            download_enabled=download,
            mirrors=mirrors,
            cache_dir=cache_dir,
            timeout=timeout,
            hint=_fix_hint(cache_dir),
        )
        for f in MNIST_FILES
    }


def _read_split(images_path: Path, labels_path: Path) -> tuple[np.ndarray, np.ndarray]:
    images = read_idx(images_path, expected_magic=IDX_IMAGES_MAGIC)
    labels = read_idx(labels_path, expected_magic=IDX_LABELS_MAGIC)
    if images.shape[1:] != MNIST_IMAGE_SHAPE:
        raise IdxFormatError(f"{images_path}: MNIST images must be 28x28, got shape {images.shape}")
    if images.shape[0] != labels.shape[0]:
        raise IdxFormatError(
            f"{images_path} holds {images.shape[0]} images but {labels_path} holds "
            f"{labels.shape[0]} labels"
        )
    if labels.size and int(labels.max()) >= MNIST_NUM_CLASSES:
        raise IdxFormatError(f"{labels_path}: labels must be in 0..9, got {int(labels.max())}")
    return images, labels.astype(np.int64)


def load_mnist_arrays(
    *,
    data_dir: Path | None = None,
    download: bool = True,
    mirrors: Sequence[str] = MNIST_MIRRORS,
    timeout: float = DOWNLOAD_TIMEOUT_S,
) -> RawData:
    """Load MNIST as raw arrays.

    Parameters
    ----------
    data_dir : Path or None, optional
        Explicit folder searched first (then ``$FEDQR_DATA``, then the cache folder).
    download : bool, optional
        Download missing files from ``mirrors`` into the cache folder.
    mirrors : sequence of str, optional
        Base URLs, tried in order.
    timeout : float, optional
        Seconds to wait for each mirror.

    Returns
    -------
    RawData
        ``x_train`` ``uint8 [60000, 28, 28]``, ``y_train`` ``int64 [60000]``,
        ``x_test`` ``uint8 [10000, 28, 28]``, ``y_test`` ``int64 [10000]``.

    Raises
    ------
    DataNotFoundError
        If a file is missing and cannot be downloaded.
    ChecksumError
        If a file on disk has the wrong md5.
    IdxFormatError
        If a file is not a valid IDX file of MNIST images or labels.
    """
    paths = locate_mnist_files(
        data_dir=data_dir, download=download, mirrors=mirrors, timeout=timeout
    )
    x_train, y_train = _read_split(paths[TRAIN_IMAGES.filename], paths[TRAIN_LABELS.filename])
    x_test, y_test = _read_split(paths[TEST_IMAGES.filename], paths[TEST_LABELS.filename])
    return RawData(x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
