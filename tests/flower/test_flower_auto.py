"""The planning step of ``fedqr flower run --rounds auto``, without Flower: from the sizes and
budgets the clients report and a public proxy, never from the clients' data."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fedqr.data import DatasetName
from fedqr.flower.auto import AutoChoice, PlanNotUseful, plan_federation, reports_from_json
from fedqr.flower.cli_auto import Schedule, auto_choice, check_plannable
from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.server_logic import ClientReports
from fedqr.planner import SearchSettings
from fedqr.privacy import Mechanism

ROOT = Path(__file__).resolve().parents[2]
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
    ("fedqr flower run", True, None, "needs --proxy-dataset mnist|digits or --proxy-data"),
    ("fedqr flower run", True, DatasetName.FEMNIST, "proxy_dataset must be one of"),
])
def test_auto_needs_run_and_a_public_proxy(command: str, remote: bool,
                                           proxy: DatasetName | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        auto_choice(Schedule(rounds=None, clients_per_round=2, sample_rate=1.0),
                    command=command, remote=remote, proxy_dataset=proxy)


def test_proxy_without_auto_and_mismatched_proxy_are_refused() -> None:
    fixed = Schedule(rounds=3, clients_per_round=2, sample_rate=1.0)
    with pytest.raises(ValueError, match="--proxy-data and --proxy-classes are used only"):
        auto_choice(fixed, command="fedqr flower run", remote=True,
                    proxy_dataset=DatasetName.DIGITS)
    mnist_proxy = AutoChoice(rounds=True, clients_per_round=False, sample_rate=False,
                             proxy=DatasetName.MNIST)
    with pytest.raises(ValueError, match="must have the run's features"):
        check_plannable(CFG, mnist_proxy)  # digits has 64 features, MNIST 784


@pytest.fixture(scope="module")
def heart(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The prepared heart files and ``three_test.csv``: the test rows of the hospitals other
    than Cleveland (Hungary, Switzerland, VA), the server's test set of their federation."""
    out = tmp_path_factory.mktemp("heart")
    subprocess.run([sys.executable, str(ROOT / "examples/heart_disease/prepare.py"),
                    "--data-dir", str(data_dir / "heart-disease"), "--out", str(out)],
                   check=True, capture_output=True)
    lines: list[str] = []
    for name in ("hungary", "switzerland", "va"):
        rows = (out / f"hospital_{name}_test.csv").read_text().splitlines()
        lines += rows if not lines else rows[1:]
    (out / "three_test.csv").write_text("\n".join(lines) + "\n")
    return out


def _heart_cfg(heart: Path) -> FlowerRunConfig:
    return FlowerRunConfig(num_clients=3, clients_per_round=3, rounds=1, test_data=str(
        heart / "three_test.csv"), model="logreg", mechanism=Mechanism.LAPLACE, clip=5.0,
        sample_rate=1.0, lr=0.05, client_data=True, client_budgets=True, min_replies=1)


def test_plan_on_a_public_file_cleveland_for_three_hospitals(heart: Path) -> None:
    cfg = _heart_cfg(heart)
    choice = auto_choice(Schedule(rounds=None, clients_per_round=None, sample_rate=1.0),
                         command="fedqr flower run", remote=True, proxy_dataset=None,
                         proxy_data=heart / "hospital_cleveland.csv")
    assert choice is not None and choice.label == "hospital_cleveland.csv"
    check_plannable(cfg, choice)  # 10 features, 2 classes: the run's
    reports = ClientReports(sizes=(210, 40, 140), eps=(2.0, 4.0, 8.0), delta=(0.0,) * 3)
    fed = plan_federation(cfg, reports, choice=choice,
                          settings=SearchSettings(repeats=2, seed=0))
    doc = fed.record()
    assert doc["data_used"]["kind"] == "public-proxy"
    assert doc["data_used"]["proxy"] == "hospital_cleveland.csv"
    assert not doc["data_used"]["reads_private_data"] and doc["privacy_cost"]["epsilon"] == 0.0
    assert fed.scenario.client_eps() == reports.eps and fed.scenario.num_clients == 3
    assert 1 <= fed.cfg.clients_per_round <= 3 and fed.cfg.rounds >= 1
    assert doc["predicted_test_loss"]["mean"] < fed.plan.untrained_loss


def test_public_file_checks_name_the_option(heart: Path, tmp_path: Path) -> None:
    auto = Schedule(rounds=None, clients_per_round=2, sample_rate=1.0)
    with pytest.raises(ValueError, match="proxy_data must be an existing"):
        auto_choice(auto, command="fedqr flower run", remote=True, proxy_dataset=None,
                    proxy_data=tmp_path / "missing.csv")
    with pytest.raises(ValueError, match="one of them"):
        AutoChoice(rounds=True, clients_per_round=False, sample_rate=False,
                   proxy=DatasetName.DIGITS, proxy_data=str(heart / "hospital_va.csv"))
    with pytest.raises(ValueError, match="--proxy-classes selects the classes of a"):
        AutoChoice(rounds=True, clients_per_round=False, sample_rate=False,
                   proxy=DatasetName.DIGITS, proxy_classes="0-1")
    with pytest.raises(ValueError, match="used only with"):
        auto_choice(Schedule(rounds=3, clients_per_round=2, sample_rate=1.0),
                    command="fedqr flower run", remote=True, proxy_dataset=None,
                    proxy_data=heart / "hospital_va.csv")
    narrow = tmp_path / "narrow.csv"  # two features fewer than the run's 13
    rows = (heart / "hospital_cleveland.csv").read_text().splitlines()
    narrow.write_text("\n".join(",".join(r.split(",")[:-2]) for r in rows) + "\n")
    choice = AutoChoice(rounds=True, clients_per_round=False, sample_rate=False,
                        proxy_data=str(narrow))
    with pytest.raises(ValueError, match="--proxy-data must have the run's features"):
        check_plannable(_heart_cfg(heart), choice)
    one_class = AutoChoice(rounds=True, clients_per_round=False, sample_rate=False,
                           proxy_data=str(heart / "hospital_cleveland.csv"),
                           proxy_classes="7")
    with pytest.raises(ValueError, match="proxy_classes"):
        check_plannable(_heart_cfg(heart), one_class)


def test_a_run_on_a_test_file_records_no_built_in_data_set(heart: Path) -> None:
    """result.json's run_config of a run whose server holds a test file names no built-in
    data set (it named the default, mnist, before)."""
    from fedqr.flower.server_logic import ServerRun

    reports = ClientReports(sizes=(210, 40, 140), eps=(2.0, 4.0, 8.0), delta=(0.0,) * 3)
    run = ServerRun.start(_heart_cfg(heart), reported=reports)
    run.record(0)
    recorded = run.result()["flower"]["run_config"]
    assert recorded["test-data"].endswith("three_test.csv")
    assert not {"dataset", "data-dir", "fraction", "partition", "alpha"} & set(recorded)
