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

from fedqr.models.logreg import Norm, clipped_residual
from fedqr.models.logreg_pass import ClientLayout, poisson_positions

__all__ = ["full_batch_gradient", "poisson_gradient", "row_ranges"]


def row_ranges(offsets: NDArray[np.int64], sel: NDArray[np.int64]
               ) -> list[tuple[int, int, list[int]]]:
    """Contiguous row ranges ``[lo, hi)`` of the selected clients (neighbours merged), each
    with its clients in row order."""
    out: list[tuple[int, int, list[int]]] = []
    for i in np.sort(sel):
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        if out and out[-1][1] == lo:
            out[-1] = (out[-1][0], hi, [*out[-1][2], int(i)])
        else:
            out.append((lo, hi, [int(i)]))
    return out


def full_batch_gradient(layout: ClientLayout, theta: Tensor, sel: NDArray[np.int64],
                        weight: Tensor, *, clip: float, norm: Norm, chunk_rows: int) -> Tensor:
    """``sum_i weight_i sum_{j in D_i} clip(grad_j)`` of every column, shape like ``theta``.

    Parameters
    ----------
    layout:
        The proxy's client-sorted rows.
    theta:
        Parameters of the A columns, ``(A, k, p)``.
    sel:
        The selected clients (the same for every column).
    weight:
        ``c_i / m_i`` of each selected client, in the order of ``sel``.
    """
    a, k, p = theta.shape
    w_of = dict(zip((int(i) for i in sel), weight.tolist(), strict=True))
    flat = theta.reshape(a * k, p)
    g = torch.zeros(a * k, p, dtype=theta.dtype, device=theta.device)
    sizes = layout.sizes
    for lo, hi, clients in row_ranges(layout.offsets, sel):
        w_rows = torch.repeat_interleave(
            torch.tensor([w_of[i] for i in clients], dtype=theta.dtype, device=theta.device),
            torch.as_tensor(sizes[clients], device=theta.device))
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


def poisson_gradient(layout: ClientLayout, theta: Tensor, sel: NDArray[np.int64],
                     weight: Tensor, *, repeats: int, sample_rate: float, clip: float,
                     norm: Norm, generator: torch.Generator) -> Tensor:
    """``sum_i weight_i sum_{j in B_i} clip(grad_j)`` with Poisson batches ``B_i`` drawn once
    per repeat and shared by that repeat's columns (column ``c K + r`` is repeat r).

    The batches of a repeat are packed (valid rows first, padded to the largest repeat's count
    with weight 0), so the round is one batched product forward and one backward.
    """
    a, k, p = theta.shape
    dev = theta.device
    n_col = a // repeats
    b = len(sel)
    sizes = torch.as_tensor(layout.sizes[sel], device=dev).expand(repeats, b)
    pos, valid = poisson_positions(sizes, sample_rate=sample_rate, generator=generator)
    m = pos.shape[-1]
    starts = torch.as_tensor(layout.offsets[:-1][sel], device=dev)
    rows = (starts[None, :, None] + pos).reshape(repeats, b * m)
    w = (weight.to(theta.dtype)[None, :, None] * valid).reshape(repeats, b * m)
    valid_flat = valid.reshape(repeats, b * m)
    count = int(valid_flat.sum(dim=1).max()) if valid_flat.numel() else 0
    if count == 0:
        return torch.zeros_like(theta)
    order = torch.argsort((~valid_flat).to(torch.int8), dim=1, stable=True)[:, :count]
    rows, w = rows.gather(1, order), w.gather(1, order)
    x = layout.x.index_select(0, rows.reshape(-1)).view(repeats, count, p)
    th = theta.view(n_col, repeats, k, p).transpose(0, 1).reshape(repeats, n_col * k, p)
    logits = torch.bmm(x, th.transpose(1, 2)).view(repeats, count, n_col, k)
    y = layout.y.index_select(0, rows.reshape(-1)).view(repeats, count, 1)
    x_norm = layout.x_norm.index_select(0, rows.reshape(-1)).view(repeats, count, 1)
    out = clipped_residual(logits, y.expand(repeats, count, n_col), x_norm=x_norm, clip=clip,
                           norm=norm, metrics=False)
    assert out.residual is not None  # residual=True
    res = out.residual.mul_(w[:, :, None, None]).view(repeats, count, n_col * k)
    g = torch.bmm(res.transpose(1, 2), x)  # (K, C k, p)
    return g.view(repeats, n_col, k, p).transpose(0, 1).reshape(a, k, p)
