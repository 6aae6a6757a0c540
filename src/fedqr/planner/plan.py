"""``make_plan``: the twin's recommended (T, b, q) for a scenario, with what it read and cost."""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import torch

from fedqr.data import ClientData
from fedqr.data.public import align_features
from fedqr.data.source import OwnData
from fedqr.models.logreg import Norm
from fedqr.planner.cache import (
    PLANNER_VERSION,
    cache_dir,
    cache_key,
    load_memo,
    save_memo,
)
from fedqr.planner.messages import USEFUL_MARGIN, budget_note, message, sampling_hint
from fedqr.planner.prior import prior_note, proxy_prior_loss
from fedqr.planner.proxy import AUTO_PROXY_ROWS, ProxyChoice, Twin, build_twin, cost_model
from fedqr.planner.scenario import DataUse, Scenario
from fedqr.planner.search import Prediction, Searcher, SearchSettings
from fedqr.planner.shift import headline, headline_re_simulated, proxy_shift
from fedqr.planner.twin import Proxy
from fedqr.planner.twin_kernel import KernelProxy
from fedqr.privacy import Mechanism, mechanism_for

__all__ = ["AUTO_PROXY_ROWS", "PLANNER_VERSION", "Plan", "PlanNotUseful", "ProxyChoice", "Twin",
           "build_twin", "cache_dir", "make_plan"]

class PlanNotUseful(RuntimeError):
    """The planner predicts that no schedule beats the untrained model: nothing is run."""


@dataclass(frozen=True)
class Plan:
    """The planner's answer."""

    recommended: Prediction
    predictions: list[Prediction]
    untrained_loss: float
    useful: bool
    message: str
    data_used: dict[str, Any]
    privacy_cost: dict[str, Any]
    method: str = "twin"
    simulated_rounds: int = 0
    wall_time_s: float = 0.0
    from_cache: bool = False
    settings: dict[str, Any] = field(default_factory=dict)
    proxy_shift: dict[str, Any] = field(default_factory=dict)
    prior_loss: float = math.nan  # predicting the label frequencies (fedqr.planner.prior)

    def check_useful(self) -> None:
        """Raise :class:`PlanNotUseful` (with the plan's message) unless the plan helps."""
        if not self.useful:
            raise PlanNotUseful(self.message)

    def runner_ups(self, k: int = 5) -> list[Prediction]:
        """The next best schedules (the search's best but the recommended one)."""
        r = self.recommended
        key = (r.rounds, r.clients_per_round, r.sample_rate)
        return [p for p in self.predictions
                if (p.rounds, p.clients_per_round, p.sample_rate) != key][:k]

    def recommended_dict(self, *, mechanism: Mechanism) -> dict[str, Any]:
        """The ``recommended`` object of ``fedqr plan --json`` and result.json."""
        r = self.recommended
        sampled = mechanism_for(mechanism).batch_rate(0.5) < 1  # else the full batch: null
        return {"rounds": r.rounds, "clients_per_round": r.clients_per_round,
                "sample_rate": r.sample_rate if sampled else None,
                "predicted_test_loss": {"mean": r.mean, "stderr": r.stderr,
                                        "fitted": r.fitted,
                                        "re_simulated": headline_re_simulated(self.proxy_shift),
                                        "search_mean": self.proxy_shift.get(
                                            "re_simulated", {}).get("search_mean", r.mean),
                                        "proxy_std": self.proxy_shift.get("proxy_std"),
                                        "proxy_range": self.proxy_shift.get("range")},
                "proxy_shift": self.proxy_shift if sampled else _full_batch(self.proxy_shift),
                "method": self.method, "data_used": self.data_used,
                "privacy_cost": self.privacy_cost, "useful": self.useful,
                "beats_label_prior": (r.mean < self.prior_loss
                                      if math.isfinite(self.prior_loss) else None),
                "message": self.message,
                "runner_ups": [p.as_dict(sampled=sampled) for p in self.runner_ups()]}


def _full_batch(value: Any) -> Any:
    """``value`` (the proxy shift's record) with every ``sample_rate`` null, as the
    recommendation's of a mechanism that reads each client's full batch."""
    if isinstance(value, dict):
        return {k: None if k == "sample_rate" else _full_batch(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_full_batch(v) for v in value]
    return value


def _proxy(scenario: Scenario, choice: ProxyChoice, real: ClientData | None,
           sizes: np.ndarray, norm: Norm, device: torch.device
           ) -> tuple[Proxy, dict[str, Any]]:
    """The logistic twin's proxy and what it reads (``norm`` is the scenario's; kept for
    ``bench/planner_fit.py``)."""
    twin = build_twin(scenario, choice, real, sizes, device, SearchSettings())
    assert isinstance(twin.proxy, Proxy)  # a scenario of softmax regression
    return twin.proxy, twin.data_used


def _privacy_cost(use: DataUse) -> dict[str, Any]:
    if use is DataUse.PUBLIC_PROXY:
        return {"epsilon": 0.0, "delta": 0.0,
                "note": "the plan reads only public data and the clients' sizes"}
    return {"epsilon": None, "delta": None,
            "note": "no guarantee for the plan itself: it is computed from the clients' data "
                    "read without differential privacy (simulation only); the run it "
                    "recommends still spends exactly each client's budget"}


def _clients(scenario: Scenario, choice: ProxyChoice, sizes: np.ndarray | None
             ) -> tuple[ClientData | None, np.ndarray]:
    """The clients' data (``None`` when only their reported ``sizes`` are known) and sizes."""
    if sizes is None:
        real = scenario.data.build()
        return real, real.partition.sizes
    real_sizes = np.asarray(sizes, dtype=np.int64)
    if choice.use is not DataUse.PUBLIC_PROXY:
        raise ValueError("sizes are given only to plan from a public proxy (the planner "
                         "then never reads the clients' data)")
    if real_sizes.shape != (scenario.num_clients,) or (real_sizes < 1).any():
        raise ValueError(f"sizes must be {scenario.num_clients} positive client sizes, "
                         f"got {real_sizes.tolist()}")
    return None, real_sizes


def _named_columns(choice: ProxyChoice, scenario: Scenario) -> ProxyChoice:
    """A public proxy file's feature columns matched to the deployment's by name
    (:func:`fedqr.data.public.align_features`), for every caller of the planner."""
    public, data = choice.public, scenario.data
    if not (isinstance(public, OwnData) and isinstance(data, OwnData)):
        return choice
    aligned = align_features(public.data, data.data.feature_names)
    return choice if aligned is public.data else replace(
        choice, public=OwnData(data=aligned, seed=public.seed))


def make_plan(scenario: Scenario, *, proxy: ProxyChoice | None = None,
              settings: SearchSettings | None = None, device: str | torch.device = "cpu",
              use_cache: bool = True, progress: Any = None,
              sizes: np.ndarray | None = None) -> Plan:
    """Predict the final test loss of every schedule with the twin and pick the best.

    Parameters
    ----------
    scenario:
        The deployment (data recipe, N, mechanism, budgets, clip, learning rate); its
        ``rounds``/``clients_per_round``/``sample_rate`` fix what the plan must not change.
    proxy:
        What data the twin trains on (default: an automatic clear-proxy share).
    settings:
        Search effort and the twin's seed.
    use_cache:
        Reuse (and store) the simulated losses of an identical earlier plan.
    progress:
        ``progress(label, simulated_rounds)`` while simulating.
    sizes:
        The clients' sizes ``d_i`` as they reported them, for a planner that never sees their
        data (a Flower federation): only with a ``public-proxy``; the scenario's data recipe
        then names the proxy's data set (the model) and N, and is not built.

    Returns
    -------
    Plan
        The recommended schedule, every prediction, what the plan read, simulated
        (``settings["simulated"]``: rounds, columns, row gradients, seconds, and for a
        budgeted kernel twin the estimate and what it left out) and cost. The
        plan itself spends no privacy budget: each predicted schedule's noise is calibrated
        to spend each client's whole budget, and ``fedqr run`` charges it.
    """
    started = time.perf_counter()
    choice = _named_columns(proxy or ProxyChoice(), scenario)
    st = settings or SearchSettings(seed=scenario.data.seed)
    dev = torch.device(device)
    real, real_sizes = _clients(scenario, choice, sizes)
    twin = build_twin(scenario, choice, real, real_sizes, dev, st)
    if twin.kernel is None and st.time_budget_s is not None:
        warnings.warn(f"time_budget_s={st.time_budget_s:g} is ignored: it sizes the twin of a "
                      f"model other than softmax regression, and the twin of model "
                      f"{scenario.model_name} runs its whole search", stacklevel=2)
    proxy_doc = {"use": choice.use.value, "share": choice.share,
                 "public": None if choice.public is None else choice.public.identity()}
    key = cache_key(scenario, proxy_doc, st, sizes=sizes, kernel=twin.kernel,
                    products=twin.proxy.products if isinstance(twin.proxy, Proxy) else None)
    path = cache_dir() / f"{key}.json"
    memo = (load_memo(path) if use_cache and path.is_file() else None)
    cached = memo is not None
    run_settings = st if twin.size is None else replace(
        st, repeats=twin.size.repeats, t_first=twin.size.t_first or st.t_first)
    searcher = Searcher(scenario=scenario, proxy=twin.proxy, settings=run_settings, device=dev,
                        memo=memo or {}, progress=progress, **_budget(twin))
    predictions = searcher.run()
    if use_cache and searcher.simulated_rounds:
        save_memo(path, searcher.memo)
    best = predictions[0]
    shift = proxy_shift(scenario, choice, real, real_sizes, dev, run_settings, twin,
                        predictions, key=key, use_cache=use_cache, repeats=searcher.repeats,
                        count=st.proxy_alternatives)
    best = headline(best, predictions, shift)
    base = searcher.untrained_loss()
    useful = best.rounds > 0 and best.mean < (1 - USEFUL_MARGIN) * base
    prior = proxy_prior_loss(twin.proxy)
    text = message(best, base, useful=useful, shift=shift, cut_short=searcher.cut_short,
                   at_limit=searcher.at_limit, followed=_followed(searcher, twin),
                   hint=sampling_hint(scenario, twin),
                   rose=all(not p.mean <= base for p in predictions if p.rounds > 0),
                   budget=budget_note(twin.size, searcher.estimated_s))
    if useful:
        text += prior_note(best.mean, prior, public=choice.use is DataUse.PUBLIC_PROXY,
                           model=scenario.model_name, uniform=base, margin=USEFUL_MARGIN)
    return Plan(recommended=best, predictions=predictions, untrained_loss=base, useful=useful,
                message=text, data_used=twin.data_used,
                privacy_cost=_privacy_cost(choice.use),
                simulated_rounds=searcher.simulated_rounds,
                wall_time_s=time.perf_counter() - started, from_cache=cached and
                searcher.simulated_rounds == 0,
                settings={**asdict(st), "repeats": searcher.repeats,
                          "t_first": run_settings.t_first,
                          "simulated": _simulated(searcher, twin)},
                proxy_shift=shift, prior_loss=prior)


def _budget(twin: Twin) -> dict[str, Any]:
    """The Searcher's cost model and budget of a kernel twin (none for the logistic twin), and
    what a default budget may be raised to for the leading arm (:mod:`fedqr.planner.follow`;
    ``None`` for a given budget)."""
    if twin.size is None or not isinstance(twin.proxy, KernelProxy):
        return {}
    return {"cost": cost_model(twin.proxy), "budget_s": twin.size.budget_s,
            "follow_budget_s": twin.size.follow_s}


def _raised_for_leader(searcher: Searcher, twin: Twin) -> float | None:
    """The budget the search ended with where the follow of the leader raised it, else None."""
    if twin.size is None or searcher.budget_s is None or searcher.budget_s <= twin.size.budget_s:
        return None
    return searcher.budget_s


def _skipped(searcher: Searcher) -> list[str]:
    """The batches left out for the budget, less the horizons simulated later after all (the
    follow of the leader on a raised budget): a recommended schedule was listed as skipped."""
    out = []
    for b, q, ts in searcher.skipped:
        left = [t for t in ts if (b, q, t) not in searcher.memo]
        if left:
            out.append(f"b={b} q={q:g} T={','.join(map(str, left))}")
    return list(dict.fromkeys(out))


def _followed(searcher: Searcher, twin: Twin) -> str:
    """The message's note when the default budget was raised to follow the leading arm."""
    raised = _raised_for_leader(searcher, twin)
    if raised is None or twin.size is None:
        return ""
    return (f"; the default time budget ({twin.size.budget_s:.0f} s estimated) stopped the "
            f"leading arm while its loss fell, so it was followed on a budget raised up to "
            f"{raised:.0f} s ({searcher.estimated_s:.0f} s estimated in all)")


def _simulated(searcher: Searcher, twin: Twin) -> dict[str, Any]:
    """How much the twin simulated (this call; 0 when every loss came from the cache)."""
    out: dict[str, Any] = {
        "rounds": searcher.simulated_rounds, "column_rounds": searcher.column_rounds,
        "columns": searcher.columns, "row_gradients": searcher.row_gradients,
        "proxy_rows": int(twin.proxy.proxy_sizes.sum()), "sim_time_s": searcher.sim_time_s,
        "products": twin.proxy.products if isinstance(twin.proxy, Proxy) else None,
        "still_falling_at_t_limit": [f"b={b} q={q:g} T={t}" for b, q, t in searcher.at_limit]}
    if twin.size is not None:
        note = budget_note(twin.size, searcher.estimated_s)
        out.update({"time_budget_s": twin.size.budget_s, "budget_kept": not note,
                    "budget_note": note or None,
                    "raised_for_leader_s": _raised_for_leader(searcher, twin),
                    "estimated_s": searcher.estimated_s,
                    "coarse_estimated_s": twin.size.coarse_s,
                    "skipped_for_budget": _skipped(searcher),
                    "still_falling_at": [f"b={b} q={q:g} T={t}"
                                         for b, q, t in searcher.cut_short]})
    return out
