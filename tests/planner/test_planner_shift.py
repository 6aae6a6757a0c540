"""Proxy shift: the plan's best schedules on other draws of the proxy, in the plan."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedqr.data import DatasetName, DataSpec, FederatedData, PartitionKind
from fedqr.data.source import OwnData
from fedqr.planner import DataUse, ProxyChoice, Scenario, SearchSettings, make_plan
from fedqr.planner.candidates import candidates
from fedqr.planner.shift import alternatives, shift_seed
from fedqr.privacy import Mechanism
from fedqr.sim.config import LearningRate

SPEC = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.TWO_DIGITS, num_clients=4)
FAST = SearchSettings(repeats=2, t_first=16, t_limit=64)
SCENARIO = Scenario(data=SPEC, mechanism=Mechanism.LAPLACE, eps=(4.0,), clip=20.0,
                    sample_rate=1.0, lr=LearningRate(eta0=0.3))


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))


def _own() -> OwnData:
    other = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.IID, num_clients=3,
                     seed=5)
    return OwnData(data=FederatedData.from_client_data(other.build()), seed=5)


def test_alternatives_by_kind_of_proxy() -> None:
    clear = ProxyChoice()
    assert alternatives(clear, n_clients=4, share=1.0, count=None) == []
    assert len(alternatives(clear, n_clients=4, share=0.5, count=None)) == 2
    recipe = ProxyChoice(use=DataUse.PUBLIC_PROXY, public=SPEC)
    assert [a.label_alpha for a in alternatives(recipe, n_clients=4, share=None,
                                                count=None)] == [None] * 3
    own = ProxyChoice(use=DataUse.PUBLIC_PROXY, public=_own())
    alts = alternatives(own, n_clients=4, share=None, count=None)
    assert [(a.draw, a.label_alpha is None) for a in alts] == [(1, True), (1, False),
                                                                (2, True), (2, False)]


def test_the_headline_is_the_re_simulation_even_without_an_alternative() -> None:
    plan = make_plan(SCENARIO, proxy=ProxyChoice(share=1.0), settings=FAST)  # every row
    shift, again = plan.proxy_shift, plan.proxy_shift["re_simulated"]
    assert shift["alternatives"] == [] and shift["proxy_std"] is None and shift["range"] is None
    assert "no other draw of the proxy" in shift["note"]
    best = plan.predictions[0]  # the search's first choice, its figure the lowest of all
    assert (plan.recommended.rounds, plan.recommended.clients_per_round) == (
        best.rounds, best.clients_per_round)
    assert again["search_mean"] == best.mean and again["repeats"] == FAST.repeats
    assert plan.recommended.mean == again["mean"] == shift["reference_loss"] != best.mean
    assert "re-simulated with fresh draws" in plan.message
    doc = plan.recommended_dict(mechanism=SCENARIO.mechanism)["predicted_test_loss"]
    assert doc["re_simulated"] and doc["search_mean"] == best.mean


def test_a_plan_whose_best_is_no_training_has_no_shift() -> None:
    broke = Scenario(data=SPEC, mechanism=Mechanism.LAPLACE, eps=(1e-4,), clip=20.0,
                     sample_rate=1.0, lr=LearningRate(eta0=0.3))
    plan = make_plan(broke, proxy=ProxyChoice(share=0.5), settings=FAST)
    assert not plan.useful and plan.recommended.rounds == 0
    assert plan.recommended == plan.predictions[0]  # no other schedule's re-simulation
    assert plan.proxy_shift["note"] == "no trained schedule to check"
    assert "re_simulated" not in plan.proxy_shift and not plan.proxy_shift["alternatives"]

def test_the_shift_draws_from_a_seed_of_its_own() -> None:
    seeds = [shift_seed(s) for s in range(50)]
    assert len(set(seeds)) == 50 and not set(seeds) & set(range(50))
    assert seeds == [shift_seed(s) for s in range(50)]  # derived, so reproducible


def test_no_shift_asked_for_keeps_the_search_figure() -> None:
    settings = SearchSettings(repeats=2, t_first=16, t_limit=64, proxy_alternatives=0)
    plan = make_plan(SCENARIO, proxy=ProxyChoice(share=0.5), settings=settings)
    assert "re_simulated" not in plan.proxy_shift
    assert plan.recommended == plan.predictions[0]
    doc = plan.recommended_dict(mechanism=SCENARIO.mechanism)["predicted_test_loss"]
    assert not doc["re_simulated"] and doc["search_mean"] == doc["mean"]

@pytest.mark.parametrize("behind", [True, False])
def test_candidates_far_behind_are_listed_not_simulated_again(
        behind: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    import fedqr.planner.search as search_mod
    import fedqr.planner.shift as shift_mod

    monkeypatch.setattr(shift_mod, "far_behind", lambda first, p, *, moved: behind)
    arms: list[tuple[int, float]] = []
    real = search_mod.Searcher.evaluate

    def spy(self: Any, b: int, q: float, rounds: list[int], **kwargs: Any) -> bool:
        arms.append((b, q))
        return real(self, b, q, rounds, **kwargs)

    search = make_plan(SCENARIO, proxy=ProxyChoice(share=0.5), settings=FAST, use_cache=False)
    every = candidates(search.predictions)
    assert len(every) == 3
    monkeypatch.setattr(search_mod.Searcher, "evaluate", spy)
    monkeypatch.setattr(shift_mod, "Searcher", search_mod.Searcher)
    plan = make_plan(SCENARIO, proxy=ProxyChoice(share=0.5), settings=FAST, use_cache=False)
    shift, first = plan.proxy_shift, every[0]
    shifted = set(arms[-len(every) if not behind else -1:])  # the shift comes last
    listed = [(c["rounds"], c["clients_per_round"]) for c in shift["far_behind"]]
    if behind:
        assert shifted == {(first.clients_per_round, first.sample_rate)}
        assert listed == [(p.rounds, p.clients_per_round) for p in every[1:]]
        assert [c["above_first_choice"] for c in shift["far_behind"]] == pytest.approx(
            [p.mean / first.mean - 1 for p in every[1:]])
        assert shift["recommended_still_best"] is None and len(shift["candidates"]) == 1
        assert "not simulated again: T=" in plan.message
        assert "time budget" not in shift.get("note", "")  # not the budget's doing
    else:
        assert shifted == {(p.clients_per_round, p.sample_rate) for p in every}
        assert listed == [] and len(shift["candidates"]) == 3
        assert shift["recommended_still_best"].endswith(" of 2")  # counted over all three


def test_public_proxy_plan_reports_its_shift_and_replans_from_the_cache() -> None:
    choice = ProxyChoice(use=DataUse.PUBLIC_PROXY, public=_own(), public_label="digits-own")
    plan = make_plan(SCENARIO, proxy=choice, settings=FAST)
    shift = plan.proxy_shift
    assert len(shift["alternatives"]) == 4
    values = [a["loss"] for a in shift["alternatives"]] + [shift["reference_loss"]]
    assert shift["range"] == [min(values), max(values)]
    assert shift["proxy_std"] > 0  # other splits of the rows do move the prediction
    rec = plan.recommended_dict(mechanism=SCENARIO.mechanism)
    assert rec["predicted_test_loss"]["proxy_std"] == shift["proxy_std"]
    assert "proxy shift" in plan.message
    again = make_plan(SCENARIO, proxy=choice, settings=FAST)
    assert again.from_cache and again.proxy_shift == shift


def test_no_alternatives_when_asked_for_none_or_all_rows_are_read() -> None:
    plan = make_plan(SCENARIO, settings=FAST, proxy=ProxyChoice(share=1.0))
    assert plan.proxy_shift["alternatives"] == [] and "every row" in plan.proxy_shift["note"]
    none = SearchSettings(repeats=2, t_first=16, t_limit=64, proxy_alternatives=0)
    plan = make_plan(SCENARIO, settings=none, proxy=ProxyChoice(share=0.5))
    assert plan.proxy_shift["alternatives"] == []
    with pytest.raises(ValueError, match="proxy_alternatives must be >= 0"):
        SearchSettings(proxy_alternatives=-1)


def test_a_share_that_reads_every_row_of_small_clients_is_reported_as_all_rows() -> None:
    # 300 clients of 16 rows: the automatic share (about 4,000 of 4,800 rows) asks 14 of each
    # client's 16, the floor of 16 rows per client takes them all: the plan says it read every
    # row (share 1), and there is no other draw of the proxy to shift to
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6000, 4)).astype(np.float32)
    y = (x[:, 0] + rng.normal(size=6000) > 0).astype(np.int64)
    data = FederatedData.from_arrays(x=x, y=y, client=np.repeat(np.arange(300), 20),
                                     test_share=0.2)
    scenario = Scenario(data=OwnData(data=data, seed=0), mechanism=Mechanism.LAPLACE,
                        eps=(4.0,), clip=5.0, sample_rate=1.0, lr=LearningRate(eta0=0.3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = make_plan(scenario, settings=FAST, proxy=ProxyChoice())
    assert plan.data_used["share"] == 1.0 and plan.data_used["rows"] == data.num_train
    assert plan.proxy_shift["alternatives"] == [] and "every row" in plan.proxy_shift["note"]
    assert not [w for w in caught if "was raised" in str(w.message)]  # no share was given
    with pytest.warns(UserWarning, match=r"proxy_share=0.5 was raised to 1 of the rows: "
                                         r"every client gives the twin at least 16"):
        half = make_plan(scenario, settings=FAST, proxy=ProxyChoice(share=0.5))  # 16 of 16
    assert half.data_used["share"] == 1.0


def test_a_plan_whose_first_choice_the_shift_overrules_recommends_the_confirmed_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import fedqr.planner.plan as plan_module

    search = make_plan(SCENARIO, proxy=ProxyChoice(share=0.5), settings=FAST)
    first, other = search.predictions[0], next(
        p for p in search.predictions[1:] if p.rounds > 0
        and p.clients_per_round != search.predictions[0].clients_per_round)
    confirmed = {"rounds": other.rounds, "clients_per_round": other.clients_per_round,
                 "sample_rate": other.sample_rate, "runs": 3,
                 "replaces": {"rounds": first.rounds, "clients_per_round": first.clients_per_round,
                              "sample_rate": first.sample_rate, "search_loss": first.mean,
                              "shift_loss": first.mean * 1.2}}
    monkeypatch.setattr(plan_module, "proxy_shift",
                        lambda *a, **k: {"alternatives": [], "confirmed": confirmed,
                                         "re_simulated": {"mean": other.mean * 0.9,
                                                          "stderr": other.stderr,
                                                          "search_mean": other.mean}})
    plan = make_plan(SCENARIO, proxy=ProxyChoice(share=0.5), settings=FAST)
    r = plan.recommended
    assert (r.rounds, r.clients_per_round, r.mean) == (other.rounds, other.clients_per_round,
                                                       other.mean * 0.9)
    ups = [(p.rounds, p.clients_per_round) for p in plan.runner_ups()]
    assert (first.rounds, first.clients_per_round) in ups
    assert (other.rounds, other.clients_per_round) not in ups
    assert f"replaces the search's first choice T={first.rounds}" in plan.message



def test_a_diverged_re_simulation_keeps_the_search_figure_and_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import fedqr.planner.plan as plan_module

    search = make_plan(SCENARIO, proxy=ProxyChoice(share=0.5), settings=FAST)
    first = search.predictions[0]
    monkeypatch.setattr(plan_module, "proxy_shift", lambda *a, **k: {
        "alternatives": [], "re_simulated": {"mean": float("inf"), "stderr": float("inf"),
                                             "search_mean": first.mean}})
    plan = make_plan(SCENARIO, proxy=ProxyChoice(share=0.5), settings=FAST)
    assert plan.recommended == first and plan.useful
    assert "re-simulation with fresh draws diverged" in plan.message
    doc = plan.recommended_dict(mechanism=SCENARIO.mechanism)["predicted_test_loss"]
    assert not doc["re_simulated"] and doc["mean"] == doc["search_mean"] == first.mean

@pytest.mark.parametrize("mechanism", [Mechanism.GAUSSIAN, Mechanism.LAPLACE])
def test_the_alternatives_run_as_one_batch_with_the_losses_they_get_one_by_one(
        mechanism: Mechanism, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference and the alternatives (clear-proxy row draws, equal sizes) are simulated
    together, with the losses the sequential path gives them."""
    import numpy as np

    import fedqr.planner.search as search_mod
    import fedqr.planner.shift as shift_mod

    scenario = Scenario(data=SPEC, mechanism=mechanism, eps=(4.0,),
                        clip=20.0 if mechanism is Mechanism.LAPLACE else 2.0,
                        sample_rate=1.0 if mechanism is Mechanism.LAPLACE else 0.2,
                        lr=LearningRate(eta0=0.3))
    widths: list[int] = []
    real = search_mod.simulate_stacked

    def spy(proxies: list[Any], *args: Any, **kwargs: Any) -> Any:
        widths.append(len(proxies))
        return real(proxies, *args, **kwargs)

    monkeypatch.setattr(search_mod, "simulate_stacked", spy)
    together = make_plan(scenario, proxy=ProxyChoice(share=0.5), settings=FAST,
                         use_cache=False).proxy_shift
    assert 3 in widths  # the reference and its two alternatives, in one batch
    widths.clear()
    monkeypatch.setattr(shift_mod, "stackable", lambda proxies: False)
    alone = make_plan(scenario, proxy=ProxyChoice(share=0.5), settings=FAST,
                      use_cache=False).proxy_shift
    assert set(widths) == {1}
    assert together["candidates"] == alone["candidates"]
    np.testing.assert_allclose([a["loss"] for a in together["alternatives"]],
                               [a["loss"] for a in alone["alternatives"]], rtol=1e-5)
    np.testing.assert_allclose(together["reference_loss"], alone["reference_loss"], rtol=1e-5)
