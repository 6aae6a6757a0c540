"""The private pilot's check: one run against the twin's prediction interval for one run."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import t as student_t

from fedqr.data import DatasetName, DataSpec, FederatedData, PartitionKind
from fedqr.data.source import OwnData
from fedqr.planner import DataUse, ProxyChoice, Scenario, SearchSettings
from fedqr.planner.pilot import pilot_check, plan_with_pilot
from fedqr.privacy import Mechanism
from fedqr.sim.config import LearningRate

FAST = SearchSettings(repeats=2, t_first=16, t_limit=64, proxy_alternatives=0)


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))


def test_the_limit_is_the_one_sided_prediction_interval_of_one_run() -> None:
    limit = 1.0 + student_t.ppf(0.995, 11) * 0.01 * math.sqrt(12) * math.sqrt(1 + 1 / 12)
    assert pilot_check(1.0, mean=1.0, stderr=0.01, repeats=12)["limit"] == pytest.approx(limit)
    assert pilot_check(limit - 1e-9, mean=1.0, stderr=0.01, repeats=12)["ok"]
    assert not pilot_check(limit + 1e-9, mean=1.0, stderr=0.01, repeats=12)["ok"]
    assert not pilot_check(math.inf, mean=1.0, stderr=0.01, repeats=12)["ok"]
    assert not pilot_check(math.nan, mean=1.0, stderr=0.01, repeats=12)["ok"]


def _clients(noise: float) -> OwnData:
    """Digits in 4 iid clients, a share ``noise`` of the training labels redrawn at random."""
    spec = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.IID, num_clients=4)
    data = FederatedData.from_client_data(spec.build())
    rng = np.random.default_rng(5)
    y = data.y.copy()
    hit = rng.random(len(y)) < noise
    y[hit] = rng.integers(0, data.num_classes, int(hit.sum()))
    return OwnData(data=dataclasses.replace(data, y=y))


@pytest.mark.parametrize(("noise", "flagged"), [(0.0, False), (1.0, True)])
def test_a_proxy_that_misleads_grossly_is_flagged_and_a_faithful_one_is_not(
        noise: float, flagged: bool) -> None:
    public = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.IID, num_clients=4,
                      seed=9)
    sc = Scenario(data=_clients(noise), mechanism=Mechanism.LAPLACE, eps=(20.0,), clip=20.0,
                  sample_rate=1.0, lr=LearningRate(eta0=0.3))
    plan = plan_with_pilot(sc, proxy=ProxyChoice(use=DataUse.PUBLIC_PROXY, public=public),
                           settings=FAST, device=torch.device("cpu"), use_cache=True,
                           progress=None, pilot_share=0.3)
    pilot = plan.data_used["pilot"]
    assert pilot["check"]["twin_repeats"] == 12
    assert pilot["proxy_represents_clients"] is not flagged
    assert ("WARNING" in plan.message) is flagged


def test_a_pilot_far_better_than_predicted_is_noted_not_flagged() -> None:
    check = pilot_check(0.5, mean=1.0, stderr=0.01, repeats=12)
    assert check["ok"] and check["better"]
    assert not pilot_check(0.99, mean=1.0, stderr=0.01, repeats=12)["better"]


@pytest.mark.parametrize("share", [0.1, 0.2, 0.3, 0.7])
def test_the_pilots_share_and_the_rest_never_sum_above_a_budget(share: float) -> None:
    """Pilot plus run stays within each client's eps and delta in floating point too
    (0.2 * 1e-5 + 0.8 * 1e-5 is 1.0000000000000003e-05 > 1e-5), and wastes at most an ulp."""
    from fedqr.planner.pilot import split_budget

    spec = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.TWO_DIGITS,
                    num_clients=4)
    eps = (2.0, 3.0, 0.7, 4.1)
    sc = Scenario(data=spec, mechanism=Mechanism.GAUSSIAN, eps=eps, delta=(1e-5, 3e-6, 1e-5, 7e-7),
                  clip=1.0, sample_rate=0.1, lr=LearningRate(eta0=0.3))
    pilot, rest = split_budget(sc, share)
    for budget, a, b in [*zip(sc.client_eps(), pilot.client_eps(), rest.client_eps(), strict=True),
                         *zip(sc.client_delta(), pilot.client_delta(), rest.client_delta(),
                              strict=True)]:
        assert a == share * budget
        assert a + b <= budget
        assert math.nextafter(a + b, math.inf) >= budget  # at most one ulp left unused


def test_no_pilot_runs_where_no_schedule_helps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pilot spent part of every replying client's budget, then the command stopped
    (nothing to run) with that spend recorded nowhere; at eps 49.95 of 50 with share 0.999."""
    import fedqr.planner.pilot as pilot_module

    def no_run(*_a: object, **_k: object) -> None:
        raise AssertionError("a pilot ran on the clients' data")

    monkeypatch.setattr(pilot_module, "run_rounds", no_run)
    public = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.IID, num_clients=4,
                      seed=9)
    sc = Scenario(data=_clients(0.0), mechanism=Mechanism.LAPLACE, eps=(0.001,), clip=20.0,
                  sample_rate=1.0, lr=LearningRate(eta0=0.3))
    plan = plan_with_pilot(sc, proxy=ProxyChoice(use=DataUse.PUBLIC_PROXY, public=public),
                           settings=FAST, device=torch.device("cpu"), use_cache=True,
                           progress=None, pilot_share=0.3)
    assert not plan.useful
    assert plan.data_used["kind"] == "private-pilot" and plan.data_used["pilot"] is None
    assert plan.privacy_cost["epsilon"] == [0.0] * 4
    assert "budget_left_for_run" not in plan.privacy_cost  # no pilot spend for the CLI to say
    assert "no pilot was run" in plan.message
