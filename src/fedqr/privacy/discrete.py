"""Discrete Laplace on integer-quantised replies: the paper's mechanism made exact.

Like paper Theorem 1: l1 clip ``C``, every row (q = 1), replace-one neighbours, mean over
``d_i``. The mean gradient is rounded to the grid ``gamma = (2 C / d_i) / (K p)`` (the
sensitivity spans ``K p`` grid units, ``K =`` :data:`GRID_PER_PARAM`, ``p`` parameters);
nearest rounding moves each coordinate by at most half a unit, so the l1 sensitivity of the
rounded reply is at most ``Delta = (K + 1) p + p // 2**20 + 1`` grid units (the last terms
absorb float32 error in ``gamma``). Integer noise ``Z ~ DLap(t)`` (pmf ``prop. exp(-|z|/t)``,
integer scale ``t``) is added in integer arithmetic and the reply is ``gamma (r + Z)``: a
post-processing of an integer vector, immune to the floating-point attacks on textbook
Laplace noise (Mironov 2012). Accounting: dp-accounting's PLD accountant on
``DiscreteLaplaceDpEvent(1 / t, Delta)`` (``from_discrete_laplace_mechanism``); ``t`` is the
smallest integer whose ``R``-fold composition meets ``(eps, delta)``.

Sampling (Canonne, Kamath, Steinke 2020, Algorithms 1 and 2) uses only uniform integers.
:class:`SecureIntegers` draws them from the OS's cryptographically secure generator
(``secrets``); the engines pass a seeded ``torch.Generator`` for reproducible simulation, and
the mechanism then draws from a ``numpy`` generator seeded by it (:class:`SeededIntegers`).
``DiscreteLaplaceMechanism(secure=True)`` ignores the torch generator and uses the OS.
"""

from __future__ import annotations

import functools
import math
import secrets
from dataclasses import dataclass
from typing import Protocol

import dp_accounting
import numpy as np
import torch
from dp_accounting import dp_event
from torch import Tensor

from fedqr.privacy.accounting import PLD_VALUE_DISCRETIZATION_INTERVAL, Accountant, make_accountant
from fedqr.privacy.mechanisms import Mechanism, Norm
from fedqr.privacy.spec import (
    NO_NOISE,
    Calibration,
    FullBatch,
    PaperBound,
    not_closed_under_sums,
)

__all__ = ["GRID_PER_PARAM", "DiscreteLaplaceMechanism", "SecureIntegers", "SeededIntegers",
           "grid_sensitivity", "sample_discrete_laplace"]

GRID_PER_PARAM = 4
"""Grid units per parameter spanned by the true sensitivity (rounding adds at most 1 per
parameter, so the noise is ``(K + 1) / K`` = 1.25 times that of exact arithmetic)."""


class IntegerSource(Protocol):
    """Uniform integers: ``below(n)[i]`` uniform in ``{0, ..., n[i] - 1}``."""

    def below(self, n: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class SeededIntegers:
    """Uniform integers from a seeded ``numpy.random.Generator`` (exact rejection sampling)."""

    rng: np.random.Generator

    def below(self, n: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.rng.integers(0, n, dtype=np.int64)
        return out


class SecureIntegers:
    """Uniform integers from the OS's cryptographically secure generator (``secrets``)."""

    def below(self, n: np.ndarray) -> np.ndarray:
        n = np.asarray(n, dtype=np.uint64)
        limit = np.uint64(2**64 - 1) - (np.uint64(0) - n) % n  # largest v with v // n complete
        out = np.empty(n.shape, dtype=np.uint64)
        todo = np.arange(n.size)
        while todo.size:
            v = np.frombuffer(secrets.token_bytes(8 * todo.size), dtype=np.uint64)
            ok = v <= limit.flat[todo]
            out.flat[todo[ok]] = v[ok] % n.flat[todo[ok]]
            todo = todo[~ok]
        return out.astype(np.int64)


def _bernoulli_exp(num: np.ndarray, den: np.ndarray, src: IntegerSource) -> np.ndarray:
    """``Bernoulli(exp(-num / den))`` for ``0 <= num <= den`` (CKS Algorithm 1)."""
    k = np.ones(num.shape, dtype=np.int64)
    active = np.arange(num.size)
    while active.size:
        a = src.below(den[active] * k[active]) < num[active]
        k[active[a]] += 1
        active = active[a]
    odd: np.ndarray = (k % 2) == 1
    return odd


def sample_discrete_laplace(scale: np.ndarray, *, source: IntegerSource) -> np.ndarray:
    """Exact ``DLap(t)`` draws (pmf ``prop. exp(-|z| / t)``), one per entry of integer ``scale``.

    CKS Algorithm 2 with integer arithmetic only. ``scale`` holds integers ``>= 1``.
    """
    t = np.asarray(scale, dtype=np.int64).ravel()
    if t.size and int(t.min()) < 1:
        raise ValueError(f"scale must hold integers >= 1, got min(scale)={int(t.min())}")
    out = np.zeros(t.size, dtype=np.int64)
    todo = np.arange(t.size)
    while todo.size:
        tt = t[todo]
        u = source.below(tt)
        keep = _bernoulli_exp(u, tt, source)
        idx, u, tt = todo[keep], u[keep], tt[keep]
        v = np.zeros(idx.size, dtype=np.int64)
        going = np.arange(idx.size)
        while going.size:  # V ~ Geometric(1 - 1/e)
            ones = np.ones(going.size, dtype=np.int64)
            hit = _bernoulli_exp(ones, ones, source)
            v[going[hit]] += 1
            going = going[hit]
        x = u + tt * v
        neg = source.below(np.full(idx.size, 2, dtype=np.int64)) == 1
        ok = ~(neg & (x == 0))
        out[idx[ok]] = np.where(neg[ok], -x[ok], x[ok])
        done = np.zeros(t.size, dtype=bool)
        done[idx[ok]] = True
        todo = todo[~done[todo]]
    return out.reshape(np.shape(scale))


def grid_sensitivity(num_params: int) -> int:
    """l1 sensitivity ``Delta``, in grid units, of a rounded reply of ``num_params`` values."""
    return (GRID_PER_PARAM + 1) * num_params + num_params // 2**20 + 1


def _unit_std(t: float) -> float:
    """Std of ``DLap(t)``: ``sqrt(2 e^{-1/t}) / (1 - e^{-1/t})``."""
    a = 1.0 / t
    return math.sqrt(2.0 * math.exp(-a)) / -math.expm1(-a)


_WIDEN = 4
"""Times the calibration's upper end is raised fourfold before an eps is called unresolved."""


@functools.lru_cache(maxsize=1024)
def _calibrate(replies: int, eps: float, delta: float, sensitivity: int) -> int:
    def event(t: float) -> dp_accounting.DpEvent:
        return dp_event.SelfComposedDpEvent(
            dp_event.DiscreteLaplaceDpEvent(noise_parameter=1.0 / t, sensitivity=sensitivity),
            replies)

    def eps_at(t: int) -> float:
        return float(make_accountant(Accountant.PLD).compose(event(t)).get_epsilon(delta))

    # basic composition meets eps at hi; halve down to a scale that does not (small scales
    # have huge privacy-loss ranges, expensive on the PLD grid, so never evaluate far below)
    hi = 2 * math.ceil(replies * sensitivity / eps)
    for _ in range(_WIDEN):  # the PLD grid may charge more than basic composition at tiny eps
        if eps_at(hi) <= eps:
            break
        hi *= 4
    else:
        raise ValueError(
            f"eps must be large enough for the pld accountant of discrete-laplace noise to "
            f"resolve ({replies} replies, delta={delta:g}, a privacy-loss grid of "
            f"{PLD_VALUE_DISCRETIZATION_INTERVAL:g}): no noise scale up to {hi // 4} grid "
            f"units meets it, got eps={eps:g}; use a larger eps")
    lo = hi
    while lo > 1:
        hi, lo = lo, lo // 2
        if eps_at(lo) > eps:
            break
    else:
        return 1
    t = dp_accounting.calibrate_dp_mechanism(
        lambda: make_accountant(Accountant.PLD), event, eps, delta,
        dp_accounting.ExplicitBracketInterval(lo, hi), discrete=True)
    return int(t)


@dataclass(frozen=True)
class DiscreteLaplaceMechanism(FullBatch):
    """Discrete Laplace on the integer grid (module docstring); PLD accounting."""

    secure: bool = False
    kind: Mechanism = Mechanism.DISCRETE_LAPLACE
    norm: Norm = Norm.L1
    private: bool = True
    needs_delta: bool = True
    bound: PaperBound | None = None  # no theorem of the paper covers it: the twin plans it
    continuous: Mechanism = Mechanism.LAPLACE
    default_clip: float = 300.0

    def accountant(self, requested: Accountant) -> Accountant | None:
        return Accountant.PLD

    def client_delta(self, delta: float) -> float:
        return delta

    def calibrate(self, *, replies: int, eps: float, delta: float, clip: float,
                  sample_rate: float, size: int, accountant: Accountant,
                  num_params: int | None = None) -> Calibration:
        if replies == 0:
            return NO_NOISE
        if num_params is None or num_params < 1:
            raise ValueError(f"{self.kind.value} needs the reply's dimension, got "
                             f"num_params={num_params!r}")
        t = _calibrate(replies, eps, delta, grid_sensitivity(num_params))
        gamma = 2.0 * clip / size / (GRID_PER_PARAM * num_params)
        return Calibration(param=float(t), std=gamma * _unit_std(t),
                           event=self.event(param=t, clip=clip, sample_rate=sample_rate,
                                            size=size, num_params=num_params))

    def event(self, *, param: float, clip: float, sample_rate: float, size: int,
              num_params: int | None = None) -> dp_accounting.DpEvent | None:
        if num_params is None:
            raise ValueError(f"{self.kind.value} needs num_params, got None")
        return dp_event.DiscreteLaplaceDpEvent(noise_parameter=1.0 / param,
                                               sensitivity=grid_sensitivity(num_params))

    def draw(self, *, std: Tensor, param: Tensor, shape: tuple[int, ...],
             generator: torch.Generator) -> Tensor:
        """Integer noise in grid units (float64 holding exact integers)."""
        source: IntegerSource
        if self.secure:
            source = SecureIntegers()
        else:
            seed = int(torch.randint(0, 2**62, (1,), generator=generator,
                                     device=generator.device))
            source = SeededIntegers(np.random.default_rng(seed))
        t = np.broadcast_to(param.detach().cpu().numpy().astype(np.int64)[..., None], shape)
        z = sample_discrete_laplace(np.maximum(t, 1), source=source)
        return torch.as_tensor(z, dtype=torch.float64, device=std.device)

    @property
    def closed_under_sums(self) -> bool:
        return False  # integer noise on each reply's own grid: drawn reply by reply

    def draw_sum(self, *, weights: Tensor, std: Tensor, num_params: int,
                 generator: torch.Generator) -> Tensor:
        raise not_closed_under_sums(self.kind)

    def sum_std(self, *, weights: Tensor, std: Tensor) -> Tensor:
        raise not_closed_under_sums(self.kind)

    def release(self, *, g_data: Tensor, decay: Tensor, noise: Tensor, std: Tensor,
                param: Tensor) -> Tensor:
        """``gamma (round(g_data / gamma) + Z) + decay``, the integer sum taken exactly."""
        t = param.double().clamp_min(1.0)
        a = 1.0 / t
        unit = torch.sqrt(2.0 * torch.exp(-a)) / -torch.expm1(-a)
        gamma = (std.double() / unit).unsqueeze(-1)
        total = torch.round(g_data.double() / gamma) + noise  # exact integers below 2**53
        return (gamma * total).to(g_data.dtype) + decay
