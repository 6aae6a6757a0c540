"""What the search is given and returns: its settings, its predictions, its first arms."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fedqr._validate import MAX_REPEATS, check_int_range, check_seed
from fedqr.planner.grids import b_grid, log_grid, q_grid
from fedqr.planner.scenario import Scenario

__all__ = ["AUTO_REPEAT_ROWS", "Memo", "Prediction", "SearchSettings", "auto_repeats",
           "first_arms", "first_grid"]


@dataclass(frozen=True, kw_only=True)
class SearchSettings:
    """How hard the twin searches.

    Attributes
    ----------
    repeats:
        Twin repeats per schedule (the prediction is their mean, its uncertainty the
        standard error); ``None``: :func:`auto_repeats` of the proxy's size.
    t_first, t_limit:
        Largest T of the first coarse pass; largest T ever simulated.
    coarse_ratio, fine_ratio:
        Ratios between neighbouring T of the coarse and the fine grid (<= 1.25).
    finalists:
        How many of the best (b, q) get the fine T grid.
    min_gain:
        The coarse grid is extended to larger T only while its largest T beats the one below
        by more than this share of the loss.
    race_margin:
        An arm is extended only while its loss at the current horizon is within this share
        of the best arm's there (and among the best half).
    fine_simulate_up_to:
        The fine T grid is simulated up to this T* and read off a fitted curve beyond.
    seed:
        Seed of the twin's draws.
    time_budget_s:
        Estimated seconds the twin of a model other than softmax regression may simulate
        (``None``: :func:`fedqr.planner.budget.default_budget_s`); the work is estimated,
        not clocked, so plans are reproducible (:mod:`fedqr.planner.budget`). The logistic
        twin always runs its whole search.
    proxy_alternatives:
        How many alternative proxies the plan's best schedules are simulated on after the
        search (:mod:`fedqr.planner.shift`); ``None``: the automatic count, 0: none.
    """

    repeats: int | None = None
    t_first: int = 64
    t_limit: int = 4096
    coarse_ratio: float = 2.0
    fine_ratio: float = 1.25
    finalists: int = 3
    min_gain: float = 0.01
    race_margin: float = 0.02
    fine_simulate_up_to: int = 256
    seed: int = 0
    time_budget_s: float | None = None
    proxy_alternatives: int | None = None

    def __post_init__(self) -> None:
        if self.repeats is not None:
            object.__setattr__(self, "repeats", check_int_range("repeats", self.repeats, 2,
                                                                  MAX_REPEATS))
        object.__setattr__(self, "seed", check_seed("seed", self.seed))
        if not 1 <= self.t_first <= self.t_limit:
            raise ValueError(f"need 1 <= t_first <= t_limit, got t_first={self.t_first}, "
                             f"t_limit={self.t_limit}")
        if not 1 < self.coarse_ratio:
            raise ValueError(f"coarse_ratio must be > 1, got {self.coarse_ratio}")
        if not 1 < self.fine_ratio <= 1.25:
            raise ValueError(f"fine_ratio must be in (1, 1.25], got {self.fine_ratio}")
        if self.proxy_alternatives is not None and self.proxy_alternatives < 0:
            raise ValueError(f"proxy_alternatives must be >= 0, got "
                             f"proxy_alternatives={self.proxy_alternatives}")
        if self.time_budget_s is not None and not (
                self.time_budget_s > 0 and math.isfinite(self.time_budget_s)):
            raise ValueError(f"time_budget_s must be > 0 and finite, got "
                             f"time_budget_s={self.time_budget_s}")


@dataclass(frozen=True)
class Prediction:
    """Predicted final test loss of one schedule."""

    rounds: int
    clients_per_round: int
    sample_rate: float
    mean: float
    stderr: float
    fitted: bool = False  # read off the fitted coarse curve rather than simulated

    def as_dict(self, *, sampled: bool = True) -> dict[str, float | int | bool | None]:
        """JSON-ready; ``sampled=False`` (full local batches: Laplace) writes ``sample_rate``
        as ``null``, as the plan's recommendation does."""
        return {"rounds": self.rounds, "clients_per_round": self.clients_per_round,
                "sample_rate": self.sample_rate if sampled else None,
                "predicted_test_loss": self.mean, "stderr": self.stderr, "fitted": self.fitted}


Memo = dict[tuple[int, float, int], tuple[float, ...]]


def first_arms(scenario: Scenario, real_sizes: NDArray[np.int64]
               ) -> tuple[list[int], list[float]]:
    """The b and q the search starts from (the coarse race's arms are their pairs)."""
    s = scenario
    bs = [s.clients_per_round] if s.clients_per_round else [int(b) for b in b_grid(
        s.num_clients)]
    if not s.poisson:
        qs = [1.0]
    elif s.sample_rate is not None:
        qs = [s.sample_rate]
    else:
        qs = [float(q) for q in q_grid(int(np.min(real_sizes)))]
    return bs, qs


def first_grid(scenario: Scenario, settings: SearchSettings) -> list[int]:
    """The horizons of the first coarse pass (``[0, T]`` when the scenario fixes T)."""
    if scenario.rounds is not None:
        return [0, scenario.rounds]
    return [0, *[int(t) for t in log_grid(1, settings.t_first, ratio=settings.coarse_ratio)]]


AUTO_REPEAT_ROWS = 9000
"""Automatic twin repeats: 3 on proxies of 3,000 rows or more, up to 12 on smaller ones
(a repeat costs in proportion to the rows, and small clients are the noisiest)."""


def auto_repeats(rows: int) -> int:
    """Twin repeats for a proxy of ``rows`` rows: ``clip(ceil(9000 / rows), 3, 12)``."""
    return int(min(12, max(3, -(-AUTO_REPEAT_ROWS // max(rows, 1)))))
