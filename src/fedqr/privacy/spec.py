"""One object per noise mechanism: everything the layers above need to know about it.

:func:`mechanism_for` maps a :class:`~fedqr.privacy.mechanisms.Mechanism` to its
:class:`NoiseMechanism`; the engines, the Flower client, the results and the CLI ask that
object (its clipping norm, sampling, denominator, calibration, noise draw, DP event and
accountant) and never branch on the mechanism themselves. A new mechanism is a new class
satisfying :class:`NoiseMechanism`, an enum member and one entry in :func:`_registry`. The
classes: :mod:`fedqr.privacy.continuous` (Laplace, Gaussian, none) and
:mod:`fedqr.privacy.discrete` (discrete Laplace).

Calibration input of every mechanism: the client's budget ``(eps, delta)``, its exact reply
count ``R``, the sampling rate ``q``, its size ``d_i``, the clip norm, the requested
accountant and the reply's dimension ``p`` (``num_params``; only a mechanism that quantises
the reply needs it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

import dp_accounting
import torch
from torch import Tensor

from fedqr.privacy.accounting import Accountant, _as_accountant
from fedqr.privacy.mechanisms import Mechanism, Norm

__all__ = [
    "Calibration",
    "FullBatch",
    "Neighbours",
    "NoiseMechanism",
    "PaperBound",
    "as_mechanism",
    "check_accountant_applies",
    "check_private",
    "mechanism_for",
    "not_closed_under_sums",
    "unspent_budget",
]


@dataclass(frozen=True)
class Calibration:
    """A client's noise, fixed before round 0.

    Attributes
    ----------
    param
        The mechanism's noise parameter (Laplace scale ``b``, Gaussian multiplier ``z``,
        ...); ``0`` without noise.
    std
        Per-coordinate noise std of one reply, in the units of the gradient (``0``: none).
    event
        dp-accounting event of one reply (``None``: nothing to account).
    """

    param: float
    std: float
    event: dp_accounting.DpEvent | None


NO_NOISE = Calibration(param=0.0, std=0.0, event=None)


class Neighbours(StrEnum):
    """The neighbouring relation a mechanism's guarantee is stated for."""

    REPLACE_ONE = "replace-one"
    """One record replaced by another (the full local batch, ``sum / d_i``)."""
    ADD_REMOVE_ONE = "add/remove-one"
    """One record added or removed (Poisson sampling, ``sum / (q d_i)``)."""


class PaperBound(StrEnum):
    """Which of the paper's convergence bounds covers a mechanism's noise."""

    THEOREM_3 = "theorem-3"
    """Laplace noise of Theorem 1 (pure eps, q = 1): closed-form optimum of U(T, b)."""
    THEOREM_4 = "theorem-4"
    """Gaussian noise calibrated by an accountant (eps, delta, Poisson q)."""


@runtime_checkable
class NoiseMechanism(Protocol):
    """What a client-side noise mechanism owns (see the module docstring)."""

    @property
    def kind(self) -> Mechanism:
        """The enum member this object implements."""
        ...

    @property
    def norm(self) -> Norm:
        """Per-sample clipping norm (the sensitivity norm)."""
        ...

    @property
    def private(self) -> bool:
        """Whether replies carry a DP guarantee (and are charged to a ledger)."""
        ...

    @property
    def needs_delta(self) -> bool:
        """Whether the budget has a delta in (0, 1) (``False``: pure DP, delta = 0)."""
        ...

    @property
    def neighbours(self) -> Neighbours:
        """The neighbouring relation of the guarantee (what a canary audit attacks)."""
        ...

    @property
    def bound(self) -> PaperBound | None:
        """The paper's bound for this noise (``None``: no theorem of the paper covers it;
        plan with the twin)."""
        ...

    @property
    def continuous(self) -> Mechanism:
        """The real-valued additive noise closest to this mechanism's (itself for Laplace and
        Gaussian; what a simulation such as the planner's twin draws for a quantising one)."""
        ...

    @property
    def default_clip(self) -> float:
        """The paper's clip bound for this mechanism (MNIST), ``inf`` for none."""
        ...

    @property
    def default_sample_rate(self) -> float:
        """Default Poisson sampling rate of the local batch."""
        ...

    def check(self, *, clip: float, sample_rate: float) -> None:
        """Raise ``ValueError`` if the clip or sampling rate do not fit the mechanism."""
        ...

    def batch_rate(self, sample_rate: float) -> float:
        """The rate the local batch is drawn with (1: every row, no Poisson sampling)."""
        ...

    def denominator_rate(self, sample_rate: float) -> float:
        """The clipped gradient sum is divided by ``d_i * rate``: ``1`` (``d_i``, replace-one)
        or ``q`` (the expected Poisson batch ``q d_i``, add/remove-one)."""
        ...

    def accountant(self, requested: Accountant) -> Accountant | None:
        """The accountant of this mechanism's events (``None``: no accounting)."""
        ...

    def client_delta(self, delta: float) -> float:
        """The delta a client's budget holds (0 for pure DP)."""
        ...

    def calibrate(self, *, replies: int, eps: float, delta: float, clip: float,
                  sample_rate: float, size: int, accountant: Accountant,
                  num_params: int | None = None) -> Calibration:
        """Noise for ``replies`` replies within ``(eps, delta)``."""
        ...

    def event(self, *, param: float, clip: float, sample_rate: float, size: int,
              num_params: int | None = None) -> dp_accounting.DpEvent | None:
        """The DP event of one reply with noise parameter ``param``."""
        ...

    def draw(self, *, std: Tensor, param: Tensor, shape: tuple[int, ...],
             generator: torch.Generator) -> Tensor:
        """Noise for replies with per-reply ``std``/``param`` (broadcast to ``shape``)."""
        ...

    def release(self, *, g_data: Tensor, decay: Tensor, noise: Tensor, std: Tensor,
                param: Tensor) -> Tensor:
        """The noisy gradient a reply carries: ``g_data + decay`` with the noise applied."""
        ...

    @property
    def closed_under_sums(self) -> bool:
        """Whether the release is ``g_data + decay + noise`` and a weighted sum of replies'
        noises is again this noise (Gaussian; none): a simulation may then draw the noise of
        the server's aggregate at once (:meth:`draw_sum`) instead of every reply's."""
        ...

    def draw_sum(self, *, weights: Tensor, std: Tensor, num_params: int,
                 generator: torch.Generator) -> Tensor:
        """The noise of ``sum_j weights[..., j] noise_j`` for replies with per-reply ``std``
        (shape ``weights.shape``), shape ``weights.shape[:-1] + (num_params,)``, drawn once
        (:meth:`draw` at :meth:`sum_std`); ``ValueError`` unless :attr:`closed_under_sums`."""
        ...

    def sum_std(self, *, weights: Tensor, std: Tensor) -> Tensor:
        """Std of ``sum_j weights[..., j] noise_j`` over the last axis, shape
        ``weights.shape[:-1]``, rounded up to ``std``'s dtype (a caller that draws many sums
        of the same replies computes it once); ``ValueError`` unless
        :attr:`closed_under_sums`."""
        ...


def not_closed_under_sums(kind: Mechanism) -> ValueError:
    """The error of :meth:`NoiseMechanism.draw_sum` for a mechanism whose noise is drawn
    reply by reply (``closed_under_sums`` false)."""
    return ValueError(f"{kind.value} noise is not closed under sums: draw it reply by reply")


def check_finite_clip(kind: Mechanism, clip: float) -> None:
    """Raise ``ValueError`` unless ``clip`` is finite (every private mechanism needs one)."""
    if math.isinf(clip):
        raise ValueError(f"{kind.value} needs a finite clip, got clip={clip}")


class FullBatch:
    """Shared by the replace-one mechanisms: every row of the client (q = 1), ``sum / d_i``,
    a finite clip."""

    kind: Mechanism
    neighbours: Neighbours = Neighbours.REPLACE_ONE
    default_sample_rate: float = 1.0

    def check(self, *, clip: float, sample_rate: float) -> None:
        check_finite_clip(self.kind, clip)
        if sample_rate != 1:
            raise ValueError(f"the {self.kind.value} mechanism uses each client's full local "
                             f"data (q = 1), got sample_rate={sample_rate}")

    def batch_rate(self, sample_rate: float) -> float:
        return 1.0

    def denominator_rate(self, sample_rate: float) -> float:
        return 1.0


def _registry() -> dict[Mechanism, NoiseMechanism]:
    from fedqr.privacy.continuous import GaussianMechanism, LaplaceMechanism, NoNoise
    from fedqr.privacy.discrete import DiscreteLaplaceMechanism

    return {Mechanism.LAPLACE: LaplaceMechanism(), Mechanism.GAUSSIAN: GaussianMechanism(),
            Mechanism.NONE: NoNoise(), Mechanism.DISCRETE_LAPLACE: DiscreteLaplaceMechanism()}


_REGISTRY: dict[Mechanism, NoiseMechanism] = {}


def as_mechanism(value: object) -> Mechanism:
    """``value`` as a :class:`Mechanism` (the enum or its string value), else ``ValueError``."""
    if isinstance(value, Mechanism):
        return value
    if isinstance(value, str) and value in Mechanism._value2member_map_:
        return Mechanism(value)
    allowed = ", ".join(repr(m.value) for m in Mechanism)
    raise ValueError(f"mechanism must be one of {allowed}, got mechanism={value!r}")


def mechanism_for(mechanism: Mechanism | str) -> NoiseMechanism:
    """The :class:`NoiseMechanism` object of ``mechanism`` (enum member or its value)."""
    if not _REGISTRY:
        _REGISTRY.update(_registry())
    return _REGISTRY[as_mechanism(mechanism)]


def check_accountant(value: object) -> Accountant:
    """``value`` as an :class:`Accountant`, else ``ValueError`` naming the allowed values."""
    return _as_accountant(value)


def check_accountant_applies(mechanism: Mechanism | str, accountant: Accountant | str) -> None:
    """Refuse an accountant asked for a mechanism that accounts its budgets otherwise (Laplace:
    pure composition; discrete Laplace: PLD; none: nothing), rather than replace it silently:
    the run's ``accounting`` block would name another accountant than the one asked for."""
    mech, asked = as_mechanism(mechanism), _as_accountant(accountant)
    used = mechanism_for(mech).accountant(asked)
    if used == asked:
        return
    if used is None:
        raise ValueError(f"accountant must be left out for the {mech.value} mechanism, which "
                         f"spends no budget, got accountant={asked.value!r}")
    raise ValueError(f"accountant must be left out or {used.value!r} for the {mech.value} "
                     f"mechanism, whose budgets the {used.value} accountant composes, got "
                     f"accountant={asked.value!r}")


def unspent_budget(mechanism: Mechanism | str, name: str) -> str | None:
    """Why the budget ``name`` (``"eps"`` or ``"delta"``) is not one ``mechanism`` spends
    (``None``: it is): without noise neither is; a pure eps-DP mechanism spends no delta. The
    command line (an option typed) and the API (a value other than the default) refuse such a
    budget with this reason rather than record one nothing holds."""
    spec = mechanism_for(as_mechanism(mechanism))
    if not spec.private:
        return "no noise, no privacy budget"
    if name == "delta" and not spec.needs_delta:
        return "pure eps-DP: delta is 0"
    return None


def check_private(mechanism: Mechanism | str) -> None:
    """``ValueError`` naming the private mechanisms unless ``mechanism`` is one (an estimate
    of the bound's constants has a clip and a noise to estimate for)."""
    mech = as_mechanism(mechanism)
    if not mechanism_for(mech).private:
        names = ", ".join(m.value for m in Mechanism if mechanism_for(m).private)
        raise ValueError(f"mechanism must be a private mechanism ({names}), got "
                         f"mechanism={mech.value!r}")
