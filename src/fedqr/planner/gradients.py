"""The twin's gradient term, two matrix products per round for every column at once.

The twin needs only the weighted sum over the selected clients,

    g = sum_i c_i / n_i * sum_{j in batch_i} clip(grad_j),

(``n_i`` the full or the expected Poisson batch), never a client's own sum. Weighting every
row by its client's ``c_i / n_i`` turns it into one product ``(w * S)^T X`` over the rows of the
round: no loop over clients, and only the rows that are used are read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from fedqr.models.logreg import Norm, clipped_residual, column_logits, weighted_residual
from fedqr.models.logreg_pass import ClientLayout
from fedqr.models.sampling import poisson_positions

__all__ = ["BLOCK_ROUNDS", "ROW_QUANTUM", "PoissonRound", "RowBlock", "StackedRows",
           "block_positions", "block_rounds", "full_batch_gradient", "poisson_gradient",
           "poisson_rounds", "row_blocks", "row_ranges", "stack_rows"]

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
                        clip: float, norm: Norm, chunk_rows: int,
                        x_products: Tensor | None = None) -> Tensor:
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
    x_products:
        The rows in bfloat16 (as :func:`poisson_gradient`), else ``None``.
    """
    a, k, p = theta.shape
    flat = theta.reshape(a * k, p)
    flat_t = flat.T if x_products is None else flat.T.to(x_products.dtype)
    g = torch.zeros(a * k, p, dtype=theta.dtype, device=theta.device)
    for lo, hi, w_rows in blocks:
        for start in range(lo, hi, chunk_rows):
            stop = min(hi, start + chunk_rows)
            x = (layout.x if x_products is None else x_products)[start:stop]
            c = stop - start
            out = clipped_residual((x @ flat_t).float().view(c, a, k),
                                   layout.y[start:stop, None].expand(c, a),
                                   x_norm=layout.x_norm[start:stop, None], clip=clip, norm=norm,
                                   metrics=False)
            assert out.residual is not None  # residual=True
            res = out.residual.mul_(w_rows[start - lo:stop - lo, None, None])
            if x_products is None:
                g.addmm_(res.view(c, a * k).T, x)
            else:
                g.add_(res.view(c, a * k).T.to(x.dtype) @ x)
    return g.view(a, k, p)


@dataclass(frozen=True)
class StackedRows:
    """The rows a Poisson round gathers: R proxies' client-sorted rows one after the other
    (``group_rows`` each, the same clients' sizes) in the products' format (``x_products``:
    bfloat16, else the float32 rows themselves), their labels and their float32 rows'
    norms."""

    y: Tensor
    x_norm: Tensor
    x_products: Tensor
    groups: int
    group_rows: int


def stack_rows(layouts: Sequence[ClientLayout], products: Sequence[Tensor | None]
               ) -> StackedRows:
    """:class:`StackedRows` of proxies of equal shapes (one layout: its own tensors);
    ``products``: each proxy's bfloat16 rows, or ``None`` for all of them (float32)."""
    def cat(ts: list[Tensor]) -> Tensor:
        return ts[0] if len(ts) == 1 else torch.cat(ts)

    bf16 = [t for t in products if t is not None]
    if bf16 and len(bf16) != len(layouts):
        raise ValueError("stacked proxies must share one product format")
    x_products = cat(bf16) if bf16 else cat([lay.x for lay in layouts])
    return StackedRows(y=cat([lay.y for lay in layouts]),
                       x_norm=cat([lay.x_norm for lay in layouts]), x_products=x_products,
                       groups=len(layouts), group_rows=int(layouts[0].x.shape[0]))


@dataclass(frozen=True)
class PoissonRound:
    """One round's Poisson batches, packed: for every stacked proxy g and repeat r (row
    ``g K + r``) the ``count`` rows gathered (valid rows first, then padding of weight 0)."""

    rows: Tensor  # (G K count,) row indices into the stacked rows
    labels: Tensor  # (G K, count, 1, 1) int64
    bound: Tensor  # (G K, count, 1): w_j xi / ||x_j||
    weight: Tensor  # (G K, count, 1): w_j (0 for padding)
    count: int


BLOCK_ROUNDS = 32
"""The Poisson batches of up to this many rounds are drawn and packed at once: a round's
own operations are then its products and its softmax (sampling and packing a round alone
took about a fifth of a twin round with one column: 0.17 of 0.85 ms in an instrumented run,
MNIST N = 10)."""

ROW_QUANTUM = 16
"""A round's packed batches are padded (weight 0) to a multiple of this many rows: torch's
CPU products are set up once per shape, and a product of a shape not seen before took about
0.8 ms against 0.13 ms for a known one (MNIST, 3 x 620 x 784 in bfloat16, an instrumented
twin run), so 600 +- 50 rows per round should be a few shapes, not a hundred. Padding
changes no plan (docs/planner.md, "Speed")."""

_BLOCK_DRAWS = 1 << 21  # at most this many gap draws per block (memory of a wide round)


def block_rounds(*, repeats: int, sizes: NDArray[np.int64], sample_rate: float) -> int:
    """Rounds per block for batches of at most ``sizes.max()`` rows per client: at most
    :data:`BLOCK_ROUNDS`, fewer where a round draws many gaps."""
    d = float(sizes.max()) if len(sizes) else 0.0
    per_round = repeats * len(sizes) * (sample_rate * d + 8 * math.sqrt(sample_rate * d + 1)
                                        + 16)
    return int(max(1, min(BLOCK_ROUNDS, _BLOCK_DRAWS // max(per_round, 1.0))))


def block_positions(sizes: Tensor, *, repeats: int, sample_rate: float,
                    generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Positions and validity of the Poisson batches of a block of rounds, ``(B, K, b, m)``
    for the selected clients' row counts ``sizes`` ``(B, b)``: one
    :func:`fedqr.models.sampling.poisson_positions` call, what every twin draws (the
    logistic and the kernel twin take the same numbers)."""
    n_rounds, b = sizes.shape
    return poisson_positions(sizes[:, None, :].expand(n_rounds, repeats, b),
                             sample_rate=sample_rate, generator=generator)


def poisson_rounds(rows: StackedRows, selections: Sequence[tuple[Tensor, Tensor, Tensor]], *,
                   repeats: int, sample_rate: float, clip: float,
                   generator: torch.Generator) -> list[PoissonRound]:
    """The Poisson batches of consecutive rounds, drawn in one call and packed.

    Parameters
    ----------
    rows:
        The proxies' rows (:func:`stack_rows`); the batches take the same positions in every
        proxy's rows of a client (common random numbers).
    selections:
        Per round, the selected clients' first row (in one proxy), row count and weight
        ``c_i / (q m_i)``, each ``(b,)`` (one b for every round).
    repeats:
        K: every repeat draws its own batches.

    Returns
    -------
    list[PoissonRound]
        One per round, in order. The draws are those of one
        :func:`fedqr.models.sampling.poisson_positions` call over ``(rounds, K, b)`` clients.
    """
    starts = torch.stack([s for s, _, _ in selections])  # (B, b)
    weight = torch.stack([w for _, _, w in selections])
    n_rounds, b = starts.shape
    pos, valid = block_positions(torch.stack([n for _, n, _ in selections]), repeats=repeats,
                                 sample_rate=sample_rate, generator=generator)
    m = pos.shape[-1]
    at = (starts[:, None, :, None] + pos).reshape(n_rounds, repeats, b * m)
    w = (weight[:, None, :, None] * valid).reshape(n_rounds, repeats, b * m)
    flat = valid.reshape(n_rounds, repeats, b * m)
    most = flat.shape[-1]
    counts = [min(most, -(-c // ROW_QUANTUM) * ROW_QUANTUM)  # a few shapes: see ROW_QUANTUM
              for c in flat.sum(dim=-1).amax(dim=-1).tolist()]  # per round, its largest repeat
    top = max(counts)
    order = torch.argsort((~flat).to(torch.int8), dim=-1, stable=True)[..., :top]
    at, w = at.gather(-1, order), w.gather(-1, order)  # (B, K, top)
    shift = torch.arange(rows.groups, device=at.device) * rows.group_rows
    at = at[:, None] + shift[None, :, None, None]  # (B, G, K, top): g's copy of the rows
    w = w[:, None].expand(at.shape)
    y = rows.y[at]
    bound = (clip / rows.x_norm[at]).mul_(w)
    total = rows.groups * repeats
    out = []
    for i, count in enumerate(counts):
        out.append(PoissonRound(
            rows=at[i, :, :, :count].reshape(-1),
            labels=y[i, :, :, :count].reshape(total, count, 1, 1),
            bound=bound[i, :, :, :count].reshape(total, count, 1),
            weight=w[i, :, :, :count].reshape(total, count, 1), count=count))
    return out


def poisson_gradient(rows: StackedRows, theta: Tensor, batch: PoissonRound, *,
                     norm: Norm) -> Tensor:
    """``sum_i weight_i sum_{j in B_i} clip(grad_j)`` of one round's Poisson batches
    (:func:`poisson_rounds`), shared by a repeat's columns and by the stacked proxies.

    Parameters
    ----------
    rows:
        The proxies' rows (:func:`stack_rows`). Where ``x_products`` is bfloat16 both
        products run in bfloat16 and their results are widened to float32 (the softmax, the
        clipping norms, which are the float32 rows', and the sums stay float32).
    theta:
        Parameters ``(G K, A, k, p)``: repeat r of proxy g has columns ``theta[g K + r]`` (a
        view of a larger tensor is read in place).

    Returns
    -------
    torch.Tensor
        The sums, shaped like ``theta`` (contiguous).
    """
    total, n_col, k, p = theta.shape
    count = batch.count
    if count == 0:
        return torch.zeros(theta.shape, dtype=theta.dtype, device=theta.device)
    th = theta.reshape(total, n_col * k, p)  # a view: the columns are a prefix
    x = rows.x_products.index_select(0, batch.rows).view(total, count, p)
    if x.dtype == theta.dtype:
        logits = column_logits(x, th).view(total, count, n_col, k)
    else:  # bfloat16: the plain layout is the faster one at every width
        logits = torch.bmm(x, th.to(x.dtype).transpose(1, 2)).float().view(
            total, count, n_col, k)
    res = weighted_residual(logits, batch.labels, bound=batch.bound, weight=batch.weight,
                            norm=norm).view(total, count, n_col * k)
    g = torch.bmm(res.transpose(1, 2).to(x.dtype), x)  # (G K, A k, p)
    return g.view(total, n_col, k, p) if x.dtype == theta.dtype else g.float().view(
        total, n_col, k, p)
