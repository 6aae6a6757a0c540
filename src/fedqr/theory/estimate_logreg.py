"""Softmax regression's objective for the estimator: closed forms throughout, no autograd.

``theta`` is the ``(features, k)`` weight matrix, flattened, in float64, starting from zero
(the paper's start). ``F(theta) = mean_j CE(x_j^T theta, y_j) + (wd/2) ||theta||^2`` with
``P = softmax(X theta)`` row-wise and ``Y`` the one-hot labels:

* gradient ``X^T (P - Y) / n + wd theta`` (:func:`value_and_gradient`: one product each way);
* Hessian-vector product ``X^T J / n + wd V`` with ``U = X V`` and
  ``J = P * U - P * rowsum(P * U)``, the softmax Jacobian applied row by row
  (:func:`hessian_vector_product`: again one product each way);
* per-sample gradients ``x (p - y)^T`` factorise: ``||x (p-y)^T||_F = ||x||_2 ||p-y||_2`` and
  ``<x (p-y)^T, wd theta> = wd <x^T theta, p-y>``, so no gradient is ever materialised;
* ``F_i`` is strictly convex (``wd > 0``): each client's local optimum and the pooled optimum
  ``theta*`` are found by L-BFGS in float64 on the closed-form gradient.

Products are taken as ``theta^T X^T`` and ``R^T X`` (classes first): the fast orientation of a
tall-skinny product in BLAS.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy
import torch
from numpy.typing import NDArray
from scipy.optimize import minimize
from threadpoolctl import ThreadpoolController
from torch import Tensor

from fedqr.models.logreg import Norm
from fedqr.models.logreg_kernel import design_rows
from fedqr.models.sparse_rows import SparseRows, background, density, pays
from fedqr.theory.estimate_curvature import Hvp
from fedqr.theory.estimate_parts import SampleStats

__all__ = ["LogRegObjective", "hessian_vector_product", "regularised_optimum",
           "softmax_t", "value_and_gradient"]

_GTOL = 1e-7
_SPARSE_MIN_ROWS = 1024  # about the crossing (bench/theta_star.py: MNIST, 0.116 s sparse
# against 0.130 s dense at 1,024 rows, 0.290 against 0.462 s at 4,096)
Floats = NDArray[np.floating]


def softmax_t(x: Floats, theta: Floats) -> tuple[Floats, Floats, Floats]:
    """``(Z^T, P^T, logsumexp)``: logits and probabilities ``(k, n)`` of the rows ``x`` and
    each row's log-partition ``(n,)``, in the dtype of ``x`` and ``theta``."""
    zt = theta.T @ x.T
    top = zt.max(axis=0)
    e = np.exp(zt - top)
    s = e.sum(axis=0)
    return zt, e / s, top + np.log(s)


def value_and_gradient(x: Floats, y: NDArray[np.integer], theta: Floats,
                       weight_decay: float) -> tuple[float, Floats]:
    """``F(theta)`` and its gradient ``(features, k)`` (mean cross-entropy plus weight decay)."""
    n = x.shape[0]
    cols = np.arange(n)
    zt, pt, lse = softmax_t(x, theta)
    ce = float(np.mean(lse - zt[y, cols], dtype=np.float64))
    pt[y, cols] -= 1.0  # P - Y
    grad = (pt @ x).T / n + weight_decay * theta
    return ce + 0.5 * weight_decay * float(np.sum(theta * theta, dtype=np.float64)), grad


def hessian_vector_product(x: Floats, pt: Floats, v: Floats, weight_decay: float) -> Floats:
    """``H v`` at the point of probabilities ``pt`` (``(k, n)``, from :func:`softmax_t`);
    ``v`` and the result are ``(features, k)``."""
    ut = v.T @ x.T
    jt = pt * (ut - (pt * ut).sum(axis=0))
    out: Floats = (jt @ x).T / x.shape[0] + weight_decay * v
    return out


@contextmanager
def _scipy_blas_serial() -> Iterator[None]:
    """scipy's own BLAS on one thread for the duration (numpy's keeps its threads).

    pip's scipy and numpy each bundle an OpenBLAS with its own thread pool; L-BFGS-B calls
    scipy's for small vector operations between numpy's large products, and the idle threads
    of each spin-wait on the cores the other needs (2 cores: every evaluation of ``theta*``
    took 0.11 s instead of 0.06 s). Nothing changes where both share one BLAS.
    """
    ctl = ThreadpoolController()
    root = str(Path(scipy.__file__).parent)  # .../scipy/ and .../scipy.libs/
    own = [lib.filepath for lib in ctl.lib_controllers
           if lib.filepath is not None and lib.filepath.startswith(root)]
    if not own:
        yield
        return
    with ctl.select(filepath=own).limit(limits=1):
        yield


def sparse_value_and_gradient(rows: SparseRows, y: Tensor, theta: Floats,
                              weight_decay: float) -> tuple[float, Floats]:
    """:func:`value_and_gradient` with the rows as :class:`~fedqr.models.sparse_rows.SparseRows`
    (``X = S + 1 m^T``, both products reading only the non-zeros of ``S``), in the dtype of
    the rows; ``theta`` ``(features, k)``."""
    n = y.shape[0]
    th = torch.from_numpy(np.ascontiguousarray(theta))
    z = rows.mm(th)  # (n, k)
    top = z.amax(dim=1, keepdim=True)
    e = (z - top).exp_()
    s = e.sum(dim=1, keepdim=True)
    ce = float(s.log().add_(top).sub_(z.gather(1, y[:, None])).sum(dtype=torch.float64)) / n
    r = e.div_(s)  # P
    r.scatter_add_(1, y[:, None], torch.full((n, 1), -1.0, dtype=r.dtype))  # P - Y
    grad = rows.tmm(r).T.numpy() / n + weight_decay * theta
    return ce + 0.5 * weight_decay * float(np.sum(theta * theta, dtype=np.float64)), grad


def _objective(x: Floats, y: NDArray[np.integer], k: int, wd: float
               ) -> Callable[[Floats], tuple[float, Floats]]:
    """``theta -> (F, grad F)`` in the dtype of ``x``: through sparse rows where their
    products pay (:func:`~fedqr.models.sparse_rows.pays`: MNIST, 19% non-zero besides each
    column's background, takes half the time of the dense products per evaluation), else
    :func:`value_and_gradient`."""
    if x.ndim == 2 and x.shape[0] >= _SPARSE_MIN_ROWS:
        xt = torch.from_numpy(np.ascontiguousarray(x))
        offset = background(xt)
        if pays(density(xt, offset), k):
            rows = SparseRows.of(xt, offset=offset, transpose=True)
            yt = torch.from_numpy(np.asarray(y, dtype=np.int64))

            def sparse(theta: Floats) -> tuple[float, Floats]:
                return sparse_value_and_gradient(rows, yt, theta, wd)

            return sparse

    def dense(theta: Floats) -> tuple[float, Floats]:
        return value_and_gradient(x, y, theta, wd)

    return dense


def _lbfgs(x: Floats, y: NDArray[np.integer], k: int, wd: float, start: NDArray[np.float64],
           gtol: float) -> tuple[float, NDArray[np.float64]]:
    """L-BFGS-B from ``start`` on ``F`` evaluated in the dtype of ``x``."""
    shape = (x.shape[1], k)
    objective = _objective(x, y, k, wd)

    def fun(v: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        val, g = objective(v.reshape(shape).astype(x.dtype, copy=False))
        return val, np.asarray(g, dtype=np.float64).reshape(-1)

    with _scipy_blas_serial():
        res = minimize(fun, start, jac=True, method="L-BFGS-B",
                       options={"maxiter": 500, "gtol": gtol})  # fmt: skip
    return float(res.fun), np.asarray(res.x, dtype=np.float64)


def regularised_optimum(x: Floats, y: NDArray[np.integer], *, num_classes: int,
                        weight_decay: float) -> NDArray[np.float64]:
    """``argmin mean CE + (wd/2) ||theta||^2`` by L-BFGS, shaped ``(k, p)`` like the engine's."""
    xd = np.asarray(x, dtype=np.float64)
    _, flat = _lbfgs(xd, np.asarray(y, dtype=np.int64), num_classes, weight_decay,
                     np.zeros(xd.shape[1] * num_classes), _GTOL)
    return np.ascontiguousarray(flat.reshape(-1, num_classes).T)


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


@dataclass(frozen=True)
class LogRegObjective:
    """:class:`~fedqr.theory.estimate_parts.Objective` of softmax regression, without bias or
    (``intercept``) with one: the rows then end in a column of ones, as the kernel's do."""

    num_features: int
    num_classes: int
    weight_decay: float
    intercept: bool = False

    @property
    def columns(self) -> int:
        """Rows' width: the features, and the intercept's 1 where there is one."""
        return self.num_features + int(self.intercept)

    @property
    def theta0(self) -> Tensor:
        """Zero, ``(columns, k)`` in float64."""
        return torch.zeros(self.columns, self.num_classes, dtype=torch.float64)

    @property
    def num_params(self) -> int:
        """``columns k``."""
        return self.columns * self.num_classes

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
        return (design_rows(xt, intercept=self.intercept).contiguous(),
                torch.as_tensor(np.asarray(y), dtype=torch.int64))

    def loss(self, x: Tensor, y: Tensor) -> Callable[[Tensor], Tensor]:
        """Mean cross-entropy plus weight decay (a torch closure, for autograd)."""
        wd = self.weight_decay

        def f(theta: Tensor) -> Tensor:
            return torch.nn.functional.cross_entropy(x @ theta, y) + 0.5 * wd * theta.pow(2).sum()

        return f

    def gradient(self, x: Tensor, y: Tensor, theta: Tensor) -> Tensor:
        """``grad F_i(theta)`` in closed form."""
        _, g = value_and_gradient(x.numpy(), y.numpy(), theta.numpy(), self.weight_decay)
        return torch.as_tensor(np.ascontiguousarray(g))

    def hvp(self, x: Tensor, y: Tensor, theta: Tensor) -> Hvp:
        """``v -> H v`` of ``F_i`` at ``theta`` in closed form (softmax computed once)."""
        xn, shape = x.numpy(), tuple(theta.shape)
        _, pt, _ = softmax_t(xn, theta.numpy())

        def hv(v: NDArray[np.float64]) -> NDArray[np.float64]:
            out = hessian_vector_product(xn, pt, v.reshape(shape), self.weight_decay)
            return np.asarray(out, dtype=np.float64).reshape(-1)

        return hv

    def sample_stats(self, x: Tensor, y: Tensor, theta: Tensor, *, clip: float,
                     norm: Norm) -> SampleStats:
        """Closed-form per-sample norms (see the module's docstring)."""
        return _sample_stats(x, y, theta, clip=clip, norm=norm, wd=self.weight_decay)

    def local_optimum(self, x: Tensor, y: Tensor) -> tuple[float, float]:
        """The client's optimum by L-BFGS in float64; ``theta_0 = 0``."""
        value, theta = _lbfgs(x.numpy(), y.numpy(), self.num_classes, self.weight_decay,
                              np.zeros(self.num_params), _GTOL)
        return value, float(np.sum(theta**2))
