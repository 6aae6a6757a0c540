"""Curvature for the estimator: Lanczos extreme eigenvalues of any Hessian-vector product.

:func:`lanczos_extremes` needs only ``v -> H v`` on flat float64 vectors: softmax regression
passes its closed form (:mod:`fedqr.theory.estimate_logreg`, two matrix products a vector),
any other loss the double-backward autograd product of :func:`autograd_hvp`
(:func:`hessian_extreme_eigenvalues`, generic over a loss closure).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

__all__ = ["Hvp", "autograd_gradient", "autograd_hvp", "hessian_extreme_eigenvalues",
           "lanczos_extremes"]

Hvp = Callable[[NDArray[np.float64]], NDArray[np.float64]]
"""A Hessian-vector product on flat float64 vectors (the parameters' flattening)."""


def autograd_gradient(loss: Callable[[Tensor], Tensor], theta: Tensor) -> Tensor:
    """``grad loss(theta)`` by autograd, shaped like ``theta``."""
    t = theta.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(loss(t), t)
    return g


def autograd_hvp(loss: Callable[[Tensor], Tensor], theta: Tensor) -> Hvp:
    """``v -> H v`` of ``loss`` at ``theta`` by double-backward autograd (the graph of the
    gradient is built once and kept for every product)."""
    dtype = theta.dtype
    x0 = theta.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss(x0), x0, create_graph=True)
    flat = grad.reshape(-1)

    def hvp(v: NDArray[np.float64]) -> NDArray[np.float64]:
        vt = torch.as_tensor(v, dtype=dtype)
        (hv,) = torch.autograd.grad(flat, x0, grad_outputs=vt, retain_graph=True)
        return np.asarray(hv.detach().reshape(-1).double().numpy())

    return hvp


def lanczos_extremes(hvp: Hvp, *, size: int, steps: int = 40,
                     seed: int = 0) -> tuple[float, float]:
    """``(smallest, largest)`` eigenvalue of the symmetric ``size x size`` operator ``hvp``.

    ``steps`` Lanczos iterations with full reorthogonalisation from a standard normal start
    (``seed``) give the extreme Ritz values of the tridiagonal matrix (exact once
    ``steps >= size``; they lie inside the spectrum and converge from within). A single run
    serves both ends, which matters for regularised LR, whose smallest eigenvalue ``wd`` is
    highly degenerate (ARPACK's residual test then fails to converge).
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got steps={steps!r}")
    m = min(steps, size)
    basis = np.zeros((m, size))
    alpha, beta = np.zeros(m), np.zeros(m)
    v = np.random.default_rng(seed).standard_normal(size)
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


def hessian_extreme_eigenvalues(
    *, loss: Callable[[Tensor], Tensor], theta: Tensor, steps: int = 40, seed: int = 0
) -> tuple[float, float]:
    """``(smallest, largest)`` Hessian eigenvalue of ``loss`` at ``theta`` by Lanczos.

    ``loss`` maps a tensor shaped like ``theta`` to a scalar; Hessian-vector products are
    double-backward autograd (:func:`autograd_hvp`), eigenvalues by :func:`lanczos_extremes`.
    Works for any twice-differentiable loss.
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got steps={steps!r}")
    return lanczos_extremes(autograd_hvp(loss, theta), size=theta.numel(), steps=steps,
                            seed=seed)
