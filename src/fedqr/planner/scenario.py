"""What the planner plans for: a deployment scenario, and how the plan may use data.

A :class:`Scenario` holds every setting of ``fedqr run`` except the three the planner chooses:
the number of rounds T, the replies per round b and (Gaussian, ``sample_rate=None``) the
Poisson sampling rate q. :meth:`Scenario.sim_config` turns a chosen ``(T, b, q)`` into the
:class:`~fedqr.sim.config.SimConfig` that ``fedqr run`` executes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fedqr._enums import DataUse, Method
from fedqr._validate import MAX_ROUNDS, check_int_range, check_nonnegative
from fedqr.data import DataSpec
from fedqr.data.presets import default_model_name
from fedqr.data.source import DataSource
from fedqr.models.factory import ModelName
from fedqr.models.kernel import Kernel
from fedqr.privacy import Accountant, Mechanism, NoiseMechanism, mechanism_for
from fedqr.sim.config import Aggregation, LearningRate, PrivacyConfig, SimConfig

__all__ = ["DataUse", "Method", "Scenario"]


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """A deployment to plan: data, clients, budgets, clipping and learning rate.

    Attributes
    ----------
    data:
        The data recipe (data set, share, partition, N, seed).
    mechanism, eps, delta, clip, accountant:
        Client-side privacy as in ``fedqr run``; ``eps``/``delta`` hold one value or N.
    sample_rate:
        Gaussian Poisson rate q; ``None`` lets the planner choose it (``--sample-rate auto``).
        Laplace uses each client's full data (q = 1).
    rounds, clients_per_round:
        Fix T or b (``None``: the planner chooses it).
    lr, weight_decay, aggregation:
        Learning-rate schedule, L2 regularisation and the server's combination rule.
    model:
        The model trained (``None``: the data set's paper model, by the model factory).
    kernel:
        The model as a kernel (:func:`fedqr.models.zoo.make_kernel`); overrides ``model``.
        Not part of the scenario's equality (a kernel holds a factory function); plans key
        their cache on its description (:func:`fedqr.planner.kernels.kernel_identity`).
    """

    data: DataSource = field(default_factory=DataSpec)
    mechanism: Mechanism = Mechanism.GAUSSIAN
    eps: tuple[float, ...] = (1.0,)
    delta: tuple[float, ...] = (1e-5,)
    clip: float = 10.0
    sample_rate: float | None = 0.01
    accountant: Accountant = Accountant.RDP
    rounds: int | None = None
    clients_per_round: int | None = None
    lr: LearningRate = field(default_factory=LearningRate)
    weight_decay: float = 0.01
    aggregation: Aggregation = Aggregation.PAPER
    model: ModelName | None = None
    kernel: Kernel | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        n = self.data.num_clients
        if not self.spec.private:
            raise ValueError("mechanism must be a private mechanism to plan for, got "
                             "mechanism='none' (without noise, more rounds never hurt)")
        for name in ("rounds", "clients_per_round"):  # NumPy integers become ints
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_int_range(name, getattr(self, name),
                                                               -2**63))
        if self.rounds is not None and not 1 <= self.rounds <= MAX_ROUNDS:
            raise ValueError(f"rounds must be in [1, {MAX_ROUNDS}], got rounds={self.rounds}")
        if self.clients_per_round is not None and not 1 <= self.clients_per_round <= n:
            raise ValueError(f"clients_per_round must be in [1, num_clients={n}], "
                             f"got clients_per_round={self.clients_per_round}")
        check_nonnegative("weight_decay", self.weight_decay)
        if self.sample_rate is not None and not 0 < self.sample_rate <= 1:
            raise ValueError(f"sample_rate must be in (0, 1], got sample_rate={self.sample_rate}")
        if not (self.clip > 0 and math.isfinite(self.clip)):
            raise ValueError(f"clip must be > 0 and finite, got clip={self.clip}")
        # the privacy settings are checked by PrivacyConfig, as for fedqr run
        self.privacy(sample_rate=self.sample_rate or 0.01).client_eps(n)
        self.privacy(sample_rate=self.sample_rate or 0.01).client_delta(n)

    @property
    def model_name(self) -> str:
        """The model trained: the kernel's name, ``model``, or the data set's paper model
        (the presets table's)."""
        if self.kernel is not None:
            return self.kernel.name
        if self.model is not None:
            return ModelName(self.model).value
        return default_model_name(self.data.dataset)

    @property
    def num_clients(self) -> int:
        """N."""
        return self.data.num_clients

    @property
    def spec(self) -> NoiseMechanism:
        """The mechanism object (norm, sampling, calibration, noise)."""
        return mechanism_for(self.mechanism)

    @property
    def poisson(self) -> bool:
        """Whether clients Poisson-sample their local batch rather than use all rows."""
        return self.spec.batch_rate(0.5) < 1.0

    def client_eps(self) -> tuple[float, ...]:
        """eps_i of every client."""
        return self.privacy(sample_rate=self.sample_rate or 0.01).client_eps(self.num_clients)

    def client_delta(self) -> tuple[float, ...]:
        """delta_i of every client (0 for pure-DP mechanisms)."""
        return self.privacy(sample_rate=self.sample_rate or 0.01).client_delta(self.num_clients)

    def privacy(self, *, sample_rate: float) -> PrivacyConfig:
        """The privacy configuration of a run with Poisson rate ``sample_rate``."""
        return PrivacyConfig(mechanism=self.mechanism, eps=self.eps, delta=self.delta,
                             clip=self.clip, sample_rate=sample_rate if self.poisson else 1.0,
                             accountant=self.accountant)

    def sim_config(self, *, rounds: int, clients_per_round: int, sample_rate: float,
                   repeats: int = 1, seed: int = 0, eval_every: int = 1) -> SimConfig:
        """The ``fedqr run`` configuration of schedule ``(T, b, q)``."""
        return SimConfig(num_clients=self.num_clients, clients_per_round=clients_per_round,
                         rounds=rounds, aggregation=self.aggregation, lr=self.lr,
                         weight_decay=self.weight_decay,
                         privacy=self.privacy(sample_rate=sample_rate), repeats=repeats,
                         seed=seed, eval_every=eval_every)
