"""FEMNIST (LEAF): handwritten digits and letters grouped by writer, 62 classes.

Two layouts are read; both give ink-positive images (background 0) and keep every sample's
writer:

LEAF JSON
    A folder with ``train/`` and ``test/`` subfolders of ``*.json`` files, each
    ``{"users": [...], "num_samples": [...], "user_data": {uid: {"x": [...], "y": [...]}}}``
    with ``x`` a list of 784 floats in ``[0, 1]`` (LEAF's polarity: background 1.0) and ``y``
    a class in ``0..61``, as written by LEAF's ``preprocess.sh`` (``leaf/data/femnist/data``
    holds ``train/`` and ``test/``; a folder holding ``data/train`` and ``data/test`` works
    too). Images come back as ``float32`` ``1 - x``.
Compact npz (:data:`FEMNIST_NPZ`)
    Keys ``x`` (``uint8 [n, 28, 28]``, LEAF polarity: background 255), ``y`` (``0..61``),
    ``writer`` (index into ``writer_ids``), ``writer_ids`` (str), ``split`` (0 = LEAF train,
    1 = LEAF test) and optionally ``writer_complete`` (bool). Images come back as
    ``uint8`` ``255 - x``.

The train and test sets are LEAF's own split flags. Lookup order (the first folder holding
a known layout wins; a folder holding something FEMNIST-like but malformed is an error):

1. ``data_dir`` (a folder, or the npz file itself) and ``data_dir/femnist``;
2. ``$FEDQR_DATA/femnist`` when that variable is set;
3. the cache folder ``$XDG_CACHE_HOME/fedqr/femnist`` (``~/.cache/fedqr/femnist``).

Nothing is downloaded: the npz subset has no public download URL, and LEAF's FEMNIST is
built with LEAF's own scripts.
"""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedqr.data._files import DataNotFoundError, cache_root, check_data_dir, unique_dirs
from fedqr.data.raw import RawData

FEMNIST_NUM_CLASSES = 62
FEMNIST_IMAGE_SHAPE = (28, 28)
#: File name of the compact npz subset (``shared/data/femnist`` in this project).
FEMNIST_NPZ = "femnist_leaf_writers.npz"
#: md5 of the project's npz (73,554 samples, 710 writers); informational, not enforced.
FEMNIST_NPZ_MD5 = "3abd4f8942d8e7f66f242e504b7735f6"
_DATA_ENV_VAR = "FEDQR_DATA"
_NPZ_KEYS = ("x", "y", "writer", "writer_ids", "split")
_LEAF_URL = "https://github.com/TalwalkarLab/leaf (data/femnist: ./preprocess.sh -s niid ...)"


class FemnistFormatError(ValueError):
    """FEMNIST files were found but are not in a known layout; the message says why."""


@dataclass(frozen=True)
class FemnistSource:
    """Where FEMNIST was found: ``kind`` is ``"npz"`` (a file) or ``"leaf"`` (a folder)."""

    kind: str
    path: Path


def femnist_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/fedqr/femnist`` or ``~/.cache/fedqr/femnist``."""
    return cache_root() / "femnist"


def femnist_search_dirs(*, data_dir: Path | None = None) -> tuple[Path, ...]:
    """Folders searched for FEMNIST, in order (see the module docstring)."""
    dirs: list[Path] = []
    if data_dir is not None:
        dirs += [Path(data_dir), Path(data_dir) / "femnist"]
    env = os.environ.get(_DATA_ENV_VAR)
    if env:
        dirs.append(Path(env) / "femnist")
    dirs.append(femnist_cache_dir())
    return unique_dirs(dirs)


def _leaf_root(folder: Path) -> Path | None:
    """``folder`` (or ``folder/data``) when it holds LEAF's ``train/`` and ``test/``."""
    for root in (folder, folder / "data"):
        has = [(root / s).is_dir() for s in ("train", "test")]
        if all(has):
            return root
        if any(has):
            raise FemnistFormatError(
                f"{root} holds only one of train/ and test/: a LEAF FEMNIST folder needs "
                "both (each with *.json files)")
    return None


def locate_femnist(*, data_dir: Path | None = None) -> FemnistSource:
    """Find FEMNIST: the npz subset or a LEAF JSON folder.

    Raises
    ------
    DataNotFoundError
        If no searched folder holds FEMNIST; the message lists them and how to fix it.
    FemnistFormatError
        If ``data_dir`` is a file that is not an npz, or a folder holds half a LEAF layout.
    """
    if data_dir is not None and Path(data_dir).is_file():
        if Path(data_dir).suffix != ".npz":
            raise FemnistFormatError(
                f"data_dir must be a folder or a .npz file, got data_dir={str(data_dir)!r}")
        return FemnistSource("npz", Path(data_dir))
    places = femnist_search_dirs(data_dir=data_dir)
    for folder in places:
        if (folder / FEMNIST_NPZ).is_file():
            return FemnistSource("npz", folder / FEMNIST_NPZ)
        root = _leaf_root(folder) if folder.is_dir() else None
        if root is not None:
            return FemnistSource("leaf", root)
    lines = ["FEMNIST not found. Searched (for "
             f"{FEMNIST_NPZ}, or LEAF's train/ and test/ JSON folders):"]
    lines += [f"  - {p}" for p in places]
    lines.append(
        f"Nothing is downloaded: the compact {FEMNIST_NPZ} has no public download URL, and "
        f"LEAF's FEMNIST is built with LEAF's scripts ({_LEAF_URL}). To fix: set "
        f"{_DATA_ENV_VAR} to a folder holding femnist/{FEMNIST_NPZ} (or femnist/train and "
        f"femnist/test), pass data_dir=..., or copy the data into {femnist_cache_dir()}/.")
    raise DataNotFoundError("\n".join(lines))


def _npz_array(z: Any, key: str, path: Path, *, dtype_kind: str) -> NDArray[Any]:
    try:
        arr: NDArray[Any] = np.asarray(z[key])
    except ValueError as exc:  # e.g. an object array, which would need pickle
        raise FemnistFormatError(f"{path}: key {key!r} cannot be read ({exc})") from None
    if arr.dtype.kind not in dtype_kind:
        raise FemnistFormatError(f"{path}: key {key!r} must have dtype kind in "
                                 f"{dtype_kind!r}, got {arr.dtype}")
    return arr


def read_femnist_npz(path: Path, *, complete_only: bool = False) -> RawData:
    """Read the compact npz subset (schema in the module docstring).

    Parameters
    ----------
    path : Path
        The ``.npz`` file.
    complete_only : bool, optional
        Keep only writers whose full LEAF data are present (``writer_complete``).

    Returns
    -------
    RawData
        ``uint8`` ink-positive images ``[n, 28, 28]`` (``255 - x``), LEAF's train/test split,
        writers.
    """
    try:
        return _read_npz(path, complete_only=complete_only)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        if isinstance(exc, FemnistFormatError):
            raise
        raise FemnistFormatError(f"{path}: not a readable npz file, truncated or damaged "
                                 f"({type(exc).__name__}: {exc}); replace it with a good "
                                 "copy") from None


def _read_npz(path: Path, *, complete_only: bool) -> RawData:
    z = np.load(path, allow_pickle=False)
    with z:
        missing = [k for k in _NPZ_KEYS if k not in z.files]
        if missing:
            raise FemnistFormatError(f"{path}: unknown layout, missing keys {missing} "
                                     f"(has {sorted(z.files)}; needs {list(_NPZ_KEYS)})")
        x = _npz_array(z, "x", path, dtype_kind="u")
        y = _npz_array(z, "y", path, dtype_kind="iu").astype(np.int64)
        writer = _npz_array(z, "writer", path, dtype_kind="iu").astype(np.int64)
        split = _npz_array(z, "split", path, dtype_kind="iub")
        ids = tuple(str(s) for s in _npz_array(z, "writer_ids", path, dtype_kind="U"))
        if complete_only and "writer_complete" not in z.files:
            raise FemnistFormatError(f"{path}: complete_only=True needs key 'writer_complete'")
        keep = (_npz_array(z, "writer_complete", path, dtype_kind="b") if complete_only
                else np.ones(y.shape, dtype=bool))
    n = y.shape[0]
    if x.dtype != np.uint8 or x.shape != (n, *FEMNIST_IMAGE_SHAPE):
        raise FemnistFormatError(f"{path}: x must be uint8 [{n}, 28, 28], got {x.dtype} "
                                 f"{list(x.shape)}")
    for key, arr in (("writer", writer), ("split", split), ("writer_complete", keep)):
        if arr.shape != (n,):
            raise FemnistFormatError(f"{path}: {key} must have shape ({n},), got {arr.shape}")
    if n and not (0 <= y.min() and y.max() < FEMNIST_NUM_CLASSES):
        raise FemnistFormatError(f"{path}: y must lie in [0, 61], got [{y.min()}, {y.max()}]")
    if n and not (0 <= writer.min() and writer.max() < len(ids)):
        raise FemnistFormatError(f"{path}: writer must index writer_ids (0..{len(ids) - 1})")
    if not np.isin(split, (0, 1)).all():
        raise FemnistFormatError(f"{path}: split must hold 0 (train) and 1 (test) only")
    tr, te = keep & (split == 0), keep & (split == 1)
    return RawData(x_train=255 - x[tr], y_train=y[tr], x_test=255 - x[te], y_test=y[te],
                   writer_train=writer[tr], writer_test=writer[te], writer_ids=ids)


def _read_leaf_file(path: Path) -> list[tuple[str, NDArray[np.float32], NDArray[np.int64]]]:
    """One LEAF JSON file as ``(writer, x [m, 28, 28] in [0, 1], y [m])`` per user."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise FemnistFormatError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(doc, dict) or not {"users", "user_data"} <= doc.keys():
        keys = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
        raise FemnistFormatError(f"{path}: unknown layout: a LEAF file needs keys 'users', "
                                 f"'num_samples' and 'user_data', got {keys}")
    counts = doc.get("num_samples")
    out = []
    for i, uid in enumerate(doc["users"]):
        entry = doc["user_data"].get(uid) if isinstance(doc["user_data"], dict) else None
        if not isinstance(entry, dict) or not {"x", "y"} <= entry.keys():
            raise FemnistFormatError(f"{path}: user_data[{uid!r}] must hold 'x' and 'y'")
        x = np.asarray(entry["x"], dtype=np.float32)
        y = np.asarray(entry["y"])
        m = y.shape[0] if y.ndim == 1 else -1
        if x.shape != (m, 784) or not np.issubdtype(y.dtype, np.integer):
            raise FemnistFormatError(
                f"{path}: user {uid!r} must have x [m, 784] floats and y [m] ints, got "
                f"x shape {list(x.shape)}, y shape {list(y.shape)} ({y.dtype})")
        if isinstance(counts, list) and i < len(counts) and counts[i] != m:
            raise FemnistFormatError(f"{path}: num_samples[{i}]={counts[i]} but user {uid!r} "
                                     f"has {m} samples")
        if m and not (x.min() >= 0.0 and x.max() <= 1.0):
            raise FemnistFormatError(f"{path}: user {uid!r}: x must lie in [0, 1]")
        if m and not (y.min() >= 0 and y.max() < FEMNIST_NUM_CLASSES):
            raise FemnistFormatError(f"{path}: user {uid!r}: y must lie in [0, 61]")
        out.append((str(uid), x.reshape(m, *FEMNIST_IMAGE_SHAPE), y.astype(np.int64)))
    return out


def read_leaf_json(root: Path) -> RawData:
    """Read LEAF's ``root/train/*.json`` and ``root/test/*.json`` (files in sorted order).

    Returns
    -------
    RawData
        ``float32`` ink-positive images ``[n, 28, 28]`` (``1 - x``) in ``[0, 1]``, LEAF's
        train/test split, writers indexed into the sorted writer names of both splits.
    """
    parts: dict[str, list[tuple[str, NDArray[np.float32], NDArray[np.int64]]]] = {}
    for split in ("train", "test"):
        files = sorted((root / split).glob("*.json"))
        if not files:
            raise FemnistFormatError(f"{root / split}: no *.json files (LEAF layout expected)")
        parts[split] = [u for f in files for u in _read_leaf_file(f)]
    ids = tuple(sorted({w for users in parts.values() for w, _, _ in users}))
    index = {w: i for i, w in enumerate(ids)}
    arrays: dict[str, Any] = {}
    for split, users in parts.items():
        if not users:
            raise FemnistFormatError(f"{root / split}: the JSON files hold no users")
        arrays[f"x_{split}"] = 1.0 - np.concatenate([x for _, x, _ in users])
        arrays[f"y_{split}"] = np.concatenate([y for _, _, y in users])
        arrays[f"writer_{split}"] = np.concatenate(
            [np.full(y.shape[0], index[w], dtype=np.int64) for w, _, y in users])
    return RawData(**arrays, writer_ids=ids)


def load_femnist_arrays(*, data_dir: Path | None = None, complete_only: bool = False) -> RawData:
    """Locate and read FEMNIST (npz subset or LEAF JSON), ink-positive, with writers.

    Parameters
    ----------
    data_dir : Path or None, optional
        Folder (or npz file) searched first; see the module docstring for the order.
    complete_only : bool, optional
        npz only: keep only writers with their full LEAF data (``writer_complete``).

    Raises
    ------
    DataNotFoundError
        If no FEMNIST data are found.
    FemnistFormatError
        If the data found are not in a known layout.
    """
    check_data_dir(data_dir)
    source = locate_femnist(data_dir=data_dir)
    if source.kind == "npz":
        return read_femnist_npz(source.path, complete_only=complete_only)
    return read_leaf_json(source.path)
