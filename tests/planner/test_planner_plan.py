"""make_plan: the recommendation is the predicted minimum, cached, honest about data and cost."""

from __future__ import annotations

import re
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fedqr.data import DatasetName, DataSpec, PartitionKind
from fedqr.planner import DataUse, ProxyChoice, Scenario, SearchSettings, make_plan
from fedqr.planner.pilot import plan_with_pilot
from fedqr.privacy import Mechanism
from fedqr.sim.config import LearningRate

SPEC = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.TWO_DIGITS, num_clients=4)
FAST = SearchSettings(repeats=2, t_first=16, t_limit=64)


def _scenario(**kw: object) -> Scenario:
    base: dict[str, object] = dict(data=SPEC, mechanism=Mechanism.LAPLACE, eps=(4.0,),
                                   clip=20.0, sample_rate=1.0, lr=LearningRate(eta0=0.3))
    base.update(kw)
    return Scenario(**base)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))


def test_plan_is_the_predicted_minimum_and_replans_from_cache() -> None:
    plan = make_plan(_scenario(), settings=FAST)
    means = [p.mean for p in plan.predictions]
    best = plan.predictions[0]  # the search's minimum, its loss re-simulated
    assert plan.recommended == replace(best, mean=plan.recommended.mean,
                                       stderr=plan.recommended.stderr)
    assert plan.proxy_shift["re_simulated"]["search_mean"] == min(means) and means == sorted(means)
    assert plan.useful and plan.recommended.rounds > 0
    assert {p.clients_per_round for p in plan.predictions} == {1, 2, 3, 4}
    assert plan.data_used["kind"] == "clear-proxy" and plan.data_used["reads_private_data"]
    again = make_plan(_scenario(), settings=FAST)
    assert again.from_cache and again.simulated_rounds == 0
    assert again.recommended == plan.recommended


@pytest.mark.slow
def test_fixed_b_and_auto_q() -> None:
    sc = _scenario(mechanism=Mechanism.GAUSSIAN, eps=(2.0,), clip=3.0, sample_rate=None,
                   clients_per_round=2)
    plan = make_plan(sc, settings=FAST)
    assert {p.clients_per_round for p in plan.predictions} == {2}
    assert len({p.sample_rate for p in plan.predictions}) >= 3


def test_a_budget_too_small_is_said_in_words() -> None:
    plan = make_plan(_scenario(eps=(1e-4,)), settings=FAST)
    assert not plan.useful
    assert "no schedule is predicted to help" in plan.message
    assert "sample_rate" not in plan.message  # Laplace replies read every row


def test_a_useless_fixed_sample_rate_is_named_with_its_batch() -> None:
    # digits' 4 clients hold about 360 rows each: at q = 0.003 a batch is about one row
    plan = make_plan(_scenario(mechanism=Mechanism.GAUSSIAN, eps=(0.5,), clip=3.0,
                               sample_rate=0.003), settings=FAST)
    assert not plan.useful
    batch = re.search(r"at the sampling rate q = 0.003 the median client's expected batch "
                      r"is ([0-9.]+) rows; the planner chooses q itself with --sample-rate auto "
                      r"\('sample_rate=None' in Python\)", plan.message)
    assert batch is not None, plan.message
    assert 0.5 < float(batch.group(1)) < 2.0  # 0.003 x ~360 rows


def test_public_proxy_costs_nothing_and_pilot_charges_its_share() -> None:
    public = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.IID, num_clients=4,
                      seed=9)
    choice = ProxyChoice(use=DataUse.PUBLIC_PROXY, public=public, public_label="digits")
    plan = make_plan(_scenario(), proxy=choice, settings=FAST)
    assert plan.privacy_cost["epsilon"] == 0.0 and not plan.data_used["reads_private_data"]
    import torch

    piloted = plan_with_pilot(_scenario(), proxy=choice, settings=FAST,
                              device=torch.device("cpu"), use_cache=True, progress=None,
                              pilot_share=0.25)
    assert piloted.data_used["kind"] == "private-pilot"
    spent = np.asarray(piloted.privacy_cost["epsilon"], dtype=float)
    assert np.all(spent <= 0.25 * 4.0 + 1e-12) and np.any(spent > 0)
    left = piloted.privacy_cost["budget_left_for_run"]["eps"]
    np.testing.assert_allclose(np.asarray(left) + 0.25 * 4.0, 4.0)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"clients_per_round": 5}, "clients_per_round"), ({"rounds": 0}, "rounds"),
    ({"eps": (-1.0,)}, "eps"), ({"mechanism": Mechanism.NONE}, "mechanism"),
    ({"sample_rate": 1.5}, "sample_rate"),
])
def test_bad_scenario_names_the_parameter(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        _scenario(**kwargs)


def test_bad_proxy_choice() -> None:
    with pytest.raises(ValueError, match="proxy_share"):
        ProxyChoice(share=0.0)
    with pytest.raises(ValueError, match="public proxy"):
        ProxyChoice(use=DataUse.PUBLIC_PROXY)


def test_the_planner_plans_any_mechanism_through_its_object() -> None:
    """The third mechanism (discrete Laplace) is planned through its own calibration."""
    sc = _scenario(mechanism=Mechanism.DISCRETE_LAPLACE, clients_per_round=2)
    plan = make_plan(sc, settings=SearchSettings(repeats=2, t_first=8, t_limit=8))
    assert plan.useful and 1 <= plan.recommended.rounds <= 16
    assert all(p.clients_per_round == 2 for p in plan.predictions)


def test_skipped_for_budget_leaves_out_what_was_simulated_later() -> None:
    """A batch skipped by the race and simulated by the follow of the leader on a raised
    budget was still listed as skipped: the recommended schedule among them (a QA plan of
    FEMNIST letters with an MLP, T=1024, b=4)."""
    from types import SimpleNamespace

    from fedqr.planner.plan import _skipped

    searcher = SimpleNamespace(
        skipped=[(4, 0.35, [1024]), (8, 0.35, [512]), (4, 1.0, [160, 200, 512]),
                 (8, 0.35, [512])],
        memo={(4, 0.35, 1024): (2.0,), (4, 1.0, 200): (2.1,)})
    assert _skipped(searcher) == ["b=8 q=0.35 T=512", "b=4 q=1 T=160,512"]  # type: ignore[arg-type]


def test_a_public_proxy_with_a_scarce_class_warns() -> None:
    """Digits' class 3 kept on 2 training rows and none of the evaluation rows: the plan is
    made for the other classes (a QA run planned three hospitals on Switzerland's records,
    1 negative row of 46, 17% worse than their best schedule, and nothing said so)."""
    from fedqr.data import FederatedData
    from fedqr.data.source import OwnData

    pool = FederatedData.from_client_data(DataSpec(
        dataset=DatasetName.DIGITS, partition=PartitionKind.IID, num_clients=1, seed=9).build())
    keep = np.flatnonzero(pool.y != 3)
    keep = np.concatenate([keep, np.flatnonzero(pool.y == 3)[:2]])
    test = pool.y_test != 3
    scarce = FederatedData(x=np.ascontiguousarray(pool.x[keep]), y=pool.y[keep],
                           client=np.zeros(len(keep), dtype=np.int64),
                           x_test=np.ascontiguousarray(pool.x_test[test]),
                           y_test=pool.y_test[test], num_classes=10,
                           input_shape=pool.input_shape, name="scarce")
    choice = ProxyChoice(use=DataUse.PUBLIC_PROXY, public=OwnData(data=scarce, seed=1),
                         public_label="scarce")
    sizes = np.array([100, 120, 140, 160])
    with pytest.warns(UserWarning, match=r"the public proxy 'scarce' holds hardly any rows of "
                                         r"some classes \(class 3: 2 of \d+ training rows, 0 of "
                                         r"\d+ evaluation rows\)"):
        make_plan(_scenario(), proxy=choice, settings=FAST, sizes=sizes, use_cache=False)
    fine = ProxyChoice(use=DataUse.PUBLIC_PROXY, public=OwnData(data=pool, seed=1),
                       public_label="digits")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        make_plan(_scenario(), proxy=fine, settings=FAST, sizes=sizes, use_cache=False)
