"""The proxy shift's candidates: which run again (``far_behind``) and which wins (``confirm``)."""

from __future__ import annotations

import numpy as np
import pytest

from fedqr.planner.candidates import (
    PRUNE_SE,
    PRUNE_SHARE,
    candidates,
    confirm,
    far_behind,
    spread,
)
from fedqr.planner.search import Prediction


def test_candidates_are_the_best_schedule_of_the_best_arms() -> None:
    preds = [Prediction(10, 2, 1.0, 0.5, 0.01), Prediction(12, 2, 1.0, 0.51, 0.01),
             Prediction(0, 0, 1.0, 0.52, 0.0), Prediction(8, 4, 1.0, 0.6, 0.01),
             Prediction(5, 1, 1.0, 0.7, 0.01), Prediction(4, 3, 1.0, 0.8, 0.01)]
    assert [(p.rounds, p.clients_per_round) for p in candidates(preds)] == [(10, 2), (8, 4),
                                                                            (5, 1)]


def test_far_behind_is_beyond_the_share_the_standard_errors_and_the_spread() -> None:
    first = Prediction(10, 2, 1.0, 0.40, 0.003)
    share = PRUNE_SHARE * 0.40
    se = PRUNE_SE * float(np.hypot(0.003, 0.001))  # here the standard errors decide
    assert se > share
    assert not far_behind(first, Prediction(8, 4, 1.0, 0.40 + se * 0.99, 0.001), moved=0.0)
    assert far_behind(first, Prediction(8, 4, 1.0, 0.40 + se * 1.01, 0.001), moved=0.0)
    # the spread of the first over the shift's runs widens the margin
    assert not far_behind(first, Prediction(8, 4, 1.0, 0.40 + se * 1.01, 0.001), moved=0.01)
    # precise predictions: the share decides
    sharp = Prediction(10, 2, 1.0, 0.40, 1e-5)
    assert not far_behind(sharp, Prediction(8, 4, 1.0, 0.40 + share * 0.99, 1e-5), moved=0.0)
    assert far_behind(sharp, Prediction(8, 4, 1.0, 0.40 + share * 1.01, 1e-5), moved=0.0)
    # an unknown standard error or spread keeps the candidate
    assert not far_behind(first, Prediction(8, 4, 1.0, 9.0, float("nan")), moved=0.0)
    assert not far_behind(first, Prediction(8, 4, 1.0, 9.0, 0.001), moved=float("inf"))


def _runs(*rows: tuple[float, float, float]) -> list[dict[tuple[int, float, int], float]]:
    """Shift runs: the mean losses of three candidates (keys of CANDS) in each run."""
    return [dict(zip([(2, 1.0, 10), (4, 1.0, 8), (1, 1.0, 5)], row, strict=True))
            for row in rows]


CANDS = [Prediction(10, 2, 1.0, 0.40, 0.02), Prediction(8, 4, 1.0, 0.41, 0.02),
         Prediction(5, 1, 1.0, 0.45, 0.02)]


def test_confirm_overrules_the_search_only_on_unanimous_clear_evidence() -> None:
    # every run ranks candidate 1 below the first, by ~10%: it replaces the first choice
    assert confirm(CANDS, _runs((0.50, 0.45, 0.60), (0.49, 0.44, 0.61), (0.51, 0.46, 0.6))) == 1
    # the lowest of two qualifying candidates
    assert confirm(CANDS, _runs((0.50, 0.45, 0.40), (0.49, 0.44, 0.41), (0.51, 0.46, 0.4))) == 2
    # one run disagrees, or the advantage is within the margin, or too few runs: keep it
    assert confirm(CANDS, _runs((0.50, 0.45, 0.6), (0.43, 0.44, 0.6), (0.51, 0.46, 0.6))) == 0
    assert confirm(CANDS, _runs((0.500, 0.499, 0.6), (0.49, 0.489, 0.6), (0.5, 0.499, 0.6))) == 0
    assert confirm(CANDS, _runs((0.50, 0.45, 0.6), (0.49, 0.44, 0.61))) == 0
    assert confirm(CANDS[:1], _runs((0.5, 0.4, 0.4), (0.5, 0.4, 0.4), (0.5, 0.4, 0.4))) == 0
    # the first choice diverging when re-simulated gives way; a diverging candidate never wins
    inf = float("inf")
    assert confirm(CANDS, _runs((inf, 0.45, 0.6), (0.49, 0.44, 0.61), (0.51, 0.46, 0.6))) == 1
    assert confirm(CANDS, _runs((0.5, inf, 0.6), (0.49, 0.44, 0.61), (0.51, 0.46, 0.6))) == 0


def test_spread_is_the_range_of_the_first_choice_or_inf_where_a_run_diverged() -> None:
    assert spread([0.40, 0.43, 0.41]) == pytest.approx(0.03)
    assert spread([0.4]) == 0.0
    assert spread([0.4, float("inf")]) == float("inf")
    assert spread([0.4, float("nan")]) == float("inf")
