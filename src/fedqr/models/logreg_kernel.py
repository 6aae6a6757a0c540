"""Softmax regression as a :class:`~fedqr.models.kernel.Kernel`: the fused pass.

``theta`` of a repeat is the flattened ``(k, p)`` weight matrix; the clipped sums come from
:mod:`fedqr.models.logreg_pass` (rank-one per-sample norms, constant-column blocks, repeats in
the GEMM's columns), so all repeats share one pass over the data.

Without an intercept (``logreg``, the paper's model) or with one (``linear``: a bias per
class). The intercept is a constant feature 1 appended to every row (:func:`design_rows`),
so ``theta`` is ``(k, p + 1)`` with the biases in its last column, and a sample's gradient
``[x; 1] (p - y)^T`` is clipped with the norm of ``[x; 1]``: exactly a Linear layer's
per-sample gradient, weight and bias together. The column is constant within every client,
so the fused pass takes it out of both products (a rank-one term,
:class:`~fedqr.models.logreg_pass.ClientBlock`); on sparse rows it is background.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor

from fedqr.models.kernel import GradSums, KernelData
from fedqr.models.logreg import clipped_residual
from fedqr.models.logreg_eval import evaluate
from fedqr.models.logreg_pass import (
    ClientLayout,
    client_layout,
    forward_weights,
    full_batch_sums,
    poisson_sums,
)
from fedqr.models.sparse_rows import SparseCache

__all__ = ["LogRegKernel", "design_rows"]


def design_rows(x: Tensor, *, intercept: bool) -> Tensor:
    """The rows softmax regression multiplies: ``x``, or ``[x, 1]`` with an intercept."""
    if not intercept:
        return x
    return torch.cat([x, torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)], dim=1)


@dataclass(frozen=True)
class LogRegKernel:
    """Softmax regression of ``num_features`` inputs and ``num_classes`` classes, from zero;
    with ``intercept``, a bias per class too (the model ``linear``)."""

    num_features: int
    num_classes: int
    intercept: bool = False

    @property
    def name(self) -> str:
        """``logreg``, or ``linear`` with an intercept."""
        return "linear" if self.intercept else "logreg"

    @property
    def columns(self) -> int:
        """Columns of the weight matrix: ``p``, or ``p + 1`` with the intercept."""
        return self.num_features + int(self.intercept)

    @property
    def num_params(self) -> int:
        """``k p`` (``k (p + 1)`` with the intercept)."""
        return self.num_classes * self.columns

    @property
    def param_shape(self) -> tuple[int, ...]:
        """The weight matrix, ``(k, p)`` (``(k, p + 1)``: the biases last)."""
        return (self.num_classes, self.columns)

    @property
    def batched(self) -> bool:
        """Repeats share every pass (columns of one GEMM) and one generator."""
        return True

    @property
    def uses_coding(self) -> bool:
        """The fused pass takes the mixed arithmetic's integer coding (of rows without the
        intercept's column)."""
        return not self.intercept

    def init(self, *, repeats: int, generator: torch.Generator) -> Tensor:
        """Zeros (the paper's start), ``(R, k p)``; ``generator`` is not drawn from."""
        return torch.zeros(repeats, self.num_params, dtype=torch.float32)

    def attach(self, data: KernelData) -> _Attached:
        """Client layout with row norms in the mechanism's norm (of the rows with the
        intercept's 1 where there is one)."""
        caches = data.sparse_caches
        if self.intercept:
            def design(x: Tensor) -> Tensor:
                return design_rows(x, intercept=True)
            rows = ((lambda x: caches.derived(x, "intercept", design)) if caches is not None
                    else design)
            data = replace(data, x=rows(data.x), x_test=rows(data.x_test), coding=None)
        layout = client_layout(data.x, data.y, offsets=data.offsets,
                               num_classes=self.num_classes, norm=data.norm,
                               coding=data.coding, chunk_rows=data.chunk_rows, caches=caches)
        test = (caches.of if caches is not None else SparseCache.of)(
            data.x_test, [(0, data.x_test.shape[0])], transpose=False)
        return _Attached(self, layout, data, test)

    def describe(self) -> dict[str, object]:
        """Name and size."""
        return {"name": self.name, "num_params": self.num_params}

    @property
    def parameter_shapes(self) -> dict[str, list[int]]:
        """``theta``'s shape ``(k, p)``, ``(k, p + 1)`` with the intercept."""
        return {"theta": [self.num_classes, self.columns]}


@dataclass(frozen=True)
class _Attached:
    kernel: LogRegKernel
    layout: ClientLayout
    data: KernelData
    test_sparse: SparseCache  # the test rows as CSR where that pays

    def _matrix(self, theta: Tensor) -> Tensor:
        return theta.view(theta.shape[0], self.kernel.num_classes, self.kernel.columns)

    def full_sums(self, theta: Tensor, sel: np.ndarray, *, clip: float,
                  with_train_loss: bool) -> GradSums:
        return full_batch_sums(self.layout, self._matrix(theta), sel, clip=clip,
                               norm=self.data.norm, chunk_rows=self.data.chunk_rows,
                               with_train_loss=with_train_loss)

    def sample_sums(self, theta: Tensor, sel: np.ndarray, *, clip: float,
                    positions: tuple[Tensor, Tensor]) -> GradSums:
        return poisson_sums(self.layout, self._matrix(theta), sel, sample_rate=1.0, clip=clip,
                            norm=self.data.norm, generator=torch.Generator(),
                            positions=positions)

    def test_metrics(self, theta: Tensor) -> tuple[list[float], list[float]]:
        n = len(self.data.y_test)
        loss, correct = evaluate(self.data.x_test, self.data.y_test, self._matrix(theta),
                                 chunk_rows=self.data.chunk_rows, sparse=self.test_sparse)
        return (loss / n).tolist(), (correct.double() / n).tolist()

    def train_objective(self, theta: Tensor, fused: GradSums | None, *, sel: np.ndarray | None,
                        weight_decay: float) -> list[float]:
        mat = self._matrix(theta)
        loss_sum = fused.loss_sum if fused is not None else None
        if loss_sum is None:
            loss_sum, _ = evaluate(self.layout.x, self.layout.y, mat,  # CSR the passes built
                                   chunk_rows=self.data.chunk_rows, sparse=self.layout.sparse,
                                   build_sparse=False)
        reg = 0.5 * weight_decay * mat.pow(2).sum(dim=(1, 2))
        values: list[float] = (loss_sum / len(self.layout.y) + reg).tolist()
        return values

    def train_losses(self, theta: Tensor, rows: Tensor) -> Tensor:
        return _row_losses(self.layout.x.index_select(0, rows),
                           self.layout.y.index_select(0, rows), self._matrix(theta),
                           chunk_rows=self.data.chunk_rows)


def _row_losses(x: Tensor, y: Tensor, theta: Tensor, *, chunk_rows: int) -> Tensor:
    """Cross-entropy of every row of ``(x, y)`` for every repeat ``(R, k, p)``, ``(R, n)``."""
    r, k, _ = theta.shape
    theta_t = forward_weights(theta)
    parts = [torch.zeros(0, r, dtype=theta.dtype, device=theta.device)]
    for start in range(0, x.shape[0], chunk_rows):
        xc = x[start:start + chunk_rows]
        c = xc.shape[0]
        out = clipped_residual((xc @ theta_t.T)[:, : r * k].view(c, r, k),
                               y[start:start + chunk_rows, None].expand(c, r), residual=False)
        assert out.loss is not None  # metrics=True by default
        parts.append(out.loss)
    return torch.cat(parts).T
