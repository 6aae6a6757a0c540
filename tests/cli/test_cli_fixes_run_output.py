"""What ``fedqr run`` prints: a planned run says, as ``fedqr plan`` does, that the planner read
the clients' data without privacy (fresh or from the cache), and the clients' table names the
clients by the ids of the data file, which per-client ``--eps`` lists follow."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from typer.testing import CliRunner

from fedqr.cli import app

runner = CliRunner()
WARNING = ("warning: the twin trains on a share of the clients' own data, read WITHOUT "
           "differential privacy")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))


def _csv(path: Path, ids: list[str], rows: int = 60) -> Path:
    """A three-class CSV file of ``rows`` rows for each client id of ``ids``."""
    rng = np.random.default_rng(0)
    lines = ["client,f0,f1,f2,label"]
    for cid in ids:
        for _ in range(rows):
            x = rng.normal(size=3)
            lines.append(f"{cid},{x[0]:.4f},{x[1]:.4f},{x[2]:.4f},{int(x[0] > 0) + int(x[1] > 0)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_a_planned_run_warns_that_the_plan_read_the_clients_data(tmp_path: Path) -> None:
    data = _csv(tmp_path / "d.csv", ["0", "1", "2", "3"], rows=150)
    scenario = ["--data", str(data), "--test-share", "0.25", "--mechanism", "laplace", "--eps",
                "20", "--clip", "5", "--twin-repeats", "2"]
    plan = runner.invoke(app, ["plan", *scenario, "--no-cache"])
    assert plan.exit_code == 0, plan.output
    assert WARNING in _flat(plan.stderr)
    for i in range(2):  # fresh, then the same plan from the cache
        out = tmp_path / f"run{i}"
        res = runner.invoke(app, ["run", *scenario, "--rounds", "auto", "--clients-per-round",
                                  "auto", "--out", str(out)])
        assert res.exit_code == 0, res.output
        assert _flat(res.stderr).count(WARNING) == 1, res.stderr
        used = json.loads((out / "result.json").read_text())["plan"]["data_used"]
        assert used["reads_private_data"] is True
        assert used["warning"] in _flat(res.stderr)  # the plan's own words


def test_a_run_on_a_public_proxy_has_no_such_warning(tmp_path: Path) -> None:
    data = _csv(tmp_path / "d.csv", ["0", "1", "2", "3"])
    proxy = _csv(tmp_path / "p.csv", ["7"], rows=200)
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", "--data", str(data), "--test-share", "0.25", "--mechanism",
                              "laplace", "--eps", "3", "--clip", "5", "--rounds", "auto",
                              "--clients-per-round", "2", "--twin-repeats", "2", "--data-use",
                              "public-proxy", "--proxy-data", str(proxy), "--out", str(out)])
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "the twin trains on a share of the clients' own data" not in said
    # the run's own pooled standardisation of the file is said (--no-standardize: not)
    assert "--data is standardised with the mean and std of all clients' training rows" in said
    assert "plan: T=" in res.stdout


@pytest.mark.parametrize("ids", [["10", "20", "2", "100"], ["hosp_b", "hosp_a", "hosp_d",
                                                            "hosp_c"]])
def test_the_clients_table_names_the_clients_by_the_files_ids(tmp_path: Path,
                                                               ids: list[str]) -> None:
    data = _csv(tmp_path / "d.csv", ids)
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", "--data", str(data), "--test-share", "0.25", "--mechanism",
                              "laplace", "--eps", "1,2,3,4", "--clip", "5", "--rounds", "4",
                              "--clients-per-round", "4", "--out", str(out)])
    assert res.exit_code == 0, res.output
    clients = json.loads((out / "result.json").read_text())["clients"]
    order = sorted(ids, key=int) if ids[0].isdigit() else sorted(ids)  # --eps follows it
    assert [c["name"] for c in clients] == order
    rows = [line.split("│")[1:5] for line in res.stdout.splitlines()
            if line.startswith("│")]
    assert [r[0].strip() for r in rows] == order
    assert [float(r[3]) for r in rows] == pytest.approx([1, 2, 3, 4], rel=0.01)


def test_a_built_in_data_set_keeps_its_client_numbers(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", "--dataset", "digits", "--mechanism", "laplace", "--eps",
                              "1", "--rounds", "1", "--clients-per-round", "2", "--out",
                              str(out)])
    assert res.exit_code == 0, res.output
    rows = [line.split("│")[1].strip() for line in res.stdout.splitlines()
            if line.startswith("│")]
    assert rows == [str(i) for i in range(10)]


def test_a_run_after_a_private_pilot_says_what_the_pilot_spent(tmp_path: Path) -> None:
    data = _csv(tmp_path / "d.csv", ["0", "1", "2", "3"], rows=150)
    proxy = _csv(tmp_path / "public.csv", ["9"], rows=300)
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", "--data", str(data), "--test-share", "0.25", "--mechanism",
                              "laplace", "--eps", "10,20,20,40", "--clip", "5",
                              "--twin-repeats", "2", "--data-use", "private-pilot",
                              "--pilot-share", "0.25", "--proxy-data", str(proxy),
                              "--rounds", "auto", "--clients-per-round", "auto",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert ("private pilot: spent eps [2.5, 5, 5, 10] of the clients' budgets on their data; "
            "the run spends the rest, eps [7.5, 15, 15, 30]") in _flat(res.stdout)
    # the plan's loss was measured on the proxy's test rows, the run's on the clients' test set
    assert "(planned on the public proxy's own test rows, achieved on your test set" in _flat(
        res.stdout)
    doc = json.loads((out / "result.json").read_text())
    assert [c["epsilon_budget"] for c in doc["clients"]] == [7.5, 15.0, 15.0, 30.0]
    # the clients' entries hold the pilot's spend and the total, pilot plus run
    assert [c["pilot_epsilon_spent"] for c in doc["clients"]] == [2.5, 5.0, 5.0, 10.0]
    assert [c["total_epsilon_spent"] for c in doc["clients"]] == pytest.approx(
        [c["pilot_epsilon_spent"] + c["epsilon_spent"] for c in doc["clients"]])
    assert all(c["total_epsilon_spent"] <= e * (1 + 1e-9) for c, e in
               zip(doc["clients"], [10, 20, 20, 40], strict=True))
    assert [c["pilot_delta_spent"] for c in doc["clients"]] == [0.0] * 4  # Laplace: pure DP
    jsonschema.validate(doc, json.loads(
        files("fedqr").joinpath("sim/result.schema.json").read_text()))


@pytest.mark.parametrize("repeats", [1, 3])
def test_the_final_accuracy_has_a_spread_only_over_several_repeats(tmp_path: Path,
                                                                    repeats: int) -> None:
    """One repeat has no spread: "+- 0" would read as no uncertainty at all."""
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", "--dataset", "digits", "--mechanism", "laplace", "--eps",
                              "1", "--rounds", "2", "--clients-per-round", "2", "--repeats",
                              str(repeats), "--out", str(out)])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("final test accuracy"))
    doc = json.loads((out / "result.json").read_text())
    std = doc["summary"]["final_test_accuracy_std"]
    losses = np.array([run["rounds"][-1]["test_loss"] for run in doc["runs"]])
    loss_std = doc["summary"]["final_test_loss_std"]
    assert loss_std == pytest.approx(losses.std(), rel=1e-12, abs=1e-15)  # population std
    if repeats == 1:
        assert "+-" not in line and "(one repeat: no spread)" in line and loss_std == 0
    else:
        assert f"+- {std:.4g} (std) over 3 repeats" in line
        said = " ".join(res.stdout.split())  # the console may wrap the line at a space
        mean = doc["summary"]["final_test_loss_mean"]
        assert loss_std > 0 and f"test loss {mean:.4g} +- {loss_std:.4g} (" in said


def test_a_run_without_noise_records_no_budget(tmp_path: Path) -> None:
    """``--mechanism none``: no eps budget applies (null), where the record said the default
    1.0 beside a spent eps of null (which read as a budget exceeded)."""
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", "--dataset", "digits", "--mechanism", "none", "--rounds",
                              "2", "--clients-per-round", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "result.json").read_text())
    schema = json.loads(files("fedqr.sim").joinpath("result.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert doc["config"]["privacy"]["eps"] == ["inf"]  # as an infinite clip is written
    for c in doc["clients"]:
        assert c["epsilon_budget"] is None and c["epsilon_spent"] is None
