"""Per-sample losses of torch models: ``loss_fn(logits, y) -> [n]`` (no reduction)."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor
from torch.nn import functional as F

__all__ = ["LossFn", "per_sample_cross_entropy"]

LossFn = Callable[[Tensor, Tensor], Tensor]
"""``(logits [n, k], labels int64 [n]) -> per-sample losses [n]``; the gradient of their sum
must split by sample (no batch-coupled terms)."""


def per_sample_cross_entropy(logits: Tensor, y: Tensor) -> Tensor:
    """Cross-entropy of every row (the default loss)."""
    return F.cross_entropy(logits, y, reduction="none")
