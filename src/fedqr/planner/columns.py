"""The twin's per-round work for many columns (models) at once: weighted clipped sums, test loss.

The twin needs, for the ``A`` running columns ``theta`` of shape ``(A, P)`` and the rows of
one round, only the weighted sum ``sum_j w_j clip(grad_j)`` (``w_j = c_i / n_i`` of row j's
client) and, at a column's horizon, its test loss. Two engines compute them:

:class:`LoopColumns`
    Any :class:`~fedqr.models.kernel.Kernel`: the columns are the kernel's repeats
    (:meth:`~fedqr.models.kernel.Attached.full_sums` / ``sample_sums``, one pass per column
    for a torch model), then weighted per client.
:class:`StackedColumns`
    A torch model whose parameters all sit in ``Linear`` layers (an MLP): every column in one
    forward and one backward, ``torch.func.vmap`` of ``functional_call`` over the stacked
    parameters. A zero *probe* added to each layer's output gives the per-sample output
    gradients ``g`` (``torch.func.grad`` with respect to the probes), and a Linear layer's
    per-sample gradient is the rank-one ``g a^T`` (``a`` its input): its norm is
    ``||g|| ||a||`` and the clip-weighted sum one matrix product per layer (the ``ghost``
    method of :mod:`fedqr.models.per_sample`, batched over the columns). On 2 CPU threads it
    is 10-40x faster than the loop for the MLPs of ``bench/twin_models.py``.

:func:`column_engine` picks the stacked engine when the model allows it and it reproduces
the loop engine on a small check (else the loop).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from fedqr.models.kernel import Attached, Kernel, KernelData
from fedqr.models.logreg import Norm
from fedqr.models.losses import LossFn
from fedqr.models.torch_kernel import TorchKernel

__all__ = ["ColumnEngine", "LoopColumns", "StackedColumns", "column_engine"]

Positions = tuple[Tensor, Tensor]


class ColumnEngine(Protocol):
    """What the kernel twin asks of a model, for ``A`` columns at once."""

    @property
    def name(self) -> str:
        """``stacked`` or ``loop``."""
        ...

    def full(self, theta: Tensor, sel: NDArray[np.int64], weight: Tensor, *,
             clip: float) -> Tensor:
        """``sum_i weight_i sum_{j in D_i} clip(grad_j)`` of every column, ``(A, P)``."""
        ...

    def sampled(self, theta: Tensor, sel: NDArray[np.int64], weight: Tensor, *, clip: float,
                positions: Positions, repeats: int) -> Tensor:
        """The same over Poisson batches ``positions`` (``(K, b, m)``, row positions within
        each selected client), column ``c K + r`` using repeat r's batches."""
        ...

    def test_loss(self, theta: Tensor) -> Tensor:
        """Mean test loss of every column, float64 ``(A,)``."""
        ...


@dataclass(frozen=True)
class LoopColumns:
    """Any kernel: the columns are its repeats."""

    attached: Attached

    @property
    def name(self) -> str:
        """``loop``."""
        return "loop"

    def full(self, theta: Tensor, sel: NDArray[np.int64], weight: Tensor, *,
             clip: float) -> Tensor:
        sels = np.ascontiguousarray(np.broadcast_to(sel, (theta.shape[0], len(sel))))
        sums = self.attached.full_sums(theta, sels, clip=clip, with_train_loss=False)
        return torch.einsum("abp,b->ap", sums.grad, weight.to(sums.grad.dtype))

    def sampled(self, theta: Tensor, sel: NDArray[np.int64], weight: Tensor, *, clip: float,
                positions: Positions, repeats: int) -> Tensor:
        a = theta.shape[0]
        rep = torch.arange(a, device=positions[0].device) % repeats
        pos, valid = positions[0][rep], positions[1][rep]
        sels = np.ascontiguousarray(np.broadcast_to(sel, (a, len(sel))))
        sums = self.attached.sample_sums(theta, sels, clip=clip, positions=(pos, valid))
        return torch.einsum("abp,b->ap", sums.grad, weight.to(sums.grad.dtype))

    def test_loss(self, theta: Tensor) -> Tensor:
        losses, _ = self.attached.test_metrics(theta)
        return torch.as_tensor(losses, dtype=torch.float64)


Layers = list[tuple[nn.Linear, slice, slice | None]]


def _linear_slices(model: nn.Module) -> Layers | None:
    """Each Linear layer with the flat slices of its weight and bias, or ``None`` when a
    parameter lives outside a Linear layer."""
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
        if not isinstance(module, nn.Linear) or not all(p.requires_grad for p in own):
            return None
        bias = where[id(module.bias)] if module.bias is not None else None
        layers.append((module, where[id(module.weight)], bias))
        owned += len(own)
    return layers if owned == len(where) else None


_ELEMENTWISE = (nn.ReLU, nn.LeakyReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.ELU, nn.SiLU,
                nn.Softplus, nn.Identity, nn.Hardtanh, nn.ReLU6, nn.Mish)
"""Parameter-free modules acting on each value alone (any leading dimensions)."""


def _sequence(model: nn.Module, layers: list[nn.Linear]) -> list[nn.Module] | None:
    """The modules of an ``nn.Sequential`` MLP in order (Flatten only before the first
    Linear layer, elementwise activations), or ``None``."""
    if not isinstance(model, nn.Sequential):
        return None
    flat: list[nn.Module] = []
    for module in model:
        flat.extend(module if isinstance(module, nn.Sequential) else [module])
    linears = [m for m in flat if isinstance(m, nn.Linear)]
    if [id(m) for m in linears] != [id(m) for m in layers]:
        return None
    for i, module in enumerate(flat):
        before_first = not any(isinstance(m, nn.Linear) for m in flat[:i])
        if isinstance(module, nn.Flatten) and before_first:
            continue
        if type(module) not in (nn.Linear, *_ELEMENTWISE):
            return None
    return flat


class StackedColumns:
    """An MLP's columns in one vmapped forward and backward (module docstring)."""

    @property
    def name(self) -> str:
        """``stacked``."""
        return "stacked"

    def __init__(self, kernel: TorchKernel, data: KernelData, *, chunk_rows: int = 1024,
                 layers: Layers | None = None) -> None:
        model = kernel.build(torch.Generator().manual_seed(0)).to(data.x.device)
        found = layers if layers is not None else _linear_slices(model)
        if found is None:
            raise ValueError(f"model {kernel.name!r}: the stacked twin needs every parameter "
                             "in a Linear layer")
        self.model, self.layers, self.loss_fn = model, found, kernel.loss_fn
        self.param_of = {id(p): n for n, p in model.named_parameters()}
        self.sequence = _sequence(model, [layer for layer, _, _ in found])
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

    def _grads(self, params: dict[str, Tensor], x: Tensor, y: Tensor
               ) -> tuple[list[Tensor], list[Tensor]]:
        """Per-sample output gradients ``(A, m, out)`` and inputs (``(A, m, in)``, or
        ``(m, in)`` when shared by every column) of every Linear layer."""
        if self.sequence is not None:
            return self._grads_sequence(params, x, y)
        return self._grads_vmap(params, x, y)

    def _grads_sequence(self, params: dict[str, Tensor], x: Tensor, y: Tensor
                        ) -> tuple[list[Tensor], list[Tensor]]:
        """An ``nn.Sequential`` of Linear layers and elementwise activations, module by
        module on ``(A, m, .)`` tensors: plain batched matrix products, one autograd call."""
        assert self.sequence is not None
        h = x
        outs: list[Tensor] = []
        ins: list[Tensor] = []
        for module in self.sequence:
            if not isinstance(module, nn.Linear):
                h = module(h)  # Flatten (before the first Linear) or an elementwise map
                continue
            w, b = params[self.param_of[id(module.weight)]], None
            if module.bias is not None:
                b = params[self.param_of[id(module.bias)]]
            ins.append(h.detach())
            if h.dim() == 2:  # the shared input of the first layer
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
        loss = self.loss_fn(h.reshape(-1, h.shape[-1]), y.repeat(a))
        return list(torch.autograd.grad(loss.sum(), outs)), ins

    def _grads_vmap(self, params: dict[str, Tensor], x: Tensor, y: Tensor
                    ) -> tuple[list[Tensor], list[Tensor]]:
        """Any Linear-only module: ``vmap`` of ``functional_call`` over the columns, the
        output gradients as the gradients of zero probes added to the layers' outputs."""
        layers = [layer for layer, _, _ in self.layers]
        loss_fn: LossFn = self.loss_fn

        def loss(probes: tuple[Tensor, ...], ps: dict[str, Tensor]
                 ) -> tuple[Tensor, tuple[Tensor, ...]]:
            inputs: dict[int, Tensor] = {}

            def hook(module: nn.Module, args: tuple[Tensor, ...], out: Tensor) -> Tensor:
                i = layers.index(module)  # type: ignore[arg-type]
                if i in inputs:
                    raise ValueError("a Linear layer was called twice in one forward")
                inputs[i] = args[0]
                return out + probes[i]

            handles = [layer.register_forward_hook(hook) for layer in layers]
            try:
                logits = functional_call(self.model, ps, (x,))
            finally:
                for h in handles:
                    h.remove()
            return loss_fn(logits, y).sum(), tuple(inputs[i].detach()
                                                   for i in range(len(layers)))

        m = x.shape[0]
        probes = tuple(torch.zeros(m, layer.out_features, dtype=x.dtype, device=x.device)
                       for layer in layers)
        g, a = vmap(grad(loss, has_aux=True), in_dims=(None, 0))(probes, params)
        return list(g), [t[0] if t.stride(0) == 0 else t for t in a]

    def _sums(self, theta: Tensor, x: Tensor, y: Tensor, w: Tensor, clip: float) -> Tensor:
        """``sum_j w_j clip(grad_j)`` over rows ``x`` shared by every column, ``(A, P)``."""
        params = self._params(theta)
        total: Tensor | None = None
        for start in range(0, x.shape[0], self.chunk_rows):
            sl = slice(start, start + self.chunk_rows)
            part = self._chunk(params, x[sl], y[sl], w[sl], clip, theta.shape[0])
            total = part if total is None else total.add_(part)
        return total if total is not None else torch.zeros_like(theta)

    def _chunk(self, params: dict[str, Tensor], x: Tensor, y: Tensor, w: Tensor, clip: float,
               a_cols: int) -> Tensor:
        """One chunk of :meth:`_sums`: per-sample norms ``||g|| ||a||`` per layer (and
        ``||g||`` per bias), then one product per layer of the scaled ``g`` and ``a``."""
        gs, acts = self._grads(params, x, y)

        def power(t: Tensor) -> Tensor:  # ||t||^2 (l2) or ||t||_1 (l1) along the last axis
            return t.abs().sum(dim=-1) if self.norm is Norm.L1 else t.square().sum(dim=-1)

        total = torch.zeros(gs[0].shape[:2], dtype=x.dtype, device=x.device)
        for (_, _, bias), g, a in zip(self.layers, gs, acts, strict=True):
            if g.dim() != 3 or a.dim() not in (2, 3):
                raise ValueError("the stacked twin needs 2-D inputs to Linear layers")
            gn = power(g)
            total += gn * (power(a) + 1.0) if bias is not None else gn * power(a)
        norms = total if self.norm is Norm.L1 else total.sqrt()
        scale = (clip / norms).clamp(max=1.0) * w  # (A, m)
        parts: dict[int, Tensor] = {}
        for (_, w_sl, bias), g, a in zip(self.layers, gs, acts, strict=True):
            sg = g * scale[..., None]  # (A, m, out)
            if a.dim() == 2:  # the shared input of the first layer: one GEMM
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
            logits = vmap(forward, in_dims=(0, None))(params, x)  # (A, m, k)
            loss = self.loss_fn(logits.reshape(-1, logits.shape[-1]), y.repeat(theta.shape[0]))
            total += loss.view(theta.shape[0], -1).double().sum(dim=1)
        mean: Tensor = total / self.y_test.shape[0]
        return mean


def column_engine(kernel: Kernel, attached: Attached, data: KernelData) -> ColumnEngine:
    """The stacked engine for a torch MLP that it reproduces, else the loop engine."""
    loop = LoopColumns(attached)
    if not isinstance(kernel, TorchKernel):
        return loop
    try:
        stacked = StackedColumns(kernel, data)
        ok = _agree(kernel, stacked, loop, data)
    except Exception:  # any model the stacked pass cannot take: the loop
        return loop
    return stacked if ok else loop


def _agree(kernel: Kernel, stacked: StackedColumns, loop: LoopColumns, data: KernelData) -> bool:
    """Whether both engines give the same sums and test loss for two columns on a few rows."""
    theta = kernel.init(repeats=2, generator=torch.Generator().manual_seed(1)).to(data.x.device)
    sel = np.arange(min(2, len(data.offsets) - 1), dtype=np.int64)
    weight = torch.linspace(0.5, 1.0, len(sel), device=data.x.device)
    for clip in (1e-3, 1e3):
        a = stacked.full(theta, sel, weight, clip=clip)
        b = loop.full(theta, sel, weight, clip=clip)
        if not torch.allclose(a, b, rtol=1e-3, atol=1e-5 * float(b.abs().max()) + 1e-12):
            return False
    return bool(torch.allclose(stacked.test_loss(theta), loop.test_loss(theta), rtol=1e-4))
