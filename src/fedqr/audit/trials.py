"""Trials of the canary game, batched: the adversary's score in each simulated run.

White box, worst case. The audited client holds the canary, a record whose clipped
per-sample gradient is ``clip * e_1`` in every round (all its norm on one coordinate, so the
l1 and the l2 norm both equal ``clip``). The adversary knows everything but the canary bit,
including every other record's gradient; those records are chosen (as DP allows any
data set) with gradients orthogonal to ``e_1``, so their contribution to coordinate 1 is
known and the audit simulates only what is unknown: the canary's term and the noise of
coordinate 1. The other coordinates carry independent noise and no signal, so they tell
the adversary nothing.

Laplace (replace-one, full batch): ``D`` holds the canary, ``D'`` replaces it by a record
with gradient ``-clip * e_1``; coordinate 1 of a reply is ``+-c + Laplace(b)`` with
``c = clip / d_i`` (the two means differ by the l1 sensitivity ``2 clip / d_i``).

Gaussian (add/remove-one, Poisson sampling at rate ``q``): ``D'`` lacks the canary;
coordinate 1 of a reply is ``B * Delta + N(0, sigma^2)`` in ``D`` with ``B ~ Bernoulli(q)``
and ``Delta = clip / (q d_i)`` (the sum over the sample is divided by the public expected
batch size ``q d_i``), and ``N(0, sigma^2)`` in ``D'``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fedqr.audit._noise import draw_noise
from fedqr.privacy import Mechanism, Neighbours, mechanism_for

__all__ = ["final_model_scores", "reply_scores"]

_CHUNK = 1 << 21  # noise draws per batch: bounds memory whatever the trials


def _chunks(trials: int, width: int) -> list[int]:
    step = max(1, _CHUNK // max(1, width))
    return [min(step, trials - s) for s in range(0, trials, step)]


def _signal(mechanism: Mechanism, *, canary: bool, shape: tuple[int, ...], shift: float,
            sample_rate: float, generator: torch.Generator) -> torch.Tensor:
    """The canary's term in coordinate 1 of each reply (``+-c``, or ``B * Delta``)."""
    if mechanism_for(mechanism).neighbours is Neighbours.REPLACE_ONE:  # full batch, +-c
        return torch.full(shape, shift if canary else -shift, dtype=torch.float64)
    if not canary:
        return torch.zeros(shape, dtype=torch.float64)
    sampled = torch.rand(shape, generator=generator, dtype=torch.float64) < sample_rate
    return sampled.to(torch.float64) * shift


def reply_scores(mechanism: Mechanism, *, canary: bool, trials: int, replies: int,
                 scale: float, shift: float, sample_rate: float,
                 generator: torch.Generator) -> np.ndarray:
    """Log-likelihood ratio of ``D`` over ``D'`` given all ``replies`` replies, per trial.

    The Neyman-Pearson optimal statistic, a sum of per-reply terms: for Laplace
    ``(|y + c| - |y - c|) / b = 2 clamp(y, -c, c) / b``; for Gaussian with Poisson sampling
    the mixture score ``log(1 - q + q exp((y Delta - Delta^2 / 2) / sigma^2))``.

    Parameters
    ----------
    mechanism
        Laplace or Gaussian.
    canary
        Whether the trials run on ``D`` (canary in) or ``D'``.
    trials, replies
        Number of simulated runs and the client's reply count ``R_i``.
    scale
        Laplace scale ``b`` or Gaussian std ``sigma`` of the client's noise.
    shift
        ``c = clip / d_i`` (Laplace) or ``Delta = clip / (q d_i)`` (Gaussian).
    sample_rate
        ``q`` (Gaussian).
    generator
        Source of every draw.
    """
    out = []
    log_keep = math.log1p(-sample_rate) if sample_rate < 1 else -math.inf
    for n in _chunks(trials, replies):
        shape = (n, replies)
        y = _signal(mechanism, canary=canary, shape=shape, shift=shift,
                    sample_rate=sample_rate, generator=generator)
        y = y + draw_noise(mechanism, scale, shape, generator=generator)
        if mechanism is Mechanism.LAPLACE:
            # (|y + c| - |y - c|) / b, written so that saturated replies give exactly
            # +-2c/b: the rounding of the textbook form differs between the worlds and
            # would itself distinguish them (a float artefact of the test, not of the noise)
            llr = y.clamp(-shift, shift) * (2.0 / scale)
        else:
            z = math.log(sample_rate) + (y * shift - shift * shift / 2.0) / (scale * scale)
            llr = torch.logaddexp(torch.full_like(z, log_keep), z)
        out.append(llr.sum(dim=1).numpy())
    return np.concatenate(out)


def final_model_scores(mechanism: Mechanism, *, canary: bool, trials: int, replies: int,
                       scale: float, others: list[tuple[int, float]], shift: float,
                       sample_rate: float, generator: torch.Generator) -> np.ndarray:
    """Coordinate 1 of the final model, up to its known part, per trial.

    For a model whose loss is linear in coordinate 1 (the canary's gradient does not depend
    on theta) and a constant learning rate ``eta``, ``theta_T[1] = known - eta / b * Y`` with
    ``Y`` the sum of coordinate 1 of *every* reply of the run: the audited client's signal
    and noise plus the noise of every other client's replies. ``Y`` is the score (the
    likelihood ratio is monotone in it for Gaussian; for Laplace it is the natural one).

    Parameters
    ----------
    others
        ``(replies, noise scale)`` of every other client (Laplace ``b`` or Gaussian ``sigma``).
    Other parameters
        As :func:`reply_scores`.
    """
    out = []
    if mechanism is Mechanism.GAUSSIAN:  # a sum of Gaussians is Gaussian: one exact draw
        std = math.sqrt(replies * scale**2 + sum(r * s**2 for r, s in others))
        for n in _chunks(trials, replies + 1):
            sig = _signal(mechanism, canary=canary, shape=(n, replies), shift=shift,
                          sample_rate=sample_rate, generator=generator).sum(dim=1)
            out.append((sig + draw_noise(mechanism, std, (n,), generator=generator)).numpy())
        return np.concatenate(out)
    # the audited client's replies are drawn by fedqr's sampler; every other client's sum of
    # r i.i.d. Laplace(s) draws is drawn exactly as s (G1 - G2), G ~ Gamma(r, 1), as
    # Laplace(s) = s (E1 - E2) with E ~ Exp(1): two draws per client instead of 2 r
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    rng = np.random.default_rng(seed)
    for n in _chunks(trials, replies + 2 * len(others)):
        y = _signal(mechanism, canary=canary, shape=(n,), shift=shift * replies,
                    sample_rate=sample_rate, generator=generator)
        y = y + draw_noise(mechanism, scale, (n, replies), generator=generator).sum(dim=1)
        rest = np.zeros(n)
        for r, s in others:
            if r > 0:
                rest += s * (rng.standard_gamma(r, n) - rng.standard_gamma(r, n))
        out.append(y.numpy() + rest)
    return np.concatenate(out)
