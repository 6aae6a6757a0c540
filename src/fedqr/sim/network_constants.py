"""Estimate the bounds' constants for a torch model (the paper's FEMNIST CNN).

**Privacy**: like :mod:`fedqr.theory.estimate`, this reads client data WITHOUT differential
privacy (``reads_private_data``); use ``proxy_fraction`` or public data where that matters.

The paper's bounds assume an L-smooth, mu-strongly convex objective (Assumptions 4-5). A CNN's
loss is neither globally, so each constant is a *local* estimate along a short non-private
training run, and one is a substitution:

* ``lambda``: largest Hessian eigenvalue of each ``F_i = mean CE + (wd/2) ||theta||^2`` by
  Lanczos on Hessian-vector products (:func:`fedqr.theory.estimate.hessian_extreme_eigenvalues`)
  at ``theta_0`` and at the end of the run; the maximum over clients and points.
* ``mu``: the smallest measured eigenvalue when it is positive; otherwise (the usual case: the
  CNN's Hessian has negative eigenvalues) the weight decay ``wd``, the curvature of the
  regulariser alone. The measured values are kept in ``mu_i``.
* ``G``, ``Lambda_i^2``: as for logistic regression, from the per-sample clipped gradients
  (``torch.func.vmap``) along ``gd_steps`` full-batch GD steps of size ``1 / lambda``.
* ``Y0``, ``Gamma``: each client's "local optimum" is the end of ``local_steps`` Adam steps
  from ``theta_0`` on its own data (a non-convex loss has no unique optimum):
  ``Y0 = sum_i d_i/d ||theta_0 - theta_i||^2``, ``Gamma = max_i F_i(theta_i) - sum_i d_i/d
  F_i(theta_i)``.

``theta_0`` is the model the simulations start from (repeat 0 of seed ``seed``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

from fedqr.data import Dataset, Partition
from fedqr.models.logreg import Norm
from fedqr.sim.network_parts import ModelFactory, paper_cnn_factory
from fedqr.theory.estimate import hessian_extreme_eigenvalues, proxy_indices
from fedqr.theory.estimate_parts import (
    EstimatedConstants,
    SampleStats,
    assemble_estimate,
    gradient_path,
)

__all__ = ["estimate_network_constants"]

_CHUNK = 128


class _Flat:
    """A model as a function of its flat parameter vector."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.names = [n for n, _ in model.named_parameters()]
        self.shapes = [p.shape for _, p in model.named_parameters()]
        self.sizes = [p.numel() for _, p in model.named_parameters()]

    def params(self, theta: Tensor) -> dict[str, Tensor]:
        parts = torch.split(theta, self.sizes)
        return {n: t.view(s) for n, t, s in zip(self.names, parts, self.shapes, strict=True)}

    def loss(self, x: Tensor, y: Tensor, wd: float) -> Callable[[Tensor], Tensor]:
        def f(theta: Tensor) -> Tensor:
            logits = functional_call(self.model, self.params(theta), (x,))
            return F.cross_entropy(logits, y) + 0.5 * wd * theta.pow(2).sum()

        return f

    def per_sample_grads(self, x: Tensor, y: Tensor, theta: Tensor) -> Tensor:
        """``[n, P]`` per-sample cross-entropy gradients (chunks of 128 rows)."""
        def one(t: Tensor, xi: Tensor, yi: Tensor) -> Tensor:
            logits = functional_call(self.model, self.params(t), (xi[None],))
            return F.cross_entropy(logits, yi[None])

        g = vmap(grad(one), in_dims=(None, 0, 0))
        return torch.cat([g(theta, x[i:i + _CHUNK], y[i:i + _CHUNK])
                          for i in range(0, x.shape[0], _CHUNK)])


def _sample_stats(
    flat: _Flat, x: Tensor, y: Tensor, theta: Tensor, *, clip: float, norm: Norm, wd: float,
) -> SampleStats:
    """Mean ``||s g + wd theta||^2``, Lambda^2, l1/l2 norms, clipped fraction."""
    g = flat.per_sample_grads(x, y, theta).double()
    l1, l2 = g.abs().sum(dim=1), g.norm(dim=1)
    s = torch.clamp(clip / (l1 if norm is Norm.L1 else l2).clamp_min(1e-300), max=1.0)
    clipped = s[:, None] * g
    full = (clipped + wd * theta.double()).pow(2).sum(dim=1)
    lam2 = float(clipped.pow(2).sum(dim=1).mean() - clipped.mean(dim=0).pow(2).sum())
    return float(full.mean()), max(lam2, 0.0), l1, l2, float((s < 1).double().mean())


def _local_model(flat: _Flat, x: Tensor, y: Tensor, theta0: Tensor, *, wd: float, steps: int,
                 lr: float) -> tuple[float, Tensor]:
    """``(F_i, theta_i)`` after ``steps`` full-batch Adam steps from ``theta0``."""
    theta = theta0.clone().requires_grad_(True)
    opt = torch.optim.Adam([theta], lr=lr)
    f = flat.loss(x, y, wd)
    for _ in range(steps):
        (theta.grad,) = torch.autograd.grad(f(theta), theta)
        opt.step()
    with torch.no_grad():
        return float(f(theta)), theta.detach()


def estimate_network_constants(
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
    model_factory: ModelFactory | None = None,
    seed: int = 0,
    gd_steps: int = 5,
    lanczos_steps: int = 12,
    local_steps: int = 60,
    local_lr: float = 1e-3,
) -> EstimatedConstants:
    """Estimate the constants of a torch model on ``dataset`` as partitioned (no privacy!).

    Parameters
    ----------
    dataset, partition
        Training data (rows reshaped to ``dataset.image_shape``) and its clients.
    clip, norm
        Per-sample clip ``xi`` and its norm (l1 Laplace, l2 Gaussian).
    eps, delta, sample_rate
        Budgets (scalar or per client) and ``q``, copied into the constants.
    weight_decay
        ``wd`` of ``F_i``; also ``mu`` when the measured curvature is not positive.
    proxy_fraction, rng
        Estimate on this random share ``(0, 1)`` of each client's rows (drawn with ``rng``),
        keeping the true ``d_i``; ``None`` uses every row.
    model_factory, seed
        The model (default: the paper's CNN) and ``theta_0``'s seed (as the simulations).
    gd_steps, lanczos_steps, local_steps, local_lr
        Lengths of the GD run, of each Lanczos run, and of each client's local Adam run.

    Returns
    -------
    EstimatedConstants
        As :func:`fedqr.theory.estimate.estimate_constants` (``mu_i`` measured, possibly < 0).
    """
    if not clip > 0:
        raise ValueError(f"clip must be > 0, got clip={clip!r}")
    if not weight_decay > 0:
        raise ValueError(f"weight_decay must be > 0 (it is mu's floor), got "
                         f"weight_decay={weight_decay!r}")
    idx = proxy_indices(partition, proxy_fraction=proxy_fraction, rng=rng)
    shape = dataset.image_shape or (dataset.num_features,)
    data = [(torch.as_tensor(dataset.x_train[ix]).view(-1, *shape),
             torch.as_tensor(dataset.y_train[ix], dtype=torch.int64)) for ix in idx]
    factory = model_factory if model_factory is not None else paper_cnn_factory(dataset)
    model = factory(torch.Generator().manual_seed(seed))
    flat = _Flat(model)
    theta0 = torch.cat([p.detach().flatten() for p in model.parameters()])
    n = len(data)
    sizes = tuple(int(ix.size) for ix in partition.indices)
    w = np.asarray(sizes, dtype=np.float64) / sum(sizes)
    wd = float(weight_decay)

    def curvature(theta: Tensor) -> list[tuple[float, float]]:
        return [hessian_extreme_eigenvalues(loss=flat.loss(x, y, wd), theta=theta,
                                            steps=lanczos_steps) for x, y in data]

    curv = curvature(theta0)
    lam_max = max(c[1] for c in curv)

    def descent(theta: Tensor) -> Tensor:  # one full-batch GD step of size 1 / lambda
        t = theta.clone().requires_grad_(True)
        total = torch.stack([float(wi) * flat.loss(x, y, wd)(t)
                             for wi, (x, y) in zip(w, data, strict=True)]).sum()
        (g,) = torch.autograd.grad(total, t)
        return theta - g / lam_max

    path = gradient_path(
        theta=theta0.clone(), steps=gd_steps, weights=w, descent=descent,
        client_stats=lambda t: [_sample_stats(flat, x, y, t, clip=clip, norm=norm, wd=wd)
                                for x, y in data])
    curv += curvature(path.theta)
    mu_i = tuple(min(curv[i][0], curv[n + i][0]) for i in range(n))
    lambda_i = tuple(max(curv[i][1], curv[n + i][1]) for i in range(n))
    local = [_local_model(flat, x, y, theta0, wd=wd, steps=local_steps, lr=local_lr)
             for x, y in data]
    return assemble_estimate(
        path=path, mu=min(mu_i) if min(mu_i) > 0 else wd, mu_i=mu_i, lambda_i=lambda_i,
        f_star=np.array([f for f, _ in local]),
        y0_i=np.array([float((t - theta0).double().pow(2).sum()) for _, t in local]),
        sizes=sizes, p=int(theta0.numel()), clip=clip, eps=eps, delta=delta,
        sample_rate=sample_rate, reads_private_data=True)
