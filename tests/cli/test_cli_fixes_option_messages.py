"""Errors name the command-line option, its allowed range and the value given, where the
library names its own parameter (``decay``, ``path``, ``mu``; the API keeps those names), and
``--mu`` or ``--gamma`` without ``--lr-schedule theory`` is refused rather than ignored (as
``--hidden`` is for a model without hidden layers). Each exits 2 and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedqr.cli import app
from fedqr.sim.config import LearningRate

runner = CliRunner()
RUN = ["run", "--dataset", "digits", "--mechanism", "laplace", "--eps", "1", "--rounds", "2",
       "--clients-per-round", "2"]


def _refused(tmp_path: Path, args: list[str], message: str) -> None:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    # rich wraps a long path anywhere: compared without white space
    assert "".join(f"error: {message}".split()) in "".join(res.stderr.split()), res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(_inputs(tmp_path))


def _inputs(tmp_path: Path) -> list[str]:
    return [p.name for p in tmp_path.iterdir() if p.suffix in (".csv", ".parquet", ".txt")
            or p.name == "afile"]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    rows = [f"{i % 3},{a:.3f},{b:.3f},{int(a > 0)}" for i, (a, b) in
            enumerate(rng.normal(size=(60, 2)))]
    path = tmp_path / "d.csv"
    path.write_text("client,f0,f1,label\n" + "\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("command", ["run", "plan"])
def test_lr_decay(tmp_path: Path, command: str) -> None:
    args = [*RUN, "--out", str(tmp_path / "o")] if command == "run" else [
        "plan", "--dataset", "digits", "--mechanism", "laplace", "--eps", "1", "--no-cache"]
    _refused(tmp_path, [*args, "--lr-decay", "-1"],
             "--lr-decay must be >= 0 and finite, got --lr-decay=-1.0")
    with pytest.raises(ValueError, match=r"^lr_decay must be >= 0 and finite, got "
                                         r"lr_decay=-1.0$"):
        LearningRate(decay=-1.0)  # the API's name (simulate's and plan's lr_decay)


@pytest.mark.parametrize(("given", "got"), [([], "--mu=None, --gamma=None"),
                                            (["--mu", "1"], "--mu=1.0, --gamma=None")])
def test_the_theory_schedule_without_mu_and_gamma(tmp_path: Path, given: list[str],
                                                 got: str) -> None:
    _refused(tmp_path, [*RUN, "--out", str(tmp_path / "o"), "--lr-schedule", "theory", *given],
             f"the theory schedule (--lr-schedule='theory') needs mu > 0 and gamma > 0, "
             f"got {got}")
    with pytest.raises(ValueError, match=r"needs mu > 0 and gamma > 0, got mu=None, "
                                         r"gamma=None$"):
        LearningRate(schedule="theory")


def test_an_out_folder_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    _refused(tmp_path, [*RUN, "--out", str(tmp_path / "afile")],
             f"--out must be a folder path, got --out='{tmp_path / 'afile'}' (is a file)")
    assert (tmp_path / "afile").read_text() == "x"


@pytest.mark.parametrize("command", ["run", "plan", "estimate"])
def test_a_data_file_of_an_unknown_format(tmp_path: Path, command: str) -> None:
    bad = tmp_path / "x.txt"
    bad.write_text("client,f0,label\n0,1,0\n")
    args = [command, "--data", str(bad), "--test-share", "0.2", "--mechanism", "laplace",
            "--clip", "5", *(["--out", str(tmp_path / "o")] if command != "plan" else [])]
    _refused(tmp_path, args, f"--data must end in .npz, .csv, .parquet, got --data='{bad}'")


def test_a_test_file_of_another_format(tmp_path: Path, data: Path) -> None:
    other = tmp_path / "t.parquet"
    other.write_bytes(b"PAR1")
    _refused(tmp_path, ["run", "--data", str(data), "--test-data", str(other), "--mechanism",
                        "laplace", "--clip", "5", "--out", str(tmp_path / "o")],
             f"--test-data must be a .csv file like --data '{data}', got --test-data='{other}'")


@pytest.mark.parametrize("command", ["run", "plan"])
def test_a_private_pilot_without_its_share(tmp_path: Path, data: Path, command: str) -> None:
    args = [command, "--data", str(data), "--test-share", "0.25", "--mechanism", "laplace",
            "--eps", "3", "--clip", "5", "--data-use", "private-pilot", "--proxy-data",
            str(data), *(["--rounds", "auto", "--out", str(tmp_path / "o")]
                         if command == "run" else ["--no-cache"])]
    _refused(tmp_path, args, "--pilot-share is required with --data-use private-pilot: the "
                             "share of every client's budget the pilot spends, in (0, 1), got "
                             "none")


@pytest.mark.parametrize("schedule", [[], ["--lr-schedule", "constant"],
                                      ["--lr-schedule", "inverse-time"]])
@pytest.mark.parametrize(("option", "value"), [("--mu", "1.0"), ("--gamma", "2.0")])
def test_mu_and_gamma_without_the_theory_schedule_are_refused(
        tmp_path: Path, schedule: list[str], option: str, value: str) -> None:
    name = schedule[1] if schedule else "inverse-time"
    _refused(tmp_path, [*RUN, "--out", str(tmp_path / "o"), *schedule, option, value],
             f"{option} must be left out for the schedule {name} (it sets the theory schedule: "
             f"--lr-schedule theory), got {option}={value}")


def test_mu_and_gamma_with_the_theory_schedule_run(tmp_path: Path) -> None:
    out = tmp_path / "o"
    res = runner.invoke(app, [*RUN, "--out", str(out), "--lr-schedule", "theory", "--mu", "1",
                              "--gamma", "20"])
    assert res.exit_code == 0, res.output
    lr = json.loads((out / "result.json").read_text())["config"]["lr"]
    assert (lr["schedule"], lr["mu"], lr["gamma"]) == ("theory", 1.0, 20.0)


def test_missing_data_names_the_command_s_option_not_the_api_s(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Data found nowhere: bad input (exit 2, as a corrupt file; it was 1), the message tells
    a CLI user to set ``FEDQR_DATA`` or pass ``--data-dir``, not the Python API's
    ``data_dir=...``."""
    monkeypatch.delenv("FEDQR_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    empty = tmp_path / "empty"
    empty.mkdir()
    res = runner.invoke(app, ["run", "--dataset", "femnist", "--data-dir", str(empty),
                              "--mechanism", "laplace", "--eps", "1", "--rounds", "2",
                              "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert "FEMNIST not found" in res.output and "FEDQR_DATA" in res.output
    assert "--data-dir=" in res.output and "data_dir=" not in res.output.replace(
        "--data-dir=", "")
    assert not (tmp_path / "out").exists()


def test_plot_names_its_argument_as_the_help_does(tmp_path: Path) -> None:
    """``fedqr plot`` takes a positional RESULT_DIR: its error names that, not a Python name."""
    (tmp_path / "afile").mkdir()  # a folder, but not one reproduce wrote
    _refused(tmp_path, ["plot", str(tmp_path / "afile")],
             f"RESULT_DIR must be a folder that fedqr reproduce --out wrote (it holds "
             f"manifest.json), got '{tmp_path / 'afile'}'")


@pytest.mark.parametrize("args", [
    ["--eps", "4", "--rounds", "2", "--eps", "8"],
    ["--eps=4", "--rounds", "2", "--eps=8"],
    ["--eps", "4", "--rounds", "2", "--rounds", "3"]])
def test_an_option_given_twice_is_refused_not_the_last_one_kept(tmp_path: Path,
                                                                 args: list[str]) -> None:
    """click keeps the last of repeated values: a script appending --eps would change the
    budget silently."""
    out = tmp_path / "afile"
    res = runner.invoke(app, ["run", "--dataset", "digits", "--mechanism", "laplace",
                              "--clients-per-round", "2", *args, "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "is given twice: give each option once" in " ".join(res.output.split())
    assert not out.exists()


@pytest.mark.parametrize("args", [["run", "--out", ""], ["run", "--out="],
                                  ["plan", "--data", " "], ["flower", "simulate", "--out", ""]])
def test_an_empty_path_is_refused_not_read_as_the_current_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]) -> None:
    """click reads "" as ".": `fedqr run --out "$UNSET"` wrote into the current folder."""
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, [*args, "--dataset", "digits"])
    assert res.exit_code == 2, res.output
    assert "must be a path, got" in res.output and "(empty: an unset shell variable?)" in \
        " ".join(res.output.split())
    assert not list(tmp_path.iterdir())


def test_a_second_value_of_an_option_is_named_with_the_option(tmp_path: Path) -> None:
    """click said only "Got unexpected extra argument (2)"."""
    res = runner.invoke(app, ["run", "--dataset", "digits", "--eps", "1", "2", "--out",
                              str(tmp_path / "o")])
    assert res.exit_code == 2, res.output
    assert ("unexpected argument '2' after --eps 1: an option takes at most one value "
            "(per-client values are comma-separated: --eps 1,2,...)") in " ".join(
                res.output.replace("│", " ").split())
    assert not (tmp_path / "o").exists()
    # an unknown option is click's to name, not a second value of the option before it
    res = runner.invoke(app, ["run", "--dataset", "digits", "--rounds", "2", "--bogus", "3",
                              "--out", str(tmp_path / "o")])
    assert res.exit_code == 2, res.output
    assert "No such option '--bogus'" in res.output and "after --rounds" not in res.output


def test_a_value_that_looks_like_an_option_and_a_flag_pair_are_told_apart() -> None:
    res = runner.invoke(app, ["plan", "--dataset", "digits", "--plot", "--json", "--num-clients",
                              "4", "--cache", "--no-cache"])
    assert res.exit_code == 2, res.output
    assert "--no-cache is given twice (as --cache first)" in " ".join(res.output.split())
