"""Sums of per-sample-clipped gradients of a torch model, in chunks of bounded memory.

For rows ``j`` with cross-entropy gradients ``g_j`` (flattened over the model's trainable
parameters, :func:`trainable_parameters`: those with ``requires_grad``, in
``model.parameters()`` order; a frozen parameter takes no gradient, no clipping share and no
noise) the functions here return, for every segment ``k`` of consecutive rows (one per client),

    ``sum_{j in k} s_j g_j``  with  ``s_j = min(1, clip / ||g_j||)``,

the norm being l1 (Laplace mechanism) or l2 (Gaussian mechanism), together with the number of
clipped rows and the summed loss. Two methods give the same result:

``ghost`` (default)
    One forward and one backward to the outputs of the parameterised layers (no parameter
    gradients are formed), then per layer: a ``Linear`` layer's per-sample gradient is the
    rank-one ``g a^T`` (output gradient times input), whose l1 and l2 norms factorise as
    ``||g|| ||a||``, so it is never materialised and its clipped sum is one GEMM
    ``(s g)^T A``; a ``Conv2d`` layer's per-sample gradient is ``G U^T`` with ``U`` the
    unfolded input (``torch.nn.functional.unfold``), one batched matmul, whose rows are
    weighted by ``s`` and summed (a ``Conv1d`` as a Conv2d of height 1, a grouped or
    depthwise convolution with each channel block as a row of its own); a ``GroupNorm``,
    ``LayerNorm`` or ``RMSNorm`` layer's affine gradients are ``sum g * x_hat`` and
    ``sum g`` per row (``x_hat``: its input normalised by the row's own statistics).
    Per-sample gradients of sample j depend only on sample j (no batch normalisation), so
    the weighted sums need no second backward pass. Models may hold trainable parameters
    only in ``Linear``, ``Conv1d``, ``Conv2d`` (numeric zero padding) and those
    normalisation layers, each called once per forward (frozen parameters may sit
    anywhere).
``vmap``
    ``torch.func.vmap`` over ``torch.func.grad_and_value``: every per-sample gradient is
    materialised (``chunk_rows x P`` floats), for any model without batch-coupled layers.

Peak extra memory of one chunk, float32, for the paper's FEMNIST CNN (P = 110,526),
measured as the growth of resident memory (``bench/per_sample.py --memory``) at the default
``chunk_rows = 256``: ``ghost`` 117 MB (about 0.46 MB, 115,000 floats, per row: activations
and output gradients, the im2col of conv1 and the width expansion of conv2's input); ``vmap``
313 MB (the per-sample gradients alone are P floats per row, 113 MB); Opacus's
``GradSampleModule`` 256 MB; an ordinary forward and backward 81 MB. Memory grows linearly
with ``chunk_rows``, not with the number of rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

from fedqr.data._validate import parse_enum
from fedqr.models._ghost import ghost_chunk, ghost_layers
from fedqr.models.logreg import Norm
from fedqr.models.losses import LossFn, per_sample_cross_entropy

#: Rows per chunk: bounds memory (see the module docstring) and keeps the GEMMs efficient.
DEFAULT_CHUNK_ROWS = 256

VMAP_CHUNK_BYTES = 1 << 30
"""Memory the ``vmap`` method's chunk may take: its rows are capped at this over
:data:`VMAP_ROW_COPIES` copies of the trainable parameters per row (a LayerNorm MLP of 12M
parameters took 190 MB a row; at 256 rows it stopped with the allocator's "can't allocate
memory"). The paper's CNN (110,526 parameters) keeps its 256 rows."""

VMAP_ROW_COPIES = 4


class Method(StrEnum):
    """How per-sample gradient norms are computed."""

    GHOST = "ghost"  # norms from layer inputs and output gradients, no per-sample linear grads
    VMAP = "vmap"  # torch.func vmap(grad): per-sample gradients materialised


@dataclass(frozen=True)
class ClippedSums:
    """Per-segment results of :func:`clipped_grad_sums`.

    Attributes
    ----------
    grad : Tensor
        ``[S, P]``: sum of clipped per-sample gradients of each segment, flattened over the
        trainable parameters (:func:`trainable_parameters`).
    rows : Tensor
        ``int64 [S]``: rows in each segment.
    clipped : Tensor
        ``int64 [S]``: rows whose gradient was scaled down (``s_j < 1``).
    loss_sum : Tensor
        ``[S]``: summed cross-entropy of each segment's rows.
    """

    grad: Tensor
    rows: Tensor
    clipped: Tensor
    loss_sum: Tensor


def _check_clip(clip: object) -> float:
    if isinstance(clip, bool) or not isinstance(clip, int | float):
        raise TypeError(f"clip must be a real number, got clip={clip!r}")
    value = float(clip)
    if not value > 0:  # also rejects nan
        raise ValueError(f"clip must be > 0 (inf disables clipping), got clip={value}")
    return value


def _check_offsets(offsets: Sequence[int] | np.ndarray | None, n: int) -> np.ndarray:
    if offsets is None:
        return np.array([0, n], dtype=np.int64)
    off = np.asarray(offsets, dtype=np.int64)
    if off.ndim != 1 or off.size < 2 or off[0] != 0 or off[-1] != n or np.any(np.diff(off) < 0):
        raise ValueError(
            f"offsets must be non-decreasing, start at 0 and end at the number of rows {n}, "
            f"got offsets={off.tolist() if off.size <= 12 else off}"
        )
    return off


def _pieces(off: np.ndarray, start: int, stop: int) -> list[tuple[int, int, int]]:
    """(segment, lo, hi) with chunk-local row ranges of the segments meeting ``[start, stop)``."""
    first = int(np.searchsorted(off, start, side="right")) - 1
    out = []
    for k in range(first, off.size - 1):
        lo, hi = max(int(off[k]), start), min(int(off[k + 1]), stop)
        if lo >= stop:
            break
        if lo < hi:
            out.append((k, lo - start, hi - start))
    return out


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters of ``model`` that are trained: ``requires_grad``, in ``parameters()``
    order (a frozen one, ``requires_grad=False``, keeps its value).

    Parameters
    ----------
    model : torch.nn.Module
        Any module.

    Returns
    -------
    list of torch.nn.Parameter
        The trainable parameters; their flattened concatenation is ``theta``.
    """
    return [p for p in model.parameters() if p.requires_grad]


def _param_slices(model: nn.Module) -> dict[int, slice]:
    """Each trainable parameter's slice of the flat gradient, by ``id``."""
    slices, pos = {}, 0
    for p in trainable_parameters(model):
        slices[id(p)] = slice(pos, pos + p.numel())
        pos += p.numel()
    return slices


def _vmap_chunk(
    model: nn.Module, xc: Tensor, yc: Tensor, *, clip: float, norm: Norm, out: Tensor,
    pieces: list[tuple[int, int, int]], loss_fn: LossFn = per_sample_cross_entropy,
) -> tuple[Tensor, Tensor]:
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    names = list(params)  # the frozen parameters: the module's own, held fixed

    def sample_loss(ps: dict[str, Tensor], xi: Tensor, yi: Tensor) -> Tensor:
        logits = functional_call(model, ps, (xi.unsqueeze(0),))
        return loss_fn(logits, yi.unsqueeze(0)).sum()

    grads, loss = vmap(grad_and_value(sample_loss), in_dims=(None, 0, 0))(params, xc, yc)
    flat = torch.cat([grads[n].reshape(xc.shape[0], -1) for n in names], dim=1)
    norms = flat.abs().sum(1) if norm is Norm.L1 else flat.norm(dim=1)
    scale = (clip / norms).clamp(max=1.0)
    for k, lo, hi in pieces:
        out[k].addmv_(flat[lo:hi].T, scale[lo:hi])
    return loss.detach(), scale


def clipped_grad_sums(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    clip: float,
    norm: Norm | str,
    offsets: Sequence[int] | np.ndarray | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    method: Method | str = Method.GHOST,
    loss_fn: LossFn = per_sample_cross_entropy,
) -> ClippedSums:
    """Sum per-sample-clipped cross-entropy gradients of ``model`` over each segment of rows.

    Parameters
    ----------
    model : torch.nn.Module
        Maps ``x`` to logits; no batch-coupled layers (batch norm). Its parameters'
        ``.grad`` fields are not touched; gradients are taken with respect to its trainable
        parameters only (:func:`trainable_parameters`).
    x : Tensor
        Inputs ``[n, ...]`` in the shape ``model`` expects, on the model's device.
    y : Tensor
        ``int64 [n]`` class labels.
    clip : float
        Per-sample norm bound xi, ``> 0``; ``inf`` disables clipping.
    norm : Norm or str
        ``"l1"`` (Laplace) or ``"l2"`` (Gaussian).
    offsets : sequence of int or None, optional
        Segment ``k`` is rows ``offsets[k]:offsets[k+1]`` (non-decreasing, from 0 to n;
        empty segments allowed); ``None``: one segment of all rows.
    chunk_rows : int, optional
        Rows processed together, ``>= 1``: bounds memory (module docstring).
    method : Method or str, optional
        ``"ghost"`` (fast; Linear, Conv2d and GroupNorm/LayerNorm/RMSNorm layers) or
        ``"vmap"`` (any per-sample model).
    loss_fn : LossFn, optional
        Per-sample loss ``(logits, y) -> [n]`` (default: cross-entropy).

    Returns
    -------
    ClippedSums
        Gradients ``[S, P]`` (P: the trainable parameters' size) in ``x``'s dtype, row and
        clipped counts, loss sums.
    """
    clip_v = _check_clip(clip)
    nrm = parse_enum(Norm, "norm", norm)
    how = parse_enum(Method, "method", method)
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise ValueError(f"chunk_rows must be an integer >= 1, got chunk_rows={chunk_rows!r}")
    n = int(x.shape[0])
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},) like x's rows, got y.shape={tuple(y.shape)}")
    off = _check_offsets(offsets, n)
    segments = off.size - 1
    num_p = sum(p.numel() for p in trainable_parameters(model))
    dev, dt = x.device, x.dtype
    out = torch.zeros(segments, num_p, dtype=dt, device=dev)
    loss_sum = torch.zeros(segments, dtype=dt, device=dev)
    clipped = torch.zeros(segments, dtype=torch.int64, device=dev)
    if how is Method.VMAP:  # every row's gradient is materialised: bound the chunk's memory
        per_row = VMAP_ROW_COPIES * max(num_p, 1) * x.element_size()
        chunk_rows = min(chunk_rows, max(1, VMAP_CHUNK_BYTES // per_row))
    layers = ghost_layers(model) if how is Method.GHOST else []
    slices = _param_slices(model)
    for start in range(0, n, chunk_rows):
        stop = min(start + chunk_rows, n)
        pieces = _pieces(off, start, stop)
        xc, yc = x[start:stop], y[start:stop]
        if how is Method.GHOST:
            loss, scale = ghost_chunk(model, layers, slices, xc, yc, clip=clip_v, norm=nrm,
                                       out=out, pieces=pieces, loss_fn=loss_fn)
        else:
            loss, scale = _vmap_chunk(model, xc, yc, clip=clip_v, norm=nrm, out=out,
                                      pieces=pieces, loss_fn=loss_fn)
        for k, lo, hi in pieces:
            loss_sum[k] += loss[lo:hi].sum()
            clipped[k] += (scale[lo:hi] < 1.0).sum()
    rows = torch.as_tensor(np.diff(off), dtype=torch.int64, device=dev)
    return ClippedSums(grad=out, rows=rows, clipped=clipped, loss_sum=loss_sum)
