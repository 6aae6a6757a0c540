"""The fine horizons beyond ``fine_simulate_up_to``, read off each repeat's coarse curve.

Common random numbers make a repeat's coarse losses a smooth function of T; near a large T*
the loss is flat in log T, so a parabola in log T through the coarse points within a factor
4 of the coarse best gives the fine grid as precisely as the twin's repeats would
(docs/planner.md). Through a sharp V (the loss rising steeply past T*) the parabola
undershoots between the points: the T it picks can be good and its loss too low
(docs/planner.md, "What the planner gets wrong").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["parabola_in_log_t"]


def parabola_in_log_t(ts: Sequence[int], losses: NDArray[np.float64], wanted: Sequence[int]
                      ) -> dict[int, tuple[float, ...]]:
    """Each repeat's loss at the horizons ``wanted``, from a parabola in ``log T``.

    Parameters
    ----------
    ts:
        The coarse horizons (increasing, ``> 0``).
    losses:
        Their losses, ``(len(ts), repeats)``.
    wanted:
        Horizons to read; only those within ``[min(ts), max(ts)]`` are (no extrapolation).

    Returns
    -------
    dict
        ``T -> one loss per repeat``; empty with fewer than three points, a non-finite loss,
        or a parabola that is not convex for every repeat (no fit to trust: the coarse grid
        stands).
    """
    if len(ts) < 3 or not np.isfinite(losses).all():
        return {}
    x = np.log(np.asarray(ts, dtype=np.float64))
    coef = np.polyfit(x, losses, deg=2)  # one parabola per repeat
    if not (coef[0] > 0).all():
        return {}
    out: dict[int, tuple[float, ...]] = {}
    for t in wanted:
        if not min(ts) <= t <= max(ts):
            continue
        xt = np.log(float(t))
        out[int(t)] = tuple(float(v) for v in coef[0] * xt ** 2 + coef[1] * xt + coef[2])
    return out
