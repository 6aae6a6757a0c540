"""Real MNIST: shapes, md5 verification, label counts, normalisation, two-digits split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedqr.data import (
    MNIST_MIRRORS,
    Dataset,
    RawData,
    load_dataset,
    load_mnist_arrays,
    locate_mnist_files,
    mnist_search_dirs,
    partition_two_digits,
)
from fedqr.data._files import file_md5
from fedqr.data.mnist import MNIST_FILES

# Canonical MNIST training label counts, digits 0..9.
TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def test_shapes_and_dtypes(mnist_raw: RawData) -> None:
    assert mnist_raw.x_train.shape == (60000, 28, 28)
    assert mnist_raw.x_test.shape == (10000, 28, 28)
    assert mnist_raw.x_train.dtype == mnist_raw.x_test.dtype == np.uint8
    assert mnist_raw.y_train.shape == (60000,)
    assert mnist_raw.y_test.shape == (10000,)
    assert mnist_raw.y_train.dtype == mnist_raw.y_test.dtype == np.int64


def test_label_counts(mnist_raw: RawData) -> None:
    assert np.bincount(mnist_raw.y_train, minlength=10).tolist() == TRAIN_COUNTS
    assert np.bincount(mnist_raw.y_test, minlength=10).tolist() == TEST_COUNTS
    assert int(np.bincount(mnist_raw.y_train)[1]) == 6742


def test_first_labels_and_pixel_range(mnist_raw: RawData) -> None:
    assert mnist_raw.y_train[:8].tolist() == [5, 0, 4, 1, 9, 2, 1, 3]
    assert mnist_raw.y_test[:5].tolist() == [7, 2, 1, 0, 4]
    assert int(mnist_raw.x_train.min()) == 0
    assert int(mnist_raw.x_train.max()) == 255


def test_files_verified_against_canonical_md5(data_dir: Path) -> None:
    paths = locate_mnist_files(data_dir=data_dir, download=False)
    assert set(paths) == {f.filename for f in MNIST_FILES}
    for f in MNIST_FILES:
        assert paths[f.filename].parent == data_dir / "mnist"
        assert file_md5(paths[f.filename]) == f.md5


def test_fedqr_data_env_is_searched(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_DATA", str(data_dir))
    dirs = mnist_search_dirs()
    assert dirs[:2] == (data_dir / "mnist", data_dir)
    paths = locate_mnist_files(download=False)
    assert all(p.parent == data_dir / "mnist" for p in paths.values())


def test_normalised_dataset(mnist_dataset: Dataset) -> None:
    d = mnist_dataset
    assert d.name == "mnist"
    assert d.x_train.shape == (60000, 784)
    assert d.x_test.shape == (10000, 784)
    assert d.x_train.dtype == d.x_test.dtype == np.float32
    assert d.num_features == 784
    assert d.num_classes == 10
    assert abs(float(d.x_train.mean(dtype=np.float64))) < 1e-4
    assert abs(float(d.x_train.std(dtype=np.float64)) - 1.0) < 1e-4
    # test set uses the training statistics: close to, not exactly, 0 and 1
    assert abs(float(d.x_test.mean(dtype=np.float64))) < 0.05
    # background pixel 0 maps to -0.1307 / 0.3081
    assert float(d.x_train.min()) == pytest.approx(-0.1307 / 0.3081, abs=1e-3)


def test_download_from_file_mirror(
    data_dir: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end, no network: a ``file://`` mirror fills the (empty) cache folder."""
    mirror = (data_dir / "mnist").as_uri() + "/"
    raw = load_mnist_arrays(download=True, mirrors=[mirror])
    cache = isolated_env / "fedqr" / "mnist"
    assert sorted(p.name for p in cache.iterdir()) == sorted(f.filename for f in MNIST_FILES)
    assert raw.x_train.shape == (60000, 28, 28)
    # second load finds the cached files without downloading
    monkeypatch.setattr("urllib.request.urlopen", _no_network)
    assert load_mnist_arrays(download=True).y_test.shape == (10000,)
    assert MNIST_MIRRORS[0].startswith("https://")


def _no_network(*args: object, **kwargs: object) -> None:
    raise AssertionError("network used")


def test_two_digits_on_mnist(mnist_raw: RawData) -> None:
    """The paper's split: 10 clients x 6,000 samples, mostly two digits each.

    Sorted labels cut into 20 shards of 3,000: shard boundaries do not line up with
    label boundaries, so 9 of the 20 shards straddle two digits. Their minority
    parts total 3,048 samples, so over any deal of shards the 10 clients' top-two
    digits cover on average >= 1 - 3048/60000 = 94.9% of their samples. Only 4
    shards have a minority above 200 samples (596, 623, 665, 754), so at least 6
    clients have top-two coverage >= (6000 - 2 * 200) / 6000 = 93%. The worst
    client (two of those 4 shards, four digits) still has 4581/6000 = 76.35%.
    """
    y = mnist_raw.y_train
    for seed in range(8):
        p = partition_two_digits(labels=y, num_clients=10, rng=np.random.default_rng(seed))
        assert p.num_clients == 10
        assert p.sizes.tolist() == [6000] * 10
        counts = p.label_counts(y, num_classes=10)
        top2 = np.sort(counts, axis=1)[:, -2:].sum(axis=1) / 6000
        assert np.all((counts > 0).sum(axis=1) <= 4)
        assert float(top2.min()) >= 4581 / 6000 - 1e-12
        assert int((top2 >= 0.9).sum()) >= 6
        assert float(top2.mean()) >= 1 - 3048 / 60000 - 1e-12


def test_load_dataset_fraction_stratified(data_dir: Path) -> None:
    d = load_dataset(
        "mnist", data_dir=data_dir, download=False, fraction=0.1, rng=np.random.default_rng(0)
    )
    assert d.x_train.shape == (6000, 784)
    assert d.x_test.shape == (10000, 784)
    counts = np.bincount(d.y_train, minlength=10)
    expected = np.asarray(TRAIN_COUNTS) * 0.1
    assert np.all(np.abs(counts - expected) <= 1)
    assert abs(float(d.x_train.mean(dtype=np.float64))) < 1e-4
