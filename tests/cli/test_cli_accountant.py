"""``--accountant`` given for a mechanism that accounts its budgets otherwise is refused (exit
2, nothing written) by every command, not silently replaced; left out, or naming the
accountant the mechanism uses, it is accepted."""

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
    ("laplace", "pld", "--accountant must be left out for the laplace mechanism, whose "
                       "budgets the pure accountant composes, got --accountant='pld'"),
    ("laplace", "rdp", "got --accountant='rdp'"),
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
