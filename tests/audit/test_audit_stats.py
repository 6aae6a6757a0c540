"""Clopper-Pearson bounds, the epsilon bound of a test, and the choice of the test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedqr.audit import (
    Direction,
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_bound,
    evaluate,
    select_threshold,
)


def test_clopper_pearson_closed_forms() -> None:
    n, alpha = 40, 0.025
    # k = 0: upper = 1 - alpha^(1/n); k = n: lower = alpha^(1/n); the other ends are 0 and 1
    assert clopper_pearson_upper(0, n, alpha) == pytest.approx(1 - alpha ** (1 / n))
    assert clopper_pearson_lower(n, n, alpha) == pytest.approx(alpha ** (1 / n))
    assert clopper_pearson_lower(0, n, alpha) == 0.0
    assert clopper_pearson_upper(n, n, alpha) == 1.0
    lo, hi = clopper_pearson_lower(12, n, alpha), clopper_pearson_upper(12, n, alpha)
    assert lo < 12 / n < hi


@pytest.mark.parametrize("p", [0.03, 0.3, 0.7])
def test_clopper_pearson_covers_the_rate(p: float) -> None:
    """Each one-sided bound holds with probability >= 1 - alpha (it is conservative)."""
    rng = np.random.default_rng(7)
    n, alpha, reps = 60, 0.05, 20_000
    k = rng.binomial(n, p, size=reps)
    below = np.mean(clopper_pearson_lower(k, n, alpha) <= p)
    above = np.mean(clopper_pearson_upper(k, n, alpha) >= p)
    slack = 4 * math.sqrt(alpha * (1 - alpha) / reps)
    assert below >= 1 - alpha - slack and above >= 1 - alpha - slack


def test_epsilon_bound_formula_and_floor() -> None:
    n, alpha = 100, 0.025
    want = math.log((clopper_pearson_lower(90, n, alpha) - 1e-3)
                    / clopper_pearson_upper(5, n, alpha))
    assert epsilon_bound(90, n, 5, n, delta=1e-3, alpha=alpha) == pytest.approx(want)
    # no evidence (rates equal) or delta above the rate: the bound is 0, never negative
    assert epsilon_bound(50, n, 50, n, delta=0.0, alpha=alpha) == 0.0
    assert epsilon_bound(1, n, 0, n, delta=0.5, alpha=alpha) == 0.0


def test_separated_scores_give_the_largest_bound_the_trials_allow() -> None:
    n, conf = 500, 0.95
    s_in, s_out = np.full(n, 1.0), np.zeros(n)
    sel = select_threshold(s_in, s_out, delta=0.0, confidence=conf)
    alpha = (1 - conf) / 2
    best = math.log(alpha ** (1 / n) / (1 - alpha ** (1 / n)))
    assert sel.epsilon_lower_bound == pytest.approx(best)
    assert sel.guessed_in_in == n and sel.guessed_in_out == 0


def test_the_second_direction_is_used_when_it_is_stronger() -> None:
    # every "in" trial scores 1; half the "out" trials score 0: guessing "out" below 1 is
    # never wrong on "in" trials (FNR = 0), while the FPR of "in" above 1 is 1/2
    n = 400
    s_in = np.ones(n)
    s_out = np.r_[np.zeros(n // 2), np.ones(n // 2)]
    sel = select_threshold(s_in, s_out, delta=0.0, confidence=0.95)
    assert sel.direction is Direction.OUT_BELOW and sel.threshold == 1.0
    ab = evaluate(s_in, s_out, threshold=1.0, direction=Direction.IN_ABOVE, delta=0.0,
                  confidence=0.95)
    assert sel.epsilon_lower_bound > 2.0 > ab.epsilon_lower_bound


def test_identical_worlds_give_no_bound_on_fresh_trials() -> None:
    rng = np.random.default_rng(3)
    a, b, c, d = (rng.standard_normal(2000) for _ in range(4))
    sel = select_threshold(a, b, delta=0.0, confidence=0.95)
    ev = evaluate(c, d, threshold=sel.threshold, direction=sel.direction, delta=0.0,
                  confidence=0.95)
    assert ev.epsilon_lower_bound == 0.0
