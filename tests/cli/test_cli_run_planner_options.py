"""``fedqr run --rounds auto`` takes the planner's settings of ``fedqr plan`` (--twin-budget,
--twin-repeats, --proxy-share) and plans the same schedule; with T, b and q all given, the
planner's options are refused rather than ignored."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedqr.cli import app

runner = CliRunner()
MODEL = ["--model", "mlp", "--hidden", "8", "--mechanism", "laplace", "--eps", "20", "--clip",
         "1"]
TWIN = ["--twin-budget", "1", "--twin-repeats", "2", "--proxy-share", "0.5"]


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def scenario(tmp_path: Path) -> list[str]:
    """Four clients of an easy two-class problem, an MLP and a Laplace budget."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1600, 6))
    path = tmp_path / "easy.npz"
    np.savez(path, x=x, y=(x[:, 0] + x[:, 1] > 0).astype(np.int64),
             client=np.repeat(np.arange(4), 400))
    return ["--data", str(path), "--test-share", "0.25", *MODEL]


def test_run_plans_with_the_plans_twin_settings(tmp_path: Path, scenario: list[str]) -> None:
    res = runner.invoke(app, ["plan", *scenario, *TWIN, "--json", "--no-cache"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)["recommended"]
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", *scenario, *TWIN, "--rounds", "auto",
                              "--clients-per-round", "auto", "--out", str(out)])
    assert res.exit_code == 0, res.output
    ran = json.loads((out / "result.json").read_text())["plan"]
    assert (ran["rounds"], ran["clients_per_round"]) == (plan["rounds"],
                                                         plan["clients_per_round"])
    assert ran["predicted_test_loss"]["mean"] == pytest.approx(
        plan["predicted_test_loss"]["mean"])


@pytest.mark.parametrize("extra", [["--twin-budget", "3"], ["--twin-repeats", "4"],
                                   ["--proxy-share", "0.5"],
                                   ["--data-use", "public-proxy", "--proxy-data", "X.npz"],
                                   ["--no-cache"], ["--cache"]])  # a flag: it was ignored
def test_planner_options_with_nothing_to_plan_are_refused(tmp_path: Path, scenario: list[str],
                                                          extra: list[str]) -> None:
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", *scenario, "--rounds", "3", "--clients-per-round", "2",
                              *extra, "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "options of the planner" in " ".join(res.output.split())
    assert not out.exists()


def test_random_selection_is_not_planned_as_round_robin(tmp_path: Path,
                                                        scenario: list[str]) -> None:
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", *scenario, "--rounds", "auto", "--clients-per-round",
                              "auto", "--selection", "random", "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert ("--selection must be round-robin where the planner chooses"
            in " ".join(res.output.split()))
    assert not out.exists()


def test_run_plans_from_scratch_with_no_cache(tmp_path: Path, scenario: list[str]) -> None:
    cache = tmp_path / "cache"
    for flag, stored in (["--no-cache"], False), ([], True):
        out = tmp_path / f"run{len(flag)}"
        res = runner.invoke(app, ["run", *scenario, *TWIN, "--rounds", "auto",
                                  "--clients-per-round", "auto", *flag, "--out", str(out)])
        assert res.exit_code == 0, res.output
        files = [p for p in cache.rglob("*") if p.is_file()] if cache.exists() else []
        assert bool(files) is stored, files


def test_what_reads_the_clients_data_without_privacy_is_said(tmp_path: Path,
                                                            scenario: list[str]) -> None:
    """A data file standardised by its pooled statistics, and a run without noise, said
    nothing on stderr."""
    run = ["run", *scenario, "--rounds", "2", "--clients-per-round", "2"]  # Laplace
    res = runner.invoke(app, [*run, "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    said = " ".join(res.stderr.split())
    assert ("--data is standardised with the mean and std of all clients' training rows, "
            "computed WITHOUT differential privacy") in said
    assert "--mechanism none" not in said
    i = run.index("--mechanism")
    none = [*run[:i], "--mechanism", "none", "--clip", "5", *run[i + 6:]]  # no --eps
    res = runner.invoke(app, [*none, "--no-standardize", "--out", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    said = " ".join(res.stderr.split())
    assert "--mechanism none adds no noise and spends no budget" in said
    assert "standardised" not in said


def test_a_twin_budget_the_logistic_twin_ignores_is_said(tmp_path: Path,
                                                        scenario: list[str]) -> None:
    """``--twin-budget`` sizes the twin of a network; the logistic twin (logreg, linear) runs
    its whole search, so a budget given for it is named as ignored (it was silently)."""
    i = scenario.index("--model")
    logistic = [*scenario[:i], "--model", "linear", *scenario[i + 4:]]  # no --hidden
    for args, ignored in ((logistic, True), (scenario, False)):
        res = runner.invoke(app, ["plan", *args, "--twin-budget", "1", "--twin-repeats", "2",
                                  "--rounds", "8", "--json", "--no-cache"])  # b alone: quick
        assert res.exit_code == 0, res.output
        said = ("--twin-budget=1 is ignored: it sizes the twin of a model other than softmax "
                "regression, and the twin of model linear runs its whole search")
        assert (said in " ".join(res.stderr.split())) is ignored
        assert (said in json.loads(res.stdout)["warnings"]) is ignored
