"""Softmax regression's objective for the estimator: closed-form per-sample norms, L-BFGS optima.

``theta`` is the ``(features, k)`` weight matrix, flattened, in float64, starting from zero
(the paper's start).

* Per-sample gradients ``x (p - y)^T`` factorise: ``||x (p-y)^T||_F = ||x||_2 ||p-y||_2`` and
  ``<x (p-y)^T, wd theta> = wd <x^T theta, p-y>``, so no gradient is ever materialised.
* ``F_i`` is strictly convex (``wd > 0``): each client's local optimum is found by L-BFGS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray
from scipy.optimize import minimize
from torch import Tensor

from fedqr.models.logreg import Norm
from fedqr.theory.estimate_parts import SampleStats

__all__ = ["LogRegObjective", "regularised_optimum"]


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


@dataclass(frozen=True)
class LogRegObjective:
    """:class:`~fedqr.theory.estimate_parts.Objective` of softmax regression without bias."""

    num_features: int
    num_classes: int
    weight_decay: float

    @property
    def theta0(self) -> Tensor:
        """Zero, ``(features, k)`` in float64."""
        return torch.zeros(self.num_features, self.num_classes, dtype=torch.float64)

    @property
    def num_params(self) -> int:
        """``features k``."""
        return self.num_features * self.num_classes

    @property
    def default_steps(self) -> tuple[int, int]:
        """20 GD steps, 40 Lanczos iterations."""
        return 20, 40

    def tensors(self, x: NDArray[np.floating], y: NDArray[np.integer]) -> tuple[Tensor, Tensor]:
        """float64 rows and int64 labels."""
        xt = torch.as_tensor(np.asarray(x), dtype=torch.float64)
        if xt.dim() != 2 or xt.shape[1] != self.num_features:
            raise ValueError(f"client rows must have {self.num_features} features (the "
                             f"kernel's), got shape {tuple(xt.shape)}")
        return xt, torch.as_tensor(np.asarray(y), dtype=torch.int64)

    def loss(self, x: Tensor, y: Tensor) -> Callable[[Tensor], Tensor]:
        """Mean cross-entropy plus weight decay."""
        return _loss(x, y, self.weight_decay)

    def sample_stats(self, x: Tensor, y: Tensor, theta: Tensor, *, clip: float,
                     norm: Norm) -> SampleStats:
        """Closed-form per-sample norms (see the module's docstring)."""
        return _sample_stats(x, y, theta, clip=clip, norm=norm, wd=self.weight_decay)

    def local_optimum(self, x: Tensor, y: Tensor) -> tuple[float, float]:
        """The client's optimum by L-BFGS; ``theta_0 = 0``."""
        value, theta = _local_optimum(x, y, self.num_classes, self.weight_decay)
        return value, float(np.sum(theta**2))
