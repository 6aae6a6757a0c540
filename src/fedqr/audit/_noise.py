"""The audit's only link to :mod:`fedqr.sim` and fedqr's noise: scenario, calibration, samplers.

Everything the audit needs from :mod:`fedqr.sim` and the noise functions of
:mod:`fedqr.privacy` goes through the four functions below, so that a change in how the
engine configures, schedules, calibrates or draws its noise is re-pointed here, in one
place. The audit builds the run's own configuration, calibrates with the engine's
:func:`fedqr.sim.budget.client_noise` and draws with fedqr's own samplers, so it attacks
the code a run uses rather than a re-derivation of it.
"""

from __future__ import annotations

from collections.abc import Callable

import dp_accounting
import numpy as np
import torch

from fedqr.privacy import (
    Accountant,
    Mechanism,
    epsilon_spent,
    sample_gaussian,
    sample_laplace,
)
from fedqr.sim.budget import client_noise
from fedqr.sim.config import PrivacyConfig, Selection, SimConfig
from fedqr.sim.schedule import make_schedule, reply_counts

__all__ = ["AUDITED", "draw_noise", "noise_parameter", "one_reply_claim",
           "round_robin_replies", "scenario"]

# The audit's canary game and its Neyman-Pearson statistics are derived for two noise
# densities (module docstring of :mod:`fedqr.audit.trials`); this table is the one place
# that says which mechanisms have them, and how their noise is drawn.
_SAMPLERS: dict[Mechanism, Callable[..., torch.Tensor]] = {
    Mechanism.LAPLACE: sample_laplace, Mechanism.GAUSSIAN: sample_gaussian}
AUDITED = tuple(_SAMPLERS)
"""The mechanisms the audit can attack."""


def scenario(*, mechanism: Mechanism, eps: float, delta: float, clip: float,
             sample_rate: float, accountant: Accountant, num_clients: int,
             clients_per_round: int, rounds: int, seed: int) -> SimConfig:
    """The ``fedqr run`` configuration of a scenario (round robin, one repeat).

    Raises
    ------
    ValueError
        If ``fedqr run`` would refuse the scenario (the message names the parameter).
    """
    return SimConfig(
        num_clients=num_clients, clients_per_round=clients_per_round, rounds=rounds,
        selection=Selection.ROUND_ROBIN, seed=seed,
        privacy=PrivacyConfig(mechanism=mechanism, eps=eps, delta=delta, clip=clip,
                              sample_rate=sample_rate, accountant=accountant))


def round_robin_replies(config: SimConfig) -> list[int]:
    """Each client's exact reply count ``R_i`` under the run's round-robin schedule."""
    schedule = make_schedule(num_clients=config.num_clients,
                             clients_per_round=config.clients_per_round, rounds=config.rounds,
                             selection=Selection.ROUND_ROBIN, repeats=1,
                             rng=np.random.default_rng(config.seed))
    return [int(r) for r in reply_counts(schedule, config.num_clients)[0]]


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


def one_reply_claim(config: SimConfig, *, client: int, replies: int,
                    num_samples: int) -> float:
    """Epsilon of one reply with the record in its batch, as the run's accounting states it.

    The per-reply event the calibration hands the accountant, unwrapped of its Poisson
    sampling: ``LaplaceDpEvent`` (pure, eps_i / R_i) or ``GaussianDpEvent(z)`` (epsilon at
    the client's delta by dp-accounting's PLD accountant). The run's claim is this event,
    sampled at rate ``q`` and composed ``R_i`` times by dp-accounting, a theorem the audit
    does not test; :data:`fedqr.audit.ThreatModel.ONE_REPLY` audits this per-reply claim.
    """
    p = config.privacy
    eps = p.client_eps(config.num_clients)[client]
    delta = p.client_delta(config.num_clients)[client]
    _, _, event = client_noise(config, replies=replies, size=num_samples, eps=eps, delta=delta)
    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
        event = event.event
    if isinstance(event, dp_accounting.LaplaceDpEvent):
        return epsilon_spent({event: 1}, delta=0.0, accountant=Accountant.PURE)
    if isinstance(event, dp_accounting.GaussianDpEvent):
        return epsilon_spent({event: 1}, delta=delta, accountant=Accountant.PLD)
    raise ValueError(f"mechanism must be laplace or gaussian, got mechanism={p.mechanism.value}")


def draw_noise(mechanism: Mechanism, scale: float, shape: tuple[int, ...], *,
               generator: torch.Generator) -> torch.Tensor:
    """I.i.d. float64 noise of ``shape``: ``Laplace(0, scale)`` or ``N(0, scale^2)``."""
    if mechanism not in _SAMPLERS:
        raise ValueError(f"mechanism must be one of {', '.join(m.value for m in AUDITED)}, "
                         f"got mechanism={mechanism.value}")
    return _SAMPLERS[mechanism](torch.tensor(scale, dtype=torch.float64), shape,
                                generator=generator)
