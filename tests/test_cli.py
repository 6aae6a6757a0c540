"""The command line: results on success; exit code 2, a named parameter and no file on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedqr.cli import app

from .argv import override

runner = CliRunner()
BASE = ["run", "--dataset", "digits", "--num-clients", "4", "--clients-per-round", "2",
        "--rounds", "6", "--repeats", "2", "--lr", "0.3"]


def test_run_writes_result_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "r"
    res = runner.invoke(app, [*BASE, "--mechanism", "laplace", "--eps", "5", "--clip", "20",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "result.json").read_text())
    assert (out / "training.png").stat().st_size > 1000
    assert doc["config"]["privacy"]["mechanism"] == "laplace"
    assert doc["config"]["num_clients"] == 4 and doc["config"]["rounds"] == 6
    for c in doc["clients"]:
        assert {"id", "num_samples", "replies", "epsilon_spent", "delta_spent",
                "noise_std"} <= set(c)
        assert c["replies"] == 3 and c["epsilon_spent"] == pytest.approx(5.0)
        assert c["delta_spent"] == 0.0
    assert [r["seed"] for r in doc["runs"]] == [0, 0] and len(doc["runs"]) == 2
    first = doc["runs"][0]["rounds"][-1]
    assert {"test_loss", "test_accuracy"} <= set(first)
    assert 0.0 <= first["test_accuracy"] <= 1.0


@pytest.mark.parametrize(("args", "evaluated"), [
    ([], [False, False, False, True]), (["--eval-train", "every"], [True] * 4),
    (["--eval-train", "none"], [False] * 4), (["--eval-train", "sample:100"], [True] * 4)])
def test_eval_train_sets_when_the_training_objective_is_evaluated(
        tmp_path: Path, args: list[str], evaluated: list[bool]) -> None:
    out = tmp_path / "e"
    res = runner.invoke(app, [*BASE, "--mechanism", "laplace", "--eps", "5", "--clip", "20",
                              "--eval-every", "2", *args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "result.json").read_text())
    for run in doc["runs"]:
        assert [rd["train_loss"] is not None for rd in run["rounds"]] == evaluated
        assert all(("train_loss_stderr" in rd) == ("sample:100" in args)
                   for rd in run["rounds"])
    assert doc["diverged"] is False


def test_arithmetic_mixed_runs_with_the_same_budgets(tmp_path: Path) -> None:
    docs = {}
    for arithmetic in ("float32", "mixed"):
        out = tmp_path / arithmetic
        res = runner.invoke(app, [*BASE, "--mechanism", "laplace", "--eps", "5", "--clip", "20",
                                  "--arithmetic", arithmetic, "--out", str(out)])
        assert res.exit_code == 0, res.output
        docs[arithmetic] = json.loads((out / "result.json").read_text())
    assert docs["mixed"]["config"]["arithmetic"] == "mixed"
    assert docs["float32"]["config"]["arithmetic"] == "float32"
    for a, b in zip(docs["float32"]["clients"], docs["mixed"]["clients"], strict=True):
        assert (a["noise_std"], a["epsilon_spent"]) == (b["noise_std"], b["epsilon_spent"])
    loss = [doc["summary"]["final_test_loss_mean"] for doc in docs.values()]
    assert loss[1] == pytest.approx(loss[0], rel=1e-2)


def test_arithmetic_mixed_says_when_it_runs_float32(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)  # continuous features: not integer-coded
    x = rng.normal(size=(240, 3))
    np.savez(tmp_path / "d.npz", x=x, y=(x[:, 0] > 0).astype(np.int64),
             client=np.arange(240) % 4, x_test=x[:40], y_test=(x[:40, 0] > 0).astype(np.int64))
    res = runner.invoke(app, ["run", "--data", str(tmp_path / "d.npz"), "--rounds", "3",
                              "--clients-per-round", "2", "--mechanism", "laplace",
                              "--model", "logreg", "--arithmetic", "mixed",
                              "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())  # rich wraps lines
    assert "--arithmetic mixed runs in float32 here" in said and "not integer-coded" in said
    res = runner.invoke(app, ["run", "--data", str(tmp_path / "d.npz"), "--rounds", "3",
                              "--clients-per-round", "2", "--mechanism", "laplace",
                              "--arithmetic", "mixed", "--out", str(tmp_path / "p")])
    assert res.exit_code == 0, res.output  # the file's default, linear: not the coded pass
    said = " ".join(res.output.split())
    assert "it is for softmax regression (logreg), not linear" in said
    # Poisson batches never take the coded pass: said (it was silent, result.json "mixed")
    res = runner.invoke(app, ["run", "--data", str(tmp_path / "d.npz"), "--rounds", "3",
                              "--clients-per-round", "2", "--mechanism", "gaussian",
                              "--model", "logreg", "--sample-rate", "0.5",
                              "--arithmetic", "mixed", "--out", str(tmp_path / "q")])
    assert res.exit_code == 0, res.output
    assert "Poisson batches (q = 0.5) take float32 products" in " ".join(res.output.split())


def test_arithmetic_auto_takes_float32_quietly_where_mixed_does_not_apply(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` is mixed only where the run can use it (it warned that "mixed runs in float32
    here" for a model the user never asked to run mixed); the API and the command line."""
    import warnings

    import fedqr
    from fedqr import _precision

    monkeypatch.setattr(_precision, "native_mixed", lambda: True)  # auto -> mixed on any CPU
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, size=(240, 3)).astype(np.float64)  # integer-coded rows
    y = (x[:, 0] > 1).astype(np.int64)
    np.savez(tmp_path / "d.npz", x=x, y=y, client=np.arange(240) % 4, x_test=x[:40],
             y_test=y[:40])
    for model, ran in (("linear", "float32"), ("logreg", "mixed")):
        res = runner.invoke(app, ["run", "--data", str(tmp_path / "d.npz"), "--rounds", "2",
                                  "--clients-per-round", "2", "--mechanism", "laplace",
                                  "--model", model, "--arithmetic", "auto",
                                  "--out", str(tmp_path / model)])
        assert res.exit_code == 0, res.output
        assert "float32 here" not in " ".join(res.output.split())
        doc = json.loads((tmp_path / model / "result.json").read_text())
        assert doc["config"]["arithmetic"] == ran
    data = fedqr.FederatedData.from_file(tmp_path / "d.npz")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = fedqr.simulate(data=data, model="linear", mechanism="laplace", eps=4.0,
                               rounds=2, clients_per_round=2, arithmetic="auto")
    assert quiet.document["config"]["arithmetic"] == "float32"
    with pytest.warns(RuntimeWarning, match="runs in float32 here"):  # asked for by name
        fedqr.simulate(data=data, model="linear", mechanism="laplace", eps=4.0, rounds=2,
                       clients_per_round=2, arithmetic="mixed")


def test_gaussian_per_client_budgets(tmp_path: Path) -> None:
    out = tmp_path / "g"
    res = runner.invoke(app, [*BASE, "--mechanism", "gaussian", "--eps", "1,2,3,4",
                              "--sample-rate", "0.2", "--clip", "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "result.json").read_text())
    spent = [c["epsilon_spent"] for c in doc["clients"]]
    assert spent == pytest.approx([1, 2, 3, 4], rel=0.01)
    assert all(s <= b * (1 + 1e-9) for s, b in zip(spent, [1, 2, 3, 4], strict=True))
    stds = [c["noise_std"] for c in doc["clients"]]
    assert stds == sorted(stds, reverse=True)  # a larger budget means less noise


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--eps", "-1"], "eps must be > 0"),
        (["--eps", "1,2"], "--eps must have 1 value or one per client (4 clients), got 2"),
        (["--eps", "abc"], "eps must be a number"),
        (["--delta", "2", "--mechanism", "gaussian"], "delta must be in (0, 1)"),
        (["--clients-per-round", "9"], "--clients-per-round must be in [1, --num-clients=4]"),
        (["--rounds", "-3"], "rounds must be an integer in [0, 10000000]"),
        (["--sample-rate", "1.5", "--mechanism", "gaussian"],
         "--sample-rate must be in [1e-09, 1]"),
        (["--sample-rate", "0.5", "--mechanism", "laplace"], "uses each client's full local"),
        (["--clip", "0"], "clip must be > 0"),
        (["--lr", "0"], "lr must be > 0"),
        (["--repeats", "0"], "repeats must be in [1, 1000]"),
        (["--alpha", "0", "--partition", "dirichlet"], "alpha must be > 0"),
        (["--num-clients", "0"], "--num-clients must be >= 1"),
        (["--device", "tpu"], "device must be"),
        (["--mechanism", "fancy"], "fancy"),
        (["--lr-schedule", "theory"], "the theory schedule (--lr-schedule='theory') needs mu"),
        (["--lr-schedule", "theory", "--mu", "-1", "--gamma", "3"], "mu must be > 0"),
        (["--eval-train", "often"], "--eval-train must be 'every', 'end', 'none'"),
        (["--eval-train", "sample:1"], "--eval-train must be 'every', 'end', 'none'"),
        (["--eval-train", "sample:99999"], "--eval-train must sample at most the"),
        (["--arithmetic", "fast"], "--arithmetic must be one of auto, float32, mixed"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path, args: list[str],
                                              needle: str) -> None:
    out = tmp_path / "bad"
    res = runner.invoke(app, override(BASE, ["--out", str(out), *args]))
    assert res.exit_code == 2, res.output
    assert needle in res.output
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_theory_learning_rate(tmp_path: Path) -> None:
    out = tmp_path / "th"
    res = runner.invoke(app, [*BASE, "--mechanism", "none", "--lr-schedule", "theory",
                              "--mu", "0.5", "--gamma", "4", "--out", str(out)])
    assert res.exit_code == 0, res.output
    lr = json.loads((out / "result.json").read_text())["config"]["lr"]
    assert lr == {"schedule": "theory", "eta0": 0.3, "decay": 0.01, "mu": 0.5, "gamma": 4.0}
