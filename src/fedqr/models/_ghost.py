"""The ``ghost`` method of :mod:`fedqr.models.per_sample`: per-layer per-sample gradients.

From one forward and one backward to the outputs of the ``Linear``, ``Conv2d`` and
normalisation layers, each layer's per-sample gradient norms and the clip-weighted sums are
formed directly: rank-one for a ``Linear`` layer on 2-D input (never materialised), batched
matmuls for the others (see :func:`_conv_grads`), and for ``GroupNorm``, ``LayerNorm`` and
``RMSNorm`` (which normalise each row by its own statistics) the affine parameters' gradients
``sum g * x_hat`` and ``sum g`` over the positions a parameter is applied to, with ``x_hat``
the layer's input normalised without its affine map (:func:`_norm_grads`).
"""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fedqr.models.logreg import Norm
from fedqr.models.losses import LossFn, per_sample_cross_entropy
from fedqr.models.norms import NORM_LAYERS, NormLayer, normalised


def _trains(p: Tensor | None) -> bool:
    """Whether ``p`` is a parameter that is trained (present, ``requires_grad``)."""
    return p is not None and p.requires_grad


def _bias(layer: nn.Module) -> Tensor | None:
    """The layer's bias (``None`` where it has none: RMSNorm has no attribute)."""
    return cast(Tensor | None, getattr(layer, "bias", None))


Conv = nn.Conv1d | nn.Conv2d
"""A convolution the ghost method takes (numeric zero padding, any groups)."""
GhostLayer = nn.Linear | Conv | NormLayer
"""A layer whose trainable parameters the ghost method takes."""


def ghost_layers(model: nn.Module) -> list[GhostLayer]:
    """Layers with trainable parameters, checked for the ghost method.

    A module whose parameters are all frozen (``requires_grad=False``) is left out whatever
    its type: it takes no gradient, its output gradients flow through it by autograd.

    Raises
    ------
    ValueError
        Naming a module with trainable parameters that is not a ``Linear``, ``Conv1d`` or
        ``Conv2d`` (numeric zero padding), ``GroupNorm``, ``LayerNorm`` or ``RMSNorm`` layer.
    """
    layers: list[GhostLayer] = []
    for name, module in model.named_modules():
        own = list(module.parameters(recurse=False))
        if not any(p.requires_grad for p in own):
            continue
        if isinstance(module, nn.Conv1d | nn.Conv2d) and not isinstance(
                module.padding, str) and module.padding_mode == "zeros":
            layers.append(module)
        elif isinstance(module, (nn.Linear, *NORM_LAYERS)):
            layers.append(module)
        else:
            raise ValueError(
                f"method='ghost' supports trainable parameters only in Linear, Conv1d and "
                f"Conv2d (numeric zero padding), GroupNorm, LayerNorm and RMSNorm layers, "
                f"got {type(module).__name__} at "
                f"{name or 'the model root'}: use method='vmap'"
            )
    return layers


#: A conv layer whose im2col row (Cin KH KW values) is at most this long is unfolded whole;
#: wider ones are expanded along the kernel width only (see :func:`_conv_grads`).
_FULL_UNFOLD_MAX = 64


def _geometry(layer: Conv) -> tuple[int, int, int, int, int, int, int, int]:
    """``(KH, KW, SH, SW, DH, DW, PH, PW)`` of a conv layer (a Conv1d: a Conv2d of height 1;
    numeric padding, checked in :func:`ghost_layers`)."""
    if isinstance(layer, nn.Conv1d):
        (k,), (s,), (d,) = layer.kernel_size, layer.stride, layer.dilation
        (p,) = cast(tuple[int], layer.padding)
        return 1, k, 1, s, 1, d, 0, p
    (kh, kw), (sh, sw), (dh, dw) = layer.kernel_size, layer.stride, layer.dilation
    ph, pw = cast(tuple[int, int], layer.padding)
    return kh, kw, sh, sw, dh, dw, ph, pw


def _conv_grads(layer: Conv, a: Tensor, g: Tensor) -> Tensor:
    """Per-sample weight gradients ``[K, n, Cout, X]`` of a conv layer
    (:func:`_conv2d_grads`): a Conv1d as a Conv2d of height 1, a grouped convolution as
    ``groups`` convolutions of its channel blocks, block k of row j taken as row ``j G + k``
    (each block's output channels follow one another in the weight, as in ``Cout``)."""
    if isinstance(layer, nn.Conv1d):
        a, g = a.unsqueeze(2), g.unsqueeze(2)
    n, groups = a.shape[0], layer.groups
    if groups > 1:
        a = a.reshape(n * groups, -1, *a.shape[2:])
        g = g.reshape(n * groups, -1, *g.shape[2:])
    out = _conv2d_grads(_geometry(layer), a, g)
    return out.view(out.shape[0], n, -1, out.shape[3]) if groups > 1 else out


def _conv2d_grads(geometry: tuple[int, ...], a: Tensor, g: Tensor) -> Tensor:
    """Per-sample weight gradients of a conv layer, ``[K, n, Cout, X]``.

    With ``A`` the zero-padded input in channels-last layout ``[n, H, W, C]``, the gradient
    is ``sum_{h,w} G[n,o,h,w] A[n, s h + d kh, s w + d kw, i]``.

    * Narrow layers (``C KH KW <= 64``, e.g. a first layer on grey images): one copy of the
      strided view ``U[n, (h, w), (kh, kw, i)]`` (an im2col) and one batched matmul
      ``G U``; ``K = 1``, ``X = KH KW C``, element order ``(o, kh, kw, i)``.
    * Wide layers: the input is expanded only along the kernel width,
      ``E[n, r, w, (kw, i)] = A[n, r, s w + d kw, i]`` (KW times the input, not KH KW
      times), and for each kernel row kh the rows ``r = s h + d kh`` of E form a
      ``[n, L, KW C]`` matrix (a view when the stride is 1): KH batched matmuls
      ``G E_kh``; ``K = KH``, ``X = KW C``, element order ``(kh, o, kw, i)``.
    """
    n, c_out = g.shape[0], g.shape[1]
    kh, kw, sh, sw, dh, dw, ph, pw = geometry
    ho, wo = g.shape[2], g.shape[3]
    ap = F.pad(a.permute(0, 2, 3, 1), (0, 0, pw, pw, ph, ph)).contiguous()  # [n, Hp, Wp, C]
    c_in = ap.shape[3]
    s0, s1, s2, s3 = ap.stride()
    gm = g.reshape(n, c_out, ho * wo)
    if c_in * kh * kw <= _FULL_UNFOLD_MAX:
        u = ap.as_strided((n, ho, wo, kh, kw, c_in),
                          (s0, sh * s1, sw * s2, dh * s1, dw * s2, s3))
        return torch.bmm(gm, u.reshape(n, ho * wo, kh * kw * c_in)).unsqueeze(0)
    e = ap.as_strided((n, ap.shape[1], wo, kw, c_in), (s0, s1, sw * s2, dw * s2, s3))
    e = e.contiguous().view(n, ap.shape[1], wo, kw * c_in)  # one copy: KW times the input
    out = torch.empty(kh, n, c_out, kw * c_in, dtype=g.dtype, device=g.device)
    for r in range(kh):
        rows = e[:, r * dh: r * dh + sh * (ho - 1) + 1: sh]  # [n, Ho, Wo, KW C]
        torch.bmm(gm, rows.reshape(n, ho * wo, kw * c_in), out=out[r])
    return out


def _conv_layout(layer: Conv, summed: Tensor) -> Tensor:
    """Sums ``[K, Cout X]`` from :func:`_conv_grads` in the weight's shape ``[Cout,
    Cin / groups, (KH,) KW]``."""
    c_out, c_in = layer.weight.shape[:2]
    kh, kw = _geometry(layer)[:2]
    if summed.shape[0] == 1:  # (o, kh, kw, i)
        out = summed.view(c_out, kh, kw, c_in).permute(0, 3, 1, 2)
    else:  # (kh, o, kw, i)
        out = summed.view(kh, c_out, kw, c_in).permute(1, 3, 0, 2)
    return out.reshape(layer.weight.shape)


def _norm_grads(layer: NormLayer, a: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    """Per-sample gradients ``[1, c, *weight.shape]`` of a normalisation layer's weight and
    ``[c, weight.numel()]`` of its bias, from its input ``a`` and output gradient ``g``.

    The layer computes ``y = x_hat * w + b`` with ``x_hat`` normalised by the row's own
    statistics, so row j's gradients are ``sum g_j * x_hat_j`` and ``sum g_j`` over the
    positions each weight is applied to (GroupNorm: every dimension after the channels;
    LayerNorm and RMSNorm: every dimension between the row's and the normalised ones).
    """
    c, gx = a.shape[0], g * normalised(layer, a)
    if isinstance(layer, nn.GroupNorm):  # (c, C, *): sum over the positions after C
        return gx.reshape(c, a.shape[1], -1).sum(2).unsqueeze(0), g.reshape(
            c, a.shape[1], -1).sum(2)
    shape = tuple(layer.normalized_shape)  # sum over the positions before the shape
    k = math.prod(shape)
    return gx.reshape(c, -1, k).sum(1).view(1, c, *shape), g.reshape(c, -1, k).sum(1)


def _layer_grads(
    layer: GhostLayer, a: Tensor, g: Tensor
) -> tuple[Tensor | None, Tensor, Tensor | None]:
    """(per-sample weight grads, or None when rank-one; per-sample bias grads; rank-one input).

    Weight grads are ``[1, c, out, in]`` for a Linear layer with extra dimensions,
    ``[K, c, Cout, X]`` (see :func:`_conv_grads`) for a Conv2d layer and ``[1, c, *shape]``
    for a normalisation layer (:func:`_norm_grads`); a frozen weight has none
    (``(None, bias grads, None)``: nothing is formed for it).
    """
    c = a.shape[0]
    if isinstance(layer, NORM_LAYERS):
        pw, pb = _norm_grads(layer, a, g)
        return (None if not _trains(layer.weight) else pw), pb, None
    frozen = not _trains(layer.weight)
    if isinstance(layer, nn.Linear) and a.dim() == 2:
        return None, g, None if frozen else a
    if isinstance(layer, nn.Linear):
        a3, g3 = a.reshape(c, -1, a.shape[-1]), g.reshape(c, -1, g.shape[-1])
        if frozen:
            return None, g3.sum(1), None
        return torch.bmm(g3.transpose(1, 2), a3).unsqueeze(0), g3.sum(1), None
    return None if frozen else _conv_grads(layer, a, g), g.flatten(2).sum(2), None


def ghost_chunk(
    model: nn.Module, layers: list[GhostLayer], slices: dict[int, slice],
    xc: Tensor, yc: Tensor, *, clip: float, norm: Norm, out: Tensor,
    pieces: list[tuple[int, int, int]], loss_fn: LossFn = per_sample_cross_entropy,
) -> tuple[Tensor, Tensor]:
    """Add the chunk's clipped sums into ``out``; return per-row loss and clip scale."""
    captured: dict[int, tuple[Tensor, Tensor]] = {}

    def hook(module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
        if id(module) in captured:
            raise ValueError(f"method='ghost' needs each layer called once per forward, "
                             f"{type(module).__name__} was called again: use method='vmap'")
        captured[id(module)] = (inputs[0].detach(), output)

    handles = [layer.register_forward_hook(hook) for layer in layers]
    try:
        with torch.enable_grad():
            logits = model(xc)
            loss = loss_fn(logits, yc)
            layers = [layer for layer in layers if id(layer) in captured]  # unused: grad 0
            outs = [captured[id(layer)][1] for layer in layers]
            gouts = torch.autograd.grad(loss.sum(), outs)
    finally:
        for h in handles:
            h.remove()
    terms = [_layer_grads(layer, captured[id(layer)][0], g.detach())
             for layer, g in zip(layers, gouts, strict=True)]
    order = 1 if norm is Norm.L1 else 2
    total = torch.zeros(xc.shape[0], dtype=xc.dtype, device=xc.device)
    for layer, (pw, pb, a) in zip(layers, terms, strict=True):
        gb = torch.linalg.vector_norm(pb, ord=order, dim=1) ** order
        if a is not None:  # rank-one linear: ||g a^T|| = ||g|| ||a||
            total += gb * torch.linalg.vector_norm(a, ord=order, dim=1) ** order
        elif pw is not None:  # [K, c, ...]: reduce every dimension but the sample one
            dims = (0, *range(2, pw.dim()))
            total += torch.linalg.vector_norm(pw, ord=order, dim=dims) ** order
        if _trains(_bias(layer)):
            total += gb
    norms = total if norm is Norm.L1 else total.sqrt()
    scale = (clip / norms).clamp(max=1.0)  # a zero gradient (norm 0) gives inf -> 1
    for layer, (pw, pb, a) in zip(layers, terms, strict=True):
        for k, lo, hi in pieces:
            s = scale[lo:hi]
            if a is not None or pw is not None:  # a trainable weight
                _add_weight_sum(layer, out[k, slices[id(layer.weight)]], pw, pb, a,
                                s, lo, hi)
            if _trains(_bias(layer)):
                out[k, slices[id(_bias(layer))]].addmv_(pb[lo:hi].T, s)
    return loss.detach(), scale


def _add_weight_sum(layer: GhostLayer, flat: Tensor, pw: Tensor | None, pb: Tensor,
                    a: Tensor | None, s: Tensor, lo: int, hi: int) -> None:
    """Add the clip-weighted sum ``sum_j s_j grad_j`` of rows ``lo:hi`` of the layer's
    weight gradient into ``flat`` (the weight's slice of one segment's sum)."""
    dst = flat.view(layer.weight.shape)
    if a is not None:  # rank-one: one GEMM
        dst.addmm_((pb[lo:hi] * s[:, None]).T, a[lo:hi])
        return
    assert pw is not None
    kk, m = pw.shape[0], hi - lo
    summed = torch.bmm(s.view(1, 1, m).expand(kk, 1, m),
                       pw[:, lo:hi].reshape(kk, m, -1)).view(kk, -1)
    dst.add_(_conv_layout(layer, summed) if isinstance(layer, nn.Conv1d | nn.Conv2d)
             else summed.view(layer.weight.shape))
