"""The real FEMNIST subset (shared/data/femnist, 73,554 samples of 710 LEAF writers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedqr.data import Dataset, RawData, load_dataset, load_femnist_arrays, make_partition


@pytest.fixture(scope="module")
def femnist_raw(femnist_dir: Path) -> RawData:
    return load_femnist_arrays(data_dir=femnist_dir)


@pytest.fixture(scope="module")
def femnist(femnist_dir: Path) -> Dataset:
    return load_dataset("femnist", data_dir=femnist_dir)


def test_counts_writers_and_classes(femnist_raw: RawData) -> None:
    raw = femnist_raw
    assert raw.y_train.size + raw.y_test.size == 73_554
    assert (raw.y_train.size, raw.y_test.size) == (57_180, 16_374)
    assert len(raw.writer_ids) == 710
    assert np.union1d(raw.writer_train, raw.writer_test).size == 710
    assert np.unique(raw.writer_train).size == 396  # the writers with complete LEAF data
    labels = np.concatenate([raw.y_train, raw.y_test])
    assert np.unique(labels).tolist() == list(range(62))
    assert int((labels < 10).sum()) == 48_326


def test_polarity_is_ink_positive(femnist_raw: RawData) -> None:
    x = femnist_raw.x_train
    assert x.dtype == np.uint8
    border = np.concatenate([x[:, 0, :], x[:, -1, :], x[:, :, 0], x[:, :, -1]], axis=1)
    assert float((border == 0).mean()) > 0.9  # background is 0 after 255 - x
    assert float(x.mean()) < 64 and int(x.max()) == 255


def test_dataset_and_balanced_writer_partition(femnist: Dataset) -> None:
    assert femnist.x_train.shape == (57_180, 784) and femnist.image_shape == (1, 28, 28)
    assert femnist.num_classes == 62 and femnist.writer_train is not None
    part = make_partition("by-writer", labels=femnist.y_train, writers=femnist.writer_train,
                          num_clients=10, rng=np.random.default_rng(0))
    sizes = part.sizes
    assert sizes.sum() == 57_180
    largest_writer = np.bincount(femnist.writer_train).max()
    assert sizes.max() - sizes.min() <= largest_writer
    assert sizes.max() - sizes.min() <= 5  # in fact within a few samples of 5,718
    owners = {}
    for client, idx in enumerate(part.indices):
        for w in np.unique(femnist.writer_train[idx]):
            assert owners.setdefault(int(w), client) == client  # no writer is split
