"""The privacy noise of every schedule, known exactly before any simulation.

Client i replies ``R_i(T, b)`` times under round robin; its per-coordinate noise std follows
from its budget and ``R_i`` alone: Laplace ``sqrt(2) 2 R_i xi / (d_i eps_i)`` (Theorem 1),
Gaussian ``z(R_i, q, eps_i, delta_i) xi / (q d_i)`` with ``z`` from the RDP accountant
(:class:`fedqr.theory.calibration.RdpNoiseTable`: dp-accounting's RDP of one step, composed
additively, within 0.3% of :func:`fedqr.privacy.calibrate_noise_multiplier`); with the PLD
accountant exactly per distinct ``R``, each calibration started from that table's ``z``. Any
other mechanism is calibrated exactly per distinct ``R`` by its own ``calibrate``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedqr.planner.scenario import Scenario
from fedqr.privacy import Accountant, Mechanism, calibrate_noise_multiplier
from fedqr.theory.calibration import RdpNoiseTable, round_robin_replies

__all__ = ["NoiseBook", "rdp_table"]


@lru_cache(maxsize=64)
def rdp_table(sample_rate: float, eps: float, delta: float) -> RdpNoiseTable:
    """The :class:`RdpNoiseTable` of ``(q, eps, delta)``, shared by every plan of the process
    (the search, its proxy-shift alternatives and a re-plan read one table: its RDP curves
    are computed once; a table's ``z(R)`` does not depend on what it was asked before)."""
    return RdpNoiseTable(sample_rate=sample_rate, eps=eps, delta=delta)


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
    _exact: dict[tuple[int, float, float, int, float], float] = field(default_factory=dict)

    def std(self, *, b: int, rounds: Sequence[int] | NDArray[np.int64],
            sample_rate: float) -> NDArray[np.float64]:
        """Noise std of each client for each T in ``rounds``, shape ``(len(rounds), N)``."""
        s = self.scenario
        n = s.num_clients
        replies = round_robin_replies(N=n, b=b, T=np.asarray(rounds, dtype=np.int64))
        d = self.sizes.astype(np.float64)
        out = np.zeros(replies.shape)
        # fast path: the Poisson-sampled Gaussian, its multipliers from one RDP table a budget
        if s.spec.kind is Mechanism.GAUSSIAN and s.accountant in (Accountant.RDP,
                                                                   Accountant.PLD):
            for (eps, delta), idx in self._groups(by_size=False):
                z = self._multipliers(replies[:, idx], sample_rate, eps, delta)
                out[:, idx] = z * s.clip / (sample_rate * d[idx])
            return out
        # any other mechanism: its own exact calibration, once per (d_i, budget, replies)
        for (size, eps, delta), idx in self._groups(by_size=True):
            r = replies[:, idx]
            for value in np.unique(r):
                key = (size, eps, delta, int(value), sample_rate)
                if key not in self._exact:
                    self._exact[key] = s.spec.calibrate(
                        replies=int(value), eps=eps, delta=delta, clip=s.clip,
                        sample_rate=sample_rate, size=size, accountant=s.accountant,
                        num_params=self.num_params).std
                out[:, idx] = np.where(r == value, self._exact[key], out[:, idx])
        return out

    def _multipliers(self, replies: NDArray[np.int64], sample_rate: float, eps: float,
                     delta: float) -> NDArray[np.float64]:
        """Gaussian noise multipliers of ``replies`` (0 where a client does not reply): the
        RDP table's; with the PLD accountant each distinct count calibrated exactly, started
        from the table's multiplier (:func:`calibrate_noise_multiplier`'s ``near``; the default
        start where RDP cannot resolve ``eps``)."""
        z = np.zeros(replies.shape)
        pos = replies > 0
        if not pos.any():
            return z
        table = rdp_table(sample_rate, eps, delta)
        if self.scenario.accountant is Accountant.RDP:
            z[pos] = table.noise_multipliers(replies[pos])
            return z
        values, inverse = np.unique(replies[pos], return_inverse=True)
        try:
            near: list[float | None] = list(table.noise_multipliers(values))
        except (ValueError, RuntimeError):  # an eps RDP cannot resolve: the default start
            near = [None] * len(values)
        z[pos] = np.array([calibrate_noise_multiplier(
            replies=value, sample_rate=sample_rate, eps=eps, delta=delta,
            accountant=Accountant.PLD, near=start)
            for value, start in zip(values.tolist(), near, strict=True)])[inverse]
        return z

    def _groups(self, *, by_size: bool) -> Iterator[tuple[tuple[Any, ...], NDArray[np.int64]]]:
        """The clients grouped by budget ``(eps_i, delta_i)`` (and ``d_i``), with their ids."""
        s = self.scenario
        keys: list[tuple[Any, ...]] = list(zip(s.client_eps(), s.client_delta(), strict=True))
        if by_size:
            keys = [(int(d), *k) for d, k in zip(self.sizes, keys, strict=True)]
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(key, []).append(i)
        for key, ids in groups.items():
            yield key, np.asarray(ids, dtype=np.int64)
