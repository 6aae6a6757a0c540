"""Batched passes over client data: clipped gradient sums for every repeat in one sweep.

A *pass* reads each needed row of X once (in cache-sized chunks) and serves all R repeats
through the columns of one GEMM. Per-client results are sums (divided by d_i or q d_i later).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from fedqr.models.logreg import Norm, clipped_residual, row_norms
from fedqr.models.logreg_coded import CodedBlock, Coding, coded_block, coded_pass
from fedqr.models.sampling import poisson_positions
from fedqr.models.sparse_rows import SparseCache, SparseCaches, SparseRows

_MIN_GEMM_COLS = 16  # AVX-512 width in float32


def forward_weights(theta: Tensor) -> Tensor:
    """``theta`` of R repeats as ``(R k, p)`` rows, zero-padded to at least 16 rows.

    With k = 10 and one repeat, the logits GEMM has only 10 output columns, a shape MKL
    handles poorly: padding to 16 zero columns made that GEMM ~1.45x faster on this machine
    (29 -> 20 ms per pass over MNIST); the extra logits are sliced off as a free view.
    """
    r, k, p = theta.shape
    flat = theta.reshape(r * k, p)
    if r * k >= _MIN_GEMM_COLS:
        return flat
    pad = torch.zeros(_MIN_GEMM_COLS - r * k, p, dtype=theta.dtype, device=theta.device)
    return torch.cat([flat, pad])


@dataclass(frozen=True)
class ClientBlock:
    """One client's rows split as ``X_i = X_v E_v^T + 1 c^T E_c^T``: the columns that vary
    over its rows (``x``, at ``cols``) and those constant over them (value ``const_vals`` at
    ``const_cols``).

    Constant columns are common in images (a pixel always background for a client's two
    digits: 125 to 217 of MNIST's 784 per client of the paper's partition). Their logits are
    one bias per class and their gradient the rank-one ``(sum_j r_j) c^T``, so the two GEMMs
    of a pass run over the varying columns only: exact, and a pass over MNIST with 10 repeats
    takes 13% less time (``bench/engine.py``).
    """

    x: Tensor  # (d_i, v) float32, contiguous
    cols: Tensor  # (v,) int64
    const_cols: Tensor  # (p - v,) int64
    const_vals: Tensor  # (p - v,) float32
    coded: CodedBlock | None = None  # the mixed arithmetic's rows (fedqr.models.logreg_coded)


@dataclass(frozen=True)
class ClientLayout:
    """Training rows sorted by client on the compute device.

    Client i owns rows ``offsets[i]:offsets[i + 1]`` of ``x`` and ``y``; ``blocks[i]`` (when
    asked for) holds the same rows without their constant columns (:class:`ClientBlock`; a
    copy, so the layout then holds up to twice the training data); ``sparse`` (when present)
    gives a client's rows as CSR where a sparse pass pays (:mod:`fedqr.models.sparse_rows`;
    built on first use). Build it with :func:`client_layout`.

    The blocks serve full-batch passes only; they are built the first time one asks for them
    (``with_blocks``), so a run of Poisson batches neither scans the clients' columns nor
    copies their rows (MNIST, 10 IID clients: about 0.1 s and 159 MB a run).
    """

    x: Tensor  # (n, p) float32
    y: Tensor  # (n,) int64
    x_norm: Tensor  # (n,) ||x_j|| in the mechanism's clipping norm
    offsets: np.ndarray  # (N + 1,) int64
    num_classes: int
    sparse: SparseCache | None = None
    with_blocks: bool = False
    coded: tuple[Coding, int] | None = None  # the mixed arithmetic's coding and chunk rows
    shared: SparseCaches | None = None  # where the blocks of earlier runs on x are kept

    @property
    def sizes(self) -> np.ndarray:
        """d_i, shape (N,)."""
        return np.diff(self.offsets)

    @functools.cached_property
    def blocks(self) -> tuple[ClientBlock | None, ...] | None:
        """Each client's :class:`ClientBlock` (``None`` where the split does not pay), built
        on first use; ``None`` for a layout made without them."""
        if not self.with_blocks:
            return None
        code = self.coded

        def build(x: Tensor) -> tuple[ClientBlock | None, ...]:
            return tuple(client_block(x[int(lo):int(hi)], None if code is None else
                                      (code[0].codes[int(lo):int(hi)], code[0], code[1]))
                         for lo, hi in itertools.pairwise(self.offsets))

        if self.shared is None:
            return build(self.x)
        # the same rows (x, the shared sorted copy), split points, chunk rows and grid (scale,
        # offset: with x's values they fix the codes) give the same blocks: built once a sweep
        digest = hashlib.sha1(self.offsets.tobytes())
        if code is not None:
            digest.update(code[0].scale.tobytes() + code[0].offset.tobytes())
        name = f"blocks/{'float32' if code is None else f'coded/{code[1]}'}/{digest.hexdigest()}"
        return self.shared.derived(self.x, name, build)


_MIN_CONST_SHARE = 1 / 16  # fewer constant columns than this share: the dense pass is as fast


def client_block(x: Tensor, coded: tuple[np.ndarray, Coding, int] | None = None
                 ) -> ClientBlock | None:
    """The :class:`ClientBlock` of one client's rows ``x`` (``None`` when too few of its
    columns are constant for the split to pay); ``coded``: the rows' codes, their coding and
    the chunk size, for the mixed arithmetic (a block is then always made)."""
    if x.shape[0] == 0:
        return None
    varying = (x != x[:1]).any(dim=0)
    if coded is None and int((~varying).sum()) < _MIN_CONST_SHARE * x.shape[1]:
        return None
    cols, const = varying.nonzero().squeeze(1), (~varying).nonzero().squeeze(1)
    xv = x.index_select(1, cols).contiguous()
    return ClientBlock(x=xv, cols=cols, const_cols=const,
                       const_vals=x[0].index_select(0, const).contiguous(),
                       coded=None if coded is None else coded_block(
                           xv, coded[0], coded[1], cols, chunk_rows=coded[2]))


def client_layout(x: Tensor, y: Tensor, *, offsets: np.ndarray, num_classes: int,
                  norm: Norm, coding: Coding | None = None, chunk_rows: int = 2048,
                  caches: SparseCaches | None = None) -> ClientLayout:
    """:class:`ClientLayout` of client-sorted rows, with row norms and constant-column blocks;
    with ``coding`` (the rows' integer coding, on the CPU) every client's block also holds
    its codes for the mixed arithmetic and the norms are the coded rows'; with ``caches``, the
    rows' CSR copies are the ones ``caches`` holds for ``x`` (built once for many runs)."""
    groups = [(int(lo), int(hi)) for lo, hi in itertools.pairwise(offsets)]
    x_norm = row_norms(x, norm) if coding is None else torch.as_tensor(
        coding.norms(1 if norm is Norm.L1 else 2), device=x.device)
    return ClientLayout(x=x, y=y, x_norm=x_norm, offsets=offsets,
                        num_classes=num_classes, with_blocks=True,
                        coded=None if coding is None else (coding, chunk_rows), shared=caches,
                        sparse=(caches.of if caches is not None else SparseCache.of)(
                            x, groups, transpose=True))


@dataclass(frozen=True)
class GradSums:
    """Clipped gradient sums of the clients that computed one in a round.

    ``grad[r, j]`` is ``sum_{samples} s (p - y) x^T`` (flattened, ``k p``) of client ``sel[r, j]``
    in repeat r; ``rows`` is its batch size and ``clipped`` how many of those rows were clipped.
    """

    grad: Tensor  # (R, b, k p)
    rows: Tensor  # (R, b)
    clipped: Tensor  # (R, b)
    loss_sum: Tensor | None  # (R,) training cross-entropy summed over all rows, when evaluated
    client_loss: Tensor | None = None  # (R, b) loss summed over each selected client's rows


def full_batch_sums(
    layout: ClientLayout,
    theta: Tensor,
    sel: np.ndarray,
    *,
    clip: float,
    norm: Norm,
    chunk_rows: int,
    with_train_loss: bool,
) -> GradSums:
    """Each selected client's clipped gradient sum over all its rows (q = 1).

    Parameters
    ----------
    layout:
        Client-sorted training data.
    theta:
        Parameters of the R repeats, shape ``(R, k, p)``.
    sel:
        Selected clients per repeat, shape ``(R, b)`` (rows may differ for random selection;
        the pass visits the union once and masks clients a repeat did not select).
    with_train_loss:
        Also sweep the unselected clients forward-only, for the full training loss.
    """
    r, k, p = theta.shape
    theta_t = forward_weights(theta)
    union = np.unique(sel)
    chosen = torch.as_tensor(sel[:, :, None] == union[None, None, :])  # (R, b, |U|)
    member = chosen.any(dim=1).T.to(theta.dtype).contiguous()  # (|U|, R)
    all_selected = bool(member.all())
    grad = torch.zeros(len(union), r * k, p, dtype=theta.dtype, device=theta.device)
    clipped = torch.zeros(len(union), r, dtype=theta.dtype, device=theta.device)
    loss_sum = torch.zeros(r, dtype=theta.dtype, device=theta.device)
    slot_of = {int(c): s for s, c in enumerate(union)}
    visit = range(len(layout.offsets) - 1) if with_train_loss else union
    for client in visit:
        slot = slot_of.get(int(client))
        weight = None if slot is None else (None if all_selected else member[slot])
        g_x, res_sum, n_clipped = _client_pass(
            layout, int(client), theta_t, r=r, k=k, chunk_rows=chunk_rows, clip=clip,
            norm=norm, residual=slot is not None, weight=weight,
            loss_sum=loss_sum if with_train_loss else None)
        if slot is None:
            continue
        clipped[slot] += n_clipped
        block = layout.blocks[client] if layout.blocks is not None else None
        if block is None or g_x.shape[1] == p:  # every column (the sparse pass, or no block)
            grad[slot] = g_x
        else:  # the gradient of the constant columns is the rank-one (sum_j r_j) c^T
            grad[slot].index_copy_(1, block.cols, g_x)
            grad[slot].index_copy_(1, block.const_cols, torch.outer(res_sum, block.const_vals))
    slots = torch.as_tensor(np.searchsorted(union, sel), device=theta.device)  # (R, b)
    reps = torch.arange(r, device=theta.device)[:, None]
    g = grad.view(len(union), r, k * p)[slots, reps]  # (R, b, k p)
    sizes = torch.as_tensor(layout.sizes[sel], dtype=theta.dtype, device=theta.device)
    return GradSums(g, sizes, clipped[slots, reps] * member[slots, reps],
                    loss_sum if with_train_loss else None)


def _client_pass(layout: ClientLayout, client: int, theta_t: Tensor, *, r: int, k: int,
                 chunk_rows: int, clip: float, norm: Norm, residual: bool,
                 weight: Tensor | None, loss_sum: Tensor | None
                 ) -> tuple[Tensor, Tensor, Tensor]:
    """One client's rows in chunks: ``S^T X`` of its clipped residuals (each repeat's share
    scaled by ``weight``), their column sums and its clipped count per repeat; its losses
    are added to ``loss_sum`` per repeat where given."""
    pieces = layout.sparse.get(client, r * k) if layout.sparse is not None else None
    if pieces is not None:
        return _sparse_pass(layout, int(layout.offsets[client]), pieces, theta_t, r=r, k=k,
                            clip=clip, norm=norm, residual=residual, weight=weight,
                            loss_sum=loss_sum)
    dtype, device = theta_t.dtype, theta_t.device
    lo, hi = int(layout.offsets[client]), int(layout.offsets[client + 1])
    block = layout.blocks[client] if layout.blocks is not None else None
    if block is not None and block.coded is not None and loss_sum is None and residual:
        return coded_pass(block.coded, theta_t, cols=block.cols, const_cols=block.const_cols,
                          const_vals=block.const_vals, y=layout.y[lo:hi],
                          x_norm=layout.x_norm[lo:hi], r=r, k=k, clip=clip, norm=norm,
                          weight=weight)
    if block is None:
        x, w, bias = layout.x[lo:hi], theta_t, None
    else:  # logits = X_v theta_v^T + (theta_c c): the constant columns as one bias
        x, w = block.x, theta_t.index_select(1, block.cols)
        bias = theta_t.index_select(1, block.const_cols) @ block.const_vals
    g_x = torch.zeros(r * k, x.shape[1], dtype=dtype, device=device)
    res_sum = torch.zeros(r * k, dtype=dtype, device=device)
    n_clipped = torch.zeros(r, dtype=dtype, device=device)
    for start in range(0, hi - lo, chunk_rows):
        stop = min(start + chunk_rows, hi - lo)
        xc, c = x[start:stop], stop - start
        logits = xc @ w.T if bias is None else torch.addmm(bias, xc, w.T)
        out = clipped_residual(
            logits[:, : r * k].view(c, r, k), layout.y[lo + start:lo + stop, None].expand(c, r),
            x_norm=layout.x_norm[lo + start:lo + stop, None], clip=clip, norm=norm,
            residual=residual, metrics=loss_sum is not None)
        if out.loss is not None and loss_sum is not None:
            loss_sum += out.loss.sum(dim=0)
        if out.residual is None:
            continue
        res = out.residual if weight is None else out.residual * weight[None, :, None]
        res = res.view(c, r * k)
        g_x.addmm_(res.T, xc)  # S^T X: faster than X^T S here
        if block is not None:
            res_sum += res.sum(dim=0)
        if out.clipped is not None:
            n_clipped += out.clipped.sum(dim=0)
    return g_x, res_sum, n_clipped


def _sparse_pass(layout: ClientLayout, lo: int, pieces: tuple[tuple[int, SparseRows], ...],
                 theta_t: Tensor, *, r: int, k: int, clip: float, norm: Norm, residual: bool,
                 weight: Tensor | None, loss_sum: Tensor | None
                 ) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`_client_pass` on the client's CSR rows (first row ``lo``): the same clipped
    residuals, ``S^T X`` over every column (``res_sum`` is not needed and left zero)."""
    dtype, device = theta_t.dtype, theta_t.device
    w_t = theta_t[: r * k].T  # (p, R k)
    g_x = torch.zeros(r * k, theta_t.shape[1], dtype=dtype, device=device)
    n_clipped = torch.zeros(r, dtype=dtype, device=device)
    for start, rows in pieces:
        a, c = lo + start, rows.csr.shape[0]
        out = clipped_residual(
            rows.mm(w_t).view(c, r, k), layout.y[a:a + c, None].expand(c, r),
            x_norm=layout.x_norm[a:a + c, None], clip=clip, norm=norm, residual=residual,
            metrics=loss_sum is not None)
        if out.loss is not None and loss_sum is not None:
            loss_sum += out.loss.sum(dim=0)
        if out.residual is None:
            continue
        res = out.residual if weight is None else out.residual * weight[None, :, None]
        g_x += rows.tmm(res.reshape(c, r * k))
        if out.clipped is not None:
            n_clipped += out.clipped.sum(dim=0)
    return g_x, torch.zeros(r * k, dtype=dtype, device=device), n_clipped


def poisson_sums(
    layout: ClientLayout,
    theta: Tensor,
    sel: np.ndarray,
    *,
    sample_rate: float,
    clip: float,
    norm: Norm,
    generator: torch.Generator,
    positions: tuple[Tensor, Tensor] | None = None,
) -> GradSums:
    """Each selected client's clipped gradient sum over its Poisson-sampled batch (q < 1).

    The batches of all (repeat, client) pairs are gathered into one padded tensor
    ``(R, b, m, p)``, so forward and backward are two batched matrix products. ``positions``
    (``(positions, valid)`` as :func:`poisson_positions` returns, shape ``(R, b, m)``) gives
    batches drawn elsewhere; by default they are drawn here from ``generator``.
    """
    r, k, p = theta.shape
    dev = theta.device
    sel_t = torch.as_tensor(np.ascontiguousarray(sel), device=dev)
    sizes = torch.as_tensor(layout.sizes, device=dev)[sel_t]
    if positions is None:
        pos, valid = poisson_positions(sizes, sample_rate=sample_rate, generator=generator)
    else:
        pos, valid = positions
    b, m = sel.shape[1], pos.shape[-1]
    rows = (torch.as_tensor(layout.offsets[:-1], device=dev)[sel_t].unsqueeze(-1) + pos).reshape(-1)
    xg = layout.x.index_select(0, rows).view(r, b * m, p)
    # the plain product (not column_logits): a reply alone (Flower) and in a batch of replies
    # (simulation) then agree bit for bit at many widths and to float32 rounding at all (BLAS
    # may order a sum by the batch's shape: tests/flower/test_flower_data.py)
    logits = torch.bmm(xg, theta.transpose(1, 2))  # (R, b m, k)
    out = clipped_residual(
        logits,
        layout.y.index_select(0, rows).view(r, b * m),
        x_norm=layout.x_norm.index_select(0, rows).view(r, b * m),
        clip=clip,
        norm=norm,
        metrics=False,
    )
    assert out.residual is not None
    mask = valid.reshape(r, b * m).to(theta.dtype)
    res = (out.residual * mask.unsqueeze(-1)).view(r * b, m, k)
    grad = torch.bmm(res.transpose(1, 2), xg.view(r * b, m, p)).view(r, b, k * p)
    clipped = (out.clipped.view(r, b * m).to(theta.dtype) * mask if out.clipped is not None
               else torch.zeros_like(mask)).view(r, b, m).sum(dim=-1)
    return GradSums(grad, valid.sum(dim=-1).to(theta.dtype), clipped, None)
