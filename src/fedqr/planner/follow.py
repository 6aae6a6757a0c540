"""Following the leading arm past a default time budget that stopped its falling loss.

A plan made on the default budget (no ``--twin-budget``) is sized so that an expensive model
gets its first race done (:func:`fedqr.planner.budget.raised_budget_s`), but the budget can
still end the race while the best arm's loss falls: on FEMNIST with the paper's CNN at eps 16
(``bench/planner_suite_models.py --held-out``) the default (71 s estimated) stopped the best
arm at T = 32, its loss 6% below T = 16, and the plan was 29% worse than the best schedule run
(T = 256, which ``--twin-budget 300`` found). The budget, not the loss, ended that search.

So when the default budget stopped the arm of the best prediction while its loss still fell,
that arm alone (the one that would be recommended) is doubled on a budget raised up to
:data:`fedqr.planner.budget.DEFAULT_BUDGET_MAX_S`, for as long as a doubling gains by
``min_gain`` and fits, then refined on the fine T grid. A budget the user gave is never raised
(:attr:`fedqr.planner.search.Searcher.follow_budget_s` is ``None`` then).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedqr.planner.search import Searcher

__all__ = ["follow_leader"]

Arm = tuple[int, float]


def follow_leader(searcher: Searcher) -> Arm | None:
    """Double the best prediction's arm while the budget that stopped it is raised (module
    docstring); returns the arm when it was extended."""
    cap = searcher.follow_budget_s
    if cap is None or searcher.budget_s is None or cap <= searcher.budget_s:
        return None
    st = searcher.settings
    best = searcher.predictions()[0]
    arm = (best.clients_per_round, best.sample_rate)
    curve = searcher.coarse_curve(*arm)
    stopped = {(b, q): t for b, q, t in searcher.cut_short}
    if not curve or stopped.get(arm) != curve[-1][0] or curve[-1][0] >= st.t_limit:
        return None  # the loss, the limit or nothing at all ended it: not the budget
    budget, searcher.budget_s = searcher.budget_s, cap
    extended = False
    hi = curve[-1][0]
    while searcher.still_falling(*arm, hi) and hi < st.t_limit:
        new_hi = min(st.t_limit, max(hi + 1, int(hi * st.coarse_ratio)))
        if not searcher.evaluate(*arm, [new_hi], optional=True):
            break  # even the raised budget is spent: the arm stays cut short at hi
        extended, hi = True, new_hi
    if not extended:
        searcher.budget_s = budget  # nothing bought: the plan reports the budget it had
        return None
    searcher.cut_short[:] = [c for c in searcher.cut_short if (c[0], c[1]) != arm]
    if searcher.still_falling(*arm, hi):
        (searcher.at_limit if hi >= st.t_limit else searcher.cut_short).append((*arm, hi))
    return arm
