"""load_dataset: digits (always available), normalisation, fraction, bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedqr.data import Dataset, DatasetName, load_dataset, load_digits_arrays
from fedqr.data.datasets import scalar_mean_std, stratified_subset


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return load_dataset(DatasetName.DIGITS)


def test_digits_raw_split_is_fixed_and_stratified() -> None:
    a, b = load_digits_arrays(), load_digits_arrays()
    np.testing.assert_array_equal(a.y_train, b.y_train)
    np.testing.assert_array_equal(a.x_test, b.x_test)
    assert a.x_train.shape == (1438, 8, 8)
    assert a.x_test.shape == (359, 8, 8)
    assert a.x_train.dtype == np.float64
    assert float(a.x_train.max()) == 16.0
    test_counts = np.bincount(a.y_test, minlength=10)
    all_counts = test_counts + np.bincount(a.y_train, minlength=10)
    np.testing.assert_array_equal(test_counts, np.round(0.2 * all_counts))
    assert a.y_test[:10].tolist() == b.y_test[:10].tolist()


def test_digits_dataset(digits: Dataset) -> None:
    assert digits.name == "digits"
    assert digits.num_features == 64
    assert digits.num_classes == 10
    assert digits.x_train.dtype == np.float32
    assert digits.y_train.dtype == np.int64
    assert abs(float(digits.x_train.mean())) < 1e-5
    assert abs(float(digits.x_train.std()) - 1.0) < 1e-5
    assert digits.num_train == 1438 and digits.num_test == 359


def test_normalisation_uses_training_statistics(digits: Dataset) -> None:
    raw = load_digits_arrays()
    x = raw.x_train / 16.0
    mean, std = x.mean(), x.std()
    expected_test = ((raw.x_test / 16.0 - mean) / std).reshape(len(raw.x_test), -1)
    np.testing.assert_allclose(digits.x_test, expected_test, rtol=1e-5, atol=1e-5)


def test_scalar_mean_std_matches_numpy() -> None:
    x = np.random.default_rng(0).integers(0, 256, size=(20000, 3, 3), dtype=np.uint8)
    mean, std = scalar_mean_std(x)
    assert mean == pytest.approx(float(x.mean()), rel=1e-12)
    assert std == pytest.approx(float(x.std()), rel=1e-12)


_FORK_BESIDE = """
import subprocess, threading
import numpy as np
from fedqr.data.datasets import scalar_mean_std

x = np.random.default_rng(0).random((60000, 64), dtype=np.float32)
done = []
worker = threading.Thread(target=lambda: done.extend(scalar_mean_std(x) for _ in range(5)))
worker.start()
while worker.is_alive():  # a fork (not vfork: preexec_fn) runs the libraries' fork handlers
    subprocess.run(["true"], preexec_fn=lambda: None, check=True)
print(len(done))
"""


def test_scalar_mean_std_finishes_while_another_thread_forks() -> None:
    """Flower's simulation loads the data in a thread while it starts Ray's processes:
    OpenBLAS's threaded dot product, which the sum of squares used, waited forever there for
    a worker thread its fork handler had stopped (1 simulation in about 15)."""
    out = subprocess.run([sys.executable, "-c", _FORK_BESIDE], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["5"]


def test_fraction_subset(digits: Dataset) -> None:
    a = load_dataset("digits", fraction=0.25, rng=np.random.default_rng(1))
    b = load_dataset("digits", fraction=0.25, rng=np.random.default_rng(1))
    c = load_dataset("digits", fraction=0.25, rng=np.random.default_rng(2))
    assert a.num_train == round(0.25 * 1438)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert not np.array_equal(a.x_train, c.x_train)
    assert a.num_test == digits.num_test
    full = np.bincount(digits.y_train, minlength=10)
    assert np.all(np.abs(np.bincount(a.y_train, minlength=10) - 0.25 * full) <= 1)


def test_stratified_subset_exact_total() -> None:
    labels = np.repeat(np.arange(3), [5, 7, 11])
    for frac in (0.01, 0.3, 0.5, 0.99, 1.0):
        keep = stratified_subset(labels, fraction=frac, rng=np.random.default_rng(0))
        assert keep.size == max(1, round(frac * labels.size))
        assert np.all(np.diff(keep) > 0)


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.5, float("nan")])
def test_bad_fraction(fraction: float) -> None:
    with pytest.raises(ValueError, match=r"fraction must be in \(0, 1\], got fraction="):
        load_dataset("digits", fraction=fraction, rng=np.random.default_rng(0))


def test_fraction_needs_rng() -> None:
    with pytest.raises(ValueError, match="rng is required when fraction < 1"):
        load_dataset("digits", fraction=0.5)


def test_unknown_name_lists_allowed() -> None:
    with pytest.raises(
        ValueError, match=r"name must be one of 'mnist', 'digits', 'femnist', got name='cifar'"
    ):
        load_dataset("cifar")


def test_dataset_validates_fields() -> None:
    x = np.zeros((3, 4), dtype=np.float32)
    y = np.zeros(3, dtype=np.int64)
    with pytest.raises(ValueError, match="x_train must be 2-D float32"):
        Dataset("t", x.astype(np.float64), y, x, y, 2)
    with pytest.raises(ValueError, match="y_test must be 1-D int64 of length 3"):
        Dataset("t", x, y, x, y[:2], 2)
    with pytest.raises(ValueError, match=r"y_train must lie in \[0, 1\]"):
        Dataset("t", x, y + 2, x, y, 2)
    with pytest.raises(ValueError, match="same number of features"):
        Dataset("t", x, y, x[:, :2], y, 2)


def test_dataset_is_frozen(digits: Dataset) -> None:
    with pytest.raises(AttributeError):
        digits.name = "other"  # type: ignore[misc]


def test_mnist_missing_is_data_not_found(tmp_path: Path, isolated_env: Path) -> None:
    from fedqr.data import DataNotFoundError

    with pytest.raises(DataNotFoundError):
        load_dataset("mnist", data_dir=tmp_path, download=False)


@pytest.mark.parametrize(("change", "message"), [
    ({"seed": 1.5}, "seed must be an integer, got seed=1.5"),
    ({"num_clients": "5"}, "num_clients must be an integer, got num_clients='5'"),
    ({"num_clients": 2.5}, "num_clients must be an integer, got num_clients=2.5"),
    ({"fraction": "0.5"}, "fraction must be a number, got fraction='0.5'"),
    ({"fraction": float("nan")}, r"fraction must be in \(0, 1\], got fraction=nan"),
    ({"alpha": 0}, "alpha must be > 0 and finite, got alpha=0"),
])
def test_a_data_spec_checks_its_numbers_by_type_and_range(change: dict[str, object],
                                                          message: str) -> None:
    """A float seed or a string count failed deep inside NumPy at build time."""
    from fedqr.data.spec import DataSpec

    with pytest.raises(ValueError, match=message):
        DataSpec(dataset=DatasetName.DIGITS, **change)  # type: ignore[arg-type]
    ok = DataSpec(dataset=DatasetName.DIGITS, num_clients=np.int64(5), seed=np.int32(3))
    assert type(ok.num_clients) is int and type(ok.seed) is int  # plain numbers
