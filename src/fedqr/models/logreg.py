"""Multinomial logistic regression without bias (the paper's 784x10 MNIST model).

The model is ``logits = x @ theta`` with ``theta`` of shape ``(p_features, k)``; the training
objective of client i is ``F_i(theta) = mean_j CE(x_j, y_j; theta) + (wd / 2) ||theta||^2``.

Per-sample clipping never materialises per-sample gradients. The cross-entropy gradient of one
sample is the rank-one matrix ``x (p - y)^T``, so its norms factorise:

* l1: ``||x (p - y)^T||_1 = ||x||_1 ||p - y||_1`` and ``||p - y||_1 = 2 (1 - p_y)``;
* l2: ``||x (p - y)^T||_F = ||x||_2 ||p - y||_2`` and ``||p - y||_2^2 = sum p^2 - 2 p_y + 1``,

and the sum of clipped gradients is ``X^T (s * (P - Y))`` with ``s_j = min(1, xi / norm_j)``.
Repeats are batched in the columns: ``theta`` for R repeats is one ``(p, R k)`` matrix, so a
single GEMM serves every repeat. Rows are processed in cache-sized chunks so that each chunk of
``X`` is read from memory once for the forward and the backward product.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedqr.privacy.mechanisms import Norm  # the clipping norm belongs to the mechanism

__all__ = ["EXP_FLOOR", "NARROW_COLUMNS", "ChunkOut", "Norm", "clipped_residual", "column_logits",
           "row_norms", "weighted_residual"]

EXP_FLOOR = -80.0
"""Shifted logits ``l_j - max_l`` below this are raised to it before ``exp``, so no softmax
term is subnormal (``e^-80`` = 1.8e-35; float32's normal range ends at 1.2e-38): x86 CPUs
compute on subnormal floats through slow microcode, and a noisy model's logits, spread over
hundreds, put many terms there. A MNIST client's clipped residuals (10 repeats) from logits of
spread 300 took 6.6 ms against 1.5 ms once raised (1.3 ms from trained logits, either way); a
Laplace run of the paper's at eps = 1 took 119 against 74 ms a round at b = 10 (T = 100) and
16.1 against 7.6 ms at b = 1 (T = 500), with the same final losses
(``python bench/exp_floor.py``). The change to a probability is at most 1.8e-35:
nothing a float32 sum of terms near 1 can hold (the mixed arithmetic truncates it to 0), so
losses, residual norms and clipping are unchanged; only a gradient column made of such
terms alone moves, by less than 1e-33."""


@dataclass(frozen=True)
class ChunkOut:
    """Per-row results of the softmax cross-entropy and clipping.

    Attributes
    ----------
    residual:
        ``s * (P - Y)``, shape ``(..., k)``; ``None`` for evaluation-only passes.
    clipped:
        Rows whose gradient was scaled down (``s < 1``); ``None`` when nothing was clipped.
    loss:
        Per-row cross-entropy; ``None`` when not requested (``metrics=False``).
    correct:
        Per-row correctness of the argmax prediction; ``None`` when not requested.
    """

    residual: Tensor | None
    clipped: Tensor | None
    loss: Tensor | None
    correct: Tensor | None


def row_norms(x: Tensor, norm: Norm) -> Tensor:
    """Per-row ``||x_j||_1`` or ``||x_j||_2`` (precomputed once per data set)."""
    out: Tensor = torch.linalg.vector_norm(x, ord=1 if norm is Norm.L1 else 2, dim=1)
    return out


def clipped_residual(
    logits: Tensor,
    y: Tensor,
    *,
    x_norm: Tensor | None = None,
    clip: float = float("inf"),
    norm: Norm = Norm.L2,
    residual: bool = True,
    metrics: bool = True,
) -> ChunkOut:
    """Softmax cross-entropy and the clipped residual ``s * (P - Y)`` from logits.

    Parameters
    ----------
    logits:
        Shape ``(..., k)``; leading dimensions are rows and repeats in any order.
    y:
        Labels of shape ``logits.shape[:-1]`` (int64).
    x_norm:
        ``||x||`` of each row, broadcastable to ``logits.shape[:-1]``; needed for a finite clip.
    clip:
        Per-sample gradient norm bound xi; ``inf`` disables clipping.
    norm:
        The norm of ``clip`` (l1 for Laplace, l2 for Gaussian).
    residual:
        ``False`` for evaluation: only loss and correctness are computed.
    metrics:
        ``False`` for training passes that need neither loss nor correctness (saves the
        argmax and the log-sum-exp, 10% of a pass over MNIST: ``bench/engine.py``).

    Returns
    -------
    ChunkOut
        Per-row ``loss`` and ``correct`` (shape ``logits.shape[:-1]``), the clipped-row mask and
        the clipped residual (in the storage of a fresh tensor, never aliasing ``logits``).
    """
    idx = y.unsqueeze(-1)
    if not residual:  # evaluation: one max gives the shift of the log-sum-exp and the argmax
        if not metrics:
            return ChunkOut(None, None, None, None)
        top, first = logits.max(dim=-1)  # the first maximum, as argmax
        shift = top.masked_fill(~torch.isfinite(top), 0.0)  # as torch.logsumexp: inf stays inf
        lse = (logits - shift.unsqueeze(-1)).clamp_(min=EXP_FLOOR).exp_().sum(dim=-1).log_()
        lse.add_(top.masked_fill(top == float("inf"), 0.0))  # all -inf: -inf, as torch's
        return ChunkOut(None, None, lse - logits.gather(-1, idx).squeeze(-1), first == y)
    arg: Tensor | None = None
    if metrics:
        m, arg = logits.max(dim=-1, keepdim=True)
    else:
        m = logits.amax(dim=-1, keepdim=True)
    e = (logits - m).clamp_(min=EXP_FLOOR).exp_()  # hand-written softmax: ~6x faster than
    # torch.softmax at k = 10
    z = e.sum(dim=-1, keepdim=True)
    loss = correct = None
    if arg is not None:  # metrics: the loss and whether the first maximum is the label
        loss = z.log().add_(m).squeeze(-1) - logits.gather(-1, idx).squeeze(-1)
        correct = arg.squeeze(-1) == y
    p = e.div_(z)  # softmax probabilities, in place
    p_y = p.gather(-1, idx)
    p.scatter_add_(-1, idx, torch.full_like(p_y, -1.0))  # P - onehot(Y), in place
    if clip == float("inf"):
        return ChunkOut(p, None, loss, correct)
    if x_norm is None:
        raise ValueError("x_norm is required when clip is finite")
    if norm is Norm.L1:
        r_norm = 2.0 * (1.0 - p_y.squeeze(-1))  # ||p - y||_1 = 2 (1 - p_y)
    else:
        r_norm = p.norm(dim=-1)  # ||p - y||_2 (p already holds p - y)
    scale = (clip / (x_norm * r_norm)).clamp_(max=1.0)  # s_j = min(1, xi / ||g_j||)
    p.mul_(scale.unsqueeze(-1))
    return ChunkOut(p, scale < 1.0, loss, correct)


def weighted_residual(logits: Tensor, idx: Tensor, *, bound: Tensor, weight: Tensor,
                      norm: Norm) -> Tensor:
    """``w_j s_j (P - Y)`` in place of ``logits``: the clipped residual of
    :func:`clipped_residual` times a row weight, in the fewest operations (the twin's rounds).

    With ``bound_j = w_j xi / ||x_j||`` precomputed, ``w_j s_j = w_j min(1, xi / (||x_j||
    ||r_j||)) = min(w_j, bound_j / ||r_j||)`` (``fmin``: a row whose residual is exactly zero
    keeps ``w_j``, where ``0 / 0`` would give NaN).

    Parameters
    ----------
    logits:
        Shape ``(..., c, k)`` (rows first, then c columns); overwritten.
    idx:
        Labels shaped ``(..., 1, 1)`` (int64), broadcast over the columns.
    bound, weight:
        ``w_j xi / ||x_j||`` and ``w_j`` of each row, shape ``(..., 1)``.
    norm:
        The clipping norm (l1: ``||r||_1 = 2 (1 - p_y)``; l2: ``||r||_2``).
    """
    m = logits.amax(dim=-1, keepdim=True)
    e = logits.sub_(m).clamp_(min=EXP_FLOOR).exp_()
    p = e.div_(e.sum(dim=-1, keepdim=True))  # softmax probabilities, in place
    at = idx.expand(*p.shape[:-1], 1)
    if norm is Norm.L1:
        r_norm = 2.0 * (1.0 - p.gather(-1, at).squeeze(-1))
        p.scatter_add_(-1, at, torch.full(at.shape, -1.0, dtype=p.dtype, device=p.device))
    else:
        p.scatter_add_(-1, at, torch.full(at.shape, -1.0, dtype=p.dtype, device=p.device))
        r_norm = torch.linalg.vector_norm(p, dim=-1)
    return p.mul_(torch.fmin(weight, bound / r_norm).unsqueeze(-1))


NARROW_COLUMNS = 24
"""At most this many logit columns (columns x classes) per repeat, the forward product is
taken transposed, ``(theta X^T)^T``: on 2 CPU threads a (3, 620, 784) x (784, 10) product
takes 0.64 ms as ``X theta^T`` and 0.34 ms transposed (``bench/twin_products.py``); the plain
layout is as fast from about 20 columns with one repeat, 40 with three, and faster beyond (80
columns: 1.58 against 1.69 ms). Used by the twin's Poisson rounds (one running
column is their common case); the engine keeps the plain product, whose rounding does not
depend on how many replies share it."""


def column_logits(x: Tensor, theta: Tensor) -> Tensor:
    """``x theta^T`` per repeat, ``(K, m, p) x (K, c, p) -> (K, m, c)``, contiguous."""
    if theta.shape[1] <= NARROW_COLUMNS:
        return torch.bmm(theta, x.transpose(1, 2)).transpose(1, 2).contiguous()
    return torch.bmm(x, theta.transpose(1, 2))
