"""``fedqr run --dataset femnist`` on the real writer-grouped FEMNIST subset: the paper's CNN,
by-writer clients, xi1 = 200, the LEAF test samples of the training writers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedqr.cli import app

runner = CliRunner()


def test_run_femnist_laplace_uses_the_papers_settings(tmp_path: Path, femnist_dir: Path) -> None:
    out = tmp_path / "f"
    res = runner.invoke(app, ["run", "--dataset", "femnist", "--fraction", "0.05",
                              "--mechanism", "laplace", "--eps", "1", "--clients-per-round", "1",
                              "--rounds", "2", "--out", str(out), "--device", "cpu",
                              "--data-dir", str(femnist_dir)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "result.json").read_text())
    assert doc["dataset"] == "femnist"
    assert doc["config"]["privacy"]["clip"] == 200.0  # the paper's FEMNIST xi1
    clients = doc["clients"]
    assert sum(c["num_samples"] for c in clients) == round(0.05 * 57180)
    assert [c["replies"] for c in clients] == [1, 1] + [0] * 8  # round robin, b = 1, T = 2
    for c in clients:
        assert c["epsilon_spent"] <= c["epsilon_budget"] + 1e-12
    acc = doc["summary"]["final_test_accuracy_mean"]
    assert 0.0 <= acc <= 1.0
    assert (out / "training.png").stat().st_size > 5000


def test_run_femnist_rejects_bad_input_without_writing(tmp_path: Path, femnist_dir: Path,
                                                       ) -> None:
    out = tmp_path / "bad"
    res = runner.invoke(app, ["run", "--dataset", "femnist", "--fraction", "1.5",
                              "--out", str(out), "--data-dir", str(femnist_dir)])
    assert res.exit_code == 2
    assert "fraction" in res.output and "1.5" in res.output
    assert not out.exists()
    res = runner.invoke(app, ["run", "--dataset", "digits", "--partition", "by-writer",
                              "--out", str(out)])
    assert res.exit_code == 2
    assert "by-writer" in res.output and "femnist" in res.output
    assert not out.exists()


@pytest.mark.slow
def test_femnist_sweep_end_to_end_on_a_tiny_grid(tmp_path: Path, femnist_dir: Path) -> None:
    """The FEMNIST sweep machinery (CNN constants, plans, runs, report) on 1% of the data.

    Sized for CPU time, not statistics: one repeat (every run evaluates the CNN on all 5,103
    LEAF test rows, so a run's cost grows with the repeats; the means and standard errors over
    several repeats are checked by the MNIST reproduction's test, 3 repeats) and the constants
    on a 5% proxy share, as ``--quick`` estimates them (QUICK_FEMNIST), 3 rows a client.
    """
    from fedqr.experiments.report import redraw
    from fedqr.experiments.sweep import (
        FEMNIST,
        QUICK_FEMNIST,
        Settings,
        build_manifest,
        run_manifest,
    )
    from fedqr.theory.paper import PAPER_TABLE_ONE_FEMNIST

    tiny = Settings(repeats=1, T_grid=(2,), b_grid=(1,), laplace_eps=(1.0,),
                    gaussian_eps=(1.0,), fractions=(1.0,), curve_points=1,
                    estimate_proxy=QUICK_FEMNIST.estimate_proxy)
    out = tmp_path / "sweep"
    out.mkdir()
    manifest = build_manifest(out, FEMNIST, tiny, base=0.01, data_dir=femnist_dir,
                              status=lambda m: None)
    assert manifest["dataset"] == "femnist"
    lap = manifest["constants"]["laplace"]
    assert lap["p"] == 110526 and lap["xi"] == 200.0
    assert manifest["constants"]["gaussian"]["xi"] == 10.0
    assert not (out / "theta_star.npy").exists()  # no unique optimum for the CNN
    done: list[bool] = []
    run_manifest(manifest, out, data_dir=femnist_dir, device="cpu",
                 on_run=lambda spec, computed: done.append(computed))
    assert done and all(done)
    redraw(out)
    table = (out / "data" / "table_one.csv").read_text().splitlines()
    assert len(table) == 1 + len(PAPER_TABLE_ONE_FEMNIST)
    assert table[1].split(",")[-2:] == [str(PAPER_TABLE_ONE_FEMNIST[1.0]["T_joint"]), "1"]
    assert "FEMNIST reproduction" in (out / "summary.md").read_text()
    # rerun: every run is reused
    again: list[bool] = []
    run_manifest(manifest, out, data_dir=femnist_dir, device="cpu",
                 on_run=lambda spec, computed: again.append(computed))
    assert again == [False] * len(again) and len(again) == len(done)


@pytest.mark.slow
def test_femnist_written_to_a_file_runs_the_cnn_to_the_same_numbers(tmp_path: Path,
                                                                   femnist_dir: Path) -> None:
    """FEMNIST with its by-writer client ids written to .npz gives the same CNN run through
    --data --model cnn as through --dataset femnist (issue: your own data and model)."""
    import fedqr
    from fedqr.data import DatasetName, DataSpec

    spec = DataSpec(dataset=DatasetName.FEMNIST, fraction=0.01, num_clients=4, seed=2,
                    data_dir=femnist_dir)
    path = tmp_path / "femnist.npz"
    fedqr.FederatedData.from_client_data(spec.build()).to_npz(path)
    common = ["--mechanism", "gaussian", "--eps", "2", "--clip", "5", "--sample-rate", "0.1",
              "--rounds", "2", "--clients-per-round", "2", "--repeats", "1", "--seed", "2",
              "--eval-every", "1", "--eval-train", "every", "--device", "cpu"]
    a = runner.invoke(app, ["run", "--dataset", "femnist", "--fraction", "0.01",
                            "--num-clients", "4", "--data-dir", str(femnist_dir),
                            "--out", str(tmp_path / "a"), *common])
    b = runner.invoke(app, ["run", "--data", str(path), "--model", "cnn", "--no-standardize",
                            "--out", str(tmp_path / "b"), *common])
    assert a.exit_code == 0 and b.exit_code == 0, (a.output, b.output)
    ra = json.loads((tmp_path / "a" / "result.json").read_text())
    rb = json.loads((tmp_path / "b" / "result.json").read_text())
    assert ra["provenance"]["model"]["name"] == rb["provenance"]["model"]["name"] == "cnn"
    rounds_a, rounds_b = ra["runs"][0]["rounds"], rb["runs"][0]["rounds"]
    assert len(rounds_a) == len(rounds_b) == 3  # rounds 0, 1, 2
    for x, y in zip(rounds_a, rounds_b, strict=True):
        assert x["test_loss"] == pytest.approx(y["test_loss"], rel=1e-5)
        assert x["train_loss"] == pytest.approx(y["train_loss"], rel=1e-5)
