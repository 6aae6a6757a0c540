"""Convergence bounds ``U(T, b) = Y_T`` of FedSGD-DPC (paper Theorems 3 and 4).

All bounds follow the recursion ``Y_{t+1} <= (1 - mu eta_t) Y_t + eta_t^2 omega`` with
``eta_t = 2 / (mu (t + gamma))``, ``gamma = 2 lambda / mu``, which gives
``Y_T <= ((4 / mu^2) omega + gamma Y0) / (T + gamma)`` (proof of Theorem 3). Every function is
vectorised: ``T`` and ``b`` broadcast as NumPy arrays (``T >= 0`` real, ``1 <= b <= N``).

Laplace (Theorem 3)
    ``U(T, b) = (C1 / b + C2 b T^2 + C3) / (T + gamma)``. Heterogeneous budgets enter as
    ``sum_i 1 / eps_i^2`` (Proposition 1; the ``d_i`` cancel there).
Gaussian (Theorem 4, errata: it is the Gaussian case and ``mu_2`` reads ``mu^2``)
    Paper form ``U = E1 / (b (T + gamma)) + E2 / (T + gamma) + E3`` with the unspecified
    moments-accountant constant ``c2`` (:func:`gaussian_bound_paper`, for comparison), and
    the form with calibrated per-client noise (:func:`gaussian_bound`, see
    :func:`aggregated_noise_variance`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedqr.theory.constants import ProblemConstants

__all__ = [
    "aggregated_noise_variance",
    "gaussian_bound",
    "gaussian_bound_paper",
    "gaussian_e1",
    "gaussian_e2",
    "gaussian_e3",
    "laplace_bound",
    "laplace_c1",
    "laplace_c2",
    "laplace_c3",
    "paper_noise_constant",
    "sampling_variance",
]

Array = NDArray[np.float64]


def _tb(constants: ProblemConstants, T: ArrayLike, b: ArrayLike) -> tuple[Array, Array]:
    t = np.asarray(T, dtype=np.float64)
    bb = np.asarray(b, dtype=np.float64)
    if np.any(~np.isfinite(t)) or np.any(t < 0):
        raise ValueError(f"T must be >= 0 and finite, got T={T!r}")
    if np.any(~np.isfinite(bb)) or np.any(bb < 1) or np.any(bb > constants.N):
        raise ValueError(f"b must be in [1, N={constants.N}], got b={b!r}")
    return t, bb


def _out(x: Any) -> Any:
    arr = np.asarray(x, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else arr


# -- Laplace: Theorem 3 and the Section IV-B problem ------------------------------------------
def laplace_c1(constants: ProblemConstants) -> float:
    """``C1 = (4 / mu^2) * 2 N G^2 / (N - 1)`` (Section IV-B, gradient-sampling term)."""
    c = constants
    return 4.0 / c.mu**2 * 2.0 * c.N * c.G**2 / (c.N - 1)


def laplace_c2(constants: ProblemConstants) -> float:
    """``C2 = (1 / mu^2) * 32 p xi_1^2 / (N d^2) * sum_i 1 / eps_i^2`` (Section IV-B).

    From Proposition 1, ``E||w_t^b||^2 = 8 eta_t^2 p b T^2 xi_1^2 / (N d^2) sum_i 1/eps_i^2``.
    """
    c = constants
    inv_eps2 = sum(1.0 / e**2 for e in c.eps_i)
    return 32.0 * c.p * c.xi**2 / (c.mu**2 * c.N * c.d**2) * inv_eps2


def laplace_c3(constants: ProblemConstants) -> float:
    """``C3 = gamma Y0 + (4 / mu^2) (2 lambda Gamma - 2 G^2 / (N - 1))`` (Section IV-B).

    May be negative (errata 5).
    """
    c = constants
    return c.gamma * c.Y0 + 4.0 / c.mu**2 * (2.0 * c.lam * c.Gamma - 2.0 * c.G**2 / (c.N - 1))


def laplace_bound(constants: ProblemConstants, *, T: ArrayLike, b: ArrayLike) -> Any:
    """Theorem 3: ``U(T, b) = (C1 / b + C2 b T^2 + C3) / (T + gamma)``.

    Equivalently ``((4/mu^2)(omega_0 + omega_1 / 4) + gamma Y0) / (T + gamma)`` with
    ``omega_0 = 2 (N - b) G^2 / ((N - 1) b) + 2 lambda Gamma`` and
    ``omega_1 = 32 p b T^2 xi_1^2 / (N d^2) sum_i 1/eps_i^2``. Broadcasts over ``T`` and ``b``;
    returns a float for scalar input.
    """
    t, bb = _tb(constants, T, b)
    c1, c2, c3 = laplace_c1(constants), laplace_c2(constants), laplace_c3(constants)
    return _out((c1 / bb + c2 * bb * t**2 + c3) / (t + constants.gamma))


# -- Gaussian: Lemma 4, Proposition 2 and Theorem 4 -------------------------------------------
def sampling_variance(constants: ProblemConstants) -> float:
    """Lemma 4's sampling term ``sum_i d_i Lambda_i^2 / (q d^2)`` (0 without ``Lambda2_i``)."""
    c = constants
    if c.Lambda2_i is None:
        return 0.0
    return sum(di * l2 for di, l2 in zip(c.d_i, c.Lambda2_i, strict=True)) / (c.q * c.d**2)


def paper_noise_constant(constants: ProblemConstants, *, c2: float) -> float:
    """``K = c2^2 p xi_2^2 / d^2 * sum_i log(1 / delta_i) / eps_i^2`` (Proposition 2:
    ``E||w_t^b||^2 = eta_t^2 T K``), with the paper's unspecified constant ``c2``."""
    if not (isinstance(c2, int | float) and math.isfinite(c2) and c2 > 0):
        raise ValueError(f"c2 must be > 0 and finite, got c2={c2!r}")
    c = constants
    if any(dl <= 0.0 for dl in c.delta_i):
        raise ValueError(f"delta_i must be in (0, 1) for the Gaussian bound, got {c.delta_i}")
    s = sum(math.log(1.0 / dl) / e**2 for e, dl in zip(c.eps_i, c.delta_i, strict=True))
    return c2**2 * c.p * c.xi**2 / c.d**2 * s


def gaussian_e1(constants: ProblemConstants) -> float:
    """``E1 = 8 G^2 N / (mu^2 (N - 1))`` (Section V-B; errata 1: ``mu_2`` is ``mu^2``)."""
    return laplace_c1(constants)


def gaussian_e2(constants: ProblemConstants, *, c2: float) -> float:
    """``E2 = (4/mu^2)(-2 G^2/(N-1) + sum_i d_i Lambda_i^2/(q d^2) + 2 lambda Gamma)
    + gamma Y0 - (4/mu^2) gamma K`` with ``K`` of :func:`paper_noise_constant`."""
    c = constants
    k = paper_noise_constant(c, c2=c2)
    inner = -2.0 * c.G**2 / (c.N - 1) + sampling_variance(c) + 2.0 * c.lam * c.Gamma
    return 4.0 / c.mu**2 * inner + c.gamma * c.Y0 - 4.0 / c.mu**2 * c.gamma * k


def gaussian_e3(constants: ProblemConstants, *, c2: float) -> float:
    """``E3 = (4/mu^2) K``: the limit of ``U`` as ``T -> infinity`` (Section V-B)."""
    return 4.0 / constants.mu**2 * paper_noise_constant(constants, c2=c2)


def gaussian_bound_paper(
    constants: ProblemConstants, *, T: ArrayLike, b: ArrayLike, c2: float
) -> Any:
    """Theorem 4 in the paper's closed form ``E1 / (b (T + gamma)) + E2 / (T + gamma) + E3``.

    For comparison only: ``c2`` is unspecified (errata 2). Broadcasts over ``T`` and ``b``.
    """
    t, bb = _tb(constants, T, b)
    e1 = gaussian_e1(constants)
    e2, e3 = gaussian_e2(constants, c2=c2), gaussian_e3(constants, c2=c2)
    return _out(e1 / (bb * (t + constants.gamma)) + e2 / (t + constants.gamma) + e3)


def aggregated_noise_variance(
    constants: ProblemConstants, *, b: ArrayLike, sigma_i: ArrayLike
) -> Any:
    """Per-``eta_t^2`` variance of the aggregated noise, ``V = E||w_t^b||^2 / eta_t^2``.

    Derivation (structure of Proposition 2's proof): ``w_t^b = (N/b) sum_{i in P_t}
    (d_i/d) eta_t w_t^i`` with independent zero-mean ``w_t^i ~ N(0, sigma_i^2 I_p)``, so
    ``E||w_t^b||^2 = eta_t^2 (N/b)^2 sum_{i in P_t} (d_i/d)^2 p sigma_i^2``. Averaging over the
    selection (each client is in ``P_t`` with probability ``b/N``, Lemma 1) gives

        ``V = (N / b) * p * sum_i (d_i / d)^2 sigma_i^2``.

    With the paper's ``sigma_i^2 = c2^2 xi^2 (bT/N) log(1/delta_i) / (d_i^2 eps_i^2)`` this is
    ``T K`` of :func:`paper_noise_constant` (Proposition 2). With a real accountant,
    ``sigma_i = z_i xi / (q d_i)`` (``fedqr.privacy.gaussian_std``) where ``z_i`` is calibrated
    for client i's exact reply count ``R_i``.

    Parameters
    ----------
    b
        Clients per round, broadcasting against ``sigma_i[..., 0]``.
    sigma_i
        Per-client noise std, last axis of length ``N``.
    """
    c = constants
    bb = np.asarray(b, dtype=np.float64)
    s = np.asarray(sigma_i, dtype=np.float64)
    if s.ndim == 0 or s.shape[-1] != c.N:
        raise ValueError(f"sigma_i must have last axis of length N={c.N}, got shape={s.shape}")
    if np.any(bb < 1) or np.any(bb > c.N):
        raise ValueError(f"b must be in [1, N={c.N}], got b={b!r}")
    w = (np.asarray(c.d_i, dtype=np.float64) / c.d) ** 2
    return _out(c.N / bb * c.p * np.sum(w * s**2, axis=-1))


def gaussian_bound(
    constants: ProblemConstants, *, T: ArrayLike, b: ArrayLike, noise_variance: ArrayLike
) -> Any:
    """Theorem 4 with a calibrated noise term:
    ``U = ((4/mu^2)(omega_0' + V) + gamma Y0) / (T + gamma)``, where
    ``omega_0' = 2 (N - b) G^2 / ((N - 1) b) + sum_i d_i Lambda_i^2 / (q d^2) + 2 lambda Gamma``
    (Lemma 4) and ``V`` is :func:`aggregated_noise_variance` (replacing ``T K``).
    """
    c = constants
    t, bb = _tb(c, T, b)
    v = np.asarray(noise_variance, dtype=np.float64)
    if np.any(v < 0) or np.any(np.isnan(v)):
        raise ValueError(f"noise_variance must be >= 0, got noise_variance={noise_variance!r}")
    omega0 = 2.0 * (c.N - bb) * c.G**2 / ((c.N - 1) * bb) + sampling_variance(c)
    omega0 = omega0 + 2.0 * c.lam * c.Gamma
    return _out((4.0 / c.mu**2 * (omega0 + v) + c.gamma * c.Y0) / (t + c.gamma))
