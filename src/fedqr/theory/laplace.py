"""Closed-form optima of the Laplace bound (paper Section IV-B, Appendix KKT conditions).

``U(T, b) = (C1/b + C2 b T^2 + C3) / (T + gamma)`` over ``T >= 0``, ``1 <= b <= N``.

* ``T*(b) = sqrt(gamma^2 + (C1/b + C3) / (C2 b)) - gamma`` (eq. ``equ:optimal T``), set to 0
  when the square root is empty or the root is negative (errata 5: then ``U`` increases in T).
* ``b*(T) = sqrt(B1 / B2) = sqrt(C1 / C2) / T`` clipped to ``[1, N]`` (``b* = N`` at T = 0).
* Joint optimum: along the interior curve ``b = sqrt(C1/C2)/T`` the bound is the Moebius
  function ``(2 sqrt(C1 C2) T + C3) / (T + gamma)``, monotone in T, so interior KKT points are
  never minima and the optimum is among the KKT candidates ``(T*(1), 1)``, ``(T*(N), N)`` and
  ``(0, N)`` (Solutions 1-3).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedqr._enums import Rounding
from fedqr.theory.bounds import laplace_bound, laplace_c1, laplace_c2, laplace_c3
from fedqr.theory.constants import ProblemConstants

__all__ = [
    "JointOptimum",
    "Rounding",
    "alternate_convex_search",
    "b_star",
    "b_star_int",
    "joint_optimum",
    "joint_optimum_int",
    "t_star",
    "t_star_int",
]


@dataclass(frozen=True)
class JointOptimum:
    """A minimiser ``(T, b)`` of ``U`` and its value."""

    T: float
    b: float
    U: float


def t_star(constants: ProblemConstants, *, b: float) -> float:
    """Real ``T*(b) = max(0, sqrt(gamma^2 + (C1/b + C3)/(C2 b)) - gamma)`` (Section IV-B)."""
    c = constants
    if not 1.0 <= b <= c.N:
        raise ValueError(f"b must be in [1, N={c.N}], got b={b!r}")
    g = c.gamma
    radicand = g**2 + (laplace_c1(c) / b + laplace_c3(c)) / (laplace_c2(c) * b)
    if radicand <= 0.0:
        return 0.0
    return max(0.0, math.sqrt(radicand) - g)


def b_star(constants: ProblemConstants, *, T: float) -> float:
    """Real ``b*(T) = sqrt(B1/B2) = sqrt(C1/C2) / T`` clipped to ``[1, N]`` (Section IV-B)."""
    c = constants
    if not (math.isfinite(T) and T >= 0.0):
        raise ValueError(f"T must be >= 0 and finite, got T={T!r}")
    if T == 0.0:
        return float(c.N)  # B2 = 0: U decreases in b
    return min(max(math.sqrt(laplace_c1(c) / laplace_c2(c)) / T, 1.0), float(c.N))


def _u(c: ProblemConstants, T: float, b: float) -> float:
    return float(laplace_bound(c, T=T, b=b))


def _best(c: ProblemConstants, cands: list[tuple[float, float]]) -> JointOptimum:
    """Lowest ``U``; ties go to fewer replies (smaller ``b T``), then smaller T."""
    scored = sorted((_u(c, t, b), b * t, t, b) for t, b in cands)
    u, _, t, b = scored[0]
    return JointOptimum(T=t, b=b, U=u)


def t_star_int(constants: ProblemConstants, *, b: int, rounding: Rounding = Rounding.BEST) -> int:
    """Integer ``T*(b)``: ``floor`` (PAPER) or the better of ``floor``/``ceil`` (BEST)."""
    t = t_star(constants, b=b)
    if Rounding(rounding) is Rounding.PAPER:
        return math.floor(t)
    cands = [(float(math.floor(t)), float(b)), (float(math.ceil(t)), float(b))]
    return int(_best(constants, cands).T)


def b_star_int(constants: ProblemConstants, *, T: int, rounding: Rounding = Rounding.BEST) -> int:
    """Integer ``b*(T)`` in ``[1, N]``: ``ceil`` (PAPER) or the better neighbour (BEST)."""
    bb = b_star(constants, T=T)
    if Rounding(rounding) is Rounding.PAPER:
        return min(math.ceil(bb), constants.N)
    cands = [(float(T), float(math.floor(bb))), (float(T), float(min(math.ceil(bb), constants.N)))]
    return int(_best(constants, cands).b)


def joint_optimum(constants: ProblemConstants) -> JointOptimum:
    """Real joint minimiser among the KKT candidates (Solutions 1-3, Appendix KKT)."""
    c = constants
    cands = [(t_star(c, b=1.0), 1.0), (t_star(c, b=float(c.N)), float(c.N)), (0.0, float(c.N))]
    return _best(c, cands)


def joint_optimum_int(
    constants: ProblemConstants, *, rounding: Rounding = Rounding.BEST
) -> JointOptimum:
    """Integer joint optimum.

    PAPER: the KKT candidates with ``floor(T*)``. BEST: for every integer ``b`` in ``[1, N]``
    the better of ``floor``/``ceil`` of ``T*(b)`` (``U`` is convex or increasing in T for fixed
    b, so this is the exact integer minimum; it contains the rounded KKT candidates).
    """
    c = constants
    if Rounding(rounding) is Rounding.PAPER:
        cands = [(float(math.floor(t_star(c, b=float(b)))), float(b)) for b in (1, c.N)]
        return _best(c, [*cands, (0.0, float(c.N))])
    bs = np.arange(1, c.N + 1, dtype=np.float64)
    g = c.gamma
    rad = g**2 + (laplace_c1(c) / bs + laplace_c3(c)) / (laplace_c2(c) * bs)
    ts = np.maximum(np.sqrt(np.maximum(rad, 0.0)) - g, 0.0)
    tt = np.concatenate([np.floor(ts), np.ceil(ts)])
    bb = np.concatenate([bs, bs])
    u = np.asarray(laplace_bound(c, T=tt, b=bb))
    order = np.lexsort((tt, bb * tt, u))
    i = int(order[0])
    return JointOptimum(T=float(tt[i]), b=float(bb[i]), U=float(u[i]))


def alternate_convex_search(
    objective: Callable[[float, float], float],
    *,
    argmin_t: Callable[[float], float],
    argmin_b: Callable[[float], float],
    starts: list[tuple[float, float]],
    tol: float = 1e-9,
    max_iter: int = 1000,
) -> JointOptimum:
    """Alternate Convex Search (Gorski et al., 2007) for a biconvex ``U(T, b)``.

    From each start, alternate ``T <- argmin_t(b)`` and ``b <- argmin_b(T)`` until ``U`` stops
    decreasing by more than ``tol`` (relative); return the best end point. A general fallback
    when no closed-form joint solution is known; :func:`laplace_acs` applies it to Theorem 3.
    """
    best: JointOptimum | None = None
    for t, b in starts:
        u = objective(t, b)
        for _ in range(max_iter):
            t = argmin_t(b)
            b = argmin_b(t)
            u_new = objective(t, b)
            done = u - u_new <= tol * max(1.0, abs(u))
            u = min(u, u_new)
            if done:
                break
        if best is None or u < best.U:
            best = JointOptimum(T=t, b=b, U=u)
    if best is None:
        raise ValueError("starts must hold at least one (T, b), got starts=[]")
    return best


def laplace_acs(constants: ProblemConstants) -> JointOptimum:
    """:func:`alternate_convex_search` on Theorem 3 from ``b = 1`` and ``b = N``."""
    c = constants
    return alternate_convex_search(
        lambda t, b: _u(c, t, b),
        argmin_t=lambda b: t_star(c, b=b),
        argmin_b=lambda t: b_star(c, T=t),
        starts=[(0.0, 1.0), (0.0, float(c.N))],
    )
