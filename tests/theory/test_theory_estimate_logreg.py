"""The estimator on softmax regression against an independent reference on real digits.

The reference shares no code with :mod:`fedqr.theory`: dense Hessians from their closed form
(``mean_j (diag p_j - p_j p_j^T) (x) x_j x_j^T + wd I``) and ``numpy.linalg.eigvalsh``,
per-sample gradients ``x_j (p_j - y_j)^T`` materialised and clipped, the same GD run, and each
client's optimum by Newton's method.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy.linalg import block_diag, eigvalsh
from threadpoolctl import threadpool_limits

from fedqr.data import Dataset, load_dataset, make_partition
from fedqr.models.logreg import Norm
from fedqr.models.logreg_kernel import LogRegKernel
from fedqr.theory.estimate import EstimateSettings, estimate_constants

WD = 0.01
GD_STEPS = 6

Arr = NDArray[np.float64]


def _probs(x: Arr, w: Arr) -> Arr:
    z = x @ w
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    out: Arr = e / e.sum(axis=1, keepdims=True)
    return out


def _objective(x: Arr, y: NDArray[np.int64], w: Arr) -> float:
    p = _probs(x, w)
    return float(-np.log(p[np.arange(len(y)), y]).mean() + 0.5 * WD * np.sum(w**2))


def _gradient(x: Arr, y: NDArray[np.int64], w: Arr) -> Arr:
    r = _probs(x, w)
    r[np.arange(len(y)), y] -= 1.0
    out: Arr = x.T @ r / len(y) + WD * w
    return out


def _hessian(x: Arr, w: Arr) -> Arr:
    """Dense Hessian of F_i in the (class, feature) flattening of ``w``, i.e. of ``w.T``."""
    n, f = x.shape
    p = _probs(x, w)
    k = p.shape[1]
    blocks = block_diag(*[x.T @ (p[:, c, None] * x) / n for c in range(k)])
    z = (p[:, :, None] * x[:, None, :]).reshape(n, k * f)
    out: Arr = blocks - z.T @ z / n + WD * np.eye(f * k)
    return out


def _extremes(h: Arr) -> tuple[float, float]:
    n = h.shape[0]
    low = eigvalsh(h, subset_by_index=[0, 0])[0]
    return float(low), float(eigvalsh(h, subset_by_index=[n - 1, n - 1])[0])


def _sample_stats(x: Arr, y: NDArray[np.int64], w: Arr, clip: float,
                  norm: Norm) -> tuple[float, float]:
    """Mean ||clipped g_j + wd w||^2 and Lambda^2 from materialised per-sample gradients."""
    r = _probs(x, w)
    r[np.arange(len(y)), y] -= 1.0
    g = (x[:, :, None] * r[:, None, :]).reshape(len(y), -1)
    size = np.abs(g).sum(axis=1) if norm is Norm.L1 else np.linalg.norm(g, axis=1)
    clipped = g * np.minimum(1.0, clip / size)[:, None]
    full = clipped + WD * w.reshape(-1)
    lam2 = (clipped**2).sum(axis=1).mean() - (clipped.mean(axis=0) ** 2).sum()
    return float((full**2).sum(axis=1).mean()), float(max(lam2, 0.0))


def _newton(x: Arr, y: NDArray[np.int64], k: int) -> Arr:
    w = np.zeros((x.shape[1], k))
    for _ in range(50):
        step = np.linalg.solve(_hessian(x, w), _gradient(x, y, w).T.reshape(-1))
        step = step.reshape(k, -1).T
        t = 1.0
        while _objective(x, y, w - t * step) > _objective(x, y, w) and t > 1e-8:
            t /= 2
        w = w - t * step
        if np.abs(_gradient(x, y, w)).max() < 1e-12:
            break
    return w


def _reference(xs: list[Arr], ys: list[NDArray[np.int64]], k: int, clip: float,
               norm: Norm) -> dict[str, Any]:
    sizes = np.array([len(y) for y in ys], dtype=np.float64)
    weights = sizes / sizes.sum()
    w = np.zeros((xs[0].shape[1], k))
    eig0 = [_extremes(_hessian(x, w)) for x in xs]
    step = max(e[1] for e in eig0)
    g2, lam2 = [], np.zeros(len(xs))
    for t in range(GD_STEPS + 1):
        stats = [_sample_stats(x, y, w, clip, norm) for x, y in zip(xs, ys, strict=True)]
        g2.append([s[0] for s in stats])
        lam2 = np.maximum(lam2, [s[1] for s in stats])
        if t < GD_STEPS:
            w = w - sum(wi * _gradient(x, y, w) for wi, x, y in zip(weights, xs, ys,
                                                                    strict=True)) / step
    eig1 = [_extremes(_hessian(x, w)) for x in xs]
    optima = [_newton(x, y, k) for x, y in zip(xs, ys, strict=True)]
    f_star = np.array([_objective(x, y, o) for x, y, o in zip(xs, ys, optima, strict=True)])
    return {"mu": min(min(a[0], b[0]) for a, b in zip(eig0, eig1, strict=True)),
            "lam": max(max(a[1], b[1]) for a, b in zip(eig0, eig1, strict=True)),
            "G": float(np.sqrt(np.max(g2))), "Lambda2_i": tuple(lam2.tolist()),
            "Gamma": float(f_star.max() - weights @ f_star),
            "Y0": float(weights @ np.array([np.sum(o**2) for o in optima]))}


@pytest.fixture(autouse=True)
def _one_blas_thread() -> Iterator[None]:
    """One BLAS thread per xdist worker, as conftest.py sets torch's (two threads each on two
    shared cores made the dense reference ten times slower)."""
    with threadpool_limits(limits=1):
        yield


@pytest.fixture(scope="module")
def digits() -> Dataset:
    ds = load_dataset("digits")
    return dataclasses.replace(ds, x_train=ds.x_train[:300], y_train=ds.y_train[:300])


# clips near the median per-sample norm at theta_0: some gradients are clipped, some not
@pytest.mark.parametrize(("partition", "norm", "clip"), [("iid", Norm.L2, 7.5),
                                                         ("two-digits", Norm.L1, 100.0)])
def test_logreg_estimate_matches_an_independent_reference(
        digits: Dataset, partition: str, norm: Norm, clip: float) -> None:
    part = make_partition(partition, labels=digits.y_train, num_clients=3,
                          rng=np.random.default_rng(0))
    est = estimate_constants(
        dataset=digits, partition=part, clip=clip, norm=norm, eps=1.0, weight_decay=WD,
        kernel=LogRegKernel(num_features=64, num_classes=10),
        settings=EstimateSettings(gd_steps=GD_STEPS))
    c = est.constants
    xs = [digits.x_train[ix].astype(np.float64) for ix in part.indices]
    ys = [digits.y_train[ix].astype(np.int64) for ix in part.indices]
    ref = _reference(xs, ys, 10, clip, norm)
    assert c.p == 640 and c.d_i == tuple(len(y) for y in ys)
    # Lanczos' Ritz values lie inside the spectrum and converge from within
    assert ref["mu"] <= c.mu == pytest.approx(ref["mu"], rel=2e-3)
    assert c.lam <= ref["lam"] * (1 + 1e-9) and c.lam == pytest.approx(ref["lam"], rel=1e-6)
    assert c.G == pytest.approx(ref["G"], rel=1e-6)
    assert c.Lambda2_i == pytest.approx(ref["Lambda2_i"], rel=1e-6)
    assert c.Gamma == pytest.approx(ref["Gamma"], rel=1e-5, abs=1e-9)
    assert c.Y0 == pytest.approx(ref["Y0"], rel=1e-4)  # L-BFGS stops at gtol 1e-7
    assert 0.1 < est.clipped_fraction[0] < 0.9  # both sides of the clip are exercised
