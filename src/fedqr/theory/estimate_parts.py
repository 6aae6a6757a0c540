"""What an estimate of the bounds' constants returns, and the parts of the one estimator.

The estimator (:func:`fedqr.theory.estimate.estimate_constants`) sees a model through an
:class:`Objective` (softmax regression: :mod:`fedqr.theory.estimate_logreg`, closed forms; any
torch model: :mod:`fedqr.theory.estimate_torch`, per-sample gradients by ``vmap``): it measures
curvature, follows a non-private GD run with :func:`gradient_path` (the objective's per-sample
statistics and the descent step as callables), finds local optima, and hands everything to
:func:`assemble_estimate`. :class:`EstimateSettings` holds the lengths of these steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from fedqr.models.logreg import Norm
from fedqr.theory.constants import ProblemConstants
from fedqr.theory.estimate_curvature import Hvp

__all__ = ["ClipSetting", "EstimateSettings", "EstimatedConstants", "GradientPath", "Objective",
           "SampleStats", "assemble_estimate", "gradient_path", "path_points", "path_statistics"]

_QUANTILES = (0.5, 0.9, 0.99, 1.0)
SampleStats = tuple[float, float, Tensor, Tensor, float]
"""One client's per-sample gradient statistics at one point: mean squared clipped norm (plus
weight decay), Lambda_i^2, the unclipped l1 and l2 norms, and the clipped fraction."""


@dataclass(frozen=True, kw_only=True)
class EstimateSettings:
    """Lengths of the estimator's steps (``None``: the model's default).

    Attributes
    ----------
    gd_steps
        Non-private full-batch GD steps (step ``1 / lambda``) along which G and Lambda are
        maximised (default 20 for softmax regression, 5 for a torch model).
    lanczos_steps
        Lanczos iterations per Hessian (default 40 for softmax regression, 12 for a torch
        model).
    local_steps, local_lr
        A torch model's local optimum: full-batch Adam steps from ``theta_0`` and their
        learning rate (softmax regression solves its strictly convex problem by L-BFGS).
    seed
        A torch model's ``theta_0``: repeat 0 of the simulations with this seed (softmax
        regression starts from zero).
    """

    gd_steps: int | None = None
    lanczos_steps: int | None = None
    local_steps: int = 60
    local_lr: float = 1e-3
    seed: int = 0

    def __post_init__(self) -> None:
        for name, low in (("gd_steps", 0), ("lanczos_steps", 1), ("local_steps", 0),
                          ("seed", 0)):
            value = getattr(self, name)
            if value is None and name in ("gd_steps", "lanczos_steps"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {name}={value!r}")
        if not self.local_lr > 0:
            raise ValueError(f"local_lr must be > 0, got local_lr={self.local_lr!r}")


@dataclass(frozen=True, kw_only=True)
class ClipSetting:
    """One mechanism's view of a workload: its clipping and the budgets copied into the
    constants. Estimates of several settings on one workload share the curvature, the GD run
    and the local optima; only the per-sample statistics depend on the clipping.

    Attributes
    ----------
    clip, norm
        Clipping norm ``xi > 0`` and its norm (l1 Laplace, l2 Gaussian).
    eps, delta, sample_rate
        Budgets (scalar or per client) and ``q``.
    """

    clip: float
    norm: Norm
    eps: float | Sequence[float]
    delta: float | Sequence[float] = 0.0
    sample_rate: float = 1.0

    def __post_init__(self) -> None:
        if not (self.clip > 0):
            raise ValueError(f"clip must be > 0, got clip={self.clip!r}")
        object.__setattr__(self, "norm", Norm(self.norm))


class Objective(Protocol):
    """A model's regularised objective ``F_i = mean loss + (wd/2) ||theta||^2`` as a function
    of flat parameters: what the estimator asks of a model."""

    @property
    def theta0(self) -> Tensor:
        """The simulations' start ``theta_0`` (flat)."""
        ...

    @property
    def num_params(self) -> int:
        """P."""
        ...

    @property
    def weight_decay(self) -> float:
        """``wd``: also ``mu`` where the measured curvature is not positive."""
        ...

    @property
    def default_steps(self) -> tuple[int, int]:
        """``(gd_steps, lanczos_steps)`` where the settings leave them open."""
        ...

    def tensors(self, x: NDArray[np.floating], y: NDArray[np.integer]) -> tuple[Tensor, Tensor]:
        """A client's flat rows and labels as the model's inputs."""
        ...

    def loss(self, x: Tensor, y: Tensor) -> Callable[[Tensor], Tensor]:
        """``F_i`` of the rows ``(x, y)`` as a closure over flat parameters."""
        ...

    def gradient(self, x: Tensor, y: Tensor, theta: Tensor) -> Tensor:
        """``grad F_i(theta)`` of the rows ``(x, y)``, shaped like ``theta``."""
        ...

    def hvp(self, x: Tensor, y: Tensor, theta: Tensor) -> Hvp:
        """``v -> H v`` of ``F_i`` at ``theta`` on flat float64 vectors."""
        ...

    def sample_stats(self, x: Tensor, y: Tensor, theta: Tensor, *, clip: float,
                     norm: Norm) -> SampleStats:
        """Per-sample gradient statistics of ``(x, y)`` at ``theta`` (see :data:`SampleStats`)."""
        ...

    def local_optimum(self, x: Tensor, y: Tensor) -> tuple[float, float]:
        """``(F_i(theta_i), ||theta_i - theta_0||^2)`` at the client's local optimum."""
        ...


@dataclass(frozen=True, eq=False)
class EstimatedConstants:
    """:class:`ProblemConstants` plus the diagnostics behind them.

    Attributes
    ----------
    constants
        The estimates (``eps_i``, ``delta_i``, ``q`` as given).
    reads_private_data
        True: the estimate read client data without any privacy protection.
    mu_i, lambda_i
        Per-client extreme Hessian eigenvalues.
    G2_trajectory
        Per GD step (rows) and client (columns): mean squared per-sample gradient norm.
    norm_quantiles
        ``{"l1": ..., "l2": ...}``: quantiles ``(0.5, 0.9, 0.99, max)`` of unclipped
        per-sample gradient norms at ``theta_0`` and at the end of the run (rows).
    clipped_fraction
        Fraction of per-sample gradients clipped at ``theta_0`` and at the end.
    F_i_star, Y0_i
        Local optima values and ``||theta_0 - theta_i*||^2``.
    """

    constants: ProblemConstants
    reads_private_data: bool
    mu_i: tuple[float, ...]
    lambda_i: tuple[float, ...]
    G2_trajectory: NDArray[np.float64]
    norm_quantiles: dict[str, NDArray[np.float64]]
    clipped_fraction: tuple[float, float]
    F_i_star: tuple[float, ...]
    Y0_i: tuple[float, ...]


@dataclass(frozen=True)
class GradientPath:
    """Per-sample gradient statistics along a non-private full-batch GD run.

    Attributes
    ----------
    theta
        The end point of the run.
    g2
        Mean squared per-sample gradient norm per step (rows) and client (columns).
    lambda2
        Each client's largest Lambda_i^2 along the run.
    norm_quantiles
        ``{"l1": ..., "l2": ...}``: quantiles of the unclipped norms at the start and the end.
    clipped_fraction
        Weighted share of clipped per-sample gradients at the start and the end.
    """

    theta: Tensor
    g2: NDArray[np.float64]
    lambda2: NDArray[np.float64]
    norm_quantiles: dict[str, NDArray[np.float64]]
    clipped_fraction: tuple[float, float]


def path_points(*, theta: Tensor, steps: int,
                descent: Callable[[Tensor], Tensor]) -> list[Tensor]:
    """``theta`` and the ``steps`` points ``theta <- descent(theta)`` after it (the GD run does
    not depend on the clipping, so several clip settings share one run)."""
    points = [theta]
    for _ in range(steps):
        points.append(descent(points[-1]))
    return points


def path_statistics(*, points: Sequence[Tensor], weights: NDArray[np.float64],
                    client_stats: Callable[[Tensor], list[SampleStats]]) -> GradientPath:
    """``client_stats`` at every point of a GD run (G: Assumption 6; Lambda: Assumption 8) and
    the norm quantiles at both ends; the run ends at ``points[-1]``."""
    g2_rows: list[list[float]] = []
    lam2 = np.zeros(len(weights))
    quant: dict[str, list[NDArray[np.float64]]] = {"l1": [], "l2": []}
    clipped: list[float] = []
    last = len(points) - 1
    for step, theta in enumerate(points):
        stats = client_stats(theta)
        g2_rows.append([st[0] for st in stats])
        lam2 = np.maximum(lam2, [st[1] for st in stats])
        if step in (0, last):
            for key, idx in (("l1", 2), ("l2", 3)):
                norms = torch.cat([torch.as_tensor(st[idx]) for st in stats]).numpy()
                quant[key].append(np.quantile(norms, _QUANTILES))
            clipped.append(float(np.average([st[4] for st in stats], weights=weights)))
    return GradientPath(theta=points[-1], g2=np.asarray(g2_rows, dtype=np.float64),
                        lambda2=lam2, norm_quantiles={k: np.asarray(v) for k, v in quant.items()},
                        clipped_fraction=(clipped[0], clipped[-1]))


def gradient_path(*, theta: Tensor, steps: int, weights: NDArray[np.float64],
                  client_stats: Callable[[Tensor], list[SampleStats]],
                  descent: Callable[[Tensor], Tensor]) -> GradientPath:
    """Run ``steps`` steps ``theta <- descent(theta)``, recording ``client_stats`` at every point
    (:func:`path_points`, then :func:`path_statistics`)."""
    return path_statistics(points=path_points(theta=theta, steps=steps, descent=descent),
                           weights=weights, client_stats=client_stats)


def assemble_estimate(
    *, path: GradientPath, mu: float, mu_i: tuple[float, ...], lambda_i: tuple[float, ...],
    f_star: NDArray[np.float64], y0_i: NDArray[np.float64], sizes: tuple[int, ...], p: int,
    clip: float, eps: float | Sequence[float], delta: float | Sequence[float],
    sample_rate: float, reads_private_data: bool,
) -> EstimatedConstants:
    """The :class:`EstimatedConstants` of measured curvature, gradient path and local optima:
    ``G = sqrt(max g2)``, ``Gamma = max F_i* - sum_i w_i F_i*``, ``Y0 = sum_i w_i Y0_i``."""
    n = len(sizes)
    w = np.asarray(sizes, dtype=np.float64) / sum(sizes)
    constants = ProblemConstants(
        N=n, d_i=sizes, p=p, mu=mu, lam=max(lambda_i),
        G=float(np.sqrt(path.g2.max())), Gamma=float(f_star.max() - w @ f_star),
        Y0=float(w @ y0_i), xi=float(clip),
        eps_i=tuple(eps) if isinstance(eps, Sequence) else (float(eps),) * n,
        delta_i=tuple(delta) if isinstance(delta, Sequence) else (float(delta),) * n,
        q=sample_rate, Lambda2_i=tuple(float(v) for v in path.lambda2),
    )  # fmt: skip
    return EstimatedConstants(
        constants=constants, reads_private_data=reads_private_data, mu_i=mu_i,
        lambda_i=lambda_i, G2_trajectory=path.g2, norm_quantiles=path.norm_quantiles,
        clipped_fraction=path.clipped_fraction, F_i_star=tuple(float(v) for v in f_star),
        Y0_i=tuple(float(v) for v in y0_i),
    )  # fmt: skip
