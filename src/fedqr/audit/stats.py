"""Clopper-Pearson bounds and the epsilon lower bound of a distinguisher.

A mechanism that is ``(eps, delta)``-DP bounds every test ``S`` between neighbours ``D``
(canary in) and ``D'`` (canary out) in both directions::

    P_D(S)  <= exp(eps) P_D'(S)  + delta      (guess "in" on S)
    P_D'(S^c) <= exp(eps) P_D(S^c) + delta    (guess "out" on S^c)

so ``eps >= log((TPR - delta) / FPR)`` for any test (Jagielski, Ullman, Oprea 2020; Nasr et
al. 2021). Rates are only estimated from trials: the bound uses a one-sided Clopper-Pearson
lower bound on the numerator rate and an upper bound on the denominator rate, each at level
``1 - (1 - confidence) / 2`` (Bonferroni), so the bound holds with probability at least
``confidence`` for a threshold and direction fixed before the evaluation trials are seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from scipy.stats import beta

__all__ = [
    "MAX_CANDIDATES",
    "Direction",
    "Evaluation",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "epsilon_bound",
    "evaluate",
    "select_threshold",
]


MAX_CANDIDATES = 20_000
"""Most thresholds :func:`select_threshold` tries (each costs four beta quantiles)."""


class Direction(StrEnum):
    """Which side of the threshold the distinguisher calls "canary in"."""

    IN_ABOVE = "in-above"
    """Guess "in" when the score is >= the threshold; bound from (TPR, FPR)."""
    OUT_BELOW = "out-below"
    """Guess "out" when the score is < the threshold; bound from (TNR, FNR)."""


def clopper_pearson_lower(k: np.ndarray | int, n: int, alpha: float) -> np.ndarray:
    """One-sided ``1 - alpha`` Clopper-Pearson lower bound of a rate from ``k`` of ``n``."""
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lo = beta.ppf(alpha, k, n - k + 1.0)
    return np.where(k <= 0, 0.0, lo)


def clopper_pearson_upper(k: np.ndarray | int, n: int, alpha: float) -> np.ndarray:
    """One-sided ``1 - alpha`` Clopper-Pearson upper bound of a rate from ``k`` of ``n``."""
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        hi = beta.ppf(1.0 - alpha, k + 1.0, n - k)
    return np.where(k >= n, 1.0, hi)


def epsilon_bound(hit: np.ndarray | int, n_hit: int, false: np.ndarray | int, n_false: int,
                  *, delta: float, alpha: float) -> np.ndarray:
    """``log((rate_lower - delta) / false_rate_upper)``, ``0`` where it is not positive.

    ``hit`` of ``n_hit`` is the numerator count (true positives in one direction), ``false``
    of ``n_false`` the denominator count; each bound is one-sided at level ``1 - alpha``.
    """
    lo = clopper_pearson_lower(hit, n_hit, alpha) - delta
    hi = clopper_pearson_upper(false, n_false, alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.log(np.where(lo > 0, lo, np.nan) / hi)
    return np.where(np.isfinite(eps) & (eps > 0), eps, 0.0)


@dataclass(frozen=True)
class Evaluation:
    """A threshold test evaluated on trials of both worlds.

    Attributes
    ----------
    threshold, direction
        The test: guess "in" when ``score >= threshold`` (``in-above``) or guess "out" when
        ``score < threshold`` (``out-below``).
    trials_in, trials_out
        Trials with the canary (``D``) and without it (``D'``).
    guessed_in_in, guessed_in_out
        How many trials of each world the test called "in".
    epsilon_lower_bound
        The bound of the chosen direction (``0`` when not positive).
    rate_lower, false_rate_upper
        Its Clopper-Pearson bounds (TPR and FPR for ``in-above``, TNR and FNR otherwise).
    """

    threshold: float
    direction: Direction
    trials_in: int
    trials_out: int
    guessed_in_in: int
    guessed_in_out: int
    epsilon_lower_bound: float
    rate_lower: float
    false_rate_upper: float


def _counts(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """How many of ``scores`` are ``>= t`` for every ``t`` in ``thresholds``."""
    s = np.sort(scores)
    return len(s) - np.searchsorted(s, thresholds, side="left")


def _bounds(k_in: np.ndarray, n_in: int, k_out: np.ndarray, n_out: int, *, delta: float,
            alpha: float, direction: Direction) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if direction is Direction.IN_ABOVE:
        hit, n_hit, false, n_false = k_in, n_in, k_out, n_out
    else:
        hit, n_hit, false, n_false = n_out - k_out, n_out, n_in - k_in, n_in
    eps = epsilon_bound(hit, n_hit, false, n_false, delta=delta, alpha=alpha)
    lo = clopper_pearson_lower(hit, n_hit, alpha)
    hi = clopper_pearson_upper(false, n_false, alpha)
    return eps, lo, hi


def evaluate(scores_in: np.ndarray, scores_out: np.ndarray, *, threshold: float,
             direction: Direction, delta: float, confidence: float) -> Evaluation:
    """Evaluate one fixed test; the bound holds with probability ``>= confidence``."""
    alpha = (1.0 - confidence) / 2.0
    t = np.array([threshold])
    k_in, k_out = _counts(scores_in, t), _counts(scores_out, t)
    eps, lo, hi = _bounds(k_in, len(scores_in), k_out, len(scores_out), delta=delta,
                          alpha=alpha, direction=direction)
    return Evaluation(threshold=threshold, direction=direction, trials_in=len(scores_in),
                      trials_out=len(scores_out), guessed_in_in=int(k_in[0]),
                      guessed_in_out=int(k_out[0]), epsilon_lower_bound=float(eps[0]),
                      rate_lower=float(lo[0]), false_rate_upper=float(hi[0]))


def select_threshold(scores_in: np.ndarray, scores_out: np.ndarray, *, delta: float,
                     confidence: float) -> Evaluation:
    """The threshold and direction with the largest bound on these (selection) trials.

    Every distinct score is a candidate, up to :data:`MAX_CANDIDATES`; beyond that, the
    ``MAX_CANDIDATES // 4`` smallest and largest (where the best tests of a privacy audit
    lie) and an even grid in between. The returned bound is optimistic (the best of many
    tests on the same trials); evaluate the chosen test on fresh trials with :func:`evaluate`.
    """
    thresholds = np.unique(np.concatenate([scores_in, scores_out]))
    thresholds = thresholds[np.isfinite(thresholds)]
    if len(thresholds) == 0:
        raise ValueError("the scores must contain a finite value")
    if len(thresholds) > MAX_CANDIDATES:
        tail = MAX_CANDIDATES // 4
        keep = np.concatenate([np.arange(tail), np.arange(len(thresholds) - tail,
                                                          len(thresholds)),
                               np.linspace(tail, len(thresholds) - tail - 1,
                                           MAX_CANDIDATES - 2 * tail).astype(np.int64)])
        thresholds = thresholds[np.unique(keep)]
    alpha = (1.0 - confidence) / 2.0
    k_in, k_out = _counts(scores_in, thresholds), _counts(scores_out, thresholds)
    best: Evaluation | None = None
    for direction in Direction:
        eps, lo, hi = _bounds(k_in, len(scores_in), k_out, len(scores_out), delta=delta,
                              alpha=alpha, direction=direction)
        j = int(np.argmax(eps))
        if best is None or eps[j] > best.epsilon_lower_bound:
            best = Evaluation(threshold=float(thresholds[j]), direction=direction,
                              trials_in=len(scores_in), trials_out=len(scores_out),
                              guessed_in_in=int(k_in[j]), guessed_in_out=int(k_out[j]),
                              epsilon_lower_bound=float(eps[j]), rate_lower=float(lo[j]),
                              false_rate_upper=float(hi[j]))
    assert best is not None  # Direction has two members
    return best

