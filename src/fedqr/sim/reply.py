"""The client's reply, written once: mean gradient, weight decay, ledger charge, noise.

Every execution path forms its replies here: the batched logistic-regression engine
(:mod:`fedqr.sim.engine`, a ``(repeats, clients)`` batch), the network engine
(:mod:`fedqr.sim.network`, one repeat's clients) and the Flower client
(:mod:`fedqr.flower.client_logic`, a batch of one). The clipped gradient sums come from the
model's own pass (the fused logistic-regression pass of :mod:`fedqr.models.logreg_pass`, or the
per-sample clipping of :mod:`fedqr.models.per_sample`); the mechanism object
(``config.privacy.spec``) decides the denominator and how the noise meets the gradient.
Same inputs and the same generator state give bit-identical replies on every path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from fedqr.sim.config import SimConfig

__all__ = ["NoiseDraw", "Replies", "client_replies"]

NoiseDraw = Callable[[Tensor, Tensor, int], Tensor]
"""``(std, param, num_params) -> noise`` of shape ``std.shape + (num_params,)``: the
mechanism's draw from whichever generator(s) the caller uses (batch or per reply)."""


@dataclass(frozen=True)
class Replies:
    """Replies ``theta^i`` and the clipped mean gradients they were made from."""

    theta: Tensor  # (..., P): theta_t - eta_t (noisy gradient)
    g_data: Tensor  # (..., P): clipped sum / denominator, no weight decay, no noise


def client_replies(
    grad_sum: Tensor, *, sizes: np.ndarray, theta: Tensor, config: SimConfig, round: int,
    std: Tensor, param: Tensor, noise: NoiseDraw | None, charge: Callable[[], None] | None,
) -> Replies:
    """``theta_t - eta_t (g + w)`` for a batch of replies, charged before the noise is drawn.

    Parameters
    ----------
    grad_sum
        Sums of per-sample-clipped gradients, shape ``(..., P)``.
    sizes
        ``d_i`` of each reply's client, shape ``grad_sum.shape[:-1]``.
    theta
        theta_t, flat, broadcastable against ``grad_sum``.
    config
        Privacy (mechanism, sampling rate), weight decay, learning rate.
    round
        t, for eta_t.
    std, param
        Per-reply noise std and noise parameter (shape ``grad_sum.shape[:-1]``).
    noise
        Draws the noise (see :data:`NoiseDraw`); ``None`` when the caller draws the noise of
        the replies' aggregate once, after this call has charged them (a mechanism
        ``closed_under_sums``: the replies are then ``theta_t - eta_t (g + w)``, noise-free).
    charge
        Charges the ledgers of these replies (raising ``PrivacyBudgetExceeded`` stops the
        reply before any noise is drawn); ``None`` when the caller has charged already.
    """
    spec = config.privacy.spec
    rate = spec.denominator_rate(config.privacy.sample_rate)
    denom = torch.as_tensor(sizes * rate, dtype=torch.float32, device=grad_sum.device)
    g_data = grad_sum / denom.unsqueeze(-1)
    decay = config.weight_decay * theta
    if charge is not None:
        charge()
    if noise is None:
        if not spec.closed_under_sums:
            raise ValueError(f"{spec.kind.value} noise must be drawn reply by reply, got "
                             "noise=None")
        g = g_data + decay
    else:
        drawn = noise(std, param, g_data.shape[-1])
        g = spec.release(g_data=g_data, decay=decay, noise=drawn, std=std, param=param)
    return Replies(theta=theta - config.lr.at(round) * g, g_data=g_data)
