"""``fedqr.plan``'s public proxy is prepared as the deployment's rows are, as on the command
line (:mod:`fedqr.data.proxy_prep`): a proxy file as given for data read with
``standardize=False`` (it was standardised whatever the deployment), a built-in set
standardised per feature for a deployment of rows (it kept one mean and std)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fedqr
from fedqr.api import _public
from fedqr.data import DatasetName, DataSpec, PartitionKind
from fedqr.data.source import OwnData


def _rows(seed: int, n: int = 240) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(n, 6)) * np.arange(1, 7) + 50).astype(np.float32)  # far from z
    return x, (x[:, 0] > 50).astype(np.int64)


def _deployment(*, standardize: bool, x: np.ndarray | None = None) -> OwnData:
    x, y = _rows(1) if x is None else (x, (x.sum(axis=1) > np.median(x.sum(axis=1))).astype(
        np.int64))
    data = fedqr.FederatedData.from_arrays(x=x, y=y, client=np.arange(len(y)) % 4,
                                           test_share=0.25, standardize=standardize, seed=0)
    return OwnData(data=data, seed=0)


@pytest.mark.parametrize("standardize", [False, True])
def test_a_proxy_file_is_prepared_as_the_deployment(tmp_path: Path, standardize: bool) -> None:
    x, y = _rows(2)
    np.savez(tmp_path / "public.npz", x=x, y=y, x_test=x[:40], y_test=y[:40])
    src = _public(tmp_path / "public.npz", None, 0,
                  deployment=_deployment(standardize=standardize))
    assert isinstance(src, OwnData)
    if standardize:
        assert src.data.standardization is not None
        np.testing.assert_allclose(src.data.x.mean(axis=0), 0.0, atol=1e-4)
    else:
        assert src.data.standardization is None
        np.testing.assert_array_equal(src.data.x, x)  # the file's rows, as given


def test_a_built_in_proxy_is_standardised_per_feature_for_a_deployment_of_rows() -> None:
    spec = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.IID, num_clients=3,
                    seed=1)
    pixels = spec.build().dataset.x_train[:300] * 3.0 + 1.0  # 64 features, as rows
    src = _public(spec, None, 0, deployment=_deployment(standardize=True, x=pixels))
    assert isinstance(src, OwnData) and src.data.input_shape == (64,)
    x = src.data.x.astype(np.float64)
    varied = x.std(axis=0) > 0
    np.testing.assert_allclose(x.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(x.std(axis=0)[varied], 1.0, atol=1e-3)
    assert _public(spec, None, 0, deployment=spec) is spec  # a built-in deployment: as given
    kept = _public(spec, "0,1", 0, deployment=_deployment(standardize=True, x=pixels))
    assert isinstance(kept, OwnData) and kept.data.num_classes == 2
    np.testing.assert_allclose(kept.data.x.astype(np.float64).mean(axis=0), 0.0, atol=1e-4)
