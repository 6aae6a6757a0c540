"""What the stacked engine (:mod:`fedqr.planner.stacked`) reads of a model: its layers.

The stacked engine takes a model whose trainable parameters all sit in ``Linear`` layers and
in normalisation layers with per-row statistics on a row's features (``GroupNorm``, and
``LayerNorm`` or ``RMSNorm`` over the last dimension: :mod:`fedqr.models.norms`). For
every such layer it needs the flat slices of its weight and bias in the parameter vector
and, for the module-by-module pass, the model as a flat sequence of those layers and
parameter-free elementwise maps.
"""

from __future__ import annotations

from torch import Tensor, nn

from fedqr.models.norms import NORM_LAYERS, NormLayer, normalised

__all__ = ["ELEMENTWISE", "Layers", "layer_slices", "rows_normalised", "sequence", "width"]

Layers = list[tuple[nn.Module, slice, slice | None]]
"""Each layer with trainable parameters (``Linear`` or a norm layer), with the flat slices
of its weight and bias (``None``: no bias)."""

ELEMENTWISE = (nn.ReLU, nn.LeakyReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.ELU, nn.SiLU,
               nn.Softplus, nn.Identity, nn.Hardtanh, nn.ReLU6, nn.Mish)
"""Parameter-free modules acting on each value alone (any leading dimensions)."""


def _row_norm(module: nn.Module) -> bool:
    """Whether ``module`` is a norm layer acting on a row's features (its last dimension)."""
    if isinstance(module, nn.GroupNorm):
        return True
    return isinstance(module, nn.LayerNorm | nn.RMSNorm) and len(module.normalized_shape) == 1


def width(module: nn.Module) -> int:
    """Output features of a layer of :data:`Layers`."""
    if isinstance(module, nn.Linear):
        return module.out_features
    if isinstance(module, nn.GroupNorm):
        return module.num_channels
    assert isinstance(module, nn.LayerNorm | nn.RMSNorm)
    return int(module.normalized_shape[-1])


def rows_normalised(module: NormLayer, h: Tensor) -> Tensor:
    """``x_hat`` of rows ``h`` (``(..., C)``: any leading dimensions, the features last)."""
    return normalised(module, h.reshape(-1, h.shape[-1])).view_as(h)


def layer_slices(model: nn.Module) -> Layers | None:
    """Each layer with trainable parameters and its flat slices (:data:`Layers`), or
    ``None`` when a parameter is frozen or lives outside those layers."""
    pos, where = 0, {}
    for p in model.parameters():
        where[id(p)] = slice(pos, pos + p.numel())
        pos += p.numel()
    layers: Layers = []
    owned = 0
    for module in model.modules():
        own = list(module.parameters(recurse=False))
        if not own:
            continue
        if not (isinstance(module, nn.Linear) or _row_norm(module)) or not all(
                p.requires_grad for p in own):
            return None
        bias = getattr(module, "bias", None)
        layers.append((module, where[id(module.weight)],
                       where[id(bias)] if bias is not None else None))
        owned += len(own)
    return layers if owned == len(where) else None


def sequence(model: nn.Module, layers: list[nn.Module], *, flat_rows: bool = True
             ) -> list[nn.Module] | None:
    """The modules of an ``nn.Sequential`` MLP in order (Flatten only before the first
    Linear layer, elementwise activations, norm layers on the features), or ``None``;
    ``flat_rows``: the rows are vectors (else a norm layer may act on them only after a
    Flatten, where its features are the row's last dimension)."""
    if not isinstance(model, nn.Sequential):
        return None
    flat: list[nn.Module] = []
    for module in model:
        flat.extend(module if isinstance(module, nn.Sequential) else [module])
    owners = [m for m in flat if any(True for _ in m.parameters(recurse=False))]
    if [id(m) for m in owners] != [id(m) for m in layers]:
        return None
    for i, module in enumerate(flat):
        before_first = not any(isinstance(m, nn.Linear) for m in flat[:i])
        if isinstance(module, nn.Flatten) and before_first:
            continue
        flat_here = flat_rows or any(isinstance(m, nn.Flatten | nn.Linear) for m in flat[:i])
        if not (type(module) in (nn.Linear, *ELEMENTWISE) or (
                isinstance(module, NORM_LAYERS) and _row_norm(module) and flat_here)):
            return None
    return flat
