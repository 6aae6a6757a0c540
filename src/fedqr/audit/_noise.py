"""The audit's only link to fedqr's noise: calibration and samplers.

Everything the audit needs from :mod:`fedqr.privacy` and :mod:`fedqr.sim` goes through the
three functions below, so that a change of how the engine calibrates or draws its noise is
re-pointed here, in one place. The audit calibrates with the engine's own
:func:`fedqr.sim.budget.client_noise` and draws with fedqr's own samplers, so it attacks the
code a run uses rather than a re-derivation of it.
"""

from __future__ import annotations

import torch

from fedqr.privacy import Mechanism, sample_gaussian, sample_laplace
from fedqr.sim.budget import client_noise
from fedqr.sim.config import SimConfig

__all__ = ["draw_noise", "noise_parameter"]


def noise_parameter(config: SimConfig, *, client: int, replies: int, num_samples: int) -> float:
    """Noise of one client's replies: the Laplace scale ``b`` or the Gaussian std ``sigma``.

    Calibrated exactly as a run of ``config`` calibrates it (budget, exact reply count
    ``replies``, data set size ``num_samples``).
    """
    p = config.privacy
    eps = p.client_eps(config.num_clients)[client]
    delta = p.client_delta(config.num_clients)[client]
    param, std, _ = client_noise(config, replies=replies, size=num_samples, eps=eps,
                                 delta=delta)
    return param if p.mechanism is Mechanism.LAPLACE else std


def draw_noise(mechanism: Mechanism, scale: float, shape: tuple[int, ...], *,
               generator: torch.Generator) -> torch.Tensor:
    """I.i.d. float64 noise of ``shape``: ``Laplace(0, scale)`` or ``N(0, scale^2)``."""
    s = torch.tensor(scale, dtype=torch.float64)
    if mechanism is Mechanism.LAPLACE:
        return sample_laplace(s, shape, generator=generator)
    if mechanism is Mechanism.GAUSSIAN:
        return sample_gaussian(s, shape, generator=generator)
    raise ValueError(f"mechanism must be laplace or gaussian, got mechanism={mechanism.value}")
