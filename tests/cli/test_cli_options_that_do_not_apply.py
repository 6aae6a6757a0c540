"""Options typed where they do not apply are refused (exit 2, nothing written) by every
command, not silently ignored: ``--accountant`` for a mechanism that accounts its budgets
otherwise, ``--hidden`` for a model other than the MLP. Left out (or, for the accountant,
naming the one the mechanism uses) they are accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedqr.cli import app

runner = CliRunner()

COMMANDS = {
    "run": ["run", "--dataset", "digits", "--rounds", "1", "--clients-per-round", "2",
            "--eps", "1", "--out", "{out}"],
    "plan": ["plan", "--dataset", "digits", "--eps", "1", "--json", "--no-cache",
             "--plot", "{out}.png"],
    "audit": ["audit", "--trials", "100", "--out", "{out}.json"],
    "flower": ["flower", "simulate", "--dataset", "digits", "--rounds", "1",
               "--clients-per-round", "2", "--eps", "1", "--out", "{out}"],
}


def _args(command: str, out: Path, *extra: str) -> list[str]:
    return [a.replace("{out}", str(out)) for a in COMMANDS[command]] + list(extra)


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize(("mechanism", "accountant", "message"), [
    ("laplace", "pld", "--accountant must be left out or 'pure' for the laplace mechanism, "
                       "whose budgets the pure accountant composes, got --accountant='pld'"),
    ("laplace", "rdp", "--accountant must be left out or 'pure' for the laplace mechanism, "
                       "whose budgets the pure accountant composes, got --accountant='rdp'"),
    ("none", "rdp", "--accountant must be left out for the none mechanism, which spends no "
                    "budget"),
])
def test_an_accountant_that_does_not_apply_is_refused(
        tmp_path: Path, command: str, mechanism: str, accountant: str, message: str) -> None:
    out = tmp_path / "out"
    res = runner.invoke(app, _args(command, out, "--mechanism", mechanism,
                                   "--accountant", accountant))
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())
    assert list(tmp_path.iterdir()) == []


def test_left_out_or_the_mechanisms_own_it_runs(tmp_path: Path) -> None:
    for i, extra in enumerate(([], ["--accountant", "pure"])):
        out = tmp_path / f"run{i}"
        res = runner.invoke(app, _args("run", out, "--mechanism", "laplace", *extra))
        assert res.exit_code == 0, res.output
        doc = json.loads((out / "result.json").read_text())
        assert doc["accounting"]["accountant"] == "pure"
    out = tmp_path / "gaussian"
    res = runner.invoke(app, _args("run", out, "--mechanism", "gaussian", "--accountant", "pld"))
    assert res.exit_code == 0, res.output
    assert json.loads((out / "result.json").read_text())["accounting"]["accountant"] == "pld"


HIDDEN_COMMANDS = {**COMMANDS, "estimate": ["estimate", "--dataset", "digits",
                                            "--out", "{out}.json"]}
del HIDDEN_COMMANDS["audit"]  # the audit has no model


@pytest.mark.parametrize("command", list(HIDDEN_COMMANDS))
@pytest.mark.parametrize(("extra", "model"), [([], "logreg"), (["--model", "logreg"], "logreg"),
                                              (["--model", "linear"], "linear")])
def test_hidden_for_a_model_without_hidden_layers_is_refused(
        tmp_path: Path, command: str, extra: list[str], model: str) -> None:
    out = tmp_path / "out"
    args = [a.replace("{out}", str(out)) for a in HIDDEN_COMMANDS[command]]
    res = runner.invoke(app, [*args, *extra, "--hidden", "16"])
    assert res.exit_code == 2, res.output
    assert (f"--hidden must be left out for the model {model} (it sets the widths of --model "
            f"mlp), got --hidden='16'") in " ".join(res.output.split())
    assert list(tmp_path.iterdir()) == []


def test_hidden_with_the_mlp_runs(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = runner.invoke(app, _args("run", out, "--model", "mlp", "--hidden", "8"))
    assert res.exit_code == 0, res.output
    model = json.loads((out / "result.json").read_text())["provenance"]["model"]
    assert model == {"name": "mlp", "num_params": 64 * 8 + 8 + 8 * 10 + 10, "per_sample": "ghost",
                     "parameter_shapes": {"1.weight": [8, 64], "1.bias": [8],  # the widths
                                          "3.weight": [10, 8], "3.bias": [10]}}


def test_linear_runs_softmax_regression_with_an_intercept(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = runner.invoke(app, _args("run", out, "--model", "linear"))
    assert res.exit_code == 0, res.output
    model = json.loads((out / "result.json").read_text())["provenance"]["model"]
    assert model == {"name": "linear", "num_params": 64 * 10 + 10,
                     "parameter_shapes": {"theta": [10, 65]}}  # a bias column per class


@pytest.fixture(scope="module")
def digits_constants(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Constants of the digits estimated for the Laplace mechanism (fedqr estimate's
    default)."""
    path = tmp_path_factory.mktemp("constants") / "digits.json"
    res = runner.invoke(app, ["estimate", "--dataset", "digits", "--mechanism", "laplace",
                              "--out", str(path), "--no-cache"])
    assert res.exit_code == 0, res.output
    return path


@pytest.mark.parametrize(("extra", "message"), [
    (["--method", "bound", "--dataset", "digits", "--rounds", "20"],
     "--rounds is an option of the twin planner (--method twin), not of --method bound, "
     "got --rounds='20'"),
    (["--method", "paper", "--dataset", "digits", "--model", "mlp"],
     "--model is an option of the twin planner (--method twin), not of --method paper"),
    (["--method", "bound", "--dataset", "digits", "--data-use", "public-proxy"],
     "got --data-use='public-proxy'"),
    (["--constants", "{constants}", "--num-clients", "20"],
     "--num-clients sets how the bound's constants are estimated from --dataset, which "
     "--constants FILE already holds, got --num-clients='20'"),
    (["--constants", "{constants}", "--partition", "iid"], "got --partition='iid'"),
    (["--dataset", "digits", "--t-max", "50"],
     "--t-max is an option of --method bound|paper, not of the twin planner, got "
     "--t-max='50'"),
    (["--dataset", "digits", "--rounding", "paper"], "got --rounding='paper'"),
])
def test_plan_refuses_the_other_method_s_options(
        tmp_path: Path, digits_constants: Path, extra: list[str], message: str) -> None:
    plot = tmp_path / "u.png"
    res = runner.invoke(app, ["plan", "--eps", "1", "--no-cache", "--plot", str(plot),
                              *[a.replace("{constants}", str(digits_constants))
                                for a in extra]])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())
    assert not plot.exists()


def test_plan_from_constants_takes_their_mechanism_unless_given(digits_constants: Path
                                                                ) -> None:
    res = runner.invoke(app, ["plan", "--constants", str(digits_constants), "--eps", "1",
                              "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["mechanism"] == "laplace"
    res = runner.invoke(app, ["plan", "--constants", str(digits_constants), "--eps", "1",
                              "--mechanism", "gaussian"])
    assert res.exit_code == 2
    assert "estimate again with --mechanism gaussian" in " ".join(res.output.split())


@pytest.fixture
def own_csv(tmp_path: Path) -> Path:
    path = tmp_path / "in" / "own.csv"
    path.parent.mkdir()
    path.write_text("client,label,age\n" + "".join(f"{i % 3},{i % 2},{40 + i}\n"
                                                   for i in range(60)))
    (path.parent / "m.py").write_text(
        "from torch import nn\n\n\ndef mlp(shape, k):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(shape[0], k))\n")
    return path


@pytest.mark.parametrize("command", ["run", "plan"])
@pytest.mark.parametrize(("extra", "message"), [
    (["--data", "{own}", "--test-share", "0.2", "--alpha", "2"],
     "--alpha must be left out: it sets the concentration of --partition dirichlet (the "
     "clients of --data FILE are its own), got --alpha=2.0"),
    (["--dataset", "digits", "--alpha", "2"],
     "--alpha must be left out: it sets the concentration of --partition dirichlet (the "
     "partition is two-digits)"),
    (["--dataset", "digits", "--lr-schedule", "constant", "--lr-decay", "0.5"],
     "--lr-decay must be left out for the schedule constant (it sets the inverse-time "
     "schedule: eta_t = eta0 / (1 + decay t)), got --lr-decay=0.5"),
    (["--data", "{own}", "--test-share", "0.2", "--model", "{dir}/m.py:mlp", "--hidden", "8"],
     "--hidden must be left out for the model"),
])
def test_options_of_a_recipe_or_schedule_that_is_not_used_are_refused(
        tmp_path: Path, own_csv: Path, command: str, extra: list[str], message: str) -> None:
    out = tmp_path / "out"
    args = [a.replace("{own}", str(own_csv)).replace("{dir}", str(own_csv.parent))
            for a in extra]
    tail = ["--rounds", "1", "--out", str(out)] if command == "run" else ["--no-cache"]
    res = runner.invoke(app, [command, *args, *tail])
    assert res.exit_code == 2, res.output
    assert message.replace("{dir}", str(own_csv.parent)) in " ".join(res.output.split())
    assert not out.exists()


@pytest.mark.parametrize("command", ["run", "plan"])
@pytest.mark.parametrize(("extra", "message"), [
    (["--client-column", "site"], "--client-column is an option of --data FILE (its columns "
                                  "and scaling), not of the built-in data sets, got "
                                  "--client-column='site'"),
    (["--label-column", "y"], "got --label-column='y'"),
    (["--no-standardize"], "--no-standardize is an option of --data FILE"),
])
def test_data_file_options_without_a_data_file_are_refused(
        tmp_path: Path, command: str, extra: list[str], message: str) -> None:
    out = tmp_path / "out"
    tail = ["--rounds", "1", "--out", str(out)] if command == "run" else ["--no-cache"]
    res = runner.invoke(app, [command, "--dataset", "digits", *extra, *tail])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())
    assert not out.exists()


def test_alpha_with_the_dirichlet_partition_runs(tmp_path: Path) -> None:
    res = runner.invoke(app, ["run", "--dataset", "digits", "--partition", "dirichlet",
                              "--alpha", "2", "--rounds", "1", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
