"""The stacked engine of the kernel twin: every column of an MLP in one pass.

For a torch model whose parameters all sit in ``Linear`` layers and norm layers on a row's
features (GroupNorm, LayerNorm, RMSNorm: :mod:`fedqr.planner.stacked_layers`), the ``A``
columns (models) of a round run together: an ``nn.Sequential`` of those layers and
elementwise activations module by module on ``(A, m, .)`` tensors (batched matrix products,
one autograd call), any other such module by ``torch.func.vmap`` of ``functional_call`` over
the stacked parameters (the output gradients are the gradients of zero probes added to the
layers' outputs). A Linear layer's per-sample gradient is the rank-one ``g a^T`` (output
gradient times input): its norm is ``||g|| ||a||`` and the clip-weighted sum one matrix
product per layer; a norm layer's are ``g * x_hat`` and ``g`` (:mod:`fedqr.models.norms`)
(the ``ghost`` method of :mod:`fedqr.models.per_sample`, batched over the columns).
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from fedqr.models.kernel import KernelData
from fedqr.models.logreg import Norm
from fedqr.models.losses import LossFn
from fedqr.models.norms import NORM_LAYERS
from fedqr.models.torch_kernel import TorchKernel, evaluation_mode
from fedqr.planner.stacked_layers import Layers, layer_slices, rows_normalised, sequence, width

__all__ = ["StackedColumns", "stacks_repeats"]

Positions = tuple[Tensor, Tensor]

_STACK_FLOATS = 2**20
"""Poisson batches: every column gathers its own copy of its repeat's rows (one pass for all
columns) when the copies hold at most this many floats; else one pass per repeat."""


def stacks_repeats(*, columns: int, rows: float, features: int) -> bool:
    """Whether the stacked engine runs a round of Poisson batches as one pass (see
    :data:`_STACK_FLOATS`; ``rows``: the padded rows of one repeat)."""
    return columns * rows * features <= _STACK_FLOATS


class StackedColumns:
    """An MLP's columns in one vmapped forward and backward (module docstring)."""

    @property
    def name(self) -> str:
        """``stacked``."""
        return "stacked"

    def __init__(self, kernel: TorchKernel, data: KernelData, *, chunk_rows: int = 1024,
                 layers: Layers | None = None) -> None:
        model = kernel.build(torch.Generator().manual_seed(0)).to(data.x.device)
        found = layers if layers is not None else layer_slices(model)
        if found is None:
            raise ValueError(f"model {kernel.name!r}: the stacked twin needs every parameter "
                             "trainable, in a Linear layer or a norm layer on the features")
        self.model, self.layers, self.loss_fn = model, found, kernel.loss_fn
        self.owners = {id(layer) for layer, _, _ in found}
        self.param_of = {id(p): n for n, p in model.named_parameters()}
        self.sequence = sequence(model, [layer for layer, _, _ in found],
                                 flat_rows=len(kernel.input_shape) == 1)
        self.names = [n for n, _ in model.named_parameters()]
        self.shapes = [p.shape for p in model.parameters()]
        self.x = data.x.view(-1, *kernel.input_shape)
        self.y, self.offsets, self.norm = data.y, data.offsets, data.norm
        self.x_test = data.x_test.view(-1, *kernel.input_shape)
        self.y_test = data.y_test
        self.chunk_rows = chunk_rows
        self._rows: dict[tuple[tuple[int, ...], tuple[float, ...]], tuple[Tensor, Tensor]] = {}

    def _params(self, theta: Tensor) -> dict[str, Tensor]:
        out, pos = {}, 0
        for name, shape in zip(self.names, self.shapes, strict=True):
            num = shape.numel()
            out[name] = theta[:, pos:pos + num].view(theta.shape[0], *shape)
            pos += num
        return out

    def _grads(self, params: dict[str, Tensor], x: Tensor, y: Tensor, *, own: bool
               ) -> tuple[list[Tensor], list[Tensor]]:
        """Per-sample output gradients ``(A, m, out)`` and inputs (``(A, m, in)``, or
        ``(m, in)`` when shared by every column) of every Linear layer; ``own``: every
        column has its own rows (``x`` of shape ``(A, m, ...)``, ``y`` ``(A, m)``)."""
        if self.sequence is not None:
            return self._grads_sequence(params, x, y, own=own)
        return self._grads_vmap(params, x, y, own=own)

    def _grads_sequence(self, params: dict[str, Tensor], x: Tensor, y: Tensor, *, own: bool
                        ) -> tuple[list[Tensor], list[Tensor]]:
        """An ``nn.Sequential`` of Linear layers, norm layers and elementwise activations,
        module by module on ``(A, m, .)`` tensors: plain batched matrix products, one autograd
        call. A norm layer's input saved is its ``x_hat`` (its affine map's input)."""
        assert self.sequence is not None
        h = x.flatten(2) if own else x
        outs: list[Tensor] = []
        ins: list[Tensor] = []
        for module in self.sequence:
            if isinstance(module, nn.Flatten) and own:
                continue  # flattened above (Flatten comes only before the first Linear)
            if isinstance(module, NORM_LAYERS):
                h = rows_normalised(module, h)  # x_hat, then the columns' affine maps
            elif not isinstance(module, nn.Linear):
                h = module(h)  # Flatten (before the first Linear) or an elementwise map
                continue
            if id(module) not in self.owners:
                continue  # a norm layer without an affine map
            w, b = params[self.param_of[id(module.weight)]], None
            bias = getattr(module, "bias", None)
            if bias is not None:
                b = params[self.param_of[id(bias)]]
            ins.append(h.detach())
            if isinstance(module, NORM_LAYERS):  # (A, m, C) from x_hat (A, m, C) or (m, C)
                z = h * w[:, None] + b[:, None] if b is not None else h * w[:, None]
            elif h.dim() == 2:  # the shared input of the first layer
                z = torch.matmul(h, w.transpose(1, 2))
                z = z + b[:, None] if b is not None else z
            elif b is not None:
                z = torch.baddbmm(b[:, None], h, w.transpose(1, 2))
            else:
                z = torch.bmm(h, w.transpose(1, 2))
            if not outs:
                z.requires_grad_(True)
            outs.append(z)
            h = z
        a = h.shape[0]
        loss = self.loss_fn(h.reshape(-1, h.shape[-1]), y.reshape(-1) if own else y.repeat(a))
        return list(torch.autograd.grad(loss.sum(), outs)), ins

    def _grads_vmap(self, params: dict[str, Tensor], x: Tensor, y: Tensor, *, own: bool
                    ) -> tuple[list[Tensor], list[Tensor]]:
        """Any other module of those layers: ``vmap`` of ``functional_call`` over the columns,
        the output gradients as the gradients of zero probes added to the layers' outputs."""
        layers = [layer for layer, _, _ in self.layers]
        loss_fn: LossFn = self.loss_fn

        def loss(probes: tuple[Tensor, ...], ps: dict[str, Tensor], xi: Tensor, yi: Tensor
                 ) -> tuple[Tensor, tuple[Tensor, ...]]:
            inputs: dict[int, Tensor] = {}

            def hook(module: nn.Module, args: tuple[Tensor, ...], out: Tensor) -> Tensor:
                i = layers.index(module)
                if i in inputs:
                    raise ValueError("a layer was called twice in one forward")
                inputs[i] = (rows_normalised(module, args[0])
                             if isinstance(module, NORM_LAYERS) else args[0])
                return out + probes[i]

            handles = [layer.register_forward_hook(hook) for layer in layers]
            try:
                logits = functional_call(self.model, ps, (xi,))
            finally:
                for h in handles:
                    h.remove()
            return loss_fn(logits, yi).sum(), tuple(inputs[i].detach()
                                                    for i in range(len(layers)))

        m = x.shape[1] if own else x.shape[0]
        probes = tuple(torch.zeros(m, width(layer), dtype=x.dtype, device=x.device)
                       for layer in layers)
        dims = 0 if own else None
        g, a = vmap(grad(loss, has_aux=True), in_dims=(None, 0, dims, dims))(probes, params,
                                                                              x, y)
        return list(g), [t[0] if t.stride(0) == 0 else t for t in a]

    def _sums(self, theta: Tensor, x: Tensor, y: Tensor, w: Tensor, clip: float, *,
              own: bool = False) -> Tensor:
        """``sum_j w_j clip(grad_j)`` over rows ``x`` shared by every column (or, ``own``,
        each column's own rows: ``x`` ``(A, m, ...)``, ``y`` and ``w`` ``(A, m)``), ``(A, P)``."""
        params = self._params(theta)
        total: Tensor | None = None
        for start in range(0, x.shape[1 if own else 0], self.chunk_rows):
            sl = (slice(None), slice(start, start + self.chunk_rows)) if own else slice(
                start, start + self.chunk_rows)
            part = self._chunk(params, x[sl], y[sl], w[sl], clip, theta.shape[0], own=own)
            total = part if total is None else total.add_(part)
        return total if total is not None else torch.zeros_like(theta)

    def _chunk(self, params: dict[str, Tensor], x: Tensor, y: Tensor, w: Tensor, clip: float,
               a_cols: int, *, own: bool) -> Tensor:
        """One chunk of :meth:`_sums`: per-sample norms ``||g|| ||a||`` per layer (and
        ``||g||`` per bias), then one product per layer of the scaled ``g`` and ``a``."""
        gs, acts = self._grads(params, x, y, own=own)

        def power(t: Tensor) -> Tensor:  # ||t||^2 (l2) or ||t||_1 (l1) along the last axis
            return t.abs().sum(dim=-1) if self.norm is Norm.L1 else t.square().sum(dim=-1)

        total = torch.zeros(gs[0].shape[:2], dtype=x.dtype, device=x.device)
        for (layer, _, bias), g, a in zip(self.layers, gs, acts, strict=True):
            if g.dim() != 3 or a.dim() not in (2, 3):
                raise ValueError("the stacked twin needs 2-D inputs to its layers")
            gn = power(g)
            if isinstance(layer, NORM_LAYERS):  # weight: g * x_hat, bias: g
                total += power(g * a) + gn if bias is not None else power(g * a)
            else:  # Linear: ||g a^T|| = ||g|| ||a||
                total += gn * (power(a) + 1.0) if bias is not None else gn * power(a)
        norms = total if self.norm is Norm.L1 else total.sqrt()
        scale = (clip / norms).clamp(max=1.0) * w  # (A, m)
        parts: dict[int, Tensor] = {}
        for (layer, w_sl, bias), g, a in zip(self.layers, gs, acts, strict=True):
            sg = g * scale[..., None]  # (A, m, out)
            if isinstance(layer, NORM_LAYERS):
                parts[w_sl.start] = (sg * a).sum(dim=1)
            elif a.dim() == 2:  # the shared input of the first layer: one GEMM
                parts[w_sl.start] = (sg.transpose(1, 2).reshape(-1, sg.shape[1]) @ a).view(
                    a_cols, -1)
            else:
                parts[w_sl.start] = torch.bmm(sg.transpose(1, 2), a).flatten(1)
            if bias is not None:
                parts[bias.start] = sg.sum(dim=1)
        return torch.cat([parts[k] for k in sorted(parts)], dim=1)

    def _client_rows(self, sel: NDArray[np.int64], weight: Tensor) -> tuple[Tensor, Tensor]:
        """The rows of the selected clients and each row's weight (cached: round robin
        selects the same few client sets again and again)."""
        key = (tuple(int(i) for i in sel), tuple(weight.tolist()))
        if key not in self._rows:
            idx = [torch.arange(int(self.offsets[i]), int(self.offsets[i + 1]),
                                device=self.x.device) for i in sel]
            w = torch.cat([torch.full((len(r),), v, dtype=self.x.dtype, device=self.x.device)
                           for r, v in zip(idx, key[1], strict=True)])
            self._rows[key] = (torch.cat(idx), w)
        return self._rows[key]

    def full(self, theta: Tensor, sel: NDArray[np.int64], weight: Tensor, *,
             clip: float) -> Tensor:
        rows, w = self._client_rows(sel, weight)
        return self._sums(theta, self.x[rows], self.y[rows], w, clip)

    def sampled(self, theta: Tensor, sel: NDArray[np.int64], weight: Tensor, *, clip: float,
                positions: Positions, repeats: int) -> Tensor:
        pos, valid = positions
        starts = torch.as_tensor(self.offsets[:-1][sel], device=pos.device)
        w_client = weight.to(self.x.dtype).to(pos.device)
        features = self.x[0].numel()
        flat = valid.reshape(repeats, -1)  # (K, b m): clients padded to the largest batch
        top = int(flat.sum(dim=1).max()) if flat.numel() else 0
        if stacks_repeats(columns=theta.shape[0], rows=top, features=features):
            # every column gathers its repeat's rows in order, padded with weight 0 to the
            # most rows of a repeat (not every client to the largest batch): one pass for all
            keep = torch.argsort((~flat).to(torch.uint8), dim=1, stable=True)[:, :top]
            rows = (starts[:, None] + pos).reshape(repeats, -1).gather(1, keep)  # (K, top)
            w = (w_client[:, None] * valid).reshape(repeats, -1).gather(1, keep)
            rep = torch.arange(theta.shape[0], device=pos.device) % repeats
            return self._sums(theta, self.x[rows[rep]], self.y[rows[rep]], w[rep], clip,
                              own=True)
        out = torch.empty_like(theta)
        for r in range(repeats):
            keep = valid[r]
            rows = (starts[:, None] + pos[r])[keep]
            w = w_client[:, None].expand_as(keep)[keep]
            out[r::repeats] = self._sums(theta[r::repeats].contiguous(), self.x[rows],
                                         self.y[rows], w, clip)
        return out

    @torch.no_grad()
    def test_loss(self, theta: Tensor) -> Tensor:
        params = self._params(theta)
        total = torch.zeros(theta.shape[0], dtype=torch.float64, device=theta.device)

        def forward(ps: dict[str, Tensor], x: Tensor) -> Tensor:
            logits: Tensor = functional_call(self.model, ps, (x,))
            return logits

        for start in range(0, self.x_test.shape[0], self.chunk_rows):
            x = self.x_test[start:start + self.chunk_rows]
            y = self.y_test[start:start + self.chunk_rows]
            with evaluation_mode(self.model):  # as the engine evaluates
                logits = vmap(forward, in_dims=(0, None))(params, x)  # (A, m, k)
            loss = self.loss_fn(logits.reshape(-1, logits.shape[-1]), y.repeat(theta.shape[0]))
            total += loss.view(theta.shape[0], -1).double().sum(dim=1)
        mean: Tensor = total / self.y_test.shape[0]
        return mean
