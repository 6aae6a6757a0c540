"""Test metrics of softmax regression for every repeat: one pass over the rows, dense or CSR.

The logits of a chunk of rows for all R repeats are one product with ``R k`` columns; where
the rows' CSR copy pays (:mod:`fedqr.models.sparse_rows`), it is used instead of the dense
rows. The loss is a fused log-sum-exp; correctness counts ``argmax == y``
(:func:`summed_metrics`).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from fedqr.models.logreg import EXP_FLOOR, clipped_residual
from fedqr.models.logreg_pass import forward_weights
from fedqr.models.sparse_rows import SparseCache

__all__ = ["evaluate", "summed_metrics"]


def evaluate(
    x: Tensor, y: Tensor, theta: Tensor, *, chunk_rows: int, sparse: SparseCache | None = None,
    build_sparse: bool = True,
) -> tuple[Tensor, Tensor]:
    """Summed cross-entropy and number correct on ``(x, y)`` for every repeat, shape ``(R,)``;
    with ``sparse`` (row groups covering ``x`` in order), the groups whose CSR products pay
    use them (``build_sparse=False``: only those already built)."""
    r, k, p = theta.shape
    sums: list[tuple[Tensor, Tensor]] = []
    for start, logits in _logits(x, _Weights(theta.reshape(r * k, p)), chunk_rows=chunk_rows,
                                 sparse=sparse, build=build_sparse):
        c = logits.shape[0]
        sums.append(summed_metrics(logits[:, : r * k].view(c, r, k), y[start:start + c]))
    if len(sums) == 1:  # one CSR piece or chunk (a test set of MNIST's size): no sums to add
        return sums[0]
    loss = torch.zeros(r, dtype=theta.dtype, device=theta.device)
    correct = torch.zeros(r, dtype=torch.int64, device=theta.device)
    for chunk_loss, chunk_correct in sums:
        loss += chunk_loss
        correct += chunk_correct
    return loss, correct


class _Weights:
    """``theta`` as ``(R k, p)`` rows, in the two forms the products take, each made once on
    first use: ``dense`` zero-padded to 16 rows (:func:`forward_weights`, for dense chunks)
    and ``csr`` transposed and contiguous ``(p, R k)`` (for CSR pieces, unpadded)."""

    def __init__(self, flat: Tensor) -> None:
        self.flat = flat
        self._dense: Tensor | None = None
        self._csr: Tensor | None = None

    @property
    def cols(self) -> int:
        return int(self.flat.shape[0])

    def dense(self) -> Tensor:
        if self._dense is None:
            self._dense = forward_weights(self.flat.unsqueeze(0))
        return self._dense

    def csr(self) -> Tensor:
        if self._csr is None:
            self._csr = self.flat.T.contiguous()
        return self._csr


def summed_metrics(logits: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """Summed cross-entropy and number correct over the rows of ``logits`` ``(c, R, k)`` with
    labels ``y`` ``(c,)``, per repeat ``(R,)``.

    The logits are laid out class-major, ``(R, k, c)`` (one copy), so that every reduction
    over the k classes is an elementwise operation along the rows: torch's CPU reductions over
    a short last dimension take several times longer (MNIST's 10,000 test rows: ``python
    bench/eval_metrics.py``). The log-sum-exp is shifted by each row's maximum; a row is
    correct where its label's logit is the maximum and no class before the label ties it
    (``argmax``'s first maximum). Where the sum is not finite (a diverged model), the rows are
    evaluated again by :func:`~fedqr.models.logreg.clipped_residual`, so an infinite logit
    gives an infinite loss there as in ``torch.logsumexp``.
    """
    c, r, _ = logits.shape
    lt = logits.permute(1, 2, 0).contiguous()  # (R, k, c)
    top = lt.amax(dim=1)  # (R, c)
    picked = lt.gather(1, y.view(1, 1, c).expand(r, 1, c)).squeeze(1)
    if int((lt == top.unsqueeze(1)).sum()) == r * c:  # one maximum in every row: no ties
        correct = (picked == top).sum(dim=1)
    else:  # argmax takes the first of tied maxima (an untrained model ties every class)
        correct = (logits.argmax(dim=-1) == y[:, None]).sum(dim=0)
    lse = lt.sub_(top.unsqueeze(1)).clamp_(min=EXP_FLOOR).exp_().sum(dim=1).log_()
    loss = lse.add_(top).sub_(picked).sum(dim=1)
    if not bool(torch.isfinite(loss).all()):
        out = clipped_residual(logits, y[:, None].expand(c, r), residual=False)
        assert out.loss is not None and out.correct is not None  # metrics=True
        return out.loss.sum(dim=0), out.correct.sum(dim=0)
    return loss, correct


def _logits(x: Tensor, w: _Weights, *, chunk_rows: int, sparse: SparseCache | None,
            build: bool) -> Iterator[tuple[int, Tensor]]:
    """``(first row, logits)`` of consecutive chunks of ``x``, one at a time: the CSR pieces
    of the groups where they pay, dense chunks of ``chunk_rows`` over the runs of the others
    (consecutive dense groups merged: many small clients are not many small products)."""
    groups = sparse.groups if sparse is not None else ((0, x.shape[0]),)
    dense_from = 0
    for g, (lo, _) in enumerate(groups):
        pieces = sparse.get(g, w.cols, build=build) if sparse is not None else None
        if pieces is None:
            continue
        yield from _dense(x, w, dense_from, lo, chunk_rows)
        for start, rows in pieces:
            yield lo + start, rows.mm(w.csr())
        dense_from = groups[g][1]
    yield from _dense(x, w, dense_from, x.shape[0], chunk_rows)


def _dense(x: Tensor, w: _Weights, lo: int, hi: int, chunk_rows: int
           ) -> Iterator[tuple[int, Tensor]]:
    for start in range(lo, hi, chunk_rows):
        yield start, x[start:min(hi, start + chunk_rows)] @ w.dense().T
