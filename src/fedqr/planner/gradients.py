"""The twin's gradient term, two matrix products per round for every column at once.

The twin needs only the weighted sum over the selected clients,

    g = sum_i c_i / n_i * sum_{j in batch_i} clip(grad_j),

(``n_i`` the full or the expected Poisson batch), never a client's own sum. Weighting every
row by its client's ``c_i / n_i`` turns it into one product ``(w * S)^T X`` over the rows of the
round: no loop over clients, and only the rows that are used are read.
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from fedqr.models.logreg import Norm, clipped_residual, column_logits
from fedqr.models.logreg_pass import ClientLayout
from fedqr.models.sampling import poisson_positions

__all__ = ["RowBlock", "full_batch_gradient", "poisson_gradient", "row_blocks", "row_ranges"]

RowBlock = tuple[int, int, Tensor]
"""Rows ``[lo, hi)`` of the proxy and each row's weight (its client's)."""


def row_ranges(offsets: NDArray[np.int64], sel: NDArray[np.int64]
               ) -> list[tuple[int, int, list[int]]]:
    """Contiguous row ranges ``[lo, hi)`` of the selected clients (neighbours merged), each
    with its clients in row order."""
    out: list[tuple[int, int, list[int]]] = []
    for i in np.sort(sel):
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        if out and out[-1][1] == lo:
            out[-1][2].append(int(i))
            out[-1] = (out[-1][0], hi, out[-1][2])
        else:
            out.append((lo, hi, [int(i)]))
    return out


def row_blocks(layout: ClientLayout, sel: NDArray[np.int64], weight: Tensor) -> list[RowBlock]:
    """The rows of the selected clients as contiguous blocks, each row weighted by its
    client's ``weight_i`` (in the order of ``sel``): what :func:`full_batch_gradient` reads,
    computed once per selection."""
    w_of = dict(zip((int(i) for i in sel), weight.tolist(), strict=True))
    return [(lo, hi, torch.repeat_interleave(
        torch.tensor([w_of[i] for i in clients], dtype=weight.dtype, device=weight.device),
        torch.as_tensor(layout.sizes[clients], device=weight.device)))
        for lo, hi, clients in row_ranges(layout.offsets, sel)]


def full_batch_gradient(layout: ClientLayout, theta: Tensor, blocks: list[RowBlock], *,
                        clip: float, norm: Norm, chunk_rows: int) -> Tensor:
    """``sum_i weight_i sum_{j in D_i} clip(grad_j)`` of every column, shape like ``theta``.

    Parameters
    ----------
    layout:
        The proxy's client-sorted rows.
    theta:
        Parameters of the A columns, ``(A, k, p)``.
    blocks:
        The selected clients' rows and their weights ``c_i / m_i`` (:func:`row_blocks`; the
        same for every column).
    """
    a, k, p = theta.shape
    flat = theta.reshape(a * k, p)
    g = torch.zeros(a * k, p, dtype=theta.dtype, device=theta.device)
    for lo, hi, w_rows in blocks:
        for start in range(lo, hi, chunk_rows):
            stop = min(hi, start + chunk_rows)
            x = layout.x[start:stop]
            c = stop - start
            out = clipped_residual((x @ flat.T).view(c, a, k),
                                   layout.y[start:stop, None].expand(c, a),
                                   x_norm=layout.x_norm[start:stop, None], clip=clip, norm=norm,
                                   metrics=False)
            assert out.residual is not None  # residual=True
            res = out.residual.mul_(w_rows[start - lo:stop - lo, None, None])
            g.addmm_(res.view(c, a * k).T, x)
    return g.view(a, k, p)


def poisson_gradient(layout: ClientLayout, theta: Tensor, starts: Tensor, sizes: Tensor,
                     weight: Tensor, *, sample_rate: float, clip: float, norm: Norm,
                     generator: torch.Generator) -> Tensor:
    """``sum_i weight_i sum_{j in B_i} clip(grad_j)`` with Poisson batches ``B_i`` drawn once
    per repeat and shared by that repeat's columns.

    Parameters
    ----------
    layout:
        The proxy's client-sorted rows.
    theta:
        Parameters ``(K, A, k, p)``: repeat r's A columns are ``theta[r]`` (a view of a
        larger tensor is read in place).
    starts, sizes:
        First row and row count of each selected client, ``(b,)`` int64.
    weight:
        ``c_i / (q m_i)`` of each selected client, ``(b,)``.

    Returns
    -------
    torch.Tensor
        The sums, shaped like ``theta`` (contiguous).

    The batches of a repeat are packed (valid rows first, padded to the largest repeat's count
    with weight 0), so the round is one batched product forward and one backward.
    """
    repeats, n_col, k, p = theta.shape
    b = len(starts)
    pos, valid = poisson_positions(sizes.expand(repeats, b), sample_rate=sample_rate,
                                   generator=generator)
    m = pos.shape[-1]
    rows = (starts[None, :, None] + pos).reshape(repeats, b * m)
    w = (weight.to(theta.dtype)[None, :, None] * valid).reshape(repeats, b * m)
    valid_flat = valid.reshape(repeats, b * m)
    count = int(valid_flat.sum(dim=1).max()) if valid_flat.numel() else 0
    if count == 0:
        return torch.zeros(theta.shape, dtype=theta.dtype, device=theta.device)
    order = torch.argsort((~valid_flat).to(torch.int8), dim=1, stable=True)[:, :count]
    flat_rows = rows.gather(1, order).view(-1)
    w = w.gather(1, order)
    x = layout.x.index_select(0, flat_rows).view(repeats, count, p)
    th = theta.reshape(repeats, n_col * k, p)  # a view: the columns are a prefix
    logits = column_logits(x, th).view(repeats, count, n_col, k)
    y = layout.y.index_select(0, flat_rows).view(repeats, count, 1)
    x_norm = layout.x_norm.index_select(0, flat_rows).view(repeats, count, 1)
    out = clipped_residual(logits, y.expand(repeats, count, n_col), x_norm=x_norm, clip=clip,
                           norm=norm, metrics=False)
    assert out.residual is not None  # residual=True
    res = out.residual.mul_(w[:, :, None, None]).view(repeats, count, n_col * k)
    return torch.bmm(res.transpose(1, 2), x).view(repeats, n_col, k, p)  # (K, A k, p)
