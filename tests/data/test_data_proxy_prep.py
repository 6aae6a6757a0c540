"""A public proxy is standardised as the deployment's rows are: per feature for rows, per
channel for images, not at all where the deployment is not (``fedqr.data.proxy_prep``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from fedqr.data import FederatedData
from fedqr.data.proxy_prep import Preparation, prepared_like
from fedqr.data.public import load_proxy


def _pixels(n: int, seed: int) -> NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    x = np.where(rng.random((n, 4, 4)) < 0.3, rng.random((n, 4, 4)), 0.0)
    return (x * np.linspace(0.2, 1.0, 16).reshape(4, 4)).astype(np.float32)  # pixels unlike


def _file(path: Path, x: NDArray[np.float32]) -> Path:
    n = len(x)
    np.savez(path, x=x, y=np.arange(n) % 2, client=np.arange(n) % 3, x_test=x[: n // 4],
             y_test=np.arange(n // 4) % 2)
    return path


def _per_feature(std: NDArray[np.float64]) -> bool:
    return bool(np.ptp(std) > 1e-3)


@pytest.mark.parametrize(("deployment", "proxy"), [((16,), (4, 4)), ((1, 4, 4), (16,))])
def test_a_proxy_file_follows_the_deployments_shape(
        tmp_path: Path, deployment: tuple[int, ...], proxy: tuple[int, ...]) -> None:
    path = _file(tmp_path / "p.npz", _pixels(200, 1).reshape(200, *proxy))
    src = load_proxy(path, classes=None, client_column="client", label_column="label", seed=0,
                     like=Preparation(input_shape=deployment))
    stats = src.data.standardization
    assert stats is not None and src.data.input_shape == deployment
    assert _per_feature(stats.std) == (len(deployment) == 1)  # images: one std per channel
    alone = load_proxy(path, classes=None, client_column="client", label_column="label",
                       seed=0)  # no deployment given: the file's own shape decides
    assert alone.data.standardization is not None
    assert _per_feature(alone.data.standardization.std) == (len(proxy) == 1)


def test_a_proxy_file_is_not_standardised_for_a_deployment_that_is_not(tmp_path: Path) -> None:
    x = _pixels(200, 1).reshape(200, 16)
    src = load_proxy(_file(tmp_path / "p.npz", x), classes=None, client_column="client",
                     label_column="label", seed=0,
                     like=Preparation(standardize=False, input_shape=(16,)))
    assert src.data.standardization is None
    np.testing.assert_array_equal(src.data.x, x)  # its rows as given


def test_a_built_in_pool_is_standardised_per_feature_as_its_raw_pixels() -> None:
    raw = _pixels(300, 2).reshape(300, 16)
    flat = dict(x=raw, y=np.arange(300) % 2, client=np.zeros(300), x_test=raw[:50],
                y_test=np.arange(50) % 2)
    scalar = FederatedData.from_arrays(**flat, input_shape=(1, 4, 4))  # as a built-in set
    assert scalar.standardization is not None and not _per_feature(scalar.standardization.std)
    rows = prepared_like(scalar, Preparation(input_shape=(16,)))
    direct = FederatedData.from_arrays(**flat)
    np.testing.assert_allclose(rows.x, direct.x, atol=1e-5)
    np.testing.assert_allclose(rows.x_test, direct.x_test, atol=1e-5)
    assert prepared_like(scalar, Preparation(input_shape=(1, 4, 4))) is scalar
    assert prepared_like(scalar, Preparation(standardize=False, input_shape=(16,))) is scalar
