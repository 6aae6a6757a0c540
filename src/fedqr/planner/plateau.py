"""A second look at arms the race left on a plateau (models other than softmax regression).

The race (:mod:`fedqr.planner.search`, step 1) stops an arm whose loss no longer falls, and
doubles only arms among the best at the current horizon. Both assume a curve that falls, then
rises. A network's curve can instead stall on a plateau and fall again: an MLP on imbalanced
tabular data first learns the class prior (Adult's 0.50 to 0.55) and leaves it only after
many rounds, and the arm that leaves it last can end lowest. Measured on Adult (20 clients,
MLP 104-32-2, Gaussian eps 8, q = 0.05; ``bench/planner_suite_models.py --held-out``): real
runs of b = 20 stay at 0.50 from T = 20 to 80 and reach 0.410 at T = 640, while the race had
stopped b = 20 at T = 64 (0.513, not lower than at 32) and planned T = 195, b = 6 (0.425).

After the search, with what is left of the time budget, the arms whose last simulated loss
is within :data:`PLATEAU_TOL` of their best are doubled, all of them one doubling a level, for
as long as a doubling still brings them a new best by ``min_gain`` within
:data:`PATIENCE` doublings. An arm that ends best is then refined on the fine T grid like the
search's finalists. Softmax regression's loss is convex in its parameters and is not given
this second look (its validated plans are unchanged).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedqr.planner.search import Searcher

__all__ = ["PATIENCE", "PLATEAU_TOL", "on_plateau", "second_look"]

PLATEAU_TOL = 0.02
"""An arm is on a plateau while its loss at its largest T is within this share of its best."""

PATIENCE = 2
"""Doublings an arm on a plateau may go without a new best (by ``min_gain``) before it stops."""

Arm = tuple[int, float]


def on_plateau(curve: list[tuple[int, float]], *, tol: float = PLATEAU_TOL) -> bool:
    """Whether a coarse curve ``[(T, loss), ...]`` (sorted by T) ends on a plateau: its last
    loss within ``tol`` of its lowest, the lowest at one of its last two horizons (a curve
    that has risen past an earlier minimum is not a plateau) and not at T = 0."""
    if len(curve) < 3:
        return False
    best_i = min(range(len(curve)), key=lambda i: (curve[i][1], curve[i][0]))
    best = curve[best_i][1]
    return (best_i >= len(curve) - 2 and curve[best_i][0] > 0
            and curve[-1][1] <= best + tol * abs(best))


def second_look(searcher: Searcher) -> list[Arm]:
    """Double the arms on a plateau while the budget allows (module docstring); returns the
    arms that were extended."""
    st = searcher.settings
    arms = searcher.coarse_arms()
    waiting = {arm: 0 for arm in arms if on_plateau(searcher.coarse_curve(*arm))
               and searcher.coarse_curve(*arm)[-1][0] < st.t_limit}
    extended: list[Arm] = []
    falling: dict[Arm, bool] = {}  # whether the arm's last doubling gained
    while waiting:
        for arm in sorted(waiting, key=lambda a: (searcher.coarse_curve(*a)[-1][0], a)):
            curve = searcher.coarse_curve(*arm)
            before = min(loss for _, loss in curve)
            hi = curve[-1][0]
            new_hi = min(st.t_limit, max(hi + 1, int(hi * st.coarse_ratio)))
            if not searcher.evaluate(*arm, [new_hi], optional=True):
                searcher.cut_short.extend((b, q, searcher.coarse_curve(b, q)[-1][0])
                                          for b, q in extended if falling.get((b, q)))
                return extended  # the budget is spent
            if arm not in extended:
                extended.append(arm)
            top = searcher.coarse_curve(*arm)[-1][1]
            gained = before - top > st.min_gain * abs(top)
            waiting[arm] = 0 if gained else waiting[arm] + 1
            falling[arm] = gained
            flat = top <= before + PLATEAU_TOL * abs(before)
            if new_hi >= st.t_limit or waiting[arm] > PATIENCE or not (gained or flat):
                del waiting[arm]
    return extended
