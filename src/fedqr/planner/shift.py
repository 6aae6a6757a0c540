"""Proxy shift: how much the plan's prediction moves with what the proxy cannot know.

The twin's standard error is Monte Carlo only. A proxy is one draw of rows (a share of the
clients' data) or one split of public data into N clients whose label mixes are unknown.
After the search, the plan's best schedules (:func:`candidates`) are simulated again on
*alternative* proxies (:func:`alternatives`): other draws of the rows or the split, and for a
public proxy split by the reported sizes also label-skewed splits of the same sizes
(:data:`fedqr.planner.public.SKEW_ALPHA`). Every alternative, and the plan's own proxy as the
reference, runs the candidates from one seed (common random numbers), so their differences
are the proxy's. The plan reports each alternative's predicted loss of the recommended
schedule, ``proxy_std`` (root mean square of its deviations from the reference), the range,
and on how many alternatives the recommendation is still the best of the candidates.

What this cannot measure: a public proxy from another source (FEMNIST's digits for MNIST)
differs from the clients' data in ways no split of it shows; ``private-pilot`` checks the
prediction on the clients' data (docs/planner.md measures how often it catches a misleading
proxy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from fedqr.data import ClientData
from fedqr.planner.cache import cache_dir, load_memo, save_memo
from fedqr.planner.candidates import Key, candidates, confirm, far_behind, schedule_key, spread
from fedqr.planner.proxy import ProxyChoice, Twin, build_twin, cost_model
from fedqr.planner.public import SKEW_ALPHA, split_by_recipe
from fedqr.planner.scenario import DataUse, Scenario
from fedqr.planner.search import Prediction, Searcher, SearchSettings
from fedqr.planner.twin import Proxy, stackable
from fedqr.planner.twin_kernel import KernelProxy

__all__ = ["SHIFT_BUDGET_SHARE", "SHIFT_SEED_STREAM", "Alternative", "alternatives",
           "headline", "headline_re_simulated", "proxy_shift", "shift_seed"]

SHIFT_BUDGET_SHARE = 1.0
"""A kernel twin's alternatives (and their reference) may take this share of the plan's time
budget (estimated), on top of the search: the candidates on as many alternatives as fit, else
the recommended schedule alone; what does not fit is left out and the plan says so."""


@dataclass(frozen=True)
class Alternative:
    """One alternative proxy: a redraw (``draw`` > 0) and optionally skewed label mixes."""

    draw: int
    label_alpha: float | None
    label: str


def alternatives(choice: ProxyChoice, *, n_clients: int, share: float | None,
                 count: int | None) -> list[Alternative]:
    """The alternative proxies of a plan (``count``: how many; ``None``: 4 for a public proxy
    dealt by sizes (2 redraws, 2 label-skewed), 3 redraws of a public recipe, 2 redraws of a
    clear proxy that reads a share of the rows, none when it reads them all)."""
    if choice.use is DataUse.CLEAR_PROXY:
        if share is not None and share >= 1:
            return []
        return [Alternative(j, None, f"clear proxy, row draw {j}")
                for j in range(1, (2 if count is None else count) + 1)]
    assert choice.public is not None  # checked by ProxyChoice
    if split_by_recipe(choice.public, n_clients):
        return [Alternative(j, None, f"public recipe, split draw {j}")
                for j in range(1, (3 if count is None else count) + 1)]
    n = 4 if count is None else count
    return [Alternative(j // 2 + 1, None if j % 2 == 0 else SKEW_ALPHA,
                        f"split by sizes, draw {j // 2 + 1}" + (
                            "" if j % 2 == 0 else f", label-skewed (alpha {SKEW_ALPHA:g})"))
            for j in range(n)]


SHIFT_SEED_STREAM = 1
"""The shift's runs draw from ``SeedSequence([seed, SHIFT_SEED_STREAM])``, not from the
search's seed: with the search's seed, the candidate of the arm the search ran first would
repeat the search's own draws, and its re-simulation would not be independent of the choice."""


def shift_seed(seed: int) -> int:
    """The twin seed of the shift's runs (reference and alternatives alike: common random
    numbers among them), derived from the search's ``seed``."""
    return int(np.random.SeedSequence([seed, SHIFT_SEED_STREAM]).generate_state(1)[0])


def _re_simulated(reference: Searcher, p: Prediction) -> dict[str, float]:
    """The recommended schedule's re-simulation on the plan's own proxy: mean and standard
    error over the twin's repeats, beside the search's own (biased low) prediction."""
    values = np.asarray(reference.memo[schedule_key(p)], dtype=np.float64)
    finite = bool(np.isfinite(values).all())
    return {"mean": float(values.mean()) if finite else math.inf,
            "stderr": float(values.std(ddof=1) / math.sqrt(len(values))) if finite
            else math.inf, "search_mean": p.mean, "repeats": len(values)}


def _stacks(searchers: list[Searcher]) -> bool:
    """Whether the searchers' proxies run as one batch: logistic proxies of the same shapes
    with nothing cached (:func:`fedqr.planner.twin.simulate_stacked`, the draws each would
    take alone: the same losses, fewer rounds)."""
    proxies = [s.proxy for s in searchers]
    return (len(searchers) > 1 and not any(s.memo for s in searchers)
            and all(isinstance(p, Proxy) for p in proxies)
            and stackable([p for p in proxies if isinstance(p, Proxy)]))


def _simulate(searchers: list[Searcher], chosen: list[Prediction], *, together: bool) -> None:
    """Simulate the candidates on every searcher's proxy (``together``: :func:`_stacks`)."""
    arms: dict[tuple[int, float], list[int]] = {}
    for p in chosen:
        arms.setdefault((p.clients_per_round, p.sample_rate), []).append(p.rounds)
    for searcher in searchers[:1] if together else searchers:
        for (b, q), ts in arms.items():
            searcher.evaluate(b, q, ts, together=tuple(searchers[1:]) if together else ())


def _losses(searchers: list[Searcher], chosen: list[Prediction]) -> list[dict[Key, float]]:
    """The candidates' mean losses on every searcher's proxy."""
    keys = [schedule_key(p) for p in chosen]
    return [{k: float(np.mean(s.memo[k])) for k in keys} for s in searchers]


def _price(twin: Twin, chosen: list[Prediction], repeats: int) -> float:
    """Estimated seconds of the candidates on one proxy (0 for the logistic twin)."""
    if twin.size is None or not isinstance(twin.proxy, KernelProxy):
        return 0.0
    cost = cost_model(twin.proxy)
    arms: dict[tuple[int, float], list[int]] = {}
    for p in chosen:
        arms.setdefault((p.clients_per_round, p.sample_rate), []).append(p.rounds)
    return sum(cost.batch_s(b=b, q=q, horizons=ts, repeats=repeats) for (b, q), ts in arms.items())


def proxy_shift(scenario: Scenario, choice: ProxyChoice, real: ClientData | None,
                sizes: np.ndarray, device: torch.device, settings: SearchSettings, twin: Twin,
                predictions: list[Prediction], *, key: str, use_cache: bool,
                repeats: int, count: int | None = None) -> dict[str, Any]:
    """The proxy-shift block of a plan (module docstring); ``settings`` are the search's (its
    seed and repeats), ``key`` the plan's cache key (the alternatives are cached beside it)."""
    trained = bool(predictions) and predictions[0].rounds > 0  # else nothing to check
    every = candidates(predictions) if trained else []
    share = twin.data_used.get("share") if choice.use is DataUse.CLEAR_PROXY else None
    alts = alternatives(choice, n_clients=len(sizes), share=share, count=count)
    out: dict[str, Any] = {"alternatives": [], "what": "the recommended schedule's predicted "
                           "loss on other draws of the proxy (same twin draws)"}
    note = ("no trained schedule to check" if not every else
            "no alternative asked for (proxy_alternatives=0)" if count == 0 else
            None if alts else "the twin reads every row of the clients: no other draw of the "
            "proxy")
    if note is not None:
        out["note"] = note
    if not every or count == 0:
        return out
    budget = SHIFT_BUDGET_SHARE * twin.size.budget_s if twin.size is not None else math.inf
    for chosen in (every, every[:1]):  # all candidates, else the recommended schedule only
        price = _price(twin, chosen, repeats)
        runs_fit = len(alts) + 1 if price == 0 else int(budget // price)  # the reference too
        fits = min(len(alts), runs_fit - 1)
        if runs_fit >= 1 and fits >= min(2, len(alts)):
            break
    if runs_fit < 1 or (alts and fits < 1):
        what = "one alternative" if alts else "the re-simulation"
        out["note"] = (f"left out for the time budget: {what} is estimated at {price:.1f} s, "
                       f"the budget for the shift is {budget:.1f} s")
        return out
    runs = [Alternative(0, None, "the plan's proxy (reference)"), *alts[:fits]]
    searchers, paths = [], []
    shift_settings = replace(settings, repeats=repeats, seed=shift_seed(settings.seed))
    for alt in runs:
        alt_twin = twin if alt.draw == 0 and alt.label_alpha is None else build_twin(
            scenario, choice, real, sizes, device, settings, draw=alt.draw,
            label_alpha=alt.label_alpha, size=twin.size)
        path = cache_dir() / f"{key}-shift-{alt.draw}-{alt.label_alpha}.json"
        memo = (load_memo(path) if use_cache and path.is_file() else None) or {}
        searchers.append(Searcher(scenario=scenario, proxy=alt_twin.proxy, memo=memo,
                                  settings=shift_settings, device=device))
        paths.append(path)
    together = _stacks(searchers)
    _simulate(searchers, chosen[:1], together=together)  # the recommended schedule first
    moved = spread([run[schedule_key(chosen[0])] for run in _losses(searchers, chosen[:1])])
    behind = [p for p in chosen[1:] if far_behind(chosen[0], p, moved=moved)]
    chosen = [p for p in chosen if p not in behind]
    _simulate(searchers, chosen[1:], together=together)
    losses = _losses(searchers, chosen)
    for searcher, path in zip(searchers, paths, strict=True):
        if use_cache and searcher.simulated_rounds:
            save_memo(path, searcher.memo)
    pick = confirm(chosen, losses)
    if pick:
        first = chosen[0]
        chosen = [chosen[pick], *(p for i, p in enumerate(chosen) if i != pick)]
    out["re_simulated"] = _re_simulated(searchers[0], chosen[0])
    summary = _summary(out, runs, losses, chosen, len(alts),
                       behind=[_behind(p, every[0]) for p in behind])
    if pick:
        new = chosen[0]
        summary["confirmed"] = {  # its re-simulation on the plan's proxy
            "rounds": new.rounds, "clients_per_round": new.clients_per_round,
            "sample_rate": new.sample_rate, "runs": len(losses),
            "replaces": {"rounds": first.rounds, "clients_per_round": first.clients_per_round,
                         "sample_rate": first.sample_rate, "search_loss": first.mean,
                         "shift_loss": float(np.mean([run[schedule_key(first)]
                                                      for run in losses]))}}
    return summary


def headline(best: Prediction, predictions: list[Prediction], shift: dict[str, Any]
              ) -> Prediction:
    """The recommended schedule with its headline prediction: the search's first choice, or
    the candidate the shift's runs confirmed instead; its loss the re-simulation on the
    plan's own proxy with draws independent of the choice where the shift ran one (the
    search's figure is the lowest of many noisy predictions, so biased low)."""
    confirmed = shift.get("confirmed")
    if confirmed is not None:  # the shift's runs overruled the search's first choice
        key = (confirmed["rounds"], confirmed["clients_per_round"], confirmed["sample_rate"])
        best = next(p for p in predictions
                    if (p.rounds, p.clients_per_round, p.sample_rate) == key)
    if not headline_re_simulated(shift):
        return best
    return replace(best, mean=shift["re_simulated"]["mean"],
                   stderr=shift["re_simulated"]["stderr"])


def headline_re_simulated(shift: dict[str, Any]) -> bool:
    """Whether the headline is the shift's re-simulation: one ran, and no repeat of it
    diverged (else the search's figure stays, and the message says why)."""
    again = shift.get("re_simulated")
    return again is not None and math.isfinite(again["mean"])


def _behind(p: Prediction, first: Prediction) -> dict[str, Any]:
    """A candidate left out of the shift, as the plan lists it: its schedule, its search loss
    and how far above the search's first choice that is (relative)."""
    return {"rounds": p.rounds, "clients_per_round": p.clients_per_round,
            "sample_rate": p.sample_rate, "search_loss": p.mean,
            "above_first_choice": p.mean / first.mean - 1 if first.mean > 0 else None}


def _summary(out: dict[str, Any], runs: list[Alternative],
             losses: list[dict[Key, float]], chosen: list[Prediction],
             wanted: int, *, behind: list[dict[str, Any]]) -> dict[str, Any]:
    best = schedule_key(chosen[0])
    ref = losses[0][best]
    devs, still = [], 0
    for alt, got in zip(runs[1:], losses[1:], strict=True):
        winner = min(got, key=lambda k: got[k])
        still += winner == best
        devs.append(got[best] - ref)
        out["alternatives"].append({
            "proxy": alt.label, "loss": got[best],
            "best_of_candidates": {"rounds": winner[2], "clients_per_round": winner[0],
                                   "sample_rate": winner[1], "loss": got[winner]}})
    values = [got[best] for got in losses]
    out.update({
        "reference_loss": ref,
        "proxy_std": float(np.sqrt(np.mean(np.square(devs)))) if devs else None,
        "range": [float(min(values)), float(max(values))] if devs else None,
        "recommended_still_best": f"{still} of {len(devs)}" if len(chosen) > 1 and devs
        else None,
        "candidates": [{"rounds": p.rounds, "clients_per_round": p.clients_per_round,
                        "sample_rate": p.sample_rate} for p in chosen],
        "far_behind": behind})
    notes = [out["note"]] if "note" in out else []  # why there is no alternative
    if len(devs) < wanted:
        notes.append(f"{wanted - len(devs)} of {wanted} alternatives left out for the budget")
    if len(chosen) == 1 and not behind:
        notes.append("only the recommended schedule was simulated again (the time budget)")
    if notes:
        out["note"] = "; ".join(notes)
    return out
