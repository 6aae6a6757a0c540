"""Sparse storage of data rows for the logistic passes: products that cost what is non-zero.

Images and one-hot tables are mostly zeros (MNIST: 19% of the pixels are non-zero). Softmax
regression's two products per pass, the logits ``X W^T`` and the gradient ``S^T X``, have only
``R k`` columns (10 for one repeat of MNIST), a shape at which a dense GEMM runs far below the
machine's peak while a CSR product reads only the non-zeros. Measured on the 2-core
development machine (MNIST, one client of 6,000 rows, one thread): with 10 columns the dense
forward and backward take 3.4 + 2.3 ms, CSR 1.0 + 1.1 ms; with 50 columns they are even and
with 100 dense wins (``python bench/sparse_rows.py``). :func:`pays` encodes that crossing.

Standardised data is not sparse but *sparse plus a background*: MNIST standardised by one
scalar maps every blank pixel to -0.424, a one-hot column standardised per column to its own
value. Rows are therefore stored as ``X = S + 1 m^T``, ``m`` each column's most frequent value
(over the group's first :data:`MODE_ROWS` rows) and ``S`` sparse, and the products are
``X W^T = S W^T + 1 (W m)^T`` and ``S_res^T X = S_res^T S + (S_res^T 1) m^T``.

The products are exact in float32 (the same terms summed in another order: the results agree
to float32 rounding, tested in ``tests/models/test_models_sparse_rows.py``). CSR copies are
built on first use and kept (:class:`SparseCache`), so data that never pays costs nothing.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar, cast

import torch
from torch import Tensor

__all__ = ["MAX_DENSITY", "MAX_DENSITY_COLUMNS", "MODE_ROWS", "PAD_COLUMNS_BELOW",
           "SPARSE_CHUNK_ROWS", "SparseCache", "SparseCaches", "SparseRows", "background",
           "density", "padded_columns", "pays", "to_csr"]

_T = TypeVar("_T")

MAX_DENSITY = 0.25
"""Rows denser than this are never multiplied sparse: a CSR copy of the rows and one of their
transpose take 2 x 8 bytes per non-zero (float32 value, int32 index) against 4 bytes per entry
dense, so at this density they take at most as much memory as the dense rows (MNIST, 0.19:
0.76x), and denser rows gain less from them."""

MAX_DENSITY_COLUMNS = 8.0
"""A product with ``cols`` dense columns runs sparse when ``density * cols`` is at most this
(MNIST's density 0.19: up to 42 columns, about where the measured times cross)."""


def pays(density: float, cols: int) -> bool:
    """Whether a CSR product of rows of this ``density`` with ``cols`` columns beats dense."""
    return density <= MAX_DENSITY and density * cols <= MAX_DENSITY_COLUMNS


def density(x: Tensor, background: Tensor | None = None) -> float:
    """Share of the entries of ``x`` that differ from their column's ``background`` (default
    0); 1 for an empty tensor (never sparse)."""
    if not x.numel():
        return 1.0
    return float((x != (0 if background is None else background)).sum()) / x.numel()


def background(x: Tensor) -> Tensor | None:
    """Each column's most frequent value over the first :data:`MODE_ROWS` rows of ``x``
    (``None`` when every one is 0)."""
    if not x.numel():
        return None
    m = torch.mode(x[:MODE_ROWS], dim=0).values
    return None if not bool(m.any()) else m.contiguous()


def to_csr(x: Tensor) -> Tensor:
    """Dense 2-D ``x`` as a CSR tensor with int32 indices where they fit (faster products)."""
    with warnings.catch_warnings():  # torch calls its CSR support "beta": not the user's news
        warnings.simplefilter("ignore", UserWarning)
        csr = x.contiguous().to_sparse_csr()
        if csr.values().numel() < 2**31 - 1:
            csr = torch.sparse_csr_tensor(csr.crow_indices().to(torch.int32),
                                          csr.col_indices().to(torch.int32), csr.values(),
                                          csr.shape)
    return csr


@dataclass(frozen=True)
class SparseRows:
    """Rows ``X = S + 1 m^T`` ``(n, p)``: ``S`` as CSR (and ``S^T`` as CSR when gradients are
    formed), ``m`` the background (``None``: 0)."""

    csr: Tensor
    csr_t: Tensor | None
    offset: Tensor | None

    @classmethod
    def of(cls, x: Tensor, *, offset: Tensor | None, transpose: bool) -> SparseRows:
        """CSR copies of dense ``x`` less its background ``offset`` (and of the transpose)."""
        s = x if offset is None else x - offset
        return cls(csr=to_csr(s), csr_t=to_csr(s.T) if transpose else None, offset=offset)

    def mm(self, w_t: Tensor) -> Tensor:
        """``X w_t`` for dense ``w_t`` ``(p, c)``: dense ``(n, c)`` (a view of a wider product
        where :func:`padded_columns` pads ``c``)."""
        c = w_t.shape[1]
        w_t = _pad_columns(w_t)
        if self.offset is None:
            return (self.csr @ w_t)[:, :c]
        # the background's logits 1 (m^T w_t) added inside the product (one pass less over the
        # logits; the same bits as adding them after at 1 to 12 and 16 columns, float32
        # rounding apart at 13 to 15: bench/sparse_rows.py)
        bias = (self.offset @ w_t).expand(self.csr.shape[0], w_t.shape[1])
        return torch.addmm(bias, self.csr, w_t)[:, :c]

    def tmm(self, s: Tensor) -> Tensor:
        """``S^T X`` for dense ``s`` ``(n, c)``: dense ``(c, p)``."""
        if self.csr_t is None:
            raise ValueError("these rows were stored without their transpose")
        c = s.shape[1]
        out = (self.csr_t @ _pad_columns(s))[:, :c].T
        return out if self.offset is None else out + torch.outer(s.sum(dim=0), self.offset)


PAD_COLUMNS_BELOW = 16
"""Dense operands of a CSR product with fewer columns than this are zero-padded to a multiple
of 4 columns (:func:`padded_columns`)."""


def padded_columns(cols: int) -> int:
    """The columns a CSR product's dense operand of ``cols`` columns is computed with: the next
    multiple of 4 below :data:`PAD_COLUMNS_BELOW`, else ``cols``. torch's CPU CSR product runs a
    faster kernel at 4, 8, 12 and 16 columns: MNIST's 10,000 test rows times 10 columns took
    0.74 ms, times 12 (two of zeros) 0.59 ms, and the transposed product 0.87 against 0.71 ms
    (``python bench/sparse_rows.py --threads 2``, 2-vCPU Xeon, which prints every width). The
    extra columns are zeros, so the product's first ``cols`` columns are the same sums, added
    in the wider kernel's order (equal to float32 rounding)."""
    return cols + (-cols) % 4 if cols < PAD_COLUMNS_BELOW else cols


def _pad_columns(a: Tensor) -> Tensor:
    cols = a.shape[1]
    wide = padded_columns(cols)
    if wide == cols:
        return a.contiguous()
    out = a.new_zeros(a.shape[0], wide)
    out[:, :cols] = a
    return out


MODE_ROWS = 1024
"""Rows whose column modes give the background ``m`` of a group (any ``m`` is exact; a good
one makes ``S`` sparse)."""

SPARSE_CHUNK_ROWS = 16384
"""Rows per CSR piece: bounds the dense logits and residuals of one sparse product."""


@dataclass(frozen=True)
class SparseCache:
    """CSR copies of groups of rows of one dense matrix (a client's rows, or a test set),
    built on first use, in pieces of at most :data:`SPARSE_CHUNK_ROWS` rows.

    Nothing is computed up front: a group's background and density are measured the first
    time it is asked for (:meth:`density_of`), and :meth:`get` returns its pieces when a
    product with ``cols`` columns pays (:func:`pays`), else ``None`` (the dense path, always
    on a GPU: :func:`pays` is a CPU measurement).
    """

    x: Tensor
    groups: tuple[tuple[int, int], ...]
    transpose: bool
    _scan: dict[int, tuple[Tensor | None, float]] = field(
        default_factory=dict, compare=False, repr=False)
    _built: dict[int, tuple[tuple[int, SparseRows], ...]] = field(
        default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, x: Tensor, groups: list[tuple[int, int]], *, transpose: bool) -> SparseCache:
        """The cache of ``x``'s row groups ``[lo, hi)`` (``transpose``: also ``X^T``, for
        gradients)."""
        return cls(x=x, groups=tuple(groups), transpose=transpose)

    def _scanned(self, group: int) -> tuple[Tensor | None, float]:
        if group not in self._scan:
            lo, hi = self.groups[group]
            m = background(self.x[lo:hi])
            self._scan[group] = (m, density(self.x[lo:hi], m))
        return self._scan[group]

    def density_of(self, group: int) -> float:
        """Share of the group's entries that differ from their column's background."""
        return self._scanned(group)[1]

    def get(self, group: int, cols: int, *, build: bool = True
            ) -> tuple[tuple[int, SparseRows], ...] | None:
        """The pieces of ``group`` (each with its first row, relative to the group) when
        sparse products with ``cols`` columns pay, else ``None``; ``build=False``: only when
        they are built already (a one-off product is not worth building them)."""
        if self.x.device.type != "cpu":  # the crossing was measured on CPU; GPUs stay dense
            return None
        if group in self._built:
            return self._built[group] if pays(self.density_of(group), cols) else None
        if not build or not pays(self.density_of(group), cols):
            return None
        lo, hi = self.groups[group]
        offset = self._scanned(group)[0]
        self._built[group] = tuple(
            (start, SparseRows.of(self.x[lo + start:min(hi, lo + start + SPARSE_CHUNK_ROWS)],
                                  offset=offset, transpose=self.transpose))
            for start in range(0, hi - lo, SPARSE_CHUNK_ROWS))
        return self._built[group]


class SparseCaches:
    """The :class:`SparseCache` of each (tensor, row groups, transpose) asked of it, and each
    tensor derived from one (:meth:`derived`), built once: a run given the tensors of an
    earlier one with the same holder (:mod:`fedqr.sim.setup_memo`) finds them built. The
    tensors must not change in place (the engine's never do)."""

    def __init__(self) -> None:
        self._caches: dict[tuple[int, tuple[tuple[int, int], ...], bool], SparseCache] = {}
        self._derived: dict[tuple[int, str], tuple[Tensor, object]] = {}
        self._lock = threading.Lock()

    def derived(self, x: Tensor, name: str, make: Callable[[Tensor], _T]) -> _T:
        """``make(x)``, made once per ``x`` and ``name`` (the rows with an intercept's column:
        their CSR copies are then shared too; a layout's client blocks). ``name`` must say
        everything else that ``make`` depends on."""
        key = (id(x), name)
        with self._lock:
            hit = self._derived.get(key)
            if hit is not None and hit[0] is x:  # the entry holds x: its id stays x's
                return cast(_T, hit[1])
        made = make(x)
        with self._lock:
            self._derived[key] = (x, made)
        return made

    def of(self, x: Tensor, groups: list[tuple[int, int]], *, transpose: bool) -> SparseCache:
        """The shared cache of ``x``'s row groups (``SparseCache.of``'s arguments)."""
        key = (id(x), tuple(groups), transpose)
        with self._lock:
            cache = self._caches.get(key)
            if cache is None or cache.x is not x:  # the cache holds x: its id stays x's
                cache = SparseCache.of(x, groups, transpose=transpose)
                self._caches[key] = cache
            return cache
