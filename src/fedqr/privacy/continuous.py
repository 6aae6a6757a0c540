"""The real-valued additive mechanisms: Laplace (the paper's Theorem 1), Gaussian, and none.

Each is a :class:`~fedqr.privacy.spec.NoiseMechanism`; :func:`~fedqr.privacy.mechanism_for`
returns them. See :mod:`fedqr.privacy.spec` for what a mechanism object answers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import dp_accounting
import torch
from torch import Tensor

from fedqr.privacy.accounting import Accountant
from fedqr.privacy.calibrate import calibrate_noise_multiplier
from fedqr.privacy.mechanisms import (
    Mechanism,
    Norm,
    gaussian_event,
    gaussian_std,
    laplace_event,
    laplace_scale,
    noise_tensor,
    sample_gaussian,
    sample_laplace,
)
from fedqr.privacy.spec import (
    NO_NOISE,
    Calibration,
    FullBatch,
    Neighbours,
    PaperBound,
    check_finite_clip,
    not_closed_under_sums,
)

__all__ = ["GaussianMechanism", "LaplaceMechanism", "NoNoise", "summed_std"]


def summed_std(weights: Tensor, std: Tensor) -> Tensor:
    """Std of ``sum_j w_j N(0, s_j^2)``, ``sqrt(sum_j w_j^2 s_j^2)`` over the last axis:
    computed in float64, rounded up to ``std``'s dtype as every std is."""
    return noise_tensor((weights.double() * std.double()).square().sum(dim=-1).sqrt(),
                        dtype=std.dtype, device=std.device)


@dataclass(frozen=True)
class _Additive:
    """Shared by the mechanisms that add real-valued noise to the gradient."""

    def release(self, *, g_data: Tensor, decay: Tensor, noise: Tensor, std: Tensor,
                param: Tensor) -> Tensor:
        return (g_data + decay) + noise


@dataclass(frozen=True)
class LaplaceMechanism(FullBatch, _Additive):
    """Paper Theorem 1: l1 clip, every row (q = 1), replace-one, pure eps-DP, basic
    composition over the exact reply count (:class:`~fedqr.privacy.PureDpAccountant`)."""

    kind: Mechanism = Mechanism.LAPLACE
    norm: Norm = Norm.L1
    private: bool = True
    needs_delta: bool = False
    bound: PaperBound | None = PaperBound.THEOREM_3
    continuous: Mechanism = Mechanism.LAPLACE
    default_clip: float = 300.0

    def accountant(self, requested: Accountant) -> Accountant | None:
        return Accountant.PURE

    def client_delta(self, delta: float) -> float:
        return 0.0

    def calibrate(self, *, replies: int, eps: float, delta: float, clip: float,
                  sample_rate: float, size: int, accountant: Accountant,
                  num_params: int | None = None) -> Calibration:
        if replies == 0:
            return NO_NOISE
        scale = laplace_scale(replies=replies, clip=clip, num_samples=size, eps=eps)
        return Calibration(param=scale, std=math.sqrt(2.0) * scale,
                           event=self.event(param=scale, clip=clip, sample_rate=sample_rate,
                                            size=size))

    def event(self, *, param: float, clip: float, sample_rate: float, size: int,
              num_params: int | None = None) -> dp_accounting.DpEvent | None:
        return laplace_event(scale=param, clip=clip, num_samples=size)

    def draw(self, *, std: Tensor, param: Tensor, shape: tuple[int, ...],
             generator: torch.Generator) -> Tensor:
        scale = noise_tensor(std.double() / 2**0.5, dtype=std.dtype)  # rounded up, as std
        return sample_laplace(scale.unsqueeze(-1), shape, generator=generator)

    @property
    def closed_under_sums(self) -> bool:
        return False  # a sum of Laplace noises is not Laplace

    def draw_sum(self, *, weights: Tensor, std: Tensor, num_params: int,
                 generator: torch.Generator) -> Tensor:
        raise not_closed_under_sums(self.kind)

    def sum_std(self, *, weights: Tensor, std: Tensor) -> Tensor:
        raise not_closed_under_sums(self.kind)


@dataclass(frozen=True)
class GaussianMechanism(_Additive):
    """l2 clip, Poisson sampling at rate q, add/remove-one, ``sum / (q d_i)``, noise
    multiplier calibrated by dp-accounting (RDP or PLD)."""

    kind: Mechanism = Mechanism.GAUSSIAN
    norm: Norm = Norm.L2
    private: bool = True
    needs_delta: bool = True
    neighbours: Neighbours = Neighbours.ADD_REMOVE_ONE
    bound: PaperBound | None = PaperBound.THEOREM_4
    continuous: Mechanism = Mechanism.GAUSSIAN
    default_clip: float = 10.0
    default_sample_rate: float = 0.01

    def check(self, *, clip: float, sample_rate: float) -> None:
        check_finite_clip(self.kind, clip)

    def batch_rate(self, sample_rate: float) -> float:
        return sample_rate

    def denominator_rate(self, sample_rate: float) -> float:
        return sample_rate

    def accountant(self, requested: Accountant) -> Accountant | None:
        return requested

    def client_delta(self, delta: float) -> float:
        return delta

    def calibrate(self, *, replies: int, eps: float, delta: float, clip: float,
                  sample_rate: float, size: int, accountant: Accountant,
                  num_params: int | None = None) -> Calibration:
        if replies == 0:
            return NO_NOISE
        z = calibrate_noise_multiplier(replies=replies, sample_rate=sample_rate, eps=eps,
                                       delta=delta, accountant=accountant)
        std = gaussian_std(noise_multiplier=z, clip=clip, sample_rate=sample_rate,
                           num_samples=size)
        return Calibration(param=z, std=std, event=gaussian_event(noise_multiplier=z,
                                                                  sample_rate=sample_rate))

    def event(self, *, param: float, clip: float, sample_rate: float, size: int,
              num_params: int | None = None) -> dp_accounting.DpEvent | None:
        return gaussian_event(noise_multiplier=param, sample_rate=sample_rate)

    def draw(self, *, std: Tensor, param: Tensor, shape: tuple[int, ...],
             generator: torch.Generator) -> Tensor:
        return sample_gaussian(std.unsqueeze(-1), shape, generator=generator)

    @property
    def closed_under_sums(self) -> bool:
        return True

    def draw_sum(self, *, weights: Tensor, std: Tensor, num_params: int,
                 generator: torch.Generator) -> Tensor:
        """``sum_j w_j N(0, s_j^2) = N(0, sum_j w_j^2 s_j^2)`` in every coordinate: one draw
        of :func:`summed_std`."""
        total = self.sum_std(weights=weights, std=std)
        return self.draw(std=total, param=torch.zeros_like(total),
                         shape=(*total.shape, num_params), generator=generator)

    def sum_std(self, *, weights: Tensor, std: Tensor) -> Tensor:
        return summed_std(weights, std)


@dataclass(frozen=True)
class NoNoise(_Additive):
    """The non-private baseline: no noise, no ledger. Clips in l2 when a finite clip is
    given, draws a Poisson batch when ``q < 1`` and divides by ``q d_i`` like Gaussian."""

    kind: Mechanism = Mechanism.NONE
    norm: Norm = Norm.L2
    private: bool = False
    needs_delta: bool = False
    neighbours: Neighbours = Neighbours.ADD_REMOVE_ONE
    bound: PaperBound | None = None
    continuous: Mechanism = Mechanism.GAUSSIAN  # zero noise: the family is immaterial
    default_clip: float = math.inf
    default_sample_rate: float = 1.0

    def check(self, *, clip: float, sample_rate: float) -> None:
        return None

    def batch_rate(self, sample_rate: float) -> float:
        return sample_rate

    def denominator_rate(self, sample_rate: float) -> float:
        return sample_rate

    def accountant(self, requested: Accountant) -> Accountant | None:
        return None

    def client_delta(self, delta: float) -> float:
        return 0.0  # nothing is promised, nothing is spent: never report a budget delta

    def calibrate(self, *, replies: int, eps: float, delta: float, clip: float,
                  sample_rate: float, size: int, accountant: Accountant,
                  num_params: int | None = None) -> Calibration:
        return NO_NOISE

    def event(self, *, param: float, clip: float, sample_rate: float, size: int,
              num_params: int | None = None) -> dp_accounting.DpEvent | None:
        return None

    def draw(self, *, std: Tensor, param: Tensor, shape: tuple[int, ...],
             generator: torch.Generator) -> Tensor:
        return torch.zeros(shape, dtype=std.dtype, device=std.device)

    @property
    def closed_under_sums(self) -> bool:
        return True

    def draw_sum(self, *, weights: Tensor, std: Tensor, num_params: int,
                 generator: torch.Generator) -> Tensor:
        return torch.zeros((*weights.shape[:-1], num_params), dtype=std.dtype,
                           device=std.device)

    def sum_std(self, *, weights: Tensor, std: Tensor) -> Tensor:
        return torch.zeros(weights.shape[:-1], dtype=std.dtype, device=std.device)


