"""Configuration of a FedSGD-DPC simulation (frozen value objects, validated on creation)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from numbers import Real

from fedqr._enums import Aggregation as Aggregation
from fedqr._enums import LrSchedule as LrSchedule
from fedqr._enums import Selection as Selection
from fedqr._precision import Arithmetic as Arithmetic
from fedqr._validate import (
    MAX_REPEATS,
    MAX_ROUNDS,
    check_in_range,
    check_int_range,
    check_positive,
    check_seed,
    float_tuple,
)
from fedqr.data._validate import parse_enum
from fedqr.privacy import Accountant, Mechanism, NoiseMechanism, as_mechanism, mechanism_for


class NoiseSeeding(StrEnum):
    """Where the randomness of a reply (its Poisson batch and its noise) comes from."""

    BATCH = "batch"  # one torch.Generator for the whole run, drawn in batches (fastest)
    # one generator per reply, seeded from (seed, repeat, round, client): a distributed client
    # (fedqr.flower) draws exactly the same batch and noise as the engine
    PER_REPLY = "per-reply"


class EvalTrain(StrEnum):
    """When the training objective F(theta) is evaluated (test metrics follow ``eval_every``).

    Over all training rows it is a forward pass over the whole training set unless every
    client computed its full gradient that round: a Gaussian (q = 0.01) MNIST round with the
    test loss every round took 42 ms with it at every evaluation, 9 ms without (2 CPU threads,
    ``bench/eval_cadence.py``).
    """

    EVERY = "every"  # at every evaluation (the paper's figures; fedqr reproduce)
    END = "end"  # only at the final evaluation (the default)
    NONE = "none"  # never: train_loss is null
    SAMPLE = "sample"  # at every evaluation, estimated from train_eval_rows rows (with stderr)


def parse_train_eval(text: str, *, name: str = "eval_train") -> tuple[EvalTrain, int | None]:
    """``every``, ``end``, ``none`` or ``sample:N`` as ``(EvalTrain, N or None)``.

    Raises
    ------
    ValueError
        Naming ``name``, the allowed values and ``text``.
    """
    word, sep, rows = text.strip().lower().partition(":")
    allowed = "'every', 'end', 'none' or 'sample:N' with an integer N >= 2"
    if word == EvalTrain.SAMPLE.value and sep:
        try:
            n = int(rows)
        except ValueError:
            n = 0
        if n >= 2:
            return EvalTrain.SAMPLE, n
    elif not sep and word in {m.value for m in EvalTrain if m is not EvalTrain.SAMPLE}:
        return EvalTrain(word), None
    raise ValueError(f"{name} must be {allowed}, got {name}={text!r}")


_positive = check_positive


@dataclass(frozen=True, kw_only=True)
class LearningRate:
    """Learning rate eta_t of round t (0-based).

    Attributes
    ----------
    schedule:
        Which formula to use.
    eta0:
        Initial rate for ``constant`` and ``inverse-time`` (the paper's experiments: 0.05).
    decay:
        ``inverse-time`` decay per round.
    mu, gamma:
        Strong convexity and ``gamma = 2 lambda / mu`` for the ``theory`` schedule.
    """

    schedule: LrSchedule = LrSchedule.INVERSE_TIME
    eta0: float = 0.05
    decay: float = 0.01
    mu: float | None = None
    gamma: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "schedule", parse_enum(LrSchedule, "lr_schedule", self.schedule))
        _positive("lr", self.eta0)
        if not (self.decay >= 0) or math.isinf(self.decay):
            raise ValueError(f"lr_decay must be >= 0 and finite, got lr_decay={self.decay}")
        if self.schedule is not LrSchedule.THEORY and (self.mu, self.gamma) != (None, None):
            raise ValueError(f"mu and gamma set the theory schedule (lr_schedule='theory'); "
                             f"leave them out for lr_schedule={self.schedule.value!r}, got "
                             f"mu={self.mu}, gamma={self.gamma}")
        if self.schedule is LrSchedule.THEORY:
            if self.mu is None or self.gamma is None:
                raise ValueError(f"the theory schedule (lr_schedule='theory') needs mu > 0 and "
                                 f"gamma > 0, got mu={self.mu}, gamma={self.gamma}")
            _positive("mu", self.mu)
            _positive("gamma", self.gamma)

    def at(self, t: int) -> float:
        """eta_t."""
        if self.schedule is LrSchedule.CONSTANT:
            return self.eta0
        if self.schedule is LrSchedule.INVERSE_TIME:
            return self.eta0 / (1.0 + self.decay * t)
        assert self.mu is not None and self.gamma is not None  # checked in __post_init__
        return 2.0 / (self.mu * (t + self.gamma))


@dataclass(frozen=True, kw_only=True)
class PrivacyConfig:
    """Client-side privacy: mechanism, per-client budgets, clipping and sampling.

    Attributes
    ----------
    mechanism:
        ``laplace`` (Theorem 1, pure eps-DP, full local batch), ``gaussian`` (Poisson-sampled
        Gaussian calibrated by dp-accounting) or ``none``.
    eps:
        Per-client epsilon budget: one value for all clients or one per client.
    delta:
        Per-client delta (Gaussian only; Laplace is pure DP: a delta given is recorded as 0,
        one per client where one per client was given, as the clients' ``delta_budget``).
    clip:
        Per-sample gradient norm bound xi (l1 for Laplace, l2 for Gaussian); ``inf`` = no clip.
    sample_rate:
        Poisson sampling rate q of the local batch (Gaussian; Laplace and none use q = 1 unless
        a smaller rate is given for ``none``).
    accountant:
        The dp-accounting accountant for the Gaussian mechanism (RDP by default).
    """

    mechanism: Mechanism = Mechanism.GAUSSIAN
    eps: float | tuple[float, ...] = 1.0
    delta: float | tuple[float, ...] = 1e-5
    clip: float = 10.0
    sample_rate: float = 0.01
    accountant: Accountant = Accountant.RDP

    def __post_init__(self) -> None:
        # a string such as "laplace" is coerced to the enum (an unknown one is refused), so
        # it is never calibrated as another mechanism
        object.__setattr__(self, "mechanism", as_mechanism(self.mechanism))
        object.__setattr__(self, "accountant",
                           parse_enum(Accountant, "accountant", self.accountant))
        for name in ("eps", "delta"):  # NumPy scalars and arrays become floats; no string
            object.__setattr__(self, name, _plain(name, getattr(self, name)))
        for e in _as_tuple(self.eps):
            _positive("eps", e)
        for d in _as_tuple(self.delta):  # whatever the mechanism: a delta is a probability
            check_in_range("delta", d, 0, 1, low_open=self.spec.needs_delta,
                           high_open=True)
        if not self.spec.needs_delta:  # pure DP (or none): the run's record says delta 0,
            object.__setattr__(self, "delta", _zeros(self.delta))  # one or one per client
        if not self.spec.private:  # no noise, no budget: the record says eps inf ("inf" in
            object.__setattr__(self, "eps", _infs(self.eps))  # config, null per client)
        _positive("clip", self.clip, allow_inf=True)
        q = self.sample_rate
        if isinstance(q, bool) or not isinstance(q, Real) or not 0 < q <= 1:
            auto = (" ('auto' is fedqr.plan's: it chooses q; pass the plan as schedule=)"
                    if isinstance(q, str) and q.strip().lower() == "auto" else "")
            raise ValueError(f"sample_rate must be a number in (0, 1], got "
                             f"sample_rate={q!r}{auto}")
        self.spec.check(clip=self.clip, sample_rate=self.sample_rate)

    @property
    def spec(self) -> NoiseMechanism:
        """The mechanism object (norm, sampling, calibration, noise, accounting)."""
        return mechanism_for(self.mechanism)

    def client_eps(self, num_clients: int) -> tuple[float, ...]:
        """eps_i for every client."""
        return _per_client("eps", self.eps, num_clients)

    def client_delta(self, num_clients: int) -> tuple[float, ...]:
        """delta_i for every client (0 for pure DP and no mechanism)."""
        values = _per_client("delta", self.delta, num_clients)
        return tuple(self.spec.client_delta(d) for d in values)


def _plain(name: str, v: object) -> float | tuple[float, ...]:
    """A budget as given when it is a Python number or tuple of them (its config hash stays),
    else as floats; a string, ``None`` or an empty sequence is refused by name."""
    values = float_tuple(name, v)
    if (isinstance(v, int | float) and not isinstance(v, bool)) or (
            isinstance(v, tuple) and all(type(x) in (int, float) for x in v)):
        return v
    is_scalar = not isinstance(v, Sequence) and getattr(v, "ndim", 0) == 0
    return values[0] if is_scalar else values


def _infs(value: float | tuple[float, ...]) -> float | tuple[float, ...]:
    """``inf`` in the form of ``value``: one, or one per client."""
    return tuple(math.inf for _ in value) if isinstance(value, tuple) else math.inf


def _zeros(v: float | tuple[float, ...]) -> float | tuple[float, ...]:
    """``v``'s shape with every delta 0: what a pure-DP (or no) mechanism spends."""
    return 0.0 if isinstance(v, int | float) else tuple(0.0 for _ in v)


def _as_tuple(v: float | Sequence[float]) -> tuple[float, ...]:
    return (float(v),) if isinstance(v, int | float) else tuple(float(x) for x in v)


def _per_client(name: str, v: float | Sequence[float], n: int) -> tuple[float, ...]:
    values = _as_tuple(v)
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise ValueError(f"{name} must have 1 value or one per client ({n} clients), got "
                         f"{len(values)}")
    return values


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """One FedSGD-DPC experiment, run ``repeats`` times in one batch.

    Attributes
    ----------
    num_clients, clients_per_round, rounds:
        N, b and T of the paper.
    selection, aggregation:
        Client selection and the server's combination rule.
    lr:
        Learning-rate schedule.
    weight_decay:
        L2 regularisation w of ``F = CE + (w/2)||theta||^2`` (0.01 as the authors: strong
        convexity). Its gradient is data-independent, so it is added after clipping.
    privacy:
        Mechanism, budgets, clip, sampling.
    repeats:
        Independent repeats, simulated together as one batch.
    seed:
        Seed of the schedule (random selection), Poisson sampling and noise.
    eval_every:
        Evaluate test metrics every this many rounds (and always before the first and after
        the last round).
    train_eval, train_eval_rows:
        When the training objective is evaluated (:class:`EvalTrain`): ``end`` (default) only
        at the final evaluation, ``every`` at every evaluation, ``none`` never, ``sample`` at
        every evaluation from ``train_eval_rows`` training rows drawn uniformly without
        replacement (its own generator, seeded by ``seed``: the training draws are unchanged),
        with its standard error. ``train_eval_rows`` (>= 2, at most the number of training
        rows) is set for ``sample`` only. No setting
        changes the replies or theta.
    chunk_rows:
        Rows per chunk of the fused pass (a cache-sized block of the data).
    noise_seeding:
        ``batch`` (default): all draws of a run come from one generator seeded by ``seed``;
        ``per-reply``: each reply's Poisson batch and noise come from its own generators
        seeded by ``(seed, repeat, round, client)``, as a Flower client draws them.
    arithmetic:
        :class:`fedqr._precision.Arithmetic` of softmax regression's full-batch passes on the
        CPU: ``float32`` (default) or ``mixed`` (bfloat16 logits and exact integer gradient
        sums of integer-coded rows; :mod:`fedqr.models.logreg_coded`); the same clipping,
        budgets and noise.
    """

    num_clients: int = 10
    clients_per_round: int = 10
    rounds: int = 100
    selection: Selection = Selection.ROUND_ROBIN
    aggregation: Aggregation = Aggregation.PAPER
    lr: LearningRate = field(default_factory=LearningRate)
    weight_decay: float = 0.01
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    repeats: int = 1
    seed: int = 0
    eval_every: int = 1
    train_eval: EvalTrain = EvalTrain.END
    train_eval_rows: int | None = None
    chunk_rows: int = 2048
    noise_seeding: NoiseSeeding = NoiseSeeding.BATCH
    arithmetic: Arithmetic = Arithmetic.FLOAT32

    def __post_init__(self) -> None:
        for name in ("num_clients", "clients_per_round", "rounds", "repeats", "eval_every",
                     "chunk_rows", "seed"):  # NumPy integers become ints; 1.5 or True do not
            object.__setattr__(self, name, check_int_range(name, getattr(self, name), -2**63))
        check_int_range("num_clients", self.num_clients, 1, MAX_ROUNDS)  # the same cap
        if not 1 <= self.clients_per_round <= self.num_clients:
            raise ValueError(
                f"clients_per_round must be in [1, num_clients={self.num_clients}], "
                f"got clients_per_round={self.clients_per_round}"
            )
        check_int_range("rounds", self.rounds, 0, MAX_ROUNDS)
        check_int_range("repeats", self.repeats, 1, MAX_REPEATS)
        if not (self.weight_decay >= 0) or math.isinf(self.weight_decay):
            raise ValueError(f"weight_decay must be >= 0, got weight_decay={self.weight_decay}")
        check_int_range("eval_every", self.eval_every, 1)
        for name, kind in (("selection", Selection), ("aggregation", Aggregation),
                           ("noise_seeding", NoiseSeeding), ("arithmetic", Arithmetic)):
            object.__setattr__(self, name, parse_enum(kind, name, getattr(self, name)))
        object.__setattr__(self, "train_eval",
                           parse_enum(EvalTrain, "train_eval", self.train_eval))
        if self.train_eval is EvalTrain.SAMPLE:
            if self.train_eval_rows is None:
                raise ValueError("train_eval='sample' needs train_eval_rows, an integer >= 2, "
                                 "got train_eval_rows=None")
            check_int_range("train_eval_rows", self.train_eval_rows, 2)
        elif self.train_eval_rows is not None:
            raise ValueError(f"train_eval_rows is for train_eval='sample' only, got "
                             f"train_eval={self.train_eval.value!r} and "
                             f"train_eval_rows={self.train_eval_rows!r}")
        check_int_range("chunk_rows", self.chunk_rows, 1)
        check_seed("seed", self.seed)
        self.privacy.client_eps(self.num_clients)  # per-client lengths must match N
        self.privacy.client_delta(self.num_clients)
