"""What an audit attacks: a ``fedqr run`` scenario, the number of trials and the threat model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedqr._enums import ThreatModel
from fedqr.audit import _noise
from fedqr.privacy import Accountant, Mechanism, mechanism_for

if TYPE_CHECKING:
    from fedqr.sim.config import SimConfig

__all__ = [
    "MAX_ONE_REPLY_TRIALS",
    "MAX_SEED",
    "MAX_TRIALS",
    "NUM_SAMPLES",
    "AuditConfig",
    "ThreatModel",
]

NUM_SAMPLES = 100
"""``d_i`` of every simulated client. The canary's effect and the noise both scale as
``clip / d_i`` (and ``clip / (q d_i)``), so no audit figure depends on it (nor on ``clip``)."""
MAX_TRIALS = 10_000_000
MAX_ONE_REPLY_TRIALS = 100_000_000
MAX_SEED = 2**63 - 1
MAX_EPS = 100.0
"""The largest claim audited: a canary game of MAX_TRIALS trials bounds eps at about
ln(MAX_TRIALS) = 16, so larger claims are all alike to it (and their noise is too small for
the accountant's arrays: eps 1e308 asked for 2 PiB)."""


@dataclass(frozen=True, kw_only=True)
class AuditConfig:
    """One audit: a FedSGD-DPC scenario (round robin) plus the audit's own settings.

    Attributes
    ----------
    mechanism, eps, delta, clip, sample_rate, accountant
        The privacy claim, as for ``fedqr run`` (one budget for every client; ``delta`` is
        ignored by Laplace, which claims ``delta = 0``).
    num_clients, clients_per_round, rounds
        N, b and T; the schedule is Algorithm 1's round robin (exact reply counts).
    seed
        Seed of every draw of the audit.
    trials
        Trials per world (with and without the canary) of the whole-run audits (``replies``,
        ``final-model``); half choose the test, half evaluate it.
    one_reply_trials
        Trials per world of the ``one-reply`` audit (one scalar draw each, so millions are
        cheap; a per-reply epsilon of ``eps / R`` needs them).
    confidence
        Probability that every reported lower bound holds at once, in (0, 1) (each audit
        is evaluated at ``1 - (1 - confidence) / k`` for ``k`` audits, a union bound).
    threat_model
        What the adversary observes.
    """

    mechanism: Mechanism = Mechanism.GAUSSIAN
    eps: float = 1.0
    delta: float = 1e-5
    clip: float = 10.0
    sample_rate: float = 0.01
    accountant: Accountant = Accountant.RDP
    num_clients: int = 10
    clients_per_round: int = 10
    rounds: int = 100
    seed: int = 0
    trials: int = 5000
    one_reply_trials: int = 4_000_000
    confidence: float = 0.95
    threat_model: ThreatModel = ThreatModel.ALL

    def __post_init__(self) -> None:
        if self.mechanism not in _noise.AUDITED:
            raise ValueError("mechanism must be one of "
                             f"{', '.join(m.value for m in _noise.AUDITED)} (the densities "
                             "the canary game is derived for; none claims no privacy), got "
                             f"mechanism={self.mechanism.value}")
        if not (isinstance(self.eps, int | float) and 0 < self.eps <= MAX_EPS):
            raise ValueError(f"eps must be in (0, {MAX_EPS:g}] (an audit of at most "
                             f"{MAX_TRIALS} trials cannot tell larger ones apart), got "
                             f"eps={self.eps}")
        spends = mechanism_for(self.mechanism).needs_delta  # (0, 1); pure eps-DP claims 0
        if not (isinstance(self.delta, int | float)
                and (0 < self.delta if spends else 0 <= self.delta) and self.delta < 1):
            raise ValueError(f"delta must be in {'(0' if spends else '[0'}, 1), got "
                             f"delta={self.delta}")
        if not (isinstance(self.trials, int) and 10 <= self.trials <= MAX_TRIALS):
            raise ValueError(f"trials must be an integer in [10, {MAX_TRIALS}], "
                             f"got trials={self.trials}")
        if not (isinstance(self.one_reply_trials, int)
                and 10 <= self.one_reply_trials <= MAX_ONE_REPLY_TRIALS):
            raise ValueError("one_reply_trials must be an integer in "
                             f"[10, {MAX_ONE_REPLY_TRIALS}], "
                             f"got one_reply_trials={self.one_reply_trials}")
        if not (isinstance(self.confidence, int | float) and 0 < self.confidence < 1):
            raise ValueError(f"confidence must be in (0, 1), got confidence={self.confidence}")
        if not 1 <= self.rounds:
            raise ValueError(f"rounds must be >= 1, got rounds={self.rounds}")
        if not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"seed must be in [0, {MAX_SEED}], got seed={self.seed}")
        self.sim_config()  # validates the scenario (N, b, clip, q, delta for gaussian, ...)

    def sim_config(self) -> SimConfig:
        """The ``fedqr run`` configuration of this scenario (round robin, one repeat)."""
        return _noise.scenario(
            mechanism=self.mechanism, eps=float(self.eps), delta=float(self.delta),
            clip=float(self.clip), sample_rate=float(self.sample_rate),
            accountant=self.accountant, num_clients=self.num_clients,
            clients_per_round=self.clients_per_round, rounds=self.rounds, seed=self.seed)

    @property
    def delta_claimed(self) -> float:
        """The claimed delta: ``0`` for pure DP (Laplace), ``delta`` otherwise (Gaussian)."""
        return mechanism_for(self.mechanism).client_delta(float(self.delta))
