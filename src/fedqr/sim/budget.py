"""Per-client noise calibration and ledgers for one simulated schedule.

Each client's noise is fixed before the first round from its budget and its *exact* number of
replies R_i in the schedule (paper Theorems 1 and 2 with R_i instead of bT/N), and every
reply is charged to that client's :class:`~fedqr.privacy.PrivacyLedger` before it is sent.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import dp_accounting
import numpy as np

from fedqr.privacy import (
    Accountant,
    Mechanism,
    PrivacyBudgetExceeded,
    PrivacyLedger,
)
from fedqr.sim.config import SimConfig
from fedqr.sim.schedule import reply_counts


class LedgerBook:
    """The ledgers of every client, one set per schedule group (1 for round robin)."""

    def __init__(self, ledgers: list[list[PrivacyLedger | None]],
                 events: list[list[dp_accounting.DpEvent | None]]) -> None:
        self.ledgers = ledgers
        self.events = events

    def charge_round(self, sel: np.ndarray) -> None:
        """Charge one reply to every client selected in a round, shape ``(R, b)`` of ids.

        Raises :class:`PrivacyBudgetExceeded` before the round's replies are released.
        """
        groups = sel[:1] if len(self.ledgers) == 1 else sel
        for g, row in enumerate(groups):
            for i in row:
                ledger, event = self.ledgers[g][int(i)], self.events[g][int(i)]
                if ledger is not None and event is not None:
                    ledger.charge(event)

    def spent_eps(self) -> list[list[float | None]]:
        """Spent epsilon per schedule group and client (``None``: no privacy mechanism)."""
        return [[None if lg is None else lg.spent()[0] for lg in row] for row in self.ledgers]


@dataclass(frozen=True)
class ClientPrivacy:
    """Noise and ledgers of every client; arrays have shape ``(S, N)``."""

    mechanism: Mechanism
    accountant: Accountant | None
    replies: np.ndarray  # R_i, exact
    noise_param: np.ndarray  # Laplace scale, or Gaussian noise multiplier z
    noise_std: np.ndarray  # per-coordinate std of the noise added to the gradient
    eps: tuple[float, ...]
    delta: tuple[float, ...]
    ledgers: LedgerBook

    def group_of(self, repeats: int) -> np.ndarray:
        """Schedule group of each repeat."""
        s = self.replies.shape[0]
        return np.zeros(repeats, dtype=np.int64) if s == 1 else np.arange(repeats)


def client_noise(
    config: SimConfig, *, replies: int, size: int, eps: float, delta: float,
    num_params: int | None = None,
) -> tuple[float, float, dp_accounting.DpEvent | None]:
    """(noise parameter, per-coordinate std, accounting event) of one client.

    The std is that of the noise on one reply of a client with ``size`` rows and ``replies``
    replies; the mechanism object (``config.privacy.spec``) does the calibration.
    ``num_params`` (the reply's dimension) is needed only by mechanisms that quantise.
    """
    p = config.privacy
    cal = p.spec.calibrate(replies=replies, eps=eps, delta=delta, clip=p.clip,
                           sample_rate=p.sample_rate, size=size, accountant=p.accountant,
                           num_params=num_params)
    return cal.param, cal.std, cal.event


def plan_client_privacy(
    config: SimConfig, *, sizes: np.ndarray, schedule: np.ndarray,
    num_params: int | None = None,
) -> ClientPrivacy:
    """Calibrate each client's noise for its exact reply count and open its ledger.

    Raises
    ------
    PrivacyBudgetExceeded
        If a client's full schedule would not fit its budget (checked before any round).
    """
    n = config.num_clients
    eps, delta = config.privacy.client_eps(n), config.privacy.client_delta(n)
    if config.privacy.spec.needs_delta:
        warn_large_delta(delta, sizes)
    replies = reply_counts(schedule, n)
    mech = config.privacy.mechanism
    kind = config.privacy.spec.accountant(config.privacy.accountant)
    param = np.zeros(replies.shape)
    std = np.zeros(replies.shape)
    ledgers: list[list[PrivacyLedger | None]] = []
    events: list[list[dp_accounting.DpEvent | None]] = []
    for g in range(replies.shape[0]):
        ledgers.append([])
        events.append([])
        for i in range(n):
            param[g, i], std[g, i], event = client_noise(
                config, replies=int(replies[g, i]), size=int(sizes[i]), eps=eps[i],
                delta=delta[i], num_params=num_params)
            ledger = None
            if kind is not None:
                ledger = PrivacyLedger(eps=eps[i], delta=delta[i], accountant=kind, client_id=i)
                if event is not None and ledger.would_exceed(event, int(replies[g, i])):
                    raise PrivacyBudgetExceeded(client_id=i, eps_budget=eps[i],
                                                delta_budget=delta[i], eps_after=math.inf)
            ledgers[g].append(ledger)
            events[g].append(event)
    return ClientPrivacy(mechanism=mech, accountant=kind, replies=replies, noise_param=param,
                         noise_std=std, eps=eps, delta=delta,
                         ledgers=LedgerBook(ledgers, events))


def warn_large_delta(delta: tuple[float, ...], sizes: np.ndarray) -> None:
    """Warn (``RuntimeWarning``) where a client's delta is at least ``1 / d_i``: an (eps,
    delta) guarantee that weak allows publishing one of its ``d_i`` records outright."""
    weak = [i for i, (d, size) in enumerate(zip(delta, sizes, strict=True)) if d * size >= 1]
    if not weak:
        return
    shown = ", ".join(f"client {i}: delta={delta[i]:g}, d={int(sizes[i])}" for i in weak[:5])
    more = f" and {len(weak) - 5} more" if len(weak) > 5 else ""
    warnings.warn(f"delta is at least 1/d for {len(weak)} client(s) ({shown}{more}): a "
                  f"guarantee that weak allows publishing one of a client's d records "
                  f"outright; choose delta well below 1/d (for example 1/(10 d))",
                  RuntimeWarning, stacklevel=3)
