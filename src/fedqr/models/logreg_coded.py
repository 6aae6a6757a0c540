"""The mixed arithmetic of the full-batch logistic pass: exact integer gradient sums.

Many data sets are *integer-coded*: every column takes values ``offset_j + scale_j c`` with
integer codes ``c`` (MNIST's pixels are ``(k / 255 - mean) / std``, a one-hot column
standardised per column takes two values). Softmax regression's clipped gradient sum over a
client's rows is ``S^T X`` with ``S`` the clipped residuals (every entry in [-1, 1]). With
:attr:`fedqr._precision.Arithmetic.MIXED`:

* the logits ``X W^T`` are one bfloat16 product (the residuals may depend on the rows in any
  way: clipping bounds whatever they are);
* each residual is truncated toward zero to a multiple of ``1 / QUANT`` (an integer ``t``
  with ``|t| <= QUANT < 2^23``), so ``|r~| <= |r| (1 + 2^-24)`` entry by entry (the float32
  product ``r QUANT`` rounds before the truncation, and the norms' margin below covers that
  factor): a clipped per-sample gradient stays within the clip bound in every norm;
* ``t`` is stored as one int32, ``(t + 3 * 2^23) XOR 0x808080``, whose four bytes read as
  int8 in place are three base-256 digits ``v_i`` in [-128, 127], with
  ``t = v_0 + 256 v_1 + 65536 v_2 + 32896``, and a byte that is always 1. One int8 product
  per client, ``[codes; 1]^T [bytes]`` with int32 sums, gives each digit's sums, the residual
  sums (the row of ones) and each column's code sum (the byte 1, which carries the 32896);
  combined in int64, ``S~^T C`` is **exact**, with no float rounding at all (float32 sums
  round; these do not), and the gradient ``(S~^T C) diag(scale) + (S~^T 1) offset^T`` is
  formed from the exact integers in float64;
* the clipping norms are those of the coded rows (float32, raised by twice their rounding
  bound, and never below the float32 rows' norms), so the bound holds for the rows the sum
  uses.

A pass that also records the training loss runs in float32 (the block's float32 rows, the
same norms), so the loss the figures plot is float32's.

On the 2-vCPU Xeon the integer part of one MNIST client with 10 repeats takes 1.7 ms against
3.1 to 3.3 ms with three limbs of base 128 written by shifts and masks, one product per
2,048-row chunk (the same integers), and a pass of 10 clients x 10 repeats 51 to 55 ms against
61 to 68 ms in chunks of 2,048 rows (``python bench/coded_pass.py``). Training moves by
the truncation (at most ``1 / QUANT`` = 4.8e-7 per residual entry) and the bfloat16 logits:
``tests/sim/test_arithmetic.py`` bounds the move of the final loss against the noise's.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from fedqr.models.logreg import Norm, clipped_residual

__all__ = ["BYTE_WEIGHTS", "CHUNK_LOGITS", "NORM_MARGIN", "QUANT", "CodedBlock", "CodedSum",
           "Coding", "code_rows", "coded_block", "coded_pass"]

QUANT = 127 * 128 ** 2
"""Residual grid: ``trunc(r * QUANT)`` of ``r`` in [-1, 1] is an integer of at most 2,080,768
in size (below ``2^23``: three signed base-256 digits). The grid step, 4.8e-7, is what
truncation can take off an entry; with a step of 6.2e-5 the shrinkage moved a digits run's
final loss by a sixth of its repeat-to-repeat spread, with this one by less than a hundredth
(measured once with the runs of ``tests/sim/test_arithmetic.py``, which fails beyond a
twentieth)."""

_LIFT = 3 << 23
"""Added to ``t``: ``t + 3 * 2^23`` lies in ``[2^24, 2^25)``, so its top byte is 1 and its low
three bytes are the base-256 digits of ``t + 2^23`` (in [0, 255])."""
_FLIP = 0x808080
"""XOR of the low three bytes' top bits: byte ``u`` becomes the int8 ``u - 128``."""
_RECENTRE = 128 * (1 + 256)  # t = v0 + 256 v1 + 65536 v2 + 128 (1 + 256 + 65536) - 2^23
_DIGITS = (1, 256, 65536, _RECENTRE)  # weights of the four bytes of one lifted int32
BYTE_WEIGHTS = _DIGITS if sys.byteorder == "little" else _DIGITS[::-1]
"""The weight of each byte of a lifted int32 in memory order: ``t = sum_i w_i b_i`` with
``b_i`` the bytes read as int8 (the fourth, always 1, carries the recentring constant)."""

CODE_TOL = 1e-3
"""A column is coded when every value is within this share of a code step of its code."""

NORM_MARGIN = 1e-6
"""Least relative margin on the coded rows' norms (computed in float32 and raised by twice
their rounding bound, at least this)."""

_SAMPLE_ROWS = 2048
_SCAN_ROWS = 8192
CHUNK_LOGITS = 1 << 20
"""The mixed pass's float work (logits, residuals) takes chunks of at least this many logits
(4 MB in float32), more than ``chunk_rows`` where few columns share a row: its results do not
depend on the chunks (each row's logits and residual are its own, and the integer sums are
exact), and larger chunks cost less per logit: ``bench/coded_pass.py``."""
_GROUP_ROWS = 65536  # int32 sums of 128 * 128 products stay exact up to 131,071 rows


@dataclass(frozen=True)
class Coding:
    """Rows ``x[i, j] = offset[j] + scale[j] * codes[i, j]`` (codes int8 in [-128, 127]), and
    each row's l1 and l2 norm for clipping: the coded row's and the float row's, the larger,
    computed in float32 and raised by twice the rounding bound (at least
    :data:`NORM_MARGIN`), rounded up."""

    codes: NDArray[np.int8]  # (n, p)
    scale: NDArray[np.float64]  # (p,)
    offset: NDArray[np.float64]  # (p,)
    norm_l1: NDArray[np.float32]  # (n,)
    norm_l2: NDArray[np.float32]  # (n,)

    def rows(self, index: NDArray[np.int64]) -> Coding:
        """The coding of ``x[index]``."""
        return Coding(self.codes[index], self.scale, self.offset, self.norm_l1[index],
                      self.norm_l2[index])

    def norms(self, ord: int) -> NDArray[np.float32]:
        """The rows' clipping norms, ``ord`` 1 or 2."""
        return self.norm_l1 if ord == 1 else self.norm_l2


_CODINGS: dict[int, tuple[weakref.ref[np.ndarray], Coding | None]] = {}


def code_rows(x: NDArray[np.floating]) -> Coding | None:
    """The integer coding of ``x`` ``(n, p)``, or ``None`` where some column is not coded
    (more than 256 levels, or levels off one grid). Each column's step is the smallest gap
    between the levels over the whole array, else the column's own smallest gap (both read on
    the first rows, checked on all). Kept for the array's lifetime (a sweep codes once)."""
    hit = _CODINGS.get(id(x))
    if hit is not None and hit[0]() is x:
        return hit[1]
    coding = _code(np.asarray(x))
    try:
        _CODINGS[id(x)] = (weakref.ref(x), coding)
        weakref.finalize(x, _CODINGS.pop, id(x), None)  # forgotten with the array
    except TypeError:  # not weakly referable: not kept
        pass
    return coding


def _code(x: NDArray[np.floating]) -> Coding | None:
    if x.ndim != 2 or not x.size or not np.issubdtype(x.dtype, np.floating):
        return None
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))  # torch's threads
    lo, hi = t.amin(dim=0).double().numpy(), t.amax(dim=0).double().numpy()
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):  # NaN or inf anywhere
        return None
    span = hi - lo
    sample = np.sort(x[:_SAMPLE_ROWS].astype(np.float64), axis=0)
    gaps = np.diff(sample, axis=0)
    own = np.where(gaps > 0, gaps, np.inf).min(axis=0, initial=np.inf)
    levels = np.unique(sample)
    shared = _refined(float(np.diff(levels).min()), float(levels[-1] - levels[0])) \
        if len(levels) > 1 else np.inf
    with np.errstate(invalid="ignore", divide="ignore"):  # inf and 0 steps: not candidates
        own = np.where(np.isfinite(own), span / np.maximum(np.rint(span / own), 1), np.inf)
    scale = np.where(span == 0, 1.0, np.nan)
    sample_levels = 1 + (gaps > 0).sum(axis=0)
    for step in (np.full_like(span, shared), own, None):
        if step is None:  # the first rows missed a column's neighbouring levels (a rare
            left = np.isnan(scale)  # value): read all its rows, unless one has too many
            if (sample_levels[left] > 256).any():
                break
            step = _whole_column_steps(x, left, span)
        todo = np.isnan(scale) & np.isfinite(step) & (step > 0) & (span <= 255.5 * step)
        if todo.any():
            cols = np.flatnonzero(todo)
            ok = _on_grid(t, cols, lo[cols], step[cols])
            scale[cols[ok]] = step[cols[ok]]
    if np.isnan(scale).any():
        return None
    offset = lo + 128 * scale
    codes = torch.empty(t.shape, dtype=torch.int8)
    norms = torch.empty(2, t.shape[0])
    lo32, scale32, offset32 = (torch.from_numpy(v.astype(np.float32)) for v in (lo, scale, offset))
    for start in range(0, t.shape[0], _SCAN_ROWS):
        part = slice(start, start + _SCAN_ROWS)
        codes[part] = ((t[part] - lo32) / scale32).round_().sub_(128)
        coded = codes[part].float().mul_(scale32).add_(offset32)
        for i, ord_ in enumerate((1, 2)):
            norms[i, part] = torch.maximum(torch.linalg.vector_norm(coded, ord=ord_, dim=1),
                                           torch.linalg.vector_norm(t[part], ord=ord_, dim=1))
    # float32 norms of p terms are within (p + 4) units of 2^-24 of the float64 rows' (the
    # rounding of scale, offset, each product and each partial sum): raised by twice that
    margin = 1 + max(NORM_MARGIN, 2 * (t.shape[1] + 4) * 2.0**-24)
    up = np.nextafter(norms.numpy() * np.float32(margin), np.float32(np.inf))
    return Coding(codes=codes.numpy(), scale=scale, offset=offset, norm_l1=up[0],
                  norm_l2=up[1])


def _whole_column_steps(x: NDArray[np.floating], cols: NDArray[np.bool_],
                        span: NDArray[np.float64]) -> NDArray[np.float64]:
    """The coarsest grid ``span / n`` (``n`` <= 255) that holds every level of each of ``cols``
    over all rows (``inf`` for the other columns and where none does): a column standardised
    on its own has a grid of its own, whose neighbouring levels its first rows, or all of
    them, may not show (levels 0, 2 and 5 steps up: the smallest gap is not the step)."""
    step = np.full(len(span), np.inf)
    for j in np.flatnonzero(cols):
        levels = np.unique(x[:, j].astype(np.float64))
        if not 1 < len(levels) <= 256:
            continue
        ns = np.arange(max(int(np.rint(span[j] / np.diff(levels).min())), 1), 256)
        k = np.outer((levels - levels[0]) / span[j], ns)  # each level in steps of span / n
        fits = np.abs(k - np.rint(k)).max(axis=0) <= CODE_TOL
        if fits.any():
            step[j] = span[j] / ns[fits.argmax()]  # the smallest n: the coarsest grid
    return step


def _refined(step: float, span: float) -> float:
    """``step`` read more precisely off ``span``, a whole number of steps (float32 levels
    differ by their step only to about 1e-5 of it)."""
    return span / max(round(span / step), 1)


def _on_grid(x: Tensor, cols: NDArray[np.int64], lo: NDArray[np.float64],
             step: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Which of ``cols`` have every value within :data:`CODE_TOL` steps of ``lo + k step``
    (float32: 256 steps are read to about 2e-5 of a step)."""
    every = len(cols) == x.shape[1]
    idx = torch.from_numpy(cols)
    lo_t, step_t = (torch.from_numpy(v.astype(np.float32)) for v in (lo, step))
    worst = torch.zeros(len(cols))
    for start in range(0, x.shape[0], _SCAN_ROWS):
        part = x[start:start + _SCAN_ROWS]
        k = ((part if every else part.index_select(1, idx)) - lo_t).div_(step_t)
        torch.maximum(worst, (k - k.round()).abs_().amax(dim=0), out=worst)
    return (worst <= CODE_TOL).numpy()


@dataclass(frozen=True)
class CodedBlock:
    """One client's varying columns for the mixed pass: bfloat16 rows for the logits, the
    codes transposed with a row of ones appended, in groups of at most 65,536 rows (one
    integer product each: int32 sums stay exact), and the columns' scale and offset."""

    x16: Tensor  # (d_i, v) bfloat16
    codes_t: tuple[Tensor, ...]  # each (v + 1, rows of the group) int8, the last row ones
    chunk_rows: int  # rows per chunk of the float work (logits and residuals)
    scale: Tensor  # (v,) float64
    offset: Tensor  # (v,) float64


def coded_block(x: Tensor, codes: NDArray[np.int8], coding: Coding, cols: Tensor, *,
                chunk_rows: int) -> CodedBlock:
    """The :class:`CodedBlock` of a client's rows ``x`` (varying columns ``cols``) and codes."""
    idx = cols.cpu().numpy()
    c = np.concatenate([codes[:, idx].T, np.ones((1, len(codes)), dtype=np.int8)])
    return CodedBlock(
        x16=x.to(torch.bfloat16), chunk_rows=chunk_rows,
        codes_t=tuple(torch.from_numpy(np.ascontiguousarray(c[:, s:s + _GROUP_ROWS]))
                      for s in range(0, c.shape[1], _GROUP_ROWS)),
        scale=torch.as_tensor(coding.scale[idx]), offset=torch.as_tensor(coding.offset[idx]))


class CodedSum:
    """``S~^T X~`` of one client's clipped residuals ``(rows, cols)`` (entries in [-1, 1]),
    exactly in integers. Every row is added once, in chunks of any size and order, before
    :meth:`result`."""

    def __init__(self, block: CodedBlock, cols: int) -> None:
        self.block, self.cols = block, cols
        self._t = torch.empty(block.x16.shape[0], cols, dtype=torch.int32)
        self._added = 0

    def add(self, start: int, res: Tensor) -> None:
        """Add the residuals of rows ``start, ..., start + len(res) - 1`` (truncated toward
        zero to the ``1 / QUANT`` grid); ``res`` is overwritten."""
        dst = self._t[start:start + res.shape[0]]
        dst.copy_(res.mul_(float(QUANT)))  # the cast truncates toward zero
        dst.add_(_LIFT).bitwise_xor_(_FLIP)  # the bytes: three int8 digits and a 1
        self._added += res.shape[0]

    def integers(self) -> tuple[Tensor, Tensor]:
        """The exact sums ``sum_j t_j c_j`` ``(v, cols)`` and ``sum_j t_j`` ``(cols,)``, int64
        (``t_j = trunc(r_j QUANT)``, ``c_j`` the codes)."""
        if self._added != self._t.shape[0]:
            raise RuntimeError(f"CodedSum: {self._added} rows added, the block has "
                               f"{self._t.shape[0]}")
        digits = self._t.view(torch.int8)  # (rows, 4 cols): each int32's bytes, in place
        acc: Tensor | None = None
        for g, codes in enumerate(self.block.codes_t):
            part = torch._int_mm(codes, digits[g * _GROUP_ROWS:g * _GROUP_ROWS + codes.shape[1]])
            acc = part.long() if acc is None else acc.add_(part)
        assert acc is not None  # a block has at least one row
        weights = torch.tensor(BYTE_WEIGHTS, dtype=torch.int64)
        whole = (acc.view(acc.shape[0], self.cols, 4) * weights).sum(dim=-1)  # exact in int64
        return whole[:-1], whole[-1]

    def result(self) -> tuple[Tensor, Tensor]:
        """The gradient sums ``(cols, v)`` and the residual sums ``(cols,)``, float32."""
        whole, total64 = self.integers()
        total = total64.double()
        grad = whole.double().mul_(self.block.scale[:, None]).add_(
            self.block.offset[:, None] * total[None, :]).div_(QUANT)
        return grad.T.float().contiguous(), (total / QUANT).float()


def coded_pass(coded: CodedBlock, theta_t: Tensor, *, cols: Tensor, const_cols: Tensor,
               const_vals: Tensor, y: Tensor, x_norm: Tensor, r: int, k: int, clip: float,
               norm: Norm, weight: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """One client's clipped gradient sums in the mixed arithmetic, as the float32 pass of
    :mod:`fedqr.models.logreg_pass` returns them: ``S~^T X~`` over the varying columns
    ``cols`` ``(R k, v)``, the residual sums (for the constant columns' rank-one gradient)
    and the clipped count per repeat. ``y`` and ``x_norm`` (the coded rows' norms) are the
    client's; ``weight`` (in [-1, 1]: the limbs hold residuals of at most 1) scales each
    repeat's residuals."""
    if weight is not None and bool(weight.abs().max() > 1):
        raise ValueError(f"weight must be within [-1, 1], got at most "
                         f"{float(weight.abs().max())}")
    w16 = theta_t.index_select(1, cols).to(torch.bfloat16)
    bias = theta_t.index_select(1, const_cols) @ const_vals  # the constant columns' logits
    sums = CodedSum(coded, r * k)
    n_clipped = torch.zeros(r, dtype=theta_t.dtype, device=theta_t.device)
    step = max(coded.chunk_rows, CHUNK_LOGITS // (r * k))
    for start in range(0, coded.x16.shape[0], step):
        stop = min(start + step, coded.x16.shape[0])
        c = stop - start
        logits = (coded.x16[start:stop] @ w16.T).float().add_(bias)
        out = clipped_residual(logits[:, : r * k].view(c, r, k),
                               y[start:stop, None].expand(c, r), x_norm=x_norm[start:stop, None],
                               clip=clip, norm=norm, metrics=False)
        assert out.residual is not None  # residual=True
        res = out.residual if weight is None else out.residual * weight[None, :, None]
        sums.add(start, res.view(c, r * k))
        if out.clipped is not None:
            n_clipped += out.clipped.sum(dim=0)
    g_x, res_sum = sums.result()
    return g_x, res_sum, n_clipped
