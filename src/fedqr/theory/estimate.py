"""Estimate the bounds' constants for regularised multinomial logistic regression.

**Privacy**: the estimators read client data WITHOUT differential privacy
(:attr:`EstimatedConstants.reads_private_data`). Use a public/proxy split (any arrays via
:func:`estimate_constants_from_arrays`, or ``proxy_fraction``) when that matters.

* ``mu``, ``lambda``: extreme Hessian eigenvalues of each ``F_i`` (Assumptions 4-5) by
  Lanczos (``scipy.sparse.linalg.eigsh``) on torch-autograd Hessian-vector products
  (:func:`hessian_extreme_eigenvalues`, generic over a loss closure), at ``theta_0 = 0`` and at
  the end of a short full-batch GD run; ``mu = min``, ``lambda = max`` over clients and points.
* ``G``: largest per-client mean squared per-sample gradient norm (clipped, plus weight decay)
  along that GD run (Assumption 6). Per-sample LR gradients ``x (p - y)^T`` factorise:
  ``||x (p-y)^T||_F = ||x||_2 ||p-y||_2`` and ``<x (p-y)^T, wd theta> = wd <x^T theta, p-y>``.
* ``Lambda_i^2 = mean_j ||g_j||^2 - ||mean_j g_j||^2`` of the clipped gradients (Assumption 8),
  the largest along the run (weight decay is common to all samples and cancels).
* ``Y0``, ``Gamma``: Section V's estimators from each client's local optimum (L-BFGS):
  ``Y0 = sum_i d_i/d ||theta_0 - theta_i*||^2``, ``Gamma = max_i F_i* - sum_i d_i/d F_i*``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from numpy.typing import NDArray
from scipy.optimize import minimize
from torch import Tensor

from fedqr.data import Dataset, Partition
from fedqr.models.logreg import Norm
from fedqr.theory.estimate_parts import (
    EstimatedConstants,
    GradientPath,
    SampleStats,
    assemble_estimate,
    gradient_path,
)

__all__ = [
    "EstimatedConstants",
    "GradientPath",
    "SampleStats",
    "assemble_estimate",
    "estimate_constants",
    "estimate_constants_from_arrays",
    "gradient_path",
    "hessian_extreme_eigenvalues",
    "proxy_indices",
    "regularised_optimum",
]

def hessian_extreme_eigenvalues(
    *, loss: Callable[[Tensor], Tensor], theta: Tensor, steps: int = 40, seed: int = 0
) -> tuple[float, float]:
    """``(smallest, largest)`` Hessian eigenvalue of ``loss`` at ``theta`` by Lanczos.

    ``loss`` maps a tensor shaped like ``theta`` to a scalar; Hessian-vector products are
    double-backward autograd. ``steps`` Lanczos iterations with full reorthogonalisation give
    the extreme Ritz values of the tridiagonal matrix (exact once ``steps >= numel``; they lie
    inside the spectrum and converge from within). A single run serves both ends, which matters
    for regularised LR, whose smallest eigenvalue ``wd`` is highly degenerate (ARPACK's
    residual test then fails to converge). Works for any twice-differentiable loss.
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got steps={steps!r}")
    dtype = theta.dtype
    n = theta.numel()
    x0 = theta.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss(x0), x0, create_graph=True)
    flat = grad.reshape(-1)

    def hvp(v: NDArray[np.float64]) -> NDArray[np.float64]:
        vt = torch.as_tensor(v, dtype=dtype)
        (hv,) = torch.autograd.grad(flat, x0, grad_outputs=vt, retain_graph=True)
        return np.asarray(hv.detach().reshape(-1).double().numpy())

    m = min(steps, n)
    basis = np.zeros((m, n))
    alpha, beta = np.zeros(m), np.zeros(m)
    v = np.random.default_rng(seed).standard_normal(n)
    basis[0] = v / np.linalg.norm(v)
    k = m
    for j in range(m):
        w = hvp(basis[j])
        alpha[j] = basis[j] @ w
        w -= basis[: j + 1].T @ (basis[: j + 1] @ w)  # full reorthogonalisation, twice
        w -= basis[: j + 1].T @ (basis[: j + 1] @ w)
        if j + 1 == m:
            break
        beta[j] = float(np.linalg.norm(w))
        if beta[j] <= 1e-12 * max(1.0, abs(alpha[j])):  # invariant subspace: exact
            k = j + 1
            break
        basis[j + 1] = w / beta[j]
    tri = np.diag(alpha[:k]) + np.diag(beta[: k - 1], 1) + np.diag(beta[: k - 1], -1)
    ev = np.linalg.eigvalsh(tri)
    return float(ev[0]), float(ev[-1])


def _loss(x: Tensor, y: Tensor, wd: float) -> Callable[[Tensor], Tensor]:
    def f(theta: Tensor) -> Tensor:
        ce = torch.nn.functional.cross_entropy(x @ theta, y)
        return ce + 0.5 * wd * theta.pow(2).sum()

    return f


def _sample_stats(
    x: Tensor, y: Tensor, theta: Tensor, *, clip: float, norm: Norm, wd: float
) -> SampleStats:
    """Mean squared per-sample gradient norm, Lambda^2, l1/l2 norms, clipped fraction."""
    logits = x @ theta
    r = torch.softmax(logits, dim=1)
    r[torch.arange(y.numel()), y] -= 1.0  # p - y
    l2 = x.norm(dim=1) * r.norm(dim=1)
    l1 = x.abs().sum(dim=1) * r.abs().sum(dim=1)
    n_clip = l1 if norm is Norm.L1 else l2
    s = torch.clamp(clip / n_clip.clamp_min(1e-300), max=1.0)
    sq = (s * l2) ** 2  # ||clipped CE gradient||^2
    cross = 2.0 * wd * s * (logits * r).sum(dim=1)  # 2 <s x r^T, wd theta>
    full = sq + cross + wd**2 * theta.pow(2).sum()
    mean_grad = x.T @ (s[:, None] * r) / y.numel()
    lam2 = float(sq.mean() - mean_grad.pow(2).sum())
    return float(full.mean()), max(lam2, 0.0), l1, l2, float((s < 1).double().mean())


def _local_optimum(x: Tensor, y: Tensor, k: int, wd: float) -> tuple[float, NDArray[np.float64]]:
    f = _loss(x, y, wd)
    shape = (x.shape[1], k)

    def fun(v: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        t = torch.as_tensor(v, dtype=x.dtype).reshape(shape).requires_grad_(True)
        val = f(t)
        (g,) = torch.autograd.grad(val, t)
        return float(val.detach()), g.reshape(-1).double().numpy()

    res = minimize(fun, np.zeros(shape[0] * k), jac=True, method="L-BFGS-B",
                   options={"maxiter": 500, "gtol": 1e-7})  # fmt: skip
    return float(res.fun), np.asarray(res.x, dtype=np.float64)


def regularised_optimum(x: NDArray[np.floating], y: NDArray[np.integer], *, num_classes: int,
                        weight_decay: float) -> NDArray[np.float64]:
    """``argmin mean CE + (wd/2) ||theta||^2`` by L-BFGS, shaped ``(k, p)`` like the engine's."""
    xt = torch.as_tensor(np.asarray(x), dtype=torch.float64)
    _, flat = _local_optimum(xt, torch.as_tensor(np.asarray(y), dtype=torch.int64),
                             num_classes, weight_decay)
    return np.ascontiguousarray(flat.reshape(xt.shape[1], num_classes).T)


def estimate_constants_from_arrays(
    *,
    client_x: Sequence[NDArray[np.floating]],
    client_y: Sequence[NDArray[np.integer]],
    num_classes: int,
    clip: float,
    norm: Norm,
    eps: float | Sequence[float],
    delta: float | Sequence[float] = 0.0,
    sample_rate: float = 1.0,
    weight_decay: float = 0.01,
    d_i: Sequence[int] | None = None,
    gd_steps: int = 20,
    reads_private_data: bool = True,
) -> EstimatedConstants:
    """Estimate the constants from per-client arrays (the clients' own data or a proxy).

    Parameters
    ----------
    client_x, client_y
        Features ``(n_i, features)`` and labels of each client (or of its proxy).
    num_classes
        Number of classes ``k``; ``p = features * k``.
    clip, norm
        Clipping norm ``xi`` and its norm (l1 Laplace, l2 Gaussian).
    eps, delta, sample_rate
        Budgets (scalar or per client) and ``q``, copied into the constants.
    weight_decay
        The ``wd`` of ``F_i = mean CE + (wd/2) ||theta||^2``.
    d_i
        Clients' true data sizes (defaults to the array lengths, e.g. for a proxy subset).
    gd_steps
        Non-private full-batch GD steps (step ``1 / lambda``) along which G and Lambda are
        maximised.
    reads_private_data
        Recorded in the result: whether the arrays are the clients' private data.
    """
    n = len(client_x)
    if n < 2 or len(client_y) != n:
        raise ValueError(f"client_x and client_y must hold the same N >= 2 clients, got {n}")
    if not (clip > 0):
        raise ValueError(f"clip must be > 0, got clip={clip!r}")
    xs = [torch.as_tensor(np.asarray(a), dtype=torch.float64) for a in client_x]
    ys = [torch.as_tensor(np.asarray(a), dtype=torch.int64) for a in client_y]
    feats = xs[0].shape[1]
    sizes = tuple(int(v) for v in (d_i if d_i is not None else [a.shape[0] for a in xs]))
    w = np.asarray(sizes, dtype=np.float64) / sum(sizes)
    norm = Norm(norm)
    wd = float(weight_decay)
    theta = torch.zeros(feats, num_classes, dtype=torch.float64)
    data = list(zip(xs, ys, strict=True))
    curv = [hessian_extreme_eigenvalues(loss=_loss(x, y, wd), theta=theta) for x, y in data]
    lam_max = max(c[1] for c in curv)

    def descent(t: Tensor) -> Tensor:  # one full-batch GD step of size 1 / lambda
        grad = torch.zeros_like(t)
        for wi, x, y in zip(w, xs, ys, strict=True):
            tg = t.clone().requires_grad_(True)
            grad += float(wi) * torch.autograd.grad(_loss(x, y, wd)(tg), tg)[0]
        return t - grad / lam_max

    path = gradient_path(
        theta=theta, steps=gd_steps, weights=w, descent=descent,
        client_stats=lambda t: [_sample_stats(x, y, t, clip=clip, norm=norm, wd=wd)
                                for x, y in data])
    curv += [hessian_extreme_eigenvalues(loss=_loss(x, y, wd), theta=path.theta)
             for x, y in data]
    mu_i = tuple(min(curv[i][0], curv[n + i][0]) for i in range(n))
    lambda_i = tuple(max(curv[i][1], curv[n + i][1]) for i in range(n))
    local = [_local_optimum(x, y, num_classes, wd) for x, y in data]
    return assemble_estimate(
        path=path, mu=min(mu_i), mu_i=mu_i, lambda_i=lambda_i,
        f_star=np.array([f for f, _ in local]),
        y0_i=np.array([float(np.sum(t**2)) for _, t in local]),  # theta_0 = 0
        sizes=sizes, p=feats * num_classes, clip=clip, eps=eps, delta=delta,
        sample_rate=sample_rate, reads_private_data=reads_private_data)


def proxy_indices(partition: Partition, *, proxy_fraction: float | None,
                  rng: np.random.Generator | None) -> list[NDArray[np.int64]]:
    """Each client's rows, or a random share ``proxy_fraction`` in ``(0, 1)`` of them (at
    least one row each) drawn with ``rng``; ``None`` keeps every row."""
    idx = [np.asarray(ix, dtype=np.int64) for ix in partition.indices]
    if proxy_fraction is None:
        return idx
    if not 0.0 < proxy_fraction < 1.0:
        raise ValueError(f"proxy_fraction must be in (0, 1), got {proxy_fraction!r}")
    if rng is None:
        raise ValueError("rng is required with proxy_fraction, got rng=None")
    return [rng.choice(ix, size=max(1, round(proxy_fraction * ix.size)), replace=False)
            for ix in idx]


def estimate_constants(
    *,
    dataset: Dataset,
    partition: Partition,
    clip: float,
    norm: Norm,
    eps: float | Sequence[float],
    delta: float | Sequence[float] = 0.0,
    sample_rate: float = 1.0,
    weight_decay: float = 0.01,
    proxy_fraction: float | None = None,
    rng: np.random.Generator | None = None,
    gd_steps: int = 20,
) -> EstimatedConstants:
    """Estimate the constants of ``dataset``'s training split as partitioned (no privacy!).

    ``proxy_fraction`` in ``(0, 1)`` estimates on that random share of each client's samples
    (drawn with ``rng``), keeping the true ``d_i``. See :func:`estimate_constants_from_arrays`.
    """
    idx = proxy_indices(partition, proxy_fraction=proxy_fraction, rng=rng)
    return estimate_constants_from_arrays(
        client_x=[dataset.x_train[ix] for ix in idx],
        client_y=[dataset.y_train[ix] for ix in idx],
        num_classes=dataset.num_classes, clip=clip, norm=norm, eps=eps, delta=delta,
        sample_rate=sample_rate, weight_decay=weight_decay,
        d_i=[int(ix.size) for ix in partition.indices], gd_steps=gd_steps,
    )  # fmt: skip
