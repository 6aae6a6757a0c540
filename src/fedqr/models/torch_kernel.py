"""Any ``torch.nn.Module`` as a :class:`~fedqr.models.kernel.Kernel`: per-sample clipping.

``theta`` of a repeat is the model's flattened trainable parameters (``requires_grad``, in
``model.parameters()`` order: :func:`~fedqr.models.per_sample.trainable_parameters`); one
working copy of the model is loaded with each repeat's ``theta`` in turn (repeats run one after
another: batching them would need R times the activation memory).

A frozen parameter (``requires_grad=False``) is not in ``theta``: it is neither trained nor
clipped nor noised, and the parameter count (the noise's dimension, the reply's size) leaves
it out. It keeps the value of the model built from seed 0 (the working copy's), in every
repeat and on every Flower node (it is never sent); a factory that sets it deterministically
(pre-trained or constant weights) gives exactly its own values, one that draws it at random
is warned that every repeat shares one draw. Clipped sums come from
:func:`fedqr.models.per_sample.clipped_grad_sums` (``ghost`` for models of Linear, Conv1d, Conv2d
and GroupNorm/LayerNorm/RMSNorm layers, ``vmap`` for any other per-sample model), with the loss
the kernel was given (default cross-entropy).
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fedqr.data._validate import parse_enum
from fedqr.models.kernel import GradSums, KernelData
from fedqr.models.losses import LossFn, per_sample_cross_entropy
from fedqr.models.per_sample import (
    DEFAULT_CHUNK_ROWS,
    ClippedSums,
    Method,
    clipped_grad_sums,
    trainable_parameters,
)

__all__ = ["ModelFactory", "TorchKernel", "TorchOptions", "evaluate_model", "evaluation_mode",
           "flat_trainable", "frozen_parameters", "load_flat", "place_model"]

#: Builds a freshly initialised model from a CPU generator (the same model on every device).
ModelFactory = Callable[[torch.Generator], nn.Module]


@dataclass(frozen=True, kw_only=True)
class TorchOptions:
    """Execution settings of a torch kernel (no effect on the algorithm).

    Attributes
    ----------
    chunk_rows:
        Rows per chunk of the per-sample clipping (bounds memory: see
        :mod:`fedqr.models.per_sample`).
    eval_rows:
        Rows per chunk of forward-only evaluation (on 2 CPU threads 256 was as fast as or
        faster than 1,000 and 4,000).
    method:
        Per-sample method: ``ghost`` (fast; Linear, conv and norm layers) or ``vmap`` (any model).
    channels_last:
        Keep 4-D parameters and evaluation inputs in channels-last memory format (on 2 CPU
        threads the CNN's forward pass is about 1.5x faster, per-sample clipping 1.2x).

    When the training objective is evaluated is the run's choice
    (:attr:`fedqr.sim.config.SimConfig.train_eval`).
    """

    chunk_rows: int = DEFAULT_CHUNK_ROWS
    eval_rows: int = 256
    method: Method = Method.GHOST
    channels_last: bool = True

    def __post_init__(self) -> None:
        for name in ("chunk_rows", "eval_rows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {name}={value!r}")
        parse_enum(Method, "method", self.method)


def place_model(model: nn.Module, device: torch.device, *, channels_last: bool) -> nn.Module:
    """``model`` on ``device``, 4-D parameters in channels-last format when asked (every path
    places it alike, so their per-sample sums agree bit for bit)."""
    model = model.to(device)
    if channels_last:
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 4:
                    p.data = p.data.contiguous(memory_format=torch.channels_last)
    return model


def load_flat(model: nn.Module, theta: Tensor) -> None:
    """Copy the flat ``theta`` into ``model``'s trainable parameters (keeping their memory
    format); frozen ones keep their values."""
    pos = 0
    with torch.no_grad():
        for p in trainable_parameters(model):
            p.copy_(theta[pos:pos + p.numel()].view_as(p))
            pos += p.numel()


def flat_trainable(model: nn.Module) -> Tensor:
    """``model``'s trainable parameters flattened into one vector (the layout of ``theta``).

    Parameters
    ----------
    model : torch.nn.Module
        Any module with at least one trainable parameter.

    Returns
    -------
    Tensor
        ``(P,)`` in the parameters' dtype, detached.
    """
    return torch.cat([p.detach().flatten() for p in trainable_parameters(model)])


def frozen_parameters(model: nn.Module) -> dict[str, Tensor]:
    """``model``'s frozen parameters (``requires_grad=False``) by name, detached."""
    return {n: p.detach() for n, p in model.named_parameters() if not p.requires_grad}


def _drawn_frozen(reference: dict[str, Tensor], model: nn.Module) -> list[str]:
    """Names of the frozen parameters whose values in ``model`` differ from ``reference``'s."""
    return [n for n, p in frozen_parameters(model).items()
            if n not in reference or not torch.equal(p, reference[n])]


@contextlib.contextmanager
def evaluation_mode(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` in evaluation mode (``model.eval()``: a ``forward`` that reads
    ``self.training`` takes its test branch) for the block; its mode restored after."""
    was = model.training
    model.train(False)
    try:
        yield model
    finally:
        model.train(was)


@torch.no_grad()
def evaluate_model(
    model: nn.Module, x: Tensor, y: Tensor, *, chunk_rows: int, channels_last: bool = False,
    loss_fn: LossFn = per_sample_cross_entropy,
) -> tuple[float, int]:
    """Summed loss (float64) and number of correct predictions over ``(x, y)``, the model in
    evaluation mode (:func:`evaluation_mode`)."""
    with evaluation_mode(model):
        return _evaluate(model, x, y, chunk_rows=chunk_rows, channels_last=channels_last,
                         loss_fn=loss_fn)


def _evaluate(model: nn.Module, x: Tensor, y: Tensor, *, chunk_rows: int, channels_last: bool,
              loss_fn: LossFn) -> tuple[float, int]:
    loss = torch.zeros((), dtype=torch.float64, device=x.device)
    correct = torch.zeros((), dtype=torch.int64, device=x.device)
    for start in range(0, x.shape[0], chunk_rows):
        xc, yc = x[start:start + chunk_rows], y[start:start + chunk_rows]
        if channels_last and xc.dim() == 4:
            xc = xc.contiguous(memory_format=torch.channels_last)
        logits = model(xc)
        if loss_fn is per_sample_cross_entropy:  # the fused sum (as every release before)
            loss += F.cross_entropy(logits, yc, reduction="sum").double()
        else:
            loss += loss_fn(logits, yc).sum().double()
        correct += (logits.argmax(dim=1) == yc).sum()
    return float(loss), int(correct)


@dataclass(frozen=True, kw_only=True)
class TorchKernel:
    """A torch model built by ``build(generator)`` for inputs of ``input_shape``."""

    build: ModelFactory
    input_shape: tuple[int, ...]
    num_classes: int
    label: str = "torch"
    loss_fn: LossFn = per_sample_cross_entropy
    options: TorchOptions = field(default_factory=TorchOptions)

    @property
    def name(self) -> str:
        """The model's label (``cnn``, ``mlp``, a factory's name)."""
        return self.label

    @functools.cached_property
    def _layout(self) -> tuple[int, dict[str, Tensor], dict[str, list[int]]]:
        """The trainable size, the frozen parameters and each trainable parameter's shape of
        the model built from seed 0 (the working copy's: its frozen values are every
        repeat's)."""
        model = self.build(torch.Generator().manual_seed(0))
        shapes = {n: list(p.shape) for n, p in model.named_parameters() if p.requires_grad}
        return (sum(p.numel() for p in trainable_parameters(model)), frozen_parameters(model),
                shapes)

    @property
    def parameter_shapes(self) -> dict[str, list[int]]:
        """Each trainable parameter's shape by name: the layer widths (result.json's
        ``provenance.model``)."""
        return self._layout[2]

    @property
    def num_params(self) -> int:
        """Number of trainable scalar parameters (frozen ones are not trained: module
        docstring)."""
        return self._layout[0]

    @property
    def num_frozen(self) -> int:
        """Number of frozen scalar parameters (``requires_grad=False``: never trained)."""
        return sum(p.numel() for p in self._layout[1].values())

    @property
    def param_shape(self) -> tuple[int, ...]:
        """Flat, ``(P,)``."""
        return (self.num_params,)

    @property
    def batched(self) -> bool:
        """Repeats run one after another, each with its own generator."""
        return False

    @property
    def uses_coding(self) -> bool:
        """Per-sample gradients of any model: float32 only."""
        return False

    def init(self, *, repeats: int, generator: torch.Generator) -> Tensor:
        """``repeats`` models drawn one after another from ``generator``, their trainable
        parameters flat, ``(R, P)`` (a warning where the factory draws frozen ones at random:
        every repeat keeps seed 0's, module docstring)."""
        models = [self.build(generator) for _ in range(repeats)]
        if self.num_frozen:
            self._warn_drawn_frozen(models)
        return torch.stack([flat_trainable(m) for m in models]).to(torch.float32)

    def _warn_drawn_frozen(self, models: list[nn.Module]) -> None:
        """Warn once per call if the frozen parameters of ``models`` differ from seed 0's."""
        reference = self._layout[1]
        drawn = sorted({n for m in models for n in _drawn_frozen(reference, m)})
        if drawn:
            warnings.warn(
                f"model {self.name!r}: the frozen parameters {', '.join(drawn)} differ between "
                "builds of the factory (drawn at random): every repeat (and every Flower "
                "node) keeps the values of the model built from seed 0; set them "
                "deterministically in the factory to choose them", RuntimeWarning,
                stacklevel=3)

    def attach(self, data: KernelData) -> _Attached:
        """The working model on the data's device and the inputs in ``input_shape``."""
        model = place_model(self.build(torch.Generator().manual_seed(0)), data.x.device,
                            channels_last=self.options.channels_last)  # frozen: seed 0's
        x, x_test = data.x.view(-1, *self.input_shape), data.x_test.view(-1, *self.input_shape)
        for name, rows in (("training", x), ("test", x_test)):
            _check_takes(model, rows[:_DATA_PROBE_ROWS], label=self.label, rows=name)
        return _Attached(self, model, data, x, x_test)

    def describe(self) -> dict[str, object]:
        """Name, size (trainable parameters) and per-sample method; ``frozen_params`` where
        the model has frozen parameters."""
        out: dict[str, object] = {"name": self.name, "num_params": self.num_params,
                                  "per_sample": self.options.method.value}
        if self.num_frozen:
            out["frozen_params"] = self.num_frozen
        return out


_DATA_PROBE_ROWS = 64
"""Rows of the data a model is run on when it is attached (its check ran on random rows)."""


@torch.no_grad()
def _check_takes(model: nn.Module, x: Tensor, *, label: str, rows: str) -> None:
    """``ValueError`` naming the model and the data when its forward fails on ``x``, the
    first rows of the run's data: an error inside torch (``IndexError: index out of range
    in self`` of an Embedding fed standardised codes) said neither."""
    if not x.shape[0]:
        return
    try:
        with evaluation_mode(model):
            model(x)
    except Exception as e:  # the user's forward on the user's rows
        raise ValueError(
            f"model {label!r} fails on the data's {rows} rows ({type(e).__name__}: {e}); "
            "its inputs are the data's features as fedqr feeds them: standardised by "
            "default (standardize=False, --no-standardize, keeps them as given, e.g. integer "
            "codes for an Embedding)") from e


@dataclass(frozen=True)
class _Attached:
    kernel: TorchKernel
    model: nn.Module
    data: KernelData
    x: Tensor
    x_test: Tensor

    def _run(self, xs: Tensor, ys: Tensor, off: np.ndarray | None, clip: float) -> ClippedSums:
        opts = self.kernel.options
        return clipped_grad_sums(self.model, xs, ys, clip=clip, norm=self.data.norm, offsets=off,
                                 chunk_rows=opts.chunk_rows, method=opts.method,
                                 loss_fn=self.kernel.loss_fn)

    def full_sums(self, theta: Tensor, sel: np.ndarray, *, clip: float,
                  with_train_loss: bool) -> GradSums:
        off, y = self.data.offsets, self.data.y
        parts = []
        for r in range(theta.shape[0]):
            load_flat(self.model, theta[r])
            parts.append([self._run(self.x[off[i]:off[i + 1]], y[off[i]:off[i + 1]], None, clip)
                          for i in sel[r]])
        return _stack([[(p.grad, p.rows, p.clipped, p.loss_sum) for p in row] for row in parts],
                      client_loss=True)

    def sample_sums(self, theta: Tensor, sel: np.ndarray, *, clip: float,
                    positions: tuple[Tensor, Tensor]) -> GradSums:
        pos, valid = positions
        dev = theta.device
        parts = []
        for r in range(theta.shape[0]):
            load_flat(self.model, theta[r])
            rows = (torch.as_tensor(self.data.offsets[sel[r]], device=dev)[:, None]
                    + pos[r])[valid[r]]
            counts = valid[r].sum(dim=1).cpu().numpy()
            out = self._run(self.x[rows], self.data.y[rows],
                            np.concatenate([[0], np.cumsum(counts)]), clip)
            parts.append([(out.grad, out.rows, out.clipped, out.loss_sum)])
        return _stack(parts, client_loss=False)

    def test_metrics(self, theta: Tensor) -> tuple[list[float], list[float]]:
        losses, accs = [], []
        n = len(self.data.y_test)
        for r in range(theta.shape[0]):
            load_flat(self.model, theta[r])
            loss, correct = self._evaluate(self.x_test, self.data.y_test)
            losses.append(loss / n)
            accs.append(correct / n)
        return losses, accs

    def _evaluate(self, x: Tensor, y: Tensor) -> tuple[float, int]:
        opts = self.kernel.options
        return evaluate_model(self.model, x, y, chunk_rows=opts.eval_rows,
                              channels_last=opts.channels_last, loss_fn=self.kernel.loss_fn)

    def train_objective(self, theta: Tensor, fused: GradSums | None, *, sel: np.ndarray | None,
                        weight_decay: float) -> list[float]:
        off, y = self.data.offsets, self.data.y
        values = []
        for r in range(theta.shape[0]):
            load_flat(self.model, theta[r])
            known: dict[int, float] = {}
            if fused is not None and fused.client_loss is not None and sel is not None:
                known = dict(zip(sel[r].tolist(), fused.client_loss[r].tolist(), strict=True))
            total = sum(known.values())
            for i in range(len(off) - 1):
                if i not in known:
                    total += self._evaluate(self.x[off[i]:off[i + 1]], y[off[i]:off[i + 1]])[0]
            reg = 0.5 * weight_decay * float(theta[r].double().pow(2).sum())
            values.append(total / int(off[-1]) + reg)
        return values

    @torch.no_grad()
    def train_losses(self, theta: Tensor, rows: Tensor) -> Tensor:
        opts = self.kernel.options
        out = torch.zeros(theta.shape[0], rows.shape[0], dtype=torch.float64,
                          device=theta.device)
        for r in range(theta.shape[0]):
            load_flat(self.model, theta[r])
            for start in range(0, rows.shape[0], opts.eval_rows):
                idx = rows[start:start + opts.eval_rows]
                xc = self.x.index_select(0, idx)
                if opts.channels_last and xc.dim() == 4:
                    xc = xc.contiguous(memory_format=torch.channels_last)
                out[r, start:start + idx.shape[0]] = self.kernel.loss_fn(
                    self.model(xc), self.data.y.index_select(0, idx)).double()
        return out


def _stack(parts: list[list[tuple[Tensor, Tensor, Tensor, Tensor]]], *,
           client_loss: bool) -> GradSums:
    """Per-repeat lists of (grad, rows, clipped, loss) segments as one ``(R, b, ...)`` batch."""
    cols = [[torch.cat([seg[k] for seg in row]) for row in parts] for k in range(4)]
    grad, rows, clipped, loss = (torch.stack(c) for c in cols)
    return GradSums(grad, rows, clipped, None, loss if client_loss else None)
