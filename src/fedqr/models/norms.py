"""Normalisation layers with per-row statistics, whose per-sample gradients are direct.

``GroupNorm``, ``LayerNorm`` and ``RMSNorm`` normalise each row by its own statistics and
then apply an affine map per feature, ``y = x_hat * w + b``. Row j's gradients of ``w`` and
``b`` are ``sum g_j * x_hat_j`` and ``sum g_j`` (``g_j``: the gradient of the layer's output)
over the positions each weight is applied to, so the ghost method
(:mod:`fedqr.models._ghost`) and the planner's stacked twin (:mod:`fedqr.planner.stacked`)
form them from ``x_hat`` without a per-sample backward pass. Batch normalisation mixes rows
and is refused elsewhere (:mod:`fedqr.models.model_check`).
"""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn import functional as F

__all__ = ["NORM_LAYERS", "NormLayer", "normalised"]

NormLayer = nn.GroupNorm | nn.LayerNorm | nn.RMSNorm
"""A normalisation layer with per-row statistics."""
NORM_LAYERS = (nn.GroupNorm, nn.LayerNorm, nn.RMSNorm)
"""The classes of :data:`NormLayer`, for ``isinstance``."""


def normalised(layer: NormLayer, x: Tensor) -> Tensor:
    """``x_hat``: the layer's input ``x`` normalised as the layer does, without its affine
    map (``GroupNorm``: ``x`` of shape ``(n, C, *)``; ``LayerNorm`` and ``RMSNorm``: ``x``
    ending in the layer's ``normalized_shape``)."""
    if isinstance(layer, nn.GroupNorm):
        return F.group_norm(x, layer.num_groups, eps=layer.eps)
    shape = tuple(layer.normalized_shape)
    if isinstance(layer, nn.LayerNorm):
        return F.layer_norm(x, shape, eps=layer.eps)
    return F.rms_norm(x, shape, eps=layer.eps)
