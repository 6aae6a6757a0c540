"""Cost control of the kernel twin: its work estimated in seconds, sized to a time budget.

A torch model costs the twin far more per row than softmax regression, so a plan with one
is made within a stated budget (``SearchSettings.time_budget_s``, default
:func:`default_budget_s`). The budget is spent on an *estimate* of the work, not on the
clock, so a plan is reproducible (the same plan on every machine, and a re-plan from the
cache takes the same path): :class:`CostModel` prices a batch of columns from the rows per
round, the columns, the model's size and forward FLOPs, the test rows and a per-call
overhead, with constants
fitted to CPU time on one thread (``bench/twin_models.py`` prints the estimate next to the
wall and CPU time).

:func:`size_twin` sizes the twin before the search: the coarse race of the first arms
(b, q) is given at most :data:`COARSE_SHARE` of the budget, by evaluating fewer test rows
(down to :data:`MIN_TEST_ROWS`), fewer repeats (down to 2), shorter first horizons (down to
:data:`MIN_T_FIRST`; the race still doubles T while the loss falls) and fewer proxy rows
(down to :data:`MIN_ROWS_PER_CLIENT` a client), in this order of preference and each only
where it saves at least 10% (fewer rows save little where the rounds' overhead dominates).
Proxy rows go last: fewer repeats only make the predictions noisier and a shorter race
leaves the longer horizons to the doublings, but a model fits a small proxy sooner than the
clients' data, so its loss stops falling at a shorter T than theirs (FEMNIST's letters of
160 writers, an MLP, Gaussian eps 4, ``--sample-rate auto``: on 471 of the 3,730 rows the
plan chose T = 1,024, b = 4, 7.8% above the best schedule of a real grid; on all of them
with 2 repeats, T = 1,024, b = 8, 1.7%; docs/planner.md). Repeats go one at a time;
where none of these steps is left and one repeat fewer saves less than 10% (10 or more
repeats, as on a small proxy), a given budget cuts the repeats to the most that save 10%,
down to 2, so its smallest twin has 2 repeats however many the proxy's size asked for (a
default budget is raised instead, as before, and keeps the automatic repeats). The search
then spends the rest on refinements, longer horizons and the fine grid while the
estimate stays within the budget (:class:`fedqr.planner.search.Searcher`), and the plan
reports what it simulated, what it skipped, the estimate and the wall time. Where even the
smallest twin's first race (which always runs) exceeds the budget, the plan says so
(:func:`fedqr.planner.messages.budget_note`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from fedqr.planner.stacked import stacks_repeats
from fedqr.planner.twin import MIN_PROXY_ROWS as MIN_ROWS_PER_CLIENT

__all__ = ["COARSE_SHARE", "CONSTANTS", "DEFAULT_BUDGET_MAX_S", "DEFAULT_BUDGET_S", "MIN_T_FIRST",
           "TERMS", "TWIN_COST_VERSION", "CostModel", "TwinSize", "default_budget_s",
           "raised_budget_s", "size_twin"]

TWIN_COST_VERSION = 4  # 2: the default budget is raised for the smallest twin's first race;
# 3: a given budget's smallest twin has 2 repeats (10 or more were never cut: one fewer saved < 10%)
# 4: fewer repeats and a shorter first race before fewer proxy rows (a small proxy biases T)
"""Bumped when the constants or the default budget change (the plans a budget buys change
with them)."""
DEFAULT_BUDGET_S = (15.0, 45.0)
"""Estimated seconds of a kernel twin's plan when no budget is given: 12 s per 1,000 proxy
rows within these bounds (:func:`default_budget_s`), raised for an expensive model
(:func:`raised_budget_s`)."""
DEFAULT_BUDGET_MAX_S = 300.0
"""The most a default budget is raised to (:func:`raised_budget_s`)."""
COARSE_SHARE = 0.4
"""Share of the budget the coarse race of the first arms may take."""
MIN_TEST_ROWS = 1000

TERMS = ("grad", "row", "call", "column", "eval", "eval_call", "round")
"""What a batch costs (:meth:`CostModel.counts`): per row x column x forward FLOP of the
gradient sums, per row x column (the activations, whatever the model's size), per engine
call, per column-round x parameter (the update of theta, the noise), per test row x column x
forward FLOP, per evaluation, and per round (the twin's own bookkeeping)."""

CONSTANTS = {
    "stacked": {"grad": 4.3e-11, "row": 3.8e-7, "call": 1.0e-3, "column": 1.6e-8,
                "eval": 1.0e-11, "eval_call": 2.4e-3, "round": 0.5e-3},
    "loop": {"grad": 1.35e-10, "row": 3.9e-6, "call": 0.5e-3, "column": 3.0e-8,
             "eval": 3.7e-11, "eval_call": 6.0e-3, "round": 2.4e-3},
}
"""CPU seconds of each term on one thread, fitted to batches of the MNIST 784-64-10 and the
heart-disease 10-32-2 MLPs and (column by column) the paper's FEMNIST CNN
(``bench/twin_models.py --part calibrate``: the stacked engine's estimates within 0.75-1.4x
of 59 measured batches, the loop's within 0.55-1.35x of 51, medians 1.0)."""


@dataclass(frozen=True, kw_only=True)
class CostModel:
    """Estimated seconds of the kernel twin's batches (module docstring)."""

    engine: str  # "stacked" (all columns in one pass) or "loop" (one column at a time)
    num_params: int
    num_clients: int
    proxy_rows: int  # sum of m_i
    real_rows: int  # sum of d_i
    test_rows: int
    features: int  # inputs per row
    flops: int  # FLOPs of one row's forward pass (:func:`fedqr.planner.kernels.forward_flops`)

    def rows_per_round(self, b: int, q: float) -> float:
        """Expected rows of a round with b replies at the real Poisson rate q (1: all)."""
        q_twin = 1.0 if q >= 1 else min(1.0, q * self.real_rows / self.proxy_rows)
        return b / self.num_clients * self.proxy_rows * q_twin

    def counts(self, *, b: int, q: float, horizons: Sequence[int], repeats: int
               ) -> dict[str, float]:
        """How much of each of :data:`TERMS` the batch of horizons ``horizons`` of arm
        (b, q) with ``repeats`` repeats holds."""
        hs = [int(t) for t in horizons]
        if not hs:
            return dict.fromkeys(TERMS, 0.0)
        t_max, column_rounds = max(hs), repeats * sum(hs)
        rows = self.rows_per_round(b, q)
        if self.engine == "loop":
            calls = column_rounds * b
        elif q < 1 and not stacks_repeats(columns=repeats * len(hs), rows=1.3 * rows + b,
                                          features=self.features):
            calls = t_max * repeats  # one pass per repeat
        else:
            calls = t_max
        p, f = self.num_params, self.flops
        return {"grad": column_rounds * rows * f, "row": column_rounds * rows, "call": calls,
                "column": column_rounds * p,
                "eval": repeats * len(hs) * self.test_rows * f, "eval_call": len(set(hs)),
                "round": t_max}

    def batch_s(self, *, b: int, q: float, horizons: Sequence[int], repeats: int) -> float:
        """Estimated seconds of one batch (:meth:`counts` priced by :data:`CONSTANTS`)."""
        prices = CONSTANTS[self.engine]
        counts = self.counts(b=b, q=q, horizons=horizons, repeats=repeats)
        return float(sum(n * prices[term] for term, n in counts.items()))


def default_budget_s(proxy_rows: int) -> float:
    """The budget of a plan that names none: 12 s per 1,000 proxy rows, from 15 s to 45 s
    (heart disease's 486 rows: 15 s; MNIST's automatic 4,000: 45 s)."""
    lo, hi = DEFAULT_BUDGET_S
    return float(min(hi, max(lo, 12.0 * proxy_rows / 1000)))


def raised_budget_s(budget_s: float, smallest_race_s: float) -> float:
    """A default ``budget_s`` raised so that the first race of the smallest twin takes at most
    :data:`COARSE_SHARE` of it (up to :data:`DEFAULT_BUDGET_MAX_S`): an expensive model (the
    paper's CNN on CPU) would otherwise spend the whole default on its first horizons
    (T <= 8) and plan a T far short of the best; a given budget is never raised."""
    return float(max(budget_s, min(DEFAULT_BUDGET_MAX_S, smallest_race_s / COARSE_SHARE)))


@dataclass(frozen=True, kw_only=True)
class TwinSize:
    """How large the kernel twin is made for its budget."""

    share: float  # of each client's rows in the proxy
    test_rows: int  # rows of the test set evaluated
    repeats: int
    t_first: int | None  # largest T of the first race (None: the scenario fixes T)
    budget_s: float
    coarse_s: float  # the estimate of the first coarse race
    follow_s: float | None = None  # a default budget's raise for the leader (planner.follow)

    @property
    def fits(self) -> bool:
        """Whether the first race fits :data:`COARSE_SHARE` of the budget (``False``: the
        smallest twin costs more, and its race runs anyway)."""
        return self.coarse_s <= COARSE_SHARE * self.budget_s * (1 + 1e-9)


MIN_T_FIRST = 8
"""The first race is shortened to no fewer horizons than 0, 1, 2, 4, 8."""


def size_twin(*, budget_s: float, arms: Sequence[tuple[int, float]],
              grid_of: Callable[[int | None], Sequence[int]], t_first: int | None,
              cost: CostModel, real_sizes: np.ndarray, share: float, repeats: int | None,
              auto_repeats: Callable[[int], int], last_resort: bool = True) -> TwinSize:
    """The largest twin (proxy share, test rows, repeats, first race) whose first race over
    ``arms`` on the horizons ``grid_of(t_first)`` is estimated to fit ``COARSE_SHARE *
    budget_s``.

    ``cost`` prices the unreduced twin (its proxy and test rows are the most the twin would
    use without a budget); ``repeats`` fixes the repeats (else ``auto_repeats(rows)`` of the
    unreduced proxy, kept while the proxy shrinks); ``t_first=None`` keeps the grid;
    ``last_resort=False`` leaves out the last resort (repeats cut below the automatic ones
    several at a time): a default budget is raised instead (:func:`raised_budget_s`), so that
    an expensive model keeps its repeats.
    """
    if not (budget_s > 0 and math.isfinite(budget_s)):
        raise ValueError(f"time_budget_s must be > 0 and finite, got time_budget_s={budget_s}")
    real = np.asarray(real_sizes, dtype=np.int64)
    floor_share = min(1.0, MIN_ROWS_PER_CLIENT * len(real) / float(real.sum()))
    floor_test = min(cost.test_rows, MIN_TEST_ROWS)

    def rows(sh: float) -> int:
        return int(sum(min(int(d), max(MIN_ROWS_PER_CLIENT, math.ceil(sh * int(d))))
                       for d in real))

    def coarse(sh: float, tr: int, k: int, tf: int | None) -> float:
        c = replace(cost, proxy_rows=rows(sh), test_rows=tr)
        return sum(c.batch_s(b=b, q=q, horizons=grid_of(tf), repeats=k) for b, q in arms)

    target = COARSE_SHARE * budget_s
    sh, tr, tf = share, cost.test_rows, t_first
    k = repeats if repeats is not None else auto_repeats(rows(sh))
    while (now := coarse(sh, tr, k, tf)) > target:
        # the first step that saves at least 10% (halving rows that cost little is no help)
        steps = [(sh, max(floor_test, tr // 2), k, tf) if tr > floor_test else None,
                 (sh, tr, k - 1, tf) if repeats is None and k > 2 else None,
                 (sh, tr, k, max(MIN_T_FIRST, tf // 2))
                 if tf is not None and tf > MIN_T_FIRST else None,
                 (max(floor_share, sh / 2), tr, k, tf) if sh > floor_share else None]
        if last_resort and repeats is None and not any(s is not None and coarse(*s) <= 0.9 * now
                                                       for s in steps):
            steps = [(sh, tr, j, tf) for j in _fewer_repeats(k)]  # the last resort
        useful = [s for s in steps if s is not None and coarse(*s) <= 0.9 * now]
        if not useful:
            break  # the smallest twin: the race is run anyway, the rest of the search waits
        sh, tr, k, tf = useful[0]
    return TwinSize(share=sh, test_rows=tr, repeats=k, t_first=tf, budget_s=budget_s,
                    coarse_s=coarse(sh, tr, k, tf))


def _fewer_repeats(k: int) -> list[int]:
    """The repeats the last resort of :func:`size_twin` tries, the most first: ``k - 2`` down
    to 2 (``k - 1`` is an ordinary step; it saves less than 10% of a race of 10 or more
    repeats, so without these such a twin would never get below its automatic repeats)."""
    return list(range(k - 2, 1, -1))
