"""Fixtures for the data tests: real MNIST (session-wide) and an isolated lookup environment."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from fedqr.data import Dataset, RawData, load_dataset, load_mnist_arrays


@pytest.fixture(scope="session")
def mnist_raw(data_dir: Path) -> RawData:
    """The real MNIST arrays, read once per test session (per xdist worker)."""
    return load_mnist_arrays(data_dir=data_dir, download=False)


@pytest.fixture(scope="session")
def mnist_dataset(data_dir: Path) -> Dataset:
    """The real MNIST data set, normalised, read once per test session."""
    return load_dataset("mnist", data_dir=data_dir, download=False)


@pytest.fixture
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No ``$FEDQR_DATA`` and an empty cache under ``tmp_path``; returns the cache root."""
    monkeypatch.delenv("FEDQR_DATA", raising=False)
    cache = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache


def _idx_bytes(arr: NDArray[np.uint8]) -> bytes:
    magic = 0x00000800 | arr.ndim
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in arr.shape)
    return header + np.ascontiguousarray(arr, dtype=np.uint8).tobytes()


@pytest.fixture
def idx_bytes() -> Callable[[NDArray[np.uint8]], bytes]:
    """Serialise a ``uint8`` array as an uncompressed IDX file."""
    return _idx_bytes


@pytest.fixture
def idx_gz_bytes() -> Callable[[NDArray[np.uint8]], bytes]:
    """Serialise a ``uint8`` array as a gzip-compressed IDX file (reproducible bytes)."""
    return lambda arr: gzip.compress(_idx_bytes(arr), mtime=0)
