"""The checks of a user's torch model before any work (:func:`check_model`).

A model must be an ``nn.Module`` built anew by each call of its factory, map a batch to
``(n, num_classes)`` floating-point logits, hold no batch-coupled layer (batch normalisation:
use GroupNorm, as Opacus' validator says) and no dropout, keep its buffers unchanged in
``forward``, compute each row's output from that row alone with a deterministic ``forward``
(:mod:`fedqr.models._probe`), and give per-sample gradients that agree with autograd's on one
row at a time; its per-sample method is ``ghost`` where that holds for the layer hooks
(Linear, Conv1d, Conv2d, GroupNorm/LayerNorm/RMSNorm), else ``vmap``. A ``loss_fn`` must give each
row a finite loss of its own.
"""

from __future__ import annotations

import torch
from torch import nn

from fedqr.models._probe import (
    check_logits,
    check_rows_independent,
    per_sample_agrees,
    probe_rows,
)
from fedqr.models.losses import LossFn, per_sample_cross_entropy
from fedqr.models.per_sample import Method
from fedqr.models.torch_kernel import ModelFactory

__all__ = ["check_model"]

_BATCH_COUPLED = (nn.modules.batchnorm._BatchNorm, nn.SyncBatchNorm)
_DROPOUT = (nn.modules.dropout._DropoutNd,)  # Dropout*, AlphaDropout, FeatureAlphaDropout


def check_model(build: ModelFactory, *, input_shape: tuple[int, ...], num_classes: int,
                label: str, loss_fn: LossFn = per_sample_cross_entropy) -> Method:
    """Build the model and check it; return its per-sample method.

    Raises
    ------
    ValueError
        If the factory raises, returns no ``nn.Module`` or the same module twice, the model
        has no parameters, holds batch normalisation or dropout, changes its buffers in
        ``forward``, draws random numbers there, mixes the rows of a batch, gives logits of
        the wrong shape, or no per-sample gradients that agree with autograd's row by row.
    """
    model = _built(build, label)
    if any(p is q for p, q in zip(model.parameters(), _built(build, label).parameters(),
                                  strict=False)):
        raise ValueError(f"model {label!r}: the factory returned the same module (or its "
                         "parameters) twice; fedqr builds one model per repeat and trains it "
                         "in place, so the factory must build a new module at each call "
                         "(copy.deepcopy(pretrained) to start from trained weights)")
    _check_layers(model, label)
    x, y = probe_rows(tuple(input_shape), num_classes)
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    try:
        out = model(x[:2])
    except Exception as e:
        raise ValueError(f"model {label!r} cannot take inputs of shape {tuple(input_shape)}: "
                         f"{type(e).__name__}: {e}") from e
    if isinstance(out, torch.Tensor) and tuple(out.shape) != (2, num_classes):
        raise ValueError(f"model {label!r} must map a batch of n inputs to (n, {num_classes}) "
                         f"logits (num_classes={num_classes}), got {tuple(out.shape)} for n=2")
    check_logits(out, 2, label=label)  # a tensor, floating point
    changed = [n for n, b in model.named_buffers() if n not in buffers
               or not torch.equal(b, buffers[n])]
    if changed:
        raise ValueError(f"model {label!r} changes its buffer {changed[0]!r} in forward "
                         "(running statistics, spectral_norm's power iteration): such state "
                         "carries one batch's rows into the next and one repeat into the "
                         "others, so a row's gradient is no longer its own; compute it "
                         "outside the model or keep it fixed")
    _check_per_sample_loss(loss_fn, out, y[:2], label=label)
    check_rows_independent(model, input_shape=tuple(input_shape), label=label)
    _check_per_sample_loss(loss_fn, model(x).detach(), y, label=label)
    return _per_sample_method(model, x, y, label=label, loss_fn=loss_fn)


def _built(build: ModelFactory, label: str) -> nn.Module:
    """The model built from seed 0, or ``ValueError`` naming what the factory did."""
    try:
        model = build(torch.Generator().manual_seed(0))
    except (Exception, SystemExit) as e:  # the user's factory (sys.exit included)
        raise ValueError(f"model {label!r}: the factory raised {type(e).__name__}: {e}") from e
    if not isinstance(model, nn.Module):
        raise ValueError(f"model {label!r}: the factory must return a torch.nn.Module, "
                         f"got {type(model).__name__}")
    return model


def _check_layers(model: nn.Module, label: str) -> None:
    """``ValueError`` for batch normalisation, dropout, no trainable or non-float32
    parameters."""
    coupled = [type(m).__name__ for m in model.modules() if isinstance(m, _BATCH_COUPLED)]
    if coupled:
        raise ValueError(f"model {label!r} holds {coupled[0]}: batch normalisation mixes the "
                         "samples of a batch, so per-sample gradients (and their clipping) "
                         "are undefined; use nn.GroupNorm (or LayerNorm) instead")
    dropout = [m for m in model.modules() if isinstance(m, _DROPOUT) and m.p > 0]
    if dropout:
        raise ValueError(f"model {label!r} holds {dropout[0]!r}: dropout draws from torch's "
                         "global random generator, not the run's seed (runs would not be "
                         "reproducible), and fedqr trains and evaluates the module as built; "
                         "remove it or set p=0 (the clients' noise regularises already)")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError(f"model {label!r} has no trainable parameters")
    other = [(n, p.dtype) for n, p in model.named_parameters() if p.dtype != torch.float32]
    if other:
        raise ValueError(f"model {label!r} must hold float32 parameters (fedqr feeds float32 "
                         f"rows and draws float32 noise), got {other[0][1]} for "
                         f"{other[0][0]!r}: leave out .double() / .half() in the factory")


def _per_sample_method(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, label: str,
                       loss_fn: LossFn) -> Method:
    """The first method (``ghost``, then ``vmap``) whose clipped per-row gradients agree with
    autograd's on one row at a time (:func:`~fedqr.models._probe.per_sample_agrees`): a
    weight shared by two layers or used outside its layer takes ``vmap``."""
    errors: list[str] = []
    for method in (Method.GHOST, Method.VMAP):
        try:
            if per_sample_agrees(model, method, x=x, y=y, loss_fn=loss_fn):
                return method
            errors.append(f"{method.value}: its clipped gradients differ from autograd's on "
                          "single rows")
        except Exception as e:  # a method this model does not support
            errors.append(f"{method.value}: {type(e).__name__}: {e}")
    raise ValueError(f"model {label!r}: per-sample gradients cannot be computed ("
                     + "; ".join(errors) + "): fedqr takes them from Linear, conv and "
                     "normalisation layers' hooks or from torch.func.vmap, and this model "
                     "suits neither (layers vmap does not support, such as nn.GRU or "
                     "nn.LSTM)")


def _check_per_sample_loss(loss_fn: LossFn, logits: torch.Tensor, y: torch.Tensor, *,
                           label: str) -> None:
    """``ValueError`` unless ``loss_fn(logits, y)`` is one finite loss per row (shape
    ``(n,)``), each computed from its own row: a reduced loss (a mean) or one divided by the
    batch's size would scale every clipped gradient and the test loss silently."""
    def losses(lg: torch.Tensor, yy: torch.Tensor) -> torch.Tensor:
        try:
            loss = loss_fn(lg, yy)
        except Exception as e:  # the user's loss
            raise ValueError(f"loss_fn (model {label!r}) raised {type(e).__name__}: "
                             f"{e}") from e
        n = lg.shape[0]
        if not isinstance(loss, torch.Tensor) or tuple(loss.shape) != (n,):
            got = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise ValueError(f"loss_fn must return one loss per row, shape (n,) (reduction="
                             f"'none'), got {got} for n={n} (model {label!r})")
        return loss
    logits = logits.detach()
    batch = losses(logits, y)
    if not bool(torch.isfinite(batch).all()):
        raise ValueError(f"loss_fn (model {label!r}) gives non-finite losses (NaN or inf) for "
                         "finite logits: it cannot be trained")
    alone = torch.cat([losses(logits[i:i + 1], y[i:i + 1]) for i in range(len(y))])
    if not float((alone - batch).abs().max()) <= 1e-5 * (float(batch.abs().max()) + 1.0):
        raise ValueError(f"loss_fn (model {label!r}) gives a row another loss in a batch than "
                         "alone (a division by len(y), a mean over the batch?): each row's "
                         "loss must depend on that row only, or clipping would not bound it")
