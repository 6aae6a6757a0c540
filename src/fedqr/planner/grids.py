"""The grids the planner searches: T on a log grid, b over 1..N, q on a log grid."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

__all__ = ["b_grid", "log_grid", "q_grid", "refine_b", "refine_q"]


def log_grid(lo: int, hi: int, *, ratio: float) -> NDArray[np.int64]:
    """Integers from ``lo`` to ``hi`` (both included), neighbours at most ``ratio`` apart
    (consecutive integers where the ratio would round to the same value)."""
    if lo < 1 or hi < lo:
        raise ValueError(f"need 1 <= lo <= hi, got lo={lo}, hi={hi}")
    if not ratio > 1:
        raise ValueError(f"ratio must be > 1, got ratio={ratio}")
    out = [lo]
    while out[-1] < hi:
        out.append(min(hi, max(out[-1] + 1, math.floor(out[-1] * ratio))))
    return np.asarray(out, dtype=np.int64)


def b_grid(n: int, *, dense_up_to: int = 5, ratio: float = 1.5) -> NDArray[np.int64]:
    """b over 1..N: every value when N is small, else a log grid refined later."""
    if n <= dense_up_to:
        return np.arange(1, n + 1, dtype=np.int64)
    return log_grid(1, n, ratio=ratio)


def refine_b(best: int, evaluated: set[int], n: int) -> list[int]:
    """The unevaluated integers between ``best`` and its evaluated neighbours (at most 4)."""
    lower = max([b for b in evaluated if b < best], default=best)
    upper = min([b for b in evaluated if b > best], default=best)
    cand = [b for b in range(max(1, lower + 1), min(n, upper - 1) + 1)
            if b not in evaluated and b != best]
    if len(cand) <= 4:
        return cand
    picks = np.unique(np.round(np.geomspace(cand[0], cand[-1], 4)).astype(int))
    return [int(b) for b in picks]


def q_grid(min_size: int, *, q_min: float = 1e-3, points_per_decade: int = 2
           ) -> NDArray[np.float64]:
    """Poisson rates from ``max(q_min, 2 / min d_i)`` to 1 on a log grid."""
    lo = max(q_min, min(1.0, 2.0 / max(min_size, 1)))
    decades = -math.log10(lo)
    k = max(1, math.ceil(decades * points_per_decade))
    return np.unique(np.round(np.geomspace(lo, 1.0, k + 1), 6))


def refine_q(best: float, grid: NDArray[np.float64]) -> list[float]:
    """Geometric midpoints between ``best`` and its grid neighbours."""
    out = []
    for other in (grid[grid < best].max(initial=0), grid[grid > best].min(initial=2)):
        if 0 < other <= 1:
            out.append(float(np.round(math.sqrt(best * other), 6)))
    return out
