"""``fedqr estimate`` and ``fedqr plan``: tables, JSON, plots and bad input (exit 2, no file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedqr.cli import app
from fedqr.theory import ProblemConstants, Rounding, constants_to_json, plan_laplace, table_one

from .argv import override

runner = CliRunner()


@pytest.fixture
def constants_file(tmp_path: Path) -> Path:
    c = ProblemConstants.uniform(N=10, d=60000, p=7840, mu=1.0, lam=1.03, G=17.9, Gamma=0.0,
                                 Y0=600.0, xi=300.0, eps=1.0)
    path = tmp_path / "c.json"
    path.write_text(constants_to_json(c))
    return path


def _json(args: list[str]) -> dict[str, object]:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    doc: dict[str, object] = json.loads(res.stdout)
    return doc


def test_plan_laplace_json_matches_library(constants_file: Path) -> None:
    doc = _json(["plan", "--mechanism", "laplace", "--constants", str(constants_file),
                 "--eps", "1", "5", "10", "--json"])
    rows = doc["table"]
    assert isinstance(rows, list) and [r["eps"] for r in rows] == [1.0, 5.0, 10.0]
    base = ProblemConstants.uniform(N=10, d=60000, p=7840, mu=1.0, lam=1.03, G=17.9,
                                    Gamma=0.0, Y0=600.0, xi=300.0, eps=1.0)
    expected = table_one(base, [1.0, 5.0, 10.0], rounding=Rounding.BEST)
    for row, exp in zip(rows, expected, strict=True):
        assert row["T_star_fix_b"] == {"5": exp["T_star_fix_b"][5],
                                       "10": exp["T_star_fix_b"][10]}
        assert row["b_star_fix_T"] == {"50": exp["b_star_fix_T"][50]}
        assert row["joint"] == pytest.approx(exp["joint"])
        plan = plan_laplace(base.with_budget(eps=row["eps"]))
        assert row["plan"]["replies"] == list(plan.replies)
        assert row["plan"]["within_budget"]
        spent = [s for s, r in zip(row["plan"]["eps_spent"], plan.replies, strict=True) if r]
        assert spent and all(s == pytest.approx(row["eps"], rel=1e-9) for s in spent)
    # T* grows with the budget (less noise per reply): a property of Theorem 3
    assert rows[0]["joint"]["T"] < rows[1]["joint"]["T"] < rows[2]["joint"]["T"]


def test_plan_paper_rounding_and_table(constants_file: Path, tmp_path: Path) -> None:
    png = tmp_path / "u.png"
    res = runner.invoke(app, ["plan", "--mechanism", "laplace", "--constants",
                              str(constants_file), "--eps", "2", "--rounding", "paper",
                              "--plot", str(png)])
    assert res.exit_code == 0, res.output
    assert "T*(b=5)" in res.stdout and "joint" in res.stdout
    assert png.stat().st_size > 5000


def test_plan_gaussian_json(tmp_path: Path) -> None:
    c = ProblemConstants.uniform(N=4, d=4000, p=100, mu=0.5, lam=2.0, G=3.0, Gamma=0.01,
                                 Y0=1.0, xi=1.0, eps=1.0, delta=1e-5, q=0.05, Lambda2=1.0)
    path = tmp_path / "g.json"
    path.write_text(constants_to_json(c))
    doc = _json(["plan", "--mechanism", "gaussian", "--constants", str(path), "--eps", "0.5",
                 "1", "--t-max", "40", "--json"])
    rows = doc["table"]
    assert isinstance(rows, list) and len(rows) == 2
    for row in rows:
        assert 0 <= row["joint"]["T"] <= 40 and 1 <= row["joint"]["b"] <= 4
        assert row["joint"]["U"] <= row["U_at_T0"] + 1e-12
        assert isinstance(row["still_falling_at_T_max"], bool)
        assert row["plan"]["within_budget"]
        assert max(row["plan"]["eps_spent"]) <= row["eps"] * (1 + 1e-9)


@pytest.mark.parametrize(("args", "needle"), [
    (["--eps", "-1"], "eps must be > 0"),
    (["--eps", "1", "x"], "unexpected argument 'x'"),
    (["--eps", "1", "--t-max", "0", "--mechanism", "gaussian"], "--t-max"),
    (["--eps", "1", "--mechanism", "none"], "mechanism"),
    # no theorem of the paper covers discrete Laplace: the bound refuses it, naming the twin
    (["--eps", "1", "--mechanism", "discrete-laplace"], "--method twin"),
    # options the constants fix are refused where they disagree, not ignored
    (["--eps", "1", "--clip", "50"], "clip is fixed by --constants (xi=300"),
    (["--eps", "1", "--sample-rate", "0.5"], "--sample-rate=0.5"),
    (["--eps", "1,2,3"], "got --eps='1,2,3'"),
])
def test_plan_bad_input_exit_2(constants_file: Path, tmp_path: Path, args: list[str],
                               needle: str) -> None:
    png = tmp_path / "never.png"
    res = runner.invoke(app, override(["plan", "--mechanism", "laplace", "--constants",
                                       str(constants_file), "--plot", str(png)], args))
    assert res.exit_code == 2, res.output
    assert needle in res.output
    assert not png.exists()


@pytest.mark.parametrize("method", ["bound", "twin"])
@pytest.mark.parametrize("name", ["plot.txt", "plot"])
def test_plot_without_a_figure_suffix_is_refused_before_any_work(
        constants_file: Path, tmp_path: Path, method: str, name: str) -> None:
    path = tmp_path / name
    source = (["--constants", str(constants_file)] if method == "bound"
              else ["--dataset", "digits", "--num-clients", "4"])
    res = runner.invoke(app, ["plan", "--method", method, "--mechanism", "laplace", "--eps",
                              "1", *source, "--plot", str(path), "--no-cache"])
    assert res.exit_code == 2, res.output
    assert "plot must end in .png" in " ".join(res.output.split())
    assert list(tmp_path.iterdir()) == [constants_file]  # nothing written


def test_plan_bound_with_a_data_file_says_how_to_estimate_the_constants(
        tmp_path: Path, constants_file: Path) -> None:
    data = tmp_path / "mine.csv"
    data.write_text("client,label,a\n0,0,1.0\n1,1,2.0\n")
    for extra in ([], ["--constants", str(constants_file)]):
        res = runner.invoke(app, ["plan", "--method", "bound", "--eps", "1", "--data",
                                  str(data), *extra])
        assert res.exit_code == 2, res.output
        text = " ".join(res.output.split())
        assert "--method bound plans from the bound's constants" in text
        # the console wraps long paths anywhere: compare without the white space
        assert f"fedqrestimate--data{data}--outconstants.json" in "".join(text.split())


def test_plan_bound_needs_exactly_one_source(constants_file: Path) -> None:
    res = runner.invoke(app, ["plan", "--method", "bound", "--eps", "1"])
    assert res.exit_code == 2 and "exactly one of --constants" in res.output
    res = runner.invoke(app, ["plan", "--eps", "1", "--constants", str(constants_file),
                              "--dataset", "digits"])
    assert res.exit_code == 2
    res = runner.invoke(app, ["plan", "--eps", "1", "--constants", "/nonexistent.json"])
    assert res.exit_code == 2 and "constants must be an existing JSON file" in res.output


def test_estimate_then_plan_on_digits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "c.json"
    res = runner.invoke(app, ["estimate", "--dataset", "digits", "--num-clients", "4",
                              "--mechanism", "laplace", "--clip", "30", "--eps", "2",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["estimate"]["reads_private_data"] is True
    assert "WITHOUT differential privacy" in doc["estimate"]["warning"]
    assert doc["N"] == 4 and doc["eps_i"] == [2.0] * 4 and doc["xi"] == 30.0
    assert 0 < doc["mu"] <= doc["lambda"]
    assert doc["mu"] >= 0.01 * (1 - 1e-6)  # the weight decay bounds mu from below
    cached = list((tmp_path / "cache" / "constants").glob("*.json"))
    assert len(cached) == 1
    plan = _json(["plan", "--method", "bound", "--mechanism", "laplace", "--dataset", "digits",
                  "--num-clients", "4", "--clip", "30", "--eps", "2", "--json"])
    source = plan["source"]
    assert isinstance(source, dict) and source["dataset"] == "digits"
    assert plan["constants"]["mu"] == doc["mu"]  # served from the cache: same estimate
    again = _json(["plan", "--mechanism", "laplace", "--constants", str(out), "--eps", "2",
                   "--json"])
    assert again["table"] == plan["table"]


def test_estimate_bad_input(tmp_path: Path) -> None:
    res = runner.invoke(app, ["estimate", "--dataset", "digits", "--proxy-fraction", "1.5",
                              "--out", str(tmp_path / "c.json")])
    assert res.exit_code == 2 and "--proxy-fraction must be in (0, 1)" in res.output
    assert not (tmp_path / "c.json").exists()


def test_plan_bound_takes_the_constants_clip_and_refuses_another_norm(
        constants_file: Path, tmp_path: Path) -> None:
    same = _json(["plan", "--mechanism", "laplace", "--constants", str(constants_file),
                  "--eps", "1", "--clip", "300", "--json"])
    assert same["constants"]["xi"] == 300.0  # type: ignore[index]
    doc = json.loads(constants_file.read_text())
    doc["estimate"] = {"spec": {"mechanism": "laplace", "clip": 300.0}}
    estimated = tmp_path / "estimated.json"
    estimated.write_text(json.dumps(doc))
    res = runner.invoke(app, ["plan", "--mechanism", "gaussian", "--constants", str(estimated),
                              "--eps", "1", "--json"])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "estimated with (laplace: l1)" in text and "--mechanism gaussian" in text
    assert _json(["plan", "--mechanism", "laplace", "--constants", str(estimated),
                  "--eps", "1", "--json"])["table"]
