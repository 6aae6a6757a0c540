"""Standardisation of images per channel, and the warning for test features that standardise
far outside the training rows (a feature nearly constant on the training rows)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from numpy.typing import NDArray

from fedqr.data import FeatureScaleWarning, FederatedData
from fedqr.data._prepare import far_outside, feature_stats


def _images(n: int, shape: tuple[int, ...], seed: int) -> NDArray[np.float32]:
    """Ink-like images: mostly 0, some pixels up to 1; pixel (0, 0) inked on one image only,
    and faintly, as a rarely used corner of a handwriting set."""
    rng = np.random.default_rng(seed)
    x = np.where(rng.random((n, *shape)) < 0.2, rng.random((n, *shape)), 0.0)
    x[..., 0, 0] = 0.0
    x[0, ..., 0, 0] = 0.004
    return x.astype(np.float32)


def test_channel_statistics_are_each_channels_over_its_pixels() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 3, 4, 5)) * np.array([1.0, 10.0, 0.1])[:, None, None] + 3.0
    flat = x.reshape(50, -1).astype(np.float32)
    stats = feature_stats(flat, channels=3)
    for c in range(3):
        pixels = flat.reshape(50, 3, 20)[:, c].astype(np.float64)
        np.testing.assert_allclose(stats.mean.reshape(3, 20)[c], pixels.mean(), rtol=1e-12)
        np.testing.assert_allclose(stats.std.reshape(3, 20)[c], pixels.std(), rtol=1e-12)
    per_feature = feature_stats(flat)
    np.testing.assert_allclose(per_feature.std, flat.astype(np.float64).std(axis=0),
                               rtol=1e-12)


@pytest.mark.parametrize("shape", [(6, 6), (2, 6, 6)])
def test_images_are_standardised_per_channel_without_a_warning(
        shape: tuple[int, ...]) -> None:
    x, xt = _images(300, shape, seed=1), _images(40, shape, seed=2)
    xt[:, ..., 0, 0] = 1.0  # the test images ink the corner that training barely did
    with warnings.catch_warnings():
        warnings.simplefilter("error", FeatureScaleWarning)
        data = FederatedData.from_arrays(x=x, y=np.arange(300) % 2, client=np.arange(300) % 3,
                                         x_test=xt, y_test=np.arange(40) % 2)
    channels = 1 if len(shape) == 2 else shape[0]
    assert data.input_shape == (channels, 6, 6)
    assert data.standardization is not None
    std = data.standardization.std.reshape(channels, 36)
    assert (std == std[:, :1]).all() and (std > 0.1).all()  # one std per channel
    assert float(np.abs(data.x_test).max()) < 10.0


def test_a_nearly_constant_feature_of_rows_warns_naming_it() -> None:
    x, xt = _images(300, (6, 6), seed=1), _images(40, (6, 6), seed=2)
    xt[:, 0, 0] = 1.0
    rows = {"x": x.reshape(300, 36), "y": np.arange(300) % 2, "client": np.arange(300) % 3,
            "x_test": xt.reshape(40, 36), "y_test": np.arange(40) % 2,
            "feature_names": [f"px{j}" for j in range(36)]}
    with pytest.warns(FeatureScaleWarning) as caught:
        data = FederatedData.from_arrays(**rows)
    assert data.input_shape == (36,)  # rows of features: standardised feature by feature
    message = str(caught[0].message)
    assert "1 feature(s) of the test rows" in message and "feature 0 ('px0')" in message
    # one training value v among n = 300 zeros: |z| = sqrt(n - 1) there, (1 - v/n) / std at 1
    std = 0.004 * np.sqrt(299) / 300
    assert f"|z| up to {(1 - 0.004 / 300) / std:.3g} on the test rows" in message
    assert f"against {np.sqrt(299):.3g} on the training rows" in message
    assert "--no-standardize" in message
    with warnings.catch_warnings():  # as given, nothing is divided
        warnings.simplefilter("error", FeatureScaleWarning)
        FederatedData.from_arrays(**rows, standardize=False)


def test_ordinary_outliers_and_rare_categories_do_not_warn() -> None:
    rng = np.random.default_rng(3)
    train = rng.normal(size=(2000, 3)).astype(np.float32)
    test = rng.normal(size=(200, 3)).astype(np.float32)
    test[0, 0] = 40.0  # an outlier 10 times the training rows' range, not 100 sigma
    assert far_outside(train, test) == []
    onehot = np.zeros((10_000, 1), np.float32)
    onehot[0] = 1.0  # a category on one training row: z = 100 there and on the test rows
    z = (onehot - onehot.mean()) / onehot.std()
    assert far_outside(z, z[:5]) == []
    assert far_outside(train, test * 1000)[0][0] in (0, 1, 2)


def test_channels_last_images_are_refused_with_the_fix() -> None:
    """``[n, 28, 28, 1]`` was read as 28 channels of 28 x 1 images, standardised per row of
    pixels; the only sign was a scale warning about one feature (a QA run)."""
    rng = np.random.default_rng(0)
    y, client = np.arange(40) % 2, np.arange(40) % 4
    for c in (1, 3):
        with pytest.raises(ValueError, match=rf"x must hold images channels first, \[n, C, H, "
                                             rf"W\], got x of shape \[n, 8, 8, {c}\].*"
                                             rf"np.moveaxis\(x, -1, 1\)"):
            FederatedData.from_arrays(x=rng.random((40, 8, 8, c)), y=y, client=client,
                                      test_share=0.25)
    moved = FederatedData.from_arrays(x=rng.random((40, 3, 8, 8)), y=y, client=client,
                                      test_share=0.25)
    assert moved.input_shape == (3, 8, 8)  # channels first, 3 channels: as before
