"""Probes of a user's model on a few random rows: is each row's output its own, and are its
per-sample gradients the ones clipping needs?

Per-sample clipping bounds each row's gradient; that bounds the sensitivity of a clipped sum
only when a row's output (hence its gradient) depends on no other row of the batch. Batch
normalisation is refused by its class (:mod:`fedqr.models.zoo`); a ``forward`` that mixes the
rows by hand (``h - h.mean(0)``) is not visible that way, so :func:`check_rows_independent`
runs the model on a batch of distinct random rows and on each row alone and refuses the
model where the outputs differ by more than float rounding. A ``forward`` that draws random
numbers (``torch.nn.functional.dropout``) gives two different outputs for the same rows: it
is refused too, as ``nn.Dropout`` is (the run's seed would not fix it, and the rows could
not be compared). Torch's global generator is left as it was. Logits that are not floating
point, or not finite on the probe rows, are refused first (a NaN is not equal to itself, so
such a model looked random). A ``forward`` that mixes rows only in batches larger than
:data:`PROBE_ROWS` is not seen.

:func:`per_sample_agrees` checks a per-sample method against autograd run on one row at a
time: the ghost method forms each layer's gradient from its hooks, so a weight shared by two
layers (its norm is not the sum of the layers' squared norms) or used outside its layer
(``F.linear(h, enc.weight.t())``: that use takes no hook) would be clipped wrongly; such a
model is given the ``vmap`` method instead (:func:`fedqr.models.model_check.check_model`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fedqr.models.logreg import Norm
from fedqr.models.losses import LossFn
from fedqr.models.per_sample import Method, clipped_grad_sums, trainable_parameters

__all__ = ["PROBE_ROWS", "check_logits", "check_rows_independent", "per_sample_agrees",
           "probe_rows"]

PROBE_ROWS = 8
"""Rows of the probe batch (uniform in [0, 1): distinct rows, inputs a model accepts)."""

_RTOL = 1e-3
"""Largest difference between a row's output in the batch and alone, relative to the largest
output (+1): float rounding of a batched product is about 1e-6 of it, mixing about 1. The same
share bounds a per-sample method's clipped gradients against autograd's, row by row."""

_TINY = 1e-30


def probe_rows(input_shape: tuple[int, ...], num_classes: int) -> tuple[Tensor, Tensor]:
    """:data:`PROBE_ROWS` rows uniform in [0, 1) (seed 1) and labels cycling the classes."""
    x = torch.rand(PROBE_ROWS, *input_shape, generator=torch.Generator().manual_seed(1))
    return x, torch.arange(PROBE_ROWS, dtype=torch.int64) % num_classes


def check_rows_independent(model: nn.Module, *, input_shape: tuple[int, ...],
                           label: str) -> None:
    """``ValueError`` if ``model``'s output for a row depends on the other rows of its batch,
    if a batch of one row is not ``(1, k)``, or if ``forward`` is random."""
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        x, _ = probe_rows(input_shape, 1)
        batch = _logits(model, x, label=label)
        if not torch.equal(batch, _logits(model, x, label=label)):
            raise ValueError(
                f"model {label!r} gives two different outputs for the same rows: its forward "
                "draws random numbers (functional dropout, noise layers) from torch's global "
                "generator, which the run's seed does not fix (runs would not be "
                "reproducible), and whether it mixes the rows of a batch (which would void "
                "the privacy guarantee) cannot be checked; make forward deterministic")
        alone = [_logits(model, x[i:i + 1], label=label) for i in range(PROBE_ROWS)]
    if any(a.shape[1] != batch.shape[1] for a in alone):
        raise ValueError(f"model {label!r} gives {batch.shape[1]} logits a row in a batch of "
                         f"{PROBE_ROWS} rows and {alone[0].shape[1]} for one row alone")
    gap = float((torch.cat(alone) - batch).abs().max())
    scale = float(batch.abs().max()) + 1.0
    if not gap <= _RTOL * scale:
        raise ValueError(
            f"model {label!r} mixes the rows of a batch: a row's logits alone differ from its "
            f"logits among {PROBE_ROWS} rows by {gap:.3g}, so clipping each row's gradient "
            "no longer bounds what one row changes (the privacy guarantee would not hold); "
            "compute each row's output from that row only (nn.GroupNorm or nn.LayerNorm "
            "instead of normalising over the batch)")


def check_logits(out: object, n: int, *, label: str) -> Tensor:
    """``out`` as ``(n, k)`` floating-point logits, or ``ValueError`` saying what it is."""
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != n:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"model {label!r} must map a batch of n inputs to (n, k) logits, got "
                         f"{shape} for n={n} (a Poisson batch can hold one row)")
    if not out.is_floating_point():
        raise ValueError(f"model {label!r} must return floating-point logits (the loss and "
                         f"its gradient need them), got dtype={out.dtype}")
    return out


def _logits(model: nn.Module, x: torch.Tensor, *, label: str) -> torch.Tensor:
    """``model(x)``, or ``ValueError`` unless it is finite ``(n, k)`` logits for the rows."""
    n = x.shape[0]
    try:
        out = model(x)
    except Exception as e:  # the user's forward
        raise ValueError(f"model {label!r} cannot take a batch of {n} row(s) (a Poisson batch "
                         f"can hold any number): {type(e).__name__}: {e}") from e
    out = check_logits(out, n, label=label)
    if not bool(torch.isfinite(out).all()):
        raise ValueError(f"model {label!r} gives non-finite logits (NaN or inf) for random "
                         f"inputs in [0, 1) of its input shape: its forward cannot be trained")
    return out


def per_sample_agrees(model: nn.Module, method: Method, *, x: Tensor, y: Tensor,
                      loss_fn: LossFn) -> bool:
    """Whether ``method``'s clipped gradient of each probe row equals autograd's on that row
    alone (clipped to half the smallest non-zero row norm, so every row is scaled by its own
    norm), in the l2 and the l1 norm, within :data:`_RTOL` of the gradients' size."""
    params = trainable_parameters(model)
    rows = []
    for i in range(x.shape[0]):
        loss = loss_fn(model(x[i:i + 1]), y[i:i + 1]).sum()
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        rows.append(torch.cat([(torch.zeros_like(p) if g is None else g.detach()).reshape(-1)
                               for p, g in zip(params, grads, strict=True)]))
    ref = torch.stack(rows)
    for norm in (Norm.L2, Norm.L1):
        sizes = ref.norm(p=1 if norm is Norm.L1 else 2, dim=1)
        positive = sizes[sizes > 0]
        if not positive.numel():
            continue  # no gradient on the probe rows: nothing to tell the methods apart
        clip = 0.5 * float(positive.min())
        expected = ref * (clip / sizes.clamp_min(_TINY)).clamp(max=1.0)[:, None]
        got = clipped_grad_sums(model, x, y, clip=clip, norm=norm, method=method,
                                loss_fn=loss_fn, offsets=list(range(x.shape[0] + 1))).grad
        scale = float(expected.abs().max()) + _TINY
        if not float((got - expected).abs().max()) <= _RTOL * scale:
            return False
    return True
