"""Which of the search's best schedules the proxy shift simulates again, and which it recommends.

The shift (:mod:`fedqr.planner.shift`) re-simulates the search's first choice and the best
schedule of the next arms (:func:`candidates`) on the plan's proxy and its alternatives. A
candidate far behind the first is left out once the first has run (:func:`far_behind`); of
those that run, one replaces the first only on unanimous, clear evidence (:func:`confirm`).
"""

from __future__ import annotations

import math

import numpy as np

from fedqr.planner.search import Prediction

__all__ = ["CONFIRM_MARGIN", "PRUNE_SE", "PRUNE_SHARE", "Key", "candidates", "confirm",
           "far_behind", "schedule_key", "spread"]

PRUNE_SHARE = 0.02
PRUNE_SE = 4.0
"""A candidate whose search loss is above the search's first choice by more than the larger of
``PRUNE_SHARE`` of it and ``PRUNE_SE`` combined standard errors, plus the spread of the first
choice over the shift's runs, is not simulated again (:func:`far_behind`): the plan lists it
under ``far_behind``."""

CONFIRM_MARGIN = 0.01
"""The search's first choice gives way to another candidate only when that candidate's loss is
lower on every run of the shift (the plan's proxy with fresh draws and each alternative, at
least three runs) and lower on average by more than this share. The search recommends the
lowest of many noisy predictions (the winner's curse); these runs are independent of that
choice, so they can overrule it."""


Key = tuple[int, float, int]
"""A schedule as the memo keys it: ``(b, q, T)``."""


def schedule_key(p: Prediction) -> Key:
    """The memo's key of a prediction's schedule."""
    return (p.clients_per_round, p.sample_rate, p.rounds)


def candidates(predictions: list[Prediction], k: int = 3) -> list[Prediction]:
    """The recommended schedule and the best schedule of each of the next ``k - 1`` arms."""
    out: list[Prediction] = []
    for p in predictions:
        if p.rounds == 0 or not math.isfinite(p.mean):
            continue
        if all((p.clients_per_round, p.sample_rate) != (c.clients_per_round, c.sample_rate)
               for c in out):
            out.append(p)
        if len(out) == k:
            break
    return out


def confirm(chosen: list[Prediction], losses: list[dict[Key, float]]) -> int:
    """Which candidate to recommend: the index in ``chosen`` (0: the search's first choice)
    of the candidate beating the first on every run of ``losses`` (the candidates' mean
    losses per shift run) by more than :data:`CONFIRM_MARGIN` on average, the lowest such."""
    if len(losses) < 3 or len(chosen) < 2:
        return 0
    first = np.array([got[schedule_key(chosen[0])] for got in losses])
    pick, lowest = 0, float(first.mean())
    for i, p in enumerate(chosen[1:], start=1):
        got = np.array([run[schedule_key(p)] for run in losses])
        mean = float(got.mean())
        if (np.isfinite(got).all() and bool((got < first).all())
                and mean < (1 - CONFIRM_MARGIN) * float(first.mean()) and mean < lowest):
            pick, lowest = i, mean
    return pick


def spread(losses: list[float]) -> float:
    """The range of the first choice's losses over the shift's runs (``inf`` where one
    diverged): the ``moved`` of :func:`far_behind`."""
    return max(losses) - min(losses) if all(map(math.isfinite, losses)) else math.inf


def far_behind(first: Prediction, p: Prediction, *, moved: float) -> bool:
    """Whether candidate ``p`` is too far behind the search's ``first`` choice to be simulated
    again: its search loss is above the first's by more than the larger of
    :data:`PRUNE_SHARE` of it and :data:`PRUNE_SE` combined standard errors, plus ``moved``
    (the first's :func:`spread`: how far the proxy and fresh draws moved its loss).
    Confirming such a candidate (:func:`confirm`) would take the first's loss to rise, or the
    candidate's to fall, by several standard errors beyond that range."""
    gap, se = p.mean - first.mean, math.hypot(first.stderr, p.stderr)
    if not (math.isfinite(se) and math.isfinite(moved)):
        return False  # nothing to measure the gap against: simulate it again
    return gap > max(PRUNE_SHARE * abs(first.mean), PRUNE_SE * se) + moved
