"""Softmax regression's closed forms (no autograd) against torch autograd on small problems,
Lanczos on a known spectrum, and the estimate of several clip settings sharing one run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from numpy.typing import NDArray

from fedqr.data import Dataset, load_dataset, make_partition
from fedqr.models.logreg import Norm
from fedqr.theory.estimate import (
    ClipSetting,
    EstimateSettings,
    estimate_constants,
    estimate_constants_many,
)
from fedqr.theory.estimate_curvature import autograd_gradient, autograd_hvp, lanczos_extremes
from fedqr.theory.estimate_logreg import (
    LogRegObjective,
    _objective,
    hessian_vector_product,
    regularised_optimum,
    softmax_t,
    value_and_gradient,
)

WD = 0.05
F, K = 7, 4


def _problem(n: int = 60, seed: int = 0) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, F)) * 2.0, rng.integers(0, K, size=n)


def _obj() -> LogRegObjective:
    return LogRegObjective(num_features=F, num_classes=K, weight_decay=WD)


def _theta(seed: int = 1) -> torch.Tensor:
    return torch.as_tensor(np.random.default_rng(seed).standard_normal((F, K)))


def test_value_and_gradient_match_autograd() -> None:
    x, y = _problem()
    xt, yt = _obj().tensors(x, y)
    theta = _theta()
    loss = _obj().loss(xt, yt)
    value, grad = value_and_gradient(x, y, theta.numpy(), WD)
    assert value == pytest.approx(float(loss(theta)), rel=1e-13)
    ref = autograd_gradient(loss, theta).numpy()
    np.testing.assert_allclose(grad, ref, rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(_obj().gradient(xt, yt, theta).numpy(), ref, rtol=1e-11,
                               atol=1e-14)


def test_hessian_vector_products_match_autograd_in_the_flat_order() -> None:
    x, y = _problem()
    xt, yt = _obj().tensors(x, y)
    theta = _theta()
    ref = autograd_hvp(_obj().loss(xt, yt), theta)
    closed = _obj().hvp(xt, yt, theta)
    rng = np.random.default_rng(2)
    for _ in range(3):
        v = rng.standard_normal(F * K)
        np.testing.assert_allclose(closed(v), ref(v), rtol=1e-11, atol=1e-13)
    _, pt, _ = softmax_t(x, theta.numpy())
    v = rng.standard_normal((F, K))
    np.testing.assert_allclose(hessian_vector_product(x, pt, v, WD).reshape(-1),
                               ref(v.reshape(-1)), rtol=1e-11, atol=1e-13)


def _newton_optimum(x: NDArray[np.float64], y: NDArray[np.int64]) -> NDArray[np.float64]:
    """The optimum by Newton's method on autograd's dense Hessian (independent of L-BFGS and
    of the closed forms)."""
    xt, yt = torch.as_tensor(x), torch.as_tensor(y)

    def f(t: torch.Tensor) -> torch.Tensor:
        return (torch.nn.functional.cross_entropy(xt @ t.reshape(F, K), yt)
                + 0.5 * WD * t.pow(2).sum())

    t = torch.zeros(F * K, dtype=torch.float64)
    for _ in range(30):
        g = torch.autograd.functional.jacobian(f, t)
        if float(g.abs().max()) < 1e-13:
            break
        t = t - torch.linalg.solve(torch.autograd.functional.hessian(f, t), g)
    return t.reshape(F, K).numpy()


def test_regularised_optimum_and_local_optimum_match_newton() -> None:
    x, y = _problem(n=200, seed=3)
    ref = _newton_optimum(x, y)
    theta = regularised_optimum(x.astype(np.float32), y, num_classes=K, weight_decay=WD)
    assert theta.shape == (K, F)  # the engine's (classes, features)
    np.testing.assert_allclose(theta.T, ref, rtol=1e-5, atol=1e-6)
    xt, yt = _obj().tensors(x, y)
    value, sq = _obj().local_optimum(xt, yt)
    assert value == pytest.approx(float(_obj().loss(xt, yt)(torch.as_tensor(ref))), rel=1e-10)
    assert sq == pytest.approx(float(np.sum(ref**2)), rel=1e-5)


def test_lanczos_is_exact_once_steps_reach_the_size() -> None:
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((12, 12)))
    eig = np.linspace(0.5, 9.0, 12)
    h = (q * eig) @ q.T
    low, top = lanczos_extremes(lambda v: h @ v, size=12, steps=12)
    assert (low, top) == pytest.approx((0.5, 9.0), rel=1e-10)
    low5, top5 = lanczos_extremes(lambda v: h @ v, size=12, steps=5)
    assert 0.5 < low5 and top5 < 9.0  # Ritz values converge from within
    with pytest.raises(ValueError, match="steps must be an integer >= 1, got steps=0"):
        lanczos_extremes(lambda v: v, size=3, steps=0)


@pytest.fixture(scope="module")
def digits() -> Dataset:
    ds = load_dataset("digits")
    return dataclasses.replace(ds, x_train=ds.x_train[:240], y_train=ds.y_train[:240])


def test_many_settings_equal_separate_estimates(digits: Dataset) -> None:
    part = make_partition("iid", labels=digits.y_train, num_clients=3,
                          rng=np.random.default_rng(0))
    clips = [ClipSetting(clip=100.0, norm=Norm.L1, eps=1.0),
             ClipSetting(clip=7.5, norm=Norm.L2, eps=(0.5, 1.0, 2.0), delta=1e-6,
                         sample_rate=0.1)]
    settings = EstimateSettings(gd_steps=4, lanczos_steps=15)
    many = estimate_constants_many(dataset=digits, partition=part, clips=clips,
                                   proxy_fraction=0.5, rng=np.random.default_rng(1),
                                   settings=settings)
    assert len(many) == 2
    for c, est in zip(clips, many, strict=True):
        one = estimate_constants(dataset=digits, partition=part, clip=c.clip, norm=c.norm,
                                 eps=c.eps, delta=c.delta, sample_rate=c.sample_rate,
                                 proxy_fraction=0.5, rng=np.random.default_rng(1),
                                 settings=settings)
        assert est.constants == one.constants
        np.testing.assert_array_equal(est.G2_trajectory, one.G2_trajectory)
        assert (est.mu_i, est.F_i_star) == (one.mu_i, one.F_i_star)
    assert many[0].constants.G != many[1].constants.G  # the clipping does differ
    assert many[0].mu_i == many[1].mu_i and many[0].Y0_i == many[1].Y0_i


def test_clip_settings_are_checked(digits: Dataset) -> None:
    with pytest.raises(ValueError, match=r"clip must be > 0, got clip=-1\.0"):
        ClipSetting(clip=-1.0, norm=Norm.L2, eps=1.0)
    part = make_partition("iid", labels=digits.y_train, num_clients=2,
                          rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="clips must name at least one ClipSetting"):
        estimate_constants_many(dataset=digits, partition=part, clips=[])


def test_the_intercept_is_a_column_of_ones_and_its_gradient_matches_autograd() -> None:
    x, y = _problem()
    obj = LogRegObjective(num_features=F, num_classes=K, weight_decay=WD, intercept=True)
    xt, yt = obj.tensors(x, y)
    assert xt.shape == (len(y), F + 1) and bool((xt[:, -1] == 1).all())
    assert obj.num_params == (F + 1) * K and obj.theta0.shape == (F + 1, K)
    theta = torch.as_tensor(np.random.default_rng(3).standard_normal((F + 1, K)))
    loss = obj.loss(xt, yt)
    np.testing.assert_allclose(obj.gradient(xt, yt, theta).numpy(),
                               autograd_gradient(loss, theta).numpy(), rtol=1e-11, atol=1e-14)
    # the bias's gradient is the mean residual: the label frequencies pull it, no feature does
    p = torch.softmax(xt @ theta, dim=1) - torch.nn.functional.one_hot(yt, K)
    np.testing.assert_allclose(obj.gradient(xt, yt, theta)[-1].numpy(),
                               (p.mean(0) + WD * theta[-1]).numpy(), rtol=1e-11, atol=1e-14)


def _sparse_problem(n: int = 2_000, seed: int = 4) -> tuple[NDArray[np.float64],
                                                            NDArray[np.int64]]:
    """Rows that are a column background plus a few non-zeros (10%), as standardised images."""
    rng = np.random.default_rng(seed)
    back = rng.standard_normal(F)
    x = np.where(rng.random((n, F)) < 0.1, rng.standard_normal((n, F)) * 3.0, 0.0) + back
    return x, rng.integers(0, K, size=n)


def test_sparse_value_and_gradient_equal_the_dense_ones() -> None:
    x, y = _sparse_problem()
    objective = _objective(x, y, K, WD)
    theta = _theta().numpy()
    value, grad = objective(theta)
    ref_value, ref_grad = value_and_gradient(x, y, theta, WD)
    assert value == pytest.approx(ref_value, rel=1e-13)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-11, atol=1e-14)
    assert objective.__name__ == "sparse"  # the rows above are sparse enough to pay


def test_dense_rows_and_few_rows_take_the_dense_objective() -> None:
    dense, y = _problem(n=2_000)
    assert _objective(dense, y, K, WD).__name__ == "dense"
    few, y_few = _sparse_problem(n=200)
    assert _objective(few, y_few, K, WD).__name__ == "dense"


def test_regularised_optimum_on_sparse_rows_matches_newton() -> None:
    """The optimum through the sparse objective reaches Newton's objective value (its theta
    to L-BFGS's tolerance on these ill-conditioned rows, as the dense objective's does)."""
    x, y = _sparse_problem()
    theta = regularised_optimum(x, y, num_classes=K, weight_decay=WD).T
    ref = _newton_optimum(x, y)
    assert value_and_gradient(x, y, theta, WD)[0] == pytest.approx(
        value_and_gradient(x, y, ref, WD)[0], rel=1e-8)
    np.testing.assert_allclose(theta, ref, atol=1e-4)
