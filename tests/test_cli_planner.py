"""fedqr plan (twin) and fedqr run --rounds auto: the documented JSON, failures, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedqr.cli import app

from .argv import override

runner = CliRunner()
BASE = ["--dataset", "digits", "--num-clients", "4", "--mechanism", "laplace", "--clip", "20",
        "--lr", "0.3", "--twin-repeats", "2"]


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))


def test_plan_json_has_the_recommended_object(tmp_path: Path) -> None:
    png = tmp_path / "pred.png"
    res = runner.invoke(app, ["plan", *BASE, "--eps", "4", "--clients-per-round", "2",
                              "--json", "--plot", str(png)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)  # stdout is the document alone
    rec = doc["recommended"]
    assert rec["clients_per_round"] == 2 and rec["rounds"] >= 1
    # reading the clients' data without privacy is said on stderr in JSON mode too
    assert "read WITHOUT differential privacy" in " ".join(res.stderr.split())
    assert rec["sample_rate"] is None  # laplace: full local batches, in every schedule
    assert {p["sample_rate"] for p in rec["runner_ups"] + doc["predictions"]} == {None}

    def rates(value: object) -> set[object]:  # every sample_rate in the proxy shift's record
        if isinstance(value, dict):
            return {v for k, v in value.items() if k == "sample_rate"}.union(
                *(rates(v) for v in value.values()))
        return set().union(*(rates(v) for v in value)) if isinstance(value, list) else set()

    assert rates(rec["proxy_shift"]) == {None}  # they said 1.0 (a tester's find)
    assert {"mean", "stderr", "fitted", "proxy_std", "proxy_range", "re_simulated",
            "search_mean"} == set(rec["predicted_test_loss"])
    assert rec["method"] == "twin" and rec["data_used"]["kind"] == "clear-proxy"
    assert "privacy_cost" in rec and len(rec["runner_ups"]) == 5
    # the headline is the re-simulation with fresh draws; the search's figure is the lowest
    pred = rec["predicted_test_loss"]
    assert pred["re_simulated"] and pred["mean"] == rec["proxy_shift"]["reference_loss"]
    assert pred["search_mean"] == min(p["predicted_test_loss"] for p in doc["predictions"])
    assert png.stat().st_size > 1000


def test_run_auto_plans_runs_and_records_the_plan(tmp_path: Path) -> None:
    out = tmp_path / "r"
    res = runner.invoke(app, ["run", *BASE[:-2], "--eps", "4", "--rounds", "auto",
                              "--clients-per-round", "2", "--repeats", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "result.json").read_text())
    assert doc["config"]["rounds"] == doc["plan"]["rounds"] >= 1
    assert doc["config"]["clients_per_round"] == 2
    assert doc["plan"]["achieved_test_loss"] == doc["summary"]["final_test_loss_mean"]
    assert "planned test loss" in res.output


def test_a_plan_that_cannot_help_is_said_and_nothing_runs(tmp_path: Path) -> None:
    out = tmp_path / "r"
    res = runner.invoke(app, ["run", *BASE[:-2], "--eps", "0.0001", "--rounds", "auto",
                              "--clients-per-round", "auto", "--out", str(out)])
    assert res.exit_code == 1
    assert "no schedule is predicted to help" in res.output
    assert not out.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--eps", "0"], "eps must be > 0"),
    (["--eps", "1", "--clients-per-round", "5"],
     "--clients-per-round must be in [1, --num-clients=4]"),
    (["--eps", "1", "--num-clients", "0"], "--num-clients must be >= 1"),
    (["--eps", "1", "--data-use", "public-proxy"], "needs --proxy-dataset"),
    (["--eps", "1", "--data-use", "private-pilot", "--proxy-dataset", "digits",
      "--pilot-share", "1.5"], "--pilot-share must be in (0, 1)"),
    (["--eps", "1", "--proxy-dataset", "nowhere"], "proxy-dataset"),
    (["--eps", "1", "--rounds", "x"], "rounds must be an integer in [1, 10000000] or 'auto'"),
])
def test_bad_plan_input_exits_2_and_writes_nothing(args: list[str], message: str,
                                                   tmp_path: Path) -> None:
    png = tmp_path / "p.png"
    res = runner.invoke(app, override(["plan", *BASE], [*args, "--plot", str(png)]))
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())
    assert not png.exists()
