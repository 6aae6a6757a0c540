"""What a plan says in words: its prediction and where it comes from, or why no schedule
helps (:func:`message`, :mod:`fedqr.planner.plan`'s ``Plan.message``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedqr.planner.budget import COARSE_SHARE, TwinSize
from fedqr.planner.candidates import CONFIRM_MARGIN
from fedqr.planner.proxy import Twin
from fedqr.planner.scenario import Scenario
from fedqr.planner.shift import headline_re_simulated

__all__ = ["USEFUL_MARGIN", "budget_note", "message", "sampling_hint"]

USEFUL_MARGIN = 0.02
"""A plan helps only if its predicted loss is this share below the untrained model's."""


def _source(shift: dict[str, Any]) -> str:
    """Where the headline prediction comes from, for the message (empty: the search, with no
    re-simulation run)."""
    again = shift.get("re_simulated")
    if again is None:
        return ""
    if headline_re_simulated(shift):
        return f" (re-simulated with fresh draws; the search's lowest: {again['search_mean']:.4f})"
    return (" (the search's figure: a repeat of its re-simulation with fresh draws diverged, "
            "so this schedule is at the edge of divergence)")


def sampling_hint(scenario: Scenario, twin: Twin) -> str:
    """For a plan that helps nothing at a Poisson rate the scenario fixed: the clients'
    expected batch at that rate, and that the planner can choose the rate ("" otherwise)."""
    q = scenario.sample_rate
    if q is None or q >= 1 or not scenario.poisson:
        return ""
    rows = q * float(np.median(twin.proxy.real_sizes))
    return (f", or sample more rows per reply: at the sampling rate q = {q:g} the median "
            f"client's expected batch is {rows:.1f} rows; the planner chooses q itself with "
            f"--sample-rate auto ('sample_rate=None' in Python)")


def budget_note(size: TwinSize | None, estimated_s: float) -> str:
    """Why a kernel twin's plan took more than its time budget (empty: it kept it).

    Parameters
    ----------
    size : TwinSize or None
        The twin's size (:func:`fedqr.planner.budget.size_twin`; ``None``: no budget, the
        logistic twin).
    estimated_s : float
        The estimate the search spent in all (:attr:`fedqr.planner.search.Searcher.estimated_s`).

    Returns
    -------
    str
        ``""`` within the budget, else a sentence for the plan's message and ``result``: the
        smallest twin's first race, which runs whatever the budget, and the budget it needs.
    """
    if size is None or size.fits or estimated_s <= size.budget_s * (1 + 1e-9):
        return ""  # kept, or gone over by a follow of the leader (planner.follow says so)
    first = ("T <= " + str(size.t_first)) if size.t_first is not None else "the scenario's T"
    return (f"the time budget of {size.budget_s:g} s (estimated) could not be kept: "
            f"{estimated_s:.1f} s estimated in all, because even the smallest twin "
            f"({size.share:.1%} of the clients' rows, {size.test_rows} test rows, "
            f"{size.repeats} repeats, {first}) is estimated at {size.coarse_s:.1f} s for its "
            f"first race, which always runs; a budget of {size.coarse_s / COARSE_SHARE:.0f} s "
            f"or more (--twin-budget; fedqr.plan's twin_budget) gives the race "
            f"{COARSE_SHARE:.0%} of it and the search the rest")


def message(best: Any, base: float, *, useful: bool, shift: dict[str, Any],
             cut_short: Any, at_limit: Any = (), followed: str = "", hint: str = "",
             rose: bool = False, budget: str = "") -> str:
    """What the plan says: the prediction (with its proxy shift and where the time budget
    cut a falling loss short), or why no schedule helps (``hint``: :func:`sampling_hint`;
    ``rose``: the loss rose above the untrained model's at every schedule simulated);
    ``budget``: :func:`budget_note`, ended by the message where not empty."""
    text = _message(best, base, useful=useful, shift=shift, cut_short=cut_short,
                    at_limit=at_limit, followed=followed, hint=hint, rose=rose)
    return f"{text}; {budget}" if budget else text


def _message(best: Any, base: float, *, useful: bool, shift: dict[str, Any],
             cut_short: Any, at_limit: Any, followed: str, hint: str, rose: bool) -> str:
    """:func:`message` without its budget note."""
    if not useful:
        return (f"no schedule is predicted to help: the best predicted test loss "
                f"{best.mean:.4f} is not {USEFUL_MARGIN:.0%} below the untrained model's "
                f"{base:.4f}; " + (
                    "the loss rose above it at every schedule simulated: the steps move the "
                    "model away, by the noise the budget needs or a learning rate too large "
                    f"for them (raise eps, lower the clip or the learning rate, use more data "
                    f"per client{hint})" if rose else
                    "either the noise the budget needs swamps the clipped gradients (raise "
                    f"eps, use more data per client{hint}) or the steps are too small to move "
                    "the model in the rounds searched (raise the learning rate, or the clip "
                    "where it cuts most gradients)"))
    message = (f"predicted test loss {best.mean:.4f} +- {best.stderr:.4f}{_source(shift)} at "
               f"T={best.rounds}, b={best.clients_per_round}")
    if (confirmed := shift.get("confirmed")) is not None:
        old = confirmed["replaces"]
        rate = ("" if old.get("sample_rate") == best.sample_rate
                else f", q={best.sample_rate:g}")
        was = "" if not rate else f", q={old['sample_rate']:g}"
        message += (f"{rate}, re-simulated on the plan's proxy: it replaces the search's first "
                    f"choice T={old['rounds']}, b={old['clients_per_round']}{was} (predicted "
                    f"{old['search_loss']:.4f}, {old['shift_loss']:.4f} on average when "
                    f"re-simulated), which all {confirmed['runs']} re-simulations on the proxy "
                    f"and its other draws ranked below it")
    if shift.get("proxy_std") is not None:
        still = shift["recommended_still_best"]
        message += (f"; proxy shift: +- {shift['proxy_std']:.4f} over "
                    f"{len(shift['alternatives'])} other draws of the proxy" + (
                        "" if still is None else
                        f", the schedule is the best of the candidates on "
                        f"{still.replace(' of ', ' of these ')} draws"
                        + _why_it_stays(still, shift))
                    + _far_behind(shift))
    message += followed
    for b, q, t in cut_short:
        if (b, q) == (best.clients_per_round, best.sample_rate):
            message += (f"; the twin's time budget ended the search of b={b} at T={t}, where "
                        f"the loss still fell (the next, longer schedule was estimated to cost "
                        f"more than the budget had left): a larger time budget may find a "
                        f"larger T")
    for b, q, t in at_limit:
        if (b, q) == (best.clients_per_round, best.sample_rate):
            message += (f"; the loss of b={b} still fell at T={t}, the largest T the search "
                        f"simulates (t_limit): more rounds may help further")
    return message


def _why_it_stays(still: str, shift: dict[str, Any]) -> str:
    """Why a schedule that lost on some of the proxy's other draws is still recommended (the
    rule of :func:`fedqr.planner.candidates.confirm`), where it did not win on all of them."""
    won, _, of = still.partition(" of ")
    if shift.get("confirmed") is not None or won == of:
        return ""
    return (" (the candidates that won elsewhere did not beat it on the plan's proxy and on "
            f"every other draw by {CONFIRM_MARGIN:.0%} on average, so the search's choice "
            "stands)")


def _far_behind(shift: dict[str, Any]) -> str:
    """The message's note on the candidates the shift did not simulate again."""
    behind = shift.get("far_behind") or []
    if not behind:
        return ""
    gaps = ", ".join(f"T={p['rounds']}, b={p['clients_per_round']}" + (
        "" if p["above_first_choice"] is None else f" (+{p['above_first_choice']:.1%})")
        for p in behind)
    return (f"; candidates whose search losses were far above the search's first choice were "
            f"not simulated again: {gaps}")
