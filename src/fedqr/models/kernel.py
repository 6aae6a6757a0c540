"""The model kernel: what the round loop, the twin and Flower ask of a model.

A kernel knows its parameter count and initial parameters, and, once :meth:`Kernel.attach`-ed
to client-sorted training rows, computes for a batch of repeats ``theta`` of shape ``(R, P)``
and selected clients ``sel`` of shape ``(R, b)``:

- the sums of per-sample-clipped gradients in the mechanism's norm over every row of each
  selected client (:meth:`Attached.full_sums`) or over a Poisson sample of it
  (:meth:`Attached.sample_sums`),
- the test metrics (summed loss and correct predictions), the training objective and the
  per-row training losses of chosen rows (a sampled estimate of the objective).

Two kernels implement it: :class:`fedqr.models.logreg_kernel.LogRegKernel` (softmax regression,
the fused pass of :mod:`fedqr.models.logreg_pass`, repeats batched in the GEMM's columns) and
:class:`fedqr.models.torch_kernel.TorchKernel` (any ``torch.nn.Module`` through the per-sample
clipping of :mod:`fedqr.models.per_sample`, repeats one after another).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from fedqr.models.logreg import Norm
from fedqr.models.logreg_coded import Coding
from fedqr.models.logreg_pass import GradSums
from fedqr.models.sparse_rows import SparseCaches

__all__ = ["Attached", "GradSums", "Kernel", "KernelData"]


@dataclass(frozen=True)
class KernelData:
    """Training rows sorted by client and the test set, on the compute device.

    ``x`` and ``x_test`` are flat ``(n, num_features)`` float32; client i owns rows
    ``offsets[i]:offsets[i + 1]``.
    """

    x: Tensor
    y: Tensor
    offsets: np.ndarray
    x_test: Tensor
    y_test: Tensor
    norm: Norm
    chunk_rows: int
    coding: Coding | None = None  # the rows' integer coding: the mixed arithmetic's passes
    sparse_caches: SparseCaches | None = None  # CSR copies shared with runs on these tensors

    @property
    def sizes(self) -> np.ndarray:
        """d_i, shape ``(N,)``."""
        return np.diff(self.offsets)


class Attached(Protocol):
    """A kernel bound to one data set (see :meth:`Kernel.attach`)."""

    def full_sums(self, theta: Tensor, sel: np.ndarray, *, clip: float,
                  with_train_loss: bool) -> GradSums:
        """Clipped gradient sums over all rows of each selected client, ``grad (R, b, P)``."""
        ...

    def sample_sums(self, theta: Tensor, sel: np.ndarray, *, clip: float,
                    positions: tuple[Tensor, Tensor]) -> GradSums:
        """Clipped gradient sums over the batches ``positions`` (``(pos, valid)``, ``(R, b, m)``:
        row positions within each selected client)."""
        ...

    def test_metrics(self, theta: Tensor) -> tuple[list[float], list[float]]:
        """Mean test loss and test accuracy of every repeat."""
        ...

    def train_objective(self, theta: Tensor, fused: GradSums | None, *, sel: np.ndarray | None,
                        weight_decay: float) -> list[float]:
        """Mean training loss plus ``weight_decay / 2 ||theta||^2`` of every repeat; ``fused``
        holds the loss sums a full pass of round ``sel`` computed (``None``: none)."""
        ...

    def train_losses(self, theta: Tensor, rows: Tensor) -> Tensor:
        """Per-row training loss of every repeat at the client-sorted training rows ``rows``
        (int64, ``(m,)``), shape ``(R, m)`` (no weight decay)."""
        ...


class Kernel(Protocol):
    """A model as the round loop sees it: flat parameters ``theta`` of ``num_params`` floats."""

    @property
    def name(self) -> str:
        """Short name for results (``logreg``, ``cnn``, ``mlp``, a factory's name)."""
        ...

    @property
    def num_params(self) -> int:
        """P."""
        ...

    @property
    def num_classes(self) -> int:
        """k: the model's outputs, one per class (labels lie in ``0..k-1``)."""
        ...

    @property
    def param_shape(self) -> tuple[int, ...]:
        """Shape of one repeat's parameters outside the round loop (results, Flower messages):
        ``(k, p)`` for softmax regression's weight matrix, ``(P,)`` for a flat vector."""
        ...

    @property
    def batched(self) -> bool:
        """Whether repeats run as one batch sharing one random generator (``True``) or one
        after another, each with its own generator (``False``)."""
        ...

    @property
    def uses_coding(self) -> bool:
        """Whether its full-batch passes use the rows' integer coding (``KernelData.coding``,
        the mixed arithmetic: :mod:`fedqr.models.logreg_coded`)."""
        ...

    def init(self, *, repeats: int, generator: torch.Generator) -> Tensor:
        """Initial parameters of ``repeats`` runs, ``(R, P)`` float32 on the CPU."""
        ...

    def attach(self, data: KernelData) -> Attached:
        """Bind the kernel to client-sorted training rows and a test set."""
        ...

    def describe(self) -> dict[str, object]:
        """``{"name", "num_params", ...}`` for ``result.json``."""
        ...
