"""Cost control of the kernel twin: its work estimated in seconds, sized to a time budget.

A torch model costs the twin far more per row than softmax regression, so a plan with one
is made within a stated budget (``SearchSettings.time_budget_s``, default
:func:`default_budget_s`). The budget is spent on an *estimate* of the work, not on the
clock, so a plan is reproducible (the same plan on every machine, and a re-plan from the
cache takes the same path): :class:`CostModel` prices a batch of columns from the rows per
round, the columns, the model's size, the test rows and a per-call overhead, with constants
fitted to CPU time on one thread (two threads are faster; ``bench/twin_models.py`` prints
the estimate next to the wall and CPU time).

:func:`size_twin` sizes the twin before the search: the coarse race of the first arms
(b, q) is given at most :data:`COARSE_SHARE` of the budget, by evaluating fewer test rows
(down to :data:`MIN_TEST_ROWS`), fewer proxy rows (down to :data:`MIN_ROWS_PER_CLIENT` a
client) and fewer repeats (down to 2) when it would not fit. The search then spends the rest
on refinements, longer horizons and the fine grid while the estimate stays within the budget
(:class:`fedqr.planner.search.Searcher`), and the plan reports what it simulated, what it
skipped, the estimate and the wall time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fedqr.planner.twin import MIN_PROXY_ROWS as MIN_ROWS_PER_CLIENT

__all__ = ["COARSE_SHARE", "DEFAULT_BUDGET_S", "TWIN_COST_VERSION", "CostModel", "TwinSize",
           "default_budget_s", "size_twin"]

TWIN_COST_VERSION = 1
"""Bumped when the constants change (the plans a budget buys change with them)."""
DEFAULT_BUDGET_S = (15.0, 45.0)
"""Estimated seconds of a kernel twin's plan when no budget is given: 12 s per 1,000 proxy
rows within these bounds (:func:`default_budget_s`)."""
COARSE_SHARE = 0.4
"""Share of the budget the coarse race of the first arms may take."""
MIN_TEST_ROWS = 1000

# CPU seconds on one thread, fitted to 99 batches of the MNIST 784-64-10 and heart-disease
# 10-32-2 MLPs (bench/twin_models.py --calibrate; the stacked engine's estimates within
# 0.6-1.4x of the measurements): per row x column x parameter of the gradient sums, per
# engine call, per column-round x parameter (the update of theta, the noise), per test row x
# column x parameter, per evaluation, and per round (the twin's own bookkeeping).
_GRAD_S = {"stacked": 6.7e-11, "loop": 2.6e-10}
_CALL_S = {"stacked": 0.8e-3, "loop": 0.6e-3}
_COLUMN_S = {"stacked": 2.3e-8, "loop": 3.0e-8}
_EVAL_S = {"stacked": 1.3e-11, "loop": 6.0e-11}
_EVAL_CALL_S = {"stacked": 3.0e-3, "loop": 7.0e-3}
_ROUND_S = {"stacked": 1.35e-3, "loop": 5.0e-3}


@dataclass(frozen=True, kw_only=True)
class CostModel:
    """Estimated seconds of the kernel twin's batches (module docstring)."""

    engine: str  # "stacked" (all columns in one pass) or "loop" (one column at a time)
    num_params: int
    num_clients: int
    proxy_rows: int  # sum of m_i
    real_rows: int  # sum of d_i
    test_rows: int

    def rows_per_round(self, b: int, q: float) -> float:
        """Expected rows of a round with b replies at the real Poisson rate q (1: all)."""
        q_twin = 1.0 if q >= 1 else min(1.0, q * self.real_rows / self.proxy_rows)
        return b / self.num_clients * self.proxy_rows * q_twin

    def batch_s(self, *, b: int, q: float, horizons: Sequence[int], repeats: int) -> float:
        """Seconds of one batch: the horizons ``horizons`` of arm (b, q) with ``repeats``."""
        hs = [int(t) for t in horizons]
        if not hs:
            return 0.0
        t_max = max(hs)
        column_rounds = repeats * sum(hs)
        e = self.engine
        rows = self.rows_per_round(b, q)
        calls = column_rounds * b if e == "loop" else t_max * (repeats if q < 1 else 1)
        work = column_rounds * self.num_params * (rows * _GRAD_S[e] + _COLUMN_S[e])
        evals = repeats * len(hs) * self.test_rows * self.num_params * _EVAL_S[e]
        return (work + calls * _CALL_S[e] + t_max * _ROUND_S[e] + evals
                + len(set(hs)) * _EVAL_CALL_S[e])


def default_budget_s(proxy_rows: int) -> float:
    """The budget of a plan that names none: 12 s per 1,000 proxy rows, from 15 s to 45 s
    (heart disease's 486 rows: 15 s; MNIST's automatic 4,000: 45 s)."""
    lo, hi = DEFAULT_BUDGET_S
    return float(min(hi, max(lo, 12.0 * proxy_rows / 1000)))


@dataclass(frozen=True, kw_only=True)
class TwinSize:
    """How large the kernel twin is made for its budget."""

    share: float  # of each client's rows in the proxy
    test_rows: int  # rows of the test set evaluated
    repeats: int
    budget_s: float
    coarse_s: float  # the estimate of the first coarse race


def size_twin(*, budget_s: float, arms: Sequence[tuple[int, float]], grid: Sequence[int],
              engine: str, num_params: int, real_sizes: np.ndarray, share: float,
              test_rows: int, repeats: int | None,
              auto_repeats: Callable[[int], int]) -> TwinSize:
    """The largest twin (proxy share, test rows, repeats) whose coarse race over ``arms`` on
    the horizons ``grid`` is estimated to fit ``COARSE_SHARE * budget_s``.

    ``repeats`` fixes the repeats (else ``auto_repeats(rows)`` of the unreduced proxy, kept
    while the proxy shrinks); ``share`` and ``test_rows`` are the most the twin would use
    without a budget.
    """
    if not (budget_s > 0 and math.isfinite(budget_s)):
        raise ValueError(f"time_budget_s must be > 0 and finite, got time_budget_s={budget_s}")
    real = np.asarray(real_sizes, dtype=np.int64)
    n = len(real)
    floor_share = min(1.0, MIN_ROWS_PER_CLIENT * n / float(real.sum()))
    floor_test = min(test_rows, MIN_TEST_ROWS)

    def rows(sh: float) -> int:
        return int(sum(min(int(d), max(MIN_ROWS_PER_CLIENT, math.ceil(sh * int(d))))
                       for d in real))

    def coarse(sh: float, tr: int, k: int) -> float:
        cost = CostModel(engine=engine, num_params=num_params, num_clients=n,
                         proxy_rows=rows(sh), real_rows=int(real.sum()), test_rows=tr)
        return sum(cost.batch_s(b=b, q=q, horizons=grid, repeats=k) for b, q in arms)

    target = COARSE_SHARE * budget_s
    sh, tr = share, test_rows
    k = repeats if repeats is not None else auto_repeats(rows(sh))
    while coarse(sh, tr, k) > target:
        if tr > floor_test:
            tr = max(floor_test, tr // 2)
        elif sh > floor_share:
            sh = max(floor_share, sh / 2)
        elif repeats is None and k > 2:
            k -= 1
        else:
            break  # the smallest twin: the race is run anyway, the rest of the search waits
    return TwinSize(share=sh, test_rows=tr, repeats=k, budget_s=budget_s,
                    coarse_s=coarse(sh, tr, k))
