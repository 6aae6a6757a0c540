"""The planning step of ``fedqr flower run --rounds auto``, without Flower: from the sizes and
budgets the clients report and a public proxy, never from the clients' data."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedqr.data import DatasetName
from fedqr.flower.auto import AutoChoice, PlanNotUseful, plan_federation, reports_from_json
from fedqr.flower.cli_auto import Schedule, auto_choice, check_plannable
from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.server_logic import ClientReports
from fedqr.planner import SearchSettings
from fedqr.privacy import Mechanism

CFG = FlowerRunConfig(num_clients=3, clients_per_round=3, rounds=1, dataset=DatasetName.DIGITS,
                      mechanism=Mechanism.LAPLACE, clip=20.0, sample_rate=1.0, lr=0.3,
                      client_data=True, client_budgets=True, min_replies=3)
AUTO = AutoChoice(rounds=True, clients_per_round=True, sample_rate=False,
                  proxy=DatasetName.DIGITS)


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))


def test_plan_from_reported_sizes_and_budgets() -> None:
    reports = ClientReports(sizes=(300, 420, 510), eps=(4.0, 6.0, 8.0), delta=(1e-5,) * 3)
    fed = plan_federation(CFG, reports, choice=AUTO,
                          settings=SearchSettings(repeats=2, seed=0))
    # the budgets planned for are the reported ones (the clients' own), not the run's default
    assert fed.scenario.client_eps() == reports.eps
    assert fed.scenario.data.dataset is DatasetName.DIGITS  # the public proxy's model
    rec = fed.plan.recommended
    assert fed.cfg.rounds == rec.rounds >= 1 and fed.cfg.clients_per_round == rec.clients_per_round
    assert 1 <= fed.cfg.clients_per_round <= 3
    assert fed.cfg.min_replies == min(3, rec.clients_per_round)
    assert fed.cfg.client_budgets  # each client spends its own budget, as it reported it
    doc = fed.record()
    assert doc["data_used"]["kind"] == "public-proxy" and not doc["data_used"][
        "reads_private_data"]
    assert doc["privacy_cost"]["epsilon"] == 0.0
    assert doc["reported"] == {"sizes": [300, 420, 510], "eps": [4.0, 6.0, 8.0],
                               "delta": [1e-5] * 3}
    assert doc["predicted_test_loss"]["mean"] < fed.plan.untrained_loss


def test_budgets_too_small_to_help_plan_nothing() -> None:
    reports = ClientReports(sizes=(300, 420, 510), eps=(1e-4,) * 3, delta=(1e-5,) * 3)
    with pytest.raises(PlanNotUseful, match="no schedule is predicted to help"):
        plan_federation(CFG, reports, choice=AUTO, settings=SearchSettings(repeats=2, seed=0))


def test_reports_are_checked() -> None:
    good = {"sizes": [3, 4], "eps": [1, 2], "delta": [1e-5, 1e-5]}
    assert reports_from_json(good, num_clients=2).eps == (1.0, 2.0)
    with pytest.raises(ValueError, match="N=3 sizes"):
        reports_from_json(good, num_clients=3)
    with pytest.raises(ValueError, match="must hold sizes"):
        reports_from_json({"sizes": [3]}, num_clients=1)


@pytest.mark.parametrize(("command", "remote", "proxy", "message"), [
    ("fedqr flower deploy", False, DatasetName.DIGITS, "fedqr flower run only"),
    ("fedqr flower run", True, None, "needs --proxy-dataset"),
    ("fedqr flower run", True, DatasetName.FEMNIST, "proxy_dataset must be one of"),
])
def test_auto_needs_run_and_a_public_proxy(command: str, remote: bool,
                                           proxy: DatasetName | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        auto_choice(Schedule(rounds=None, clients_per_round=2, sample_rate=1.0),
                    command=command, remote=remote, proxy_dataset=proxy)


def test_proxy_without_auto_and_mismatched_proxy_are_refused() -> None:
    fixed = Schedule(rounds=3, clients_per_round=2, sample_rate=1.0)
    with pytest.raises(ValueError, match="--proxy-dataset is used only with"):
        auto_choice(fixed, command="fedqr flower run", remote=True,
                    proxy_dataset=DatasetName.DIGITS)
    mnist_proxy = AutoChoice(rounds=True, clients_per_round=False, sample_rate=False,
                             proxy=DatasetName.MNIST)
    with pytest.raises(ValueError, match="must have the run's features"):
        check_plannable(CFG, mnist_proxy)  # digits has 64 features, MNIST 784
