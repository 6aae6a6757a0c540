"""The privacy noise of every schedule, known exactly before any simulation.

Client i replies ``R_i(T, b)`` times under round robin; its per-coordinate noise std follows
from its budget and ``R_i`` alone: Laplace ``sqrt(2) 2 R_i xi / (d_i eps_i)`` (Theorem 1),
Gaussian ``z(R_i, q, eps_i, delta_i) xi / (q d_i)`` with ``z`` from the RDP accountant
(:class:`fedqr.theory.calibration.RdpNoiseTable`: dp-accounting's RDP of one step, composed
additively, within ~0.1% of :func:`fedqr.privacy.calibrate_noise_multiplier`). Any other
mechanism is calibrated exactly per distinct ``R`` by its own ``calibrate``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from fedqr.planner.scenario import Scenario
from fedqr.privacy import Accountant, Mechanism
from fedqr.theory.calibration import RdpNoiseTable, round_robin_replies

__all__ = ["NoiseBook"]


@dataclass
class NoiseBook:
    """Per-client noise std of schedules of one scenario, with calibrations cached.

    Parameters
    ----------
    scenario:
        Mechanism, budgets, clip, accountant.
    sizes:
        ``d_i`` of the deployment's clients (the noise depends on the real sizes, not on the
        proxy the twin trains on).
    """

    scenario: Scenario
    sizes: NDArray[np.int64]
    num_params: int | None = None
    _tables: dict[tuple[float, float, float], RdpNoiseTable] = field(default_factory=dict)
    _exact: dict[tuple[int, int, float], float] = field(default_factory=dict)

    def std(self, *, b: int, rounds: Sequence[int] | NDArray[np.int64],
            sample_rate: float) -> NDArray[np.float64]:
        """Noise std of each client for each T in ``rounds``, shape ``(len(rounds), N)``."""
        s = self.scenario
        n = s.num_clients
        eps, delta = s.client_eps(), s.client_delta()
        replies = round_robin_replies(N=n, b=b, T=np.asarray(rounds, dtype=np.int64))
        d = self.sizes.astype(np.float64)
        out = np.zeros(replies.shape)
        # fast path: the RDP-accounted Poisson-sampled Gaussian, one RDP curve per noise level
        if s.spec.kind is Mechanism.GAUSSIAN and s.accountant is Accountant.RDP:
            for i in range(n):
                key = (sample_rate, eps[i], delta[i])
                if key not in self._tables:
                    self._tables[key] = RdpNoiseTable(sample_rate=sample_rate, eps=eps[i],
                                                      delta=delta[i])
                r_i = replies[:, i]
                z = np.zeros(len(r_i))
                pos = r_i > 0
                if pos.any():
                    z[pos] = self._tables[key].noise_multipliers(r_i[pos])
                out[:, i] = z * s.clip / (sample_rate * d[i])
            return out
        for c, row in enumerate(replies):  # any other mechanism: its own exact calibration
            for i, r in enumerate(row):
                key2 = (i, int(r), sample_rate)
                if key2 not in self._exact:
                    self._exact[key2] = s.spec.calibrate(
                        replies=int(r), eps=eps[i], delta=delta[i], clip=s.clip,
                        sample_rate=sample_rate, size=int(d[i]), accountant=s.accountant,
                        num_params=self.num_params).std
                out[c, i] = self._exact[key2]
        return out
