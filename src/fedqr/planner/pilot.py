"""Private pilot: plan on a public proxy, then check the twin on the clients' data with DP.

The clients' budgets are split: a declared share ``s`` pays for one pilot run on their own
data, the rest ``1 - s`` is what the plan (and the real run) may spend (basic composition of
the two runs). The twin plans for the rest on a public proxy; the pilot then runs the plan's
b and q for ``max(1, round(s T))`` rounds at the pilot budget -- T / eps replies per unit of
budget, so for Laplace the per-reply noise of the planned schedule at the *whole* budget,
``1 - s`` times the planned run's -- with every reply charged to the clients' ledgers, and
compares its test loss with the twin's prediction for that same pilot schedule
(:func:`pilot_check`: one run against the twin's prediction interval for one run). A pilot
much worse than predicted means the proxy does not represent the clients' data.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch

from fedqr.models.logreg_kernel import LogRegKernel
from fedqr.planner.plan import Plan, ProxyChoice, make_plan
from fedqr.planner.proxy import build_twin
from fedqr.planner.scenario import DataUse, Scenario
from fedqr.planner.search import Searcher, SearchSettings
from fedqr.sim.loop import run_rounds

__all__ = ["pilot_check", "plan_with_pilot", "split_budget"]

PILOT_SEED_OFFSET = 7919
PILOT_REPEATS = 12
"""Twin repeats of the pilot's prediction: the check needs the spread of one run."""
PILOT_QUANTILE = 0.995
"""One-sided level of the prediction interval a pilot run must fall in."""


def pilot_check(achieved: float, *, mean: float, stderr: float, repeats: int) -> dict[str, Any]:
    """Whether one pilot run's test loss is within the twin's prediction for one run.

    The twin's ``repeats`` runs of the pilot schedule have mean ``mean`` and standard error
    ``stderr``, so one run's spread is ``s = stderr sqrt(K)``; the one-sided 99.5% prediction
    interval of a new run is ``mean + t(0.995, K - 1) s sqrt(1 + 1/K)``. A pilot above it (or
    diverged) says the proxy does not represent the clients (``ok`` False); one as far below
    the mean (``better``) that the prediction is pessimistic.
    """
    from scipy.stats import t as student_t

    k = max(2, int(repeats))
    scale = stderr * math.sqrt(k) * math.sqrt(1 + 1 / k)
    limit = mean + float(student_t.ppf(PILOT_QUANTILE, k - 1)) * scale
    z = (achieved - mean) / scale if scale > 0 else (math.inf if achieved > mean else 0.0)
    return {"ok": bool(np.isfinite(achieved)) and achieved <= limit, "limit": limit,
            "better": bool(achieved < 2 * mean - limit),
            "z": z if math.isfinite(z) else None, "twin_repeats": k,
            "rule": f"one run within the twin's one-sided {PILOT_QUANTILE:.1%} prediction "
                    f"interval (t with {k - 1} degrees of freedom)"}


def split_budget(scenario: Scenario, share: float) -> tuple[Scenario, Scenario]:
    """(pilot scenario with ``share`` of every budget, plan scenario with the rest)."""
    if not 0 < share < 1:
        raise ValueError(f"pilot_share must be in (0, 1), got pilot_share={share}")
    eps, delta = scenario.client_eps(), scenario.client_delta()
    pure = not scenario.spec.needs_delta
    pilot_eps, pilot_delta = tuple(share * e for e in eps), tuple(share * d for d in delta)

    def part(e: tuple[float, ...], d: tuple[float, ...]) -> Scenario:
        return dataclasses.replace(scenario, eps=e, delta=scenario.delta if pure else d)

    return (part(pilot_eps, pilot_delta),
            part(_rest(eps, pilot_eps), _rest(delta, pilot_delta)))


def _rest(budget: tuple[float, ...], used: tuple[float, ...]) -> tuple[float, ...]:
    """``budget - used`` per client, rounded down so that ``used + rest <= budget`` holds in
    floating point too (``0.2 * 1e-5 + 0.8 * 1e-5`` is ``1.0000000000000003e-05``)."""
    out = []
    for b, u in zip(budget, used, strict=True):
        r = b - u
        while r > 0 and u + r > b:
            r = math.nextafter(r, 0.0)
        out.append(r)
    return tuple(out)


def plan_with_pilot(scenario: Scenario, *, proxy: ProxyChoice, settings: SearchSettings,
                    device: torch.device, use_cache: bool, progress: Any,
                    pilot_share: float) -> Plan:
    """Plan for the budget left after a private pilot, then run and check the pilot."""
    if proxy.use is not DataUse.PUBLIC_PROXY:
        raise ValueError("a private pilot plans on a public proxy (--proxy-dataset)")
    pilot_sc, rest = split_budget(scenario, pilot_share)
    plan = make_plan(rest, proxy=proxy, settings=settings, device=device,
                     use_cache=use_cache, progress=progress)
    if not plan.useful:  # nothing will run: a pilot would only spend the clients' budgets
        return _without_pilot(plan, num_clients=len(scenario.client_eps()))
    r = plan.recommended
    t_pilot = max(1, round(pilot_share * r.rounds))
    # the twin's prediction for the pilot schedule at the pilot budget, on the plan's proxy
    real = scenario.data.build()
    twin = build_twin(pilot_sc, proxy, real, real.partition.sizes, device, settings)
    searcher = Searcher(scenario=pilot_sc, proxy=twin.proxy, device=device,
                        settings=dataclasses.replace(settings, repeats=PILOT_REPEATS))
    searcher.evaluate(r.clients_per_round, r.sample_rate, [t_pilot])
    predicted = searcher.predictions()[0]
    config = pilot_sc.sim_config(rounds=t_pilot, clients_per_round=r.clients_per_round,
                                 sample_rate=r.sample_rate, repeats=1,
                                 seed=scenario.data.seed + PILOT_SEED_OFFSET,
                                 eval_every=max(1, t_pilot))
    kernel = twin.kernel or scenario.kernel or LogRegKernel(
        num_features=real.dataset.num_features, num_classes=real.dataset.num_classes)
    result = run_rounds(real.dataset, real.partition, config, kernel, device=device)
    achieved = float(result.runs[0]["rounds"][-1]["test_loss"])
    spent = [c["epsilon_spent"] for c in result.clients]
    check = pilot_check(achieved, mean=predicted.mean, stderr=predicted.stderr,
                        repeats=searcher.repeats)
    ok = check["ok"]
    pilot = {"rounds": t_pilot, "clients_per_round": r.clients_per_round,
             "sample_rate": r.sample_rate, "achieved_test_loss": achieved,
             "predicted_test_loss": {"mean": predicted.mean, "stderr": predicted.stderr},
             "check": {k: v for k, v in check.items() if k != "ok"},
             "proxy_represents_clients": ok}
    message = plan.message + ("" if ok else (
        f"; WARNING: the private pilot's test loss {achieved:.4f} is worse than the twin "
        f"predicted ({predicted.mean:.4f} +- {predicted.stderr:.4f}): the public proxy may "
        f"not represent the clients' data")) + ("" if not check["better"] else (
        f"; note: the private pilot's test loss {achieved:.4f} is better than the twin "
        f"predicted ({predicted.mean:.4f}): the public proxy is harder than the clients' data "
        f"and the predicted loss pessimistic (its ranking of schedules may still hold)"))
    data_used = {**plan.data_used, "kind": DataUse.PRIVATE_PILOT.value, "pilot": pilot}
    cost = {"epsilon": spent, "delta": list(pilot_sc.client_delta()),
            "note": f"one pilot run charged on the clients' ledgers ({pilot_share:.0%} of each "
                    f"budget); the recommended run may spend the rest",
            "budget_left_for_run": {"eps": list(rest.client_eps()),
                                    "delta": list(rest.client_delta())}}
    return dataclasses.replace(plan, data_used=data_used, privacy_cost=cost, message=message)


def _without_pilot(plan: Plan, *, num_clients: int) -> Plan:
    """The plan of a private pilot where no schedule is predicted to help: no pilot runs
    (it spent part of every replying client's budget, and with no run to follow that spend
    was recorded nowhere), nothing is charged."""
    note = ("no pilot was run: no schedule is predicted to help on the public proxy, so there "
            "is no run to check (nothing charged)")
    return dataclasses.replace(
        plan, data_used={**plan.data_used, "kind": DataUse.PRIVATE_PILOT.value, "pilot": None},
        privacy_cost={"epsilon": [0.0] * num_clients, "delta": [0.0] * num_clients,
                      "note": note},
        message=f"{plan.message}; {note}")
