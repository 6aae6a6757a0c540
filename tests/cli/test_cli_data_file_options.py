"""``--data FILE`` with a built-in data set's options, or one column as client and label:
refused (exit 2, the options named, nothing written) by plan, run and estimate alike."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedqr.cli import app

runner = CliRunner()


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "mine.csv"
    rows = [f"{i % 3},{i % 2},{i * 0.1:.1f},{(i * 7) % 5}" for i in range(60)]
    path.write_text("client,label,a,b\n" + "\n".join(rows) + "\n")
    return path


RECIPE = [(["--dataset", "digits"], "got --dataset=digits with data"),
          (["--partition", "iid"], "got --partition=iid with data"),
          (["--fraction", "0.5"], "got --fraction=0.5 with data")]
SAME_COLUMN = (["--client-column", "label"], "must name different columns, got both 'label'")


@pytest.mark.parametrize(("command", "extra", "message"), [
    *[(c, e, m) for c in ("plan", "run") for e, m in RECIPE],
    *[("estimate", e, m) for e, m in RECIPE[:2]],  # estimate has no --fraction
    *[(c, *SAME_COLUMN) for c in ("plan", "run", "estimate")]])
def test_built_in_options_with_a_data_file_are_refused(
        data_file: Path, tmp_path: Path, command: str, extra: list[str], message: str) -> None:
    out = tmp_path / "out"
    args = [command, "--data", str(data_file), "--test-share", "0.3", "--mechanism", "laplace",
            "--eps" if command != "estimate" else "--clip", "2", *extra]
    args += {"plan": [], "run": ["--rounds", "2", "--out", str(out)],
             "estimate": ["--out", str(out / "c.json")]}[command]
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())
    assert not out.exists()


def _named_clients(tmp_path: Path) -> Path:
    """Three clients named in an order their sorted ids do not follow."""
    path = tmp_path / "named.csv"
    names = ["zeta", "alpha", "mid"]
    rows = [f"{names[i % 3]},{(i // 3) % 2},{i * 0.1:.1f},{(i * 7) % 5}" for i in range(90)]
    path.write_text("site,label,a,b\n" + "\n".join(rows) + "\n")
    return path


def test_run_on_fewer_clients_than_ten_replies_with_all_and_names_them(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", "--data", str(_named_clients(tmp_path)),
                                 "--client-column", "site", "--test-share", "0.3",
                                 "--mechanism", "laplace", "--eps", "1,2,5", "--clip", "2",
                                 "--rounds", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "result.json").read_text())
    assert doc["config"]["clients_per_round"] == 3  # b = N where N < 10, not a refused 10
    assert [(c["name"], c["epsilon_budget"]) for c in doc["clients"]] == [
        ("alpha", 1.0), ("mid", 2.0), ("zeta", 5.0)]  # eps lists follow the sorted ids


@pytest.mark.parametrize(("command", "rate", "message"), [
    ("plan", "0.5", "uses each client's full local data (q = 1), got --sample-rate=0.5"),
    ("plan", "auto", "laplace reads every row of a client (q = 1)"),
    ("run", "auto", "laplace reads every row of a client (q = 1)")])
def test_a_sample_rate_for_laplace_is_refused_by_plan_as_by_run(
        data_file: Path, tmp_path: Path, command: str, rate: str, message: str) -> None:
    out = tmp_path / "out"
    args = [command, "--data", str(data_file), "--test-share", "0.3", "--mechanism", "laplace",
            "--eps", "2", "--sample-rate", rate]
    args += ["--rounds", "auto", "--out", str(out)] if command == "run" else []
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not out.exists()


@pytest.mark.parametrize("command", ["plan", "run"])
def test_a_data_file_without_a_test_set_names_each_option_once(
        data_file: Path, tmp_path: Path, command: str) -> None:
    out = tmp_path / "out"
    args = [command, "--data", str(data_file), "--mechanism", "laplace", "--eps", "2"]
    args += ["--rounds", "2", "--out", str(out)] if command == "run" else []
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "give a test set or --test-share, the share" in text
    assert "a test set is a test file, --test-data, or the arrays x_test and y_test" in text
    assert text.count("--test-data") == 1 and "test_path" not in text
    assert not out.exists()


def test_test_features_far_outside_the_training_rows_are_a_warning_line(tmp_path: Path) -> None:
    """A column nearly constant on the training rows (one faint value) that the test rows use:
    one ``warning:`` line naming the file and the column, not a Python warning."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(90, 3)).astype(np.float32)
    x[:, 2], x[0, 2] = 0.0, 0.001
    xt = rng.normal(size=(30, 3)).astype(np.float32)
    xt[:, 2] = 1.0
    path = tmp_path / "faint.npz"
    np.savez(path, x=x, y=np.arange(90) % 2, client=np.arange(90) % 3, x_test=xt,
             y_test=np.arange(30) % 2)
    out = tmp_path / "out"
    res = runner.invoke(app, ["run", "--data", str(path), "--mechanism", "laplace", "--eps", "2",
                              "--rounds", "2", "--clients-per-round", "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = "".join(res.stderr.split())  # rich wraps long paths anywhere
    assert "".join(f"warning: {path}: after standardisation 1 feature(s) of the test rows lie "
                   "far outside the training rows: feature 2, |z| up to".split()) in text, text
    assert "FeatureScaleWarning" not in text and ".py:" not in text


def test_an_error_keeps_its_brackets_and_writes_nothing(tmp_path: Path) -> None:
    """Errors are printed as text, not rich markup: '[n, C, H, W]' and 'got x of shape [n,
    28, 28, 1]' were printed as ', got x of shape :' (rich took them for style tags)."""
    rng = np.random.default_rng(0)
    path = tmp_path / "last.npz"
    np.savez(path, x=rng.random((40, 8, 8, 1)), y=np.arange(40) % 2, client=np.arange(40) % 4,
             x_test=rng.random((8, 8, 8, 1)), y_test=np.arange(8) % 2)
    out = tmp_path / "out"
    res = runner.invoke(app, ["run", "--data", str(path), "--mechanism", "laplace", "--eps", "2",
                              "--rounds", "2", "--clients-per-round", "2", "--out", str(out)])
    assert res.exit_code == 2, res.output
    text = " ".join(res.stderr.split())
    assert "x must hold images channels first, [n, C, H, W], got x of shape [n, 8, 8, 1]" in text
    assert "rows [n, 64]" in text and not out.exists()


@pytest.mark.parametrize(("option", "value", "needle"), [
    ("--eps", "-1", "--eps must be > 0 and finite, got --eps=-1.0"),
    ("--lr", "-1", "--lr must be > 0 and finite, got --lr=-1.0"),
    ("--clients-per-round", "0", "--clients-per-round must be an integer >= 1"),
])
def test_a_bad_option_is_refused_before_the_data_is_read(
        tmp_path: Path, option: str, value: str, needle: str) -> None:
    """The error alone: a bad --eps or --lr was found after the data file had been read and
    its warnings printed (a QA run saw the standardisation warning first)."""
    out = tmp_path / "out"
    res = runner.invoke(app, ["run", "--data", str(_named_clients(tmp_path)), "--mechanism",
                              "laplace", "--rounds", "2", option, value, "--out", str(out)])
    assert res.exit_code == 2, res.output
    text = " ".join(res.stderr.split())
    assert needle in text and "warning" not in text, text
    assert not out.exists()
