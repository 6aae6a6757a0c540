"""The one estimator of the bounds' constants, for any model kernel (no privacy!).

**Privacy**: the estimator reads client data WITHOUT differential privacy
(:attr:`EstimatedConstants.reads_private_data`). Use a public/proxy split (any arrays via
:func:`estimate_constants_from_arrays`, or ``proxy_fraction``) when that matters.

:func:`estimate_constants` takes the workload, a data set with its partition and a
:class:`~fedqr.models.kernel.Kernel`, and sees the model through its
:class:`~fedqr.theory.estimate_parts.Objective`: softmax regression
(:class:`~fedqr.models.logreg_kernel.LogRegKernel`, the default) by the closed forms of
:mod:`fedqr.theory.estimate_logreg`, any torch model
(:class:`~fedqr.models.torch_kernel.TorchKernel`) by the per-sample gradients of
:mod:`fedqr.theory.estimate_torch` (local estimates: see there).

* ``mu``, ``lambda``: extreme Hessian eigenvalues of each ``F_i`` (Assumptions 4-5) by
  Lanczos (:mod:`fedqr.theory.estimate_curvature`) on the objective's Hessian-vector products
  (closed form for softmax regression, double-backward autograd for a torch model), at
  ``theta_0`` and at the end of a short full-batch GD run;
  ``mu = min``, ``lambda = max`` over clients and points (``mu`` is floored at the weight
  decay when the measured minimum is not positive: a non-convex network).
* ``G``: largest per-client mean squared per-sample gradient norm (clipped, plus weight decay)
  along that GD run (Assumption 6).
* ``Lambda_i^2 = mean_j ||g_j||^2 - ||mean_j g_j||^2`` of the clipped gradients (Assumption 8),
  the largest along the run (weight decay is common to all samples and cancels).
* ``Y0``, ``Gamma``: Section V's estimators from each client's local optimum:
  ``Y0 = sum_i d_i/d ||theta_0 - theta_i*||^2``, ``Gamma = max_i F_i* - sum_i d_i/d F_i*``.

Only G and Lambda depend on the clipping: :func:`estimate_constants_many` estimates several
:class:`ClipSetting` (e.g. the paper's Laplace and Gaussian experiments) on one workload with
one curvature measurement, one GD run and one set of local optima.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from fedqr.data import Dataset, Partition
from fedqr.models.kernel import Kernel
from fedqr.models.logreg import Norm
from fedqr.models.logreg_kernel import LogRegKernel
from fedqr.models.torch_kernel import TorchKernel
from fedqr.theory.estimate_curvature import hessian_extreme_eigenvalues, lanczos_extremes
from fedqr.theory.estimate_logreg import LogRegObjective, regularised_optimum
from fedqr.theory.estimate_parts import (
    ClipSetting,
    EstimatedConstants,
    EstimateSettings,
    GradientPath,
    Objective,
    SampleStats,
    assemble_estimate,
    gradient_path,
    path_points,
    path_statistics,
)
from fedqr.theory.estimate_torch import TorchObjective

__all__ = [
    "ClipSetting",
    "EstimateSettings",
    "EstimatedConstants",
    "GradientPath",
    "Objective",
    "SampleStats",
    "assemble_estimate",
    "estimate_constants",
    "estimate_constants_from_arrays",
    "estimate_constants_many",
    "gradient_path",
    "hessian_extreme_eigenvalues",
    "objective_for",
    "proxy_indices",
    "regularised_optimum",
]


def objective_for(kernel: Kernel, *, weight_decay: float,
                  settings: EstimateSettings) -> Objective:
    """The estimator's view of ``kernel``'s model (softmax regression or a torch model)."""
    if isinstance(kernel, LogRegKernel):
        return LogRegObjective(num_features=kernel.num_features, num_classes=kernel.num_classes,
                               weight_decay=weight_decay, intercept=kernel.intercept)
    if isinstance(kernel, TorchKernel):
        return TorchObjective(kernel, weight_decay=weight_decay, seed=settings.seed,
                              local_steps=settings.local_steps, local_lr=settings.local_lr)
    raise ValueError(f"kernel must be a LogRegKernel or a TorchKernel to estimate the "
                     f"constants, got kernel={type(kernel).__name__}")


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
    kernel: Kernel | None = None,
    settings: EstimateSettings | None = None,
    reads_private_data: bool = True,
) -> EstimatedConstants:
    """Estimate the constants from per-client arrays (the clients' own data or a proxy).

    Parameters
    ----------
    client_x, client_y
        Flat features ``(n_i, features)`` and labels of each client (or of its proxy).
    num_classes
        Number of classes ``k``.
    clip, norm
        Clipping norm ``xi`` and its norm (l1 Laplace, l2 Gaussian).
    eps, delta, sample_rate
        Budgets (scalar or per client) and ``q``, copied into the constants.
    weight_decay
        The ``wd > 0`` of ``F_i = mean loss + (wd/2) ||theta||^2``; also ``mu``'s floor.
    d_i
        Clients' true data sizes (defaults to the array lengths, e.g. for a proxy subset).
    kernel
        The model (default: softmax regression of the arrays' features and ``num_classes``).
    settings
        Lengths of the GD run, the Lanczos runs and a torch model's local runs.
    reads_private_data
        Recorded in the result: whether the arrays are the clients' private data.
    """
    clips = [ClipSetting(clip=clip, norm=Norm(norm), eps=eps, delta=delta,
                         sample_rate=sample_rate)]
    return _from_arrays(client_x, client_y, num_classes=num_classes, clips=clips,
                        weight_decay=weight_decay, d_i=d_i, kernel=kernel, settings=settings,
                        reads_private_data=reads_private_data)[0]


def _from_arrays(client_x: Sequence[NDArray[np.floating]],
                 client_y: Sequence[NDArray[np.integer]], *, num_classes: int,
                 clips: Sequence[ClipSetting], weight_decay: float,
                 d_i: Sequence[int] | None, kernel: Kernel | None,
                 settings: EstimateSettings | None,
                 reads_private_data: bool) -> list[EstimatedConstants]:
    """:func:`estimate_constants_from_arrays` for several clip settings at once."""
    n = len(client_x)
    if n < 2 or len(client_y) != n:
        raise ValueError(f"client_x and client_y must hold the same N >= 2 clients, got {n}")
    if not clips:
        raise ValueError("clips must name at least one ClipSetting, got none")
    if not weight_decay > 0:
        raise ValueError(f"weight_decay must be > 0 (it is mu's floor), got "
                         f"weight_decay={weight_decay!r}")
    s = settings if settings is not None else EstimateSettings()
    if kernel is None:
        kernel = LogRegKernel(num_features=int(np.asarray(client_x[0]).shape[1]),
                              num_classes=num_classes)
    obj = objective_for(kernel, weight_decay=float(weight_decay), settings=s)
    data = [obj.tensors(x, y) for x, y in zip(client_x, client_y, strict=True)]
    sizes = tuple(int(v) for v in (d_i if d_i is not None else [x.shape[0] for x, _ in data]))
    gd_steps, lanczos_steps = obj.default_steps
    return _estimate(
        obj, data, sizes=sizes, clips=clips, reads_private_data=reads_private_data,
        gd_steps=gd_steps if s.gd_steps is None else s.gd_steps,
        lanczos_steps=lanczos_steps if s.lanczos_steps is None else s.lanczos_steps)


def _estimate(obj: Objective, data: list[tuple[Tensor, Tensor]], *, sizes: tuple[int, ...],
              clips: Sequence[ClipSetting], reads_private_data: bool, gd_steps: int,
              lanczos_steps: int) -> list[EstimatedConstants]:
    """Curvature, the GD path, curvature again, local optima (shared by every clip setting),
    then each setting's per-sample statistics along the path: the constants of each."""
    n = len(data)
    w = np.asarray(sizes, dtype=np.float64) / sum(sizes)

    def curvature(theta: Tensor) -> list[tuple[float, float]]:
        return [lanczos_extremes(obj.hvp(x, y, theta), size=theta.numel(), steps=lanczos_steps)
                for x, y in data]

    theta0 = obj.theta0
    curv = curvature(theta0)
    lam_max = max(c[1] for c in curv)

    def descent(t: Tensor) -> Tensor:  # one full-batch GD step of size 1 / lambda
        grad = torch.zeros_like(t)
        for wi, (x, y) in zip(w, data, strict=True):
            grad += float(wi) * obj.gradient(x, y, t)
        return t - grad / lam_max

    points = path_points(theta=theta0.clone(), steps=gd_steps, descent=descent)
    curv += curvature(points[-1])
    mu_i = tuple(min(curv[i][0], curv[n + i][0]) for i in range(n))
    lambda_i = tuple(max(curv[i][1], curv[n + i][1]) for i in range(n))
    local = [obj.local_optimum(x, y) for x, y in data]
    mu = min(mu_i)
    out = []
    for c in clips:

        def stats(t: Tensor, c: ClipSetting = c) -> list[SampleStats]:
            return [obj.sample_stats(x, y, t, clip=c.clip, norm=c.norm) for x, y in data]

        path = path_statistics(points=points, weights=w, client_stats=stats)
        out.append(assemble_estimate(
            path=path, mu=mu if mu > 0 else obj.weight_decay, mu_i=mu_i,
            lambda_i=lambda_i, f_star=np.array([f for f, _ in local]),
            y0_i=np.array([y0 for _, y0 in local]), sizes=sizes, p=obj.num_params,
            clip=c.clip, eps=c.eps, delta=c.delta, sample_rate=c.sample_rate,
            reads_private_data=reads_private_data))
    return out


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
    kernel: Kernel | None = None,
    proxy_fraction: float | None = None,
    rng: np.random.Generator | None = None,
    settings: EstimateSettings | None = None,
) -> EstimatedConstants:
    """Estimate the constants of a workload: ``dataset``'s training split as partitioned, and
    the model ``kernel`` (default softmax regression) trained on it (no privacy!).

    ``proxy_fraction`` in ``(0, 1)`` estimates on that random share of each client's samples
    (drawn with ``rng``), keeping the true ``d_i``. See :func:`estimate_constants_from_arrays`.

    Returns
    -------
    EstimatedConstants
        The constants and their diagnostics (a torch model's ``mu_i`` as measured, possibly
        negative).
    """
    clips = [ClipSetting(clip=clip, norm=Norm(norm), eps=eps, delta=delta,
                         sample_rate=sample_rate)]
    return estimate_constants_many(
        dataset=dataset, partition=partition, clips=clips, weight_decay=weight_decay,
        kernel=kernel, proxy_fraction=proxy_fraction, rng=rng, settings=settings)[0]


def estimate_constants_many(
    *,
    dataset: Dataset,
    partition: Partition,
    clips: Sequence[ClipSetting],
    weight_decay: float = 0.01,
    kernel: Kernel | None = None,
    proxy_fraction: float | None = None,
    rng: np.random.Generator | None = None,
    settings: EstimateSettings | None = None,
) -> list[EstimatedConstants]:
    """:func:`estimate_constants` of one workload under several clip settings (one per
    mechanism), in the order of ``clips``: the curvature, the GD run and the local optima do
    not depend on the clipping and are measured once; each result equals that setting's
    :func:`estimate_constants` with the same ``rng`` state.
    """
    idx = proxy_indices(partition, proxy_fraction=proxy_fraction, rng=rng)
    return _from_arrays(
        [dataset.x_train[ix] for ix in idx], [dataset.y_train[ix] for ix in idx],
        num_classes=dataset.num_classes, clips=clips, weight_decay=weight_decay,
        d_i=[int(ix.size) for ix in partition.indices], kernel=kernel, settings=settings,
        reads_private_data=True)
