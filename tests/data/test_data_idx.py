"""IDX parsing: round trip and header validation."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from fedqr.data import IdxFormatError
from fedqr.data.idx import IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC, parse_idx, read_idx

IdxFn = Callable[[NDArray[np.uint8]], bytes]


def test_round_trip(tmp_path: Path, idx_gz_bytes: IdxFn, idx_bytes: IdxFn) -> None:
    images = np.random.default_rng(0).integers(0, 256, size=(3, 28, 28), dtype=np.uint8)
    labels = np.array([7, 0, 9], dtype=np.uint8)
    (tmp_path / "i.gz").write_bytes(idx_gz_bytes(images))
    (tmp_path / "l").write_bytes(idx_bytes(labels))
    got = read_idx(tmp_path / "i.gz", expected_magic=IDX_IMAGES_MAGIC)
    np.testing.assert_array_equal(got, images)
    assert got.flags.writeable
    np.testing.assert_array_equal(read_idx(tmp_path / "l", expected_magic=IDX_LABELS_MAGIC), labels)


def test_wrong_magic(idx_bytes: IdxFn) -> None:
    labels = idx_bytes(np.zeros(4, dtype=np.uint8))
    with pytest.raises(
        IdxFormatError, match=r"bad IDX magic number 0x00000801, expected 0x00000803"
    ):
        parse_idx(labels, expected_magic=IDX_IMAGES_MAGIC, source="x")


def test_truncated_and_trailing(idx_bytes: IdxFn) -> None:
    raw = idx_bytes(np.zeros((2, 28, 28), dtype=np.uint8))
    with pytest.raises(IdxFormatError, match="announces shape"):
        parse_idx(raw[:-1], expected_magic=IDX_IMAGES_MAGIC)
    with pytest.raises(IdxFormatError, match="announces shape"):
        parse_idx(raw + b"\0", expected_magic=IDX_IMAGES_MAGIC)
    with pytest.raises(IdxFormatError, match="truncated IDX header"):
        parse_idx(raw[:10], expected_magic=IDX_IMAGES_MAGIC)
    with pytest.raises(IdxFormatError, match="too short"):
        parse_idx(b"\0\0", expected_magic=IDX_IMAGES_MAGIC)


def test_not_gzip(tmp_path: Path) -> None:
    bad = tmp_path / "x.gz"
    bad.write_bytes(b"plain bytes, not gzip")
    with pytest.raises(IdxFormatError, match="not a valid gzip file"):
        read_idx(bad, expected_magic=IDX_LABELS_MAGIC)
    bad.write_bytes(gzip.compress(b"\0\0\x08\x01\0\0\0\x05abc")[:-4])  # truncated stream
    with pytest.raises(IdxFormatError, match="not a valid gzip file"):
        read_idx(bad, expected_magic=IDX_LABELS_MAGIC)


def test_bad_expected_magic() -> None:
    with pytest.raises(ValueError, match="expected_magic must be"):
        parse_idx(b"", expected_magic=0x0D03)
