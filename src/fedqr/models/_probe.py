"""Probes of a user's model on a few random rows: is each row's output its own?

Per-sample clipping bounds each row's gradient; that bounds the sensitivity of a clipped sum
only when a row's output (hence its gradient) depends on no other row of the batch. Batch
normalisation is refused by its class (:mod:`fedqr.models.zoo`); a ``forward`` that mixes the
rows by hand (``h - h.mean(0)``) is not visible that way, so :func:`check_rows_independent`
runs the model on a batch of distinct random rows and on each row alone and refuses the
model where the outputs differ by more than float rounding. A ``forward`` that draws random
numbers (``torch.nn.functional.dropout``) gives two different outputs for the same rows: it
is reported (:class:`RandomForwardWarning`: the run's seed does not fix it), and the rows
cannot then be compared. Torch's global generator is left as it was. Logits that are not
floating point, or not finite on the probe rows, are refused first (a NaN is not equal to
itself, so such a model looked random). A ``forward`` that mixes rows only in batches larger
than :data:`PROBE_ROWS` is not seen.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

__all__ = ["PROBE_ROWS", "RandomForwardWarning", "check_rows_independent"]

PROBE_ROWS = 8
"""Rows of the probe batch (uniform in [0, 1): distinct rows, inputs a model accepts)."""

_RTOL = 1e-3
"""Largest difference between a row's output in the batch and alone, relative to the largest
output (+1): float rounding of a batched product is about 1e-6 of it, mixing about 1."""


class RandomForwardWarning(UserWarning):
    """The model's ``forward`` draws random numbers the run's seed does not fix."""


def check_rows_independent(model: nn.Module, *, input_shape: tuple[int, ...],
                           label: str) -> None:
    """``ValueError`` if ``model``'s output for a row depends on the other rows of its batch
    (or a batch of one row is not ``(1, k)``); :class:`RandomForwardWarning` if ``forward``
    is random (the rows are then not compared)."""
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        x = torch.rand(PROBE_ROWS, *input_shape, generator=torch.Generator().manual_seed(1))
        batch = _logits(model, x, label=label)
        if not torch.equal(batch, _logits(model, x, label=label)):
            warnings.warn(
                f"model {label!r} gives two different outputs for the same rows: its forward "
                "draws random numbers (dropout?) from torch's global generator, which the "
                "run's seed does not fix (runs are not reproducible)",
                RandomForwardWarning, stacklevel=3)
            return
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


def _logits(model: nn.Module, x: torch.Tensor, *, label: str) -> torch.Tensor:
    """``model(x)``, or ``ValueError`` unless it is ``(n, k)`` logits for the ``n`` rows."""
    n = x.shape[0]
    try:
        out = model(x)
    except Exception as e:  # the user's forward
        raise ValueError(f"model {label!r} cannot take a batch of {n} row(s) (a Poisson batch "
                         f"can hold any number): {type(e).__name__}: {e}") from e
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != n:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"model {label!r} must map a batch of n inputs to (n, k) logits, got "
                         f"{shape} for n={n} (a Poisson batch can hold one row)")
    if not out.is_floating_point():
        raise ValueError(f"model {label!r} must return floating-point logits (the loss and "
                         f"its gradient need them), got dtype={out.dtype}")
    if not bool(torch.isfinite(out).all()):
        raise ValueError(f"model {label!r} gives non-finite logits (NaN or inf) for random "
                         f"inputs in [0, 1) of its input shape: its forward cannot be trained")
    return out
