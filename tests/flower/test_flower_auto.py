"""The planning step of ``fedqr flower run --rounds auto``, without Flower: from the sizes and
budgets the clients report and a public proxy, never from the clients' data."""

from __future__ import annotations

import csv
import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedqr.data import DatasetName
from fedqr.data.source import OwnData
from fedqr.flower.auto import (
    AutoChoice,
    PlanNotUseful,
    plan_federation,
    proxy_spec,
    public_source,
    reports_from_json,
)
from fedqr.flower.cli_auto import Schedule, auto_choice, check_plannable
from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.server_logic import ClientReports, server_dataset
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
    with pytest.raises(ValueError, match="used only by fedqr flower run with"):
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


def test_the_proxy_file_is_prepared_as_the_nodes_rows(heart: Path) -> None:
    """The server plans on its --proxy-data scaled as the SuperNodes' rows: standardised per
    feature where it standardises its test file (the nodes' --standardize), as given under
    --no-standardize (the proxy used to be standardised either way: nodes reading raw rows
    were planned at another scale)."""
    choice = AutoChoice(rounds=True, clients_per_round=True, sample_rate=False,
                        proxy_data=str(heart / "hospital_cleveland.csv"))
    cfg = _heart_cfg(heart)
    scaled = public_source(cfg, choice, ds=server_dataset(cfg))
    assert isinstance(scaled, OwnData) and scaled.data.standardization is not None
    x = scaled.data.x.astype(np.float64)
    varied = x.std(axis=0) > 0
    np.testing.assert_allclose(x.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(x.std(axis=0)[varied], 1.0, atol=1e-4)
    raw_cfg = dataclasses.replace(cfg, standardize=False)
    raw = public_source(raw_cfg, choice, ds=server_dataset(raw_cfg))
    assert isinstance(raw, OwnData) and raw.data.standardization is None
    with open(heart / "hospital_cleveland.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    names = list(raw.data.feature_names or ())
    assert names and len(names) == raw.data.num_features
    given = np.array([[float(r[n]) for n in names] for r in table], dtype=np.float32)
    used = np.concatenate([raw.data.x, raw.data.x_test])  # every row, as the file gives it
    assert used.shape == given.shape
    np.testing.assert_array_equal(np.unique(used, axis=0), np.unique(given, axis=0))


def test_a_built_in_proxy_is_restandardised_per_feature_for_a_test_file_of_rows(
        tmp_path: Path) -> None:
    """A server standardising a test file of rows plans on the built-in digits standardised
    per feature, as the nodes' --standardize rows are; a built-in run keeps the recipe."""
    ds = CFG.load_data()[0]
    np.savez(tmp_path / "test.npz", x=ds.x_test.reshape(len(ds.x_test), -1), y=ds.y_test)
    on_file = dataclasses.replace(CFG, test_data=str(tmp_path / "test.npz"))
    src = public_source(on_file, AUTO, ds=server_dataset(on_file))
    assert isinstance(src, OwnData) and src.data.input_shape == (64,)
    x = src.data.x.astype(np.float64)
    varied = x.std(axis=0) > 0
    np.testing.assert_allclose(x.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(x.std(axis=0)[varied], 1.0, atol=1e-3)
    assert public_source(CFG, AUTO, ds=server_dataset(CFG)) == proxy_spec(CFG,
                                                                         DatasetName.DIGITS)
