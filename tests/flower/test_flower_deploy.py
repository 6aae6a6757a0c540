"""A real local deployment: a SuperLink and 3 SuperNodes on 127.0.0.1, 3 rounds on MNIST.

The same run checks the equivalence: with per-reply seeding, the deployed run's final model
equals the in-process engine's (to 1e-5; in practice bit for bit).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedqr.flower.cli import flower_app
from fedqr.flower.client_state import read_state
from fedqr.flower.config import FlowerRunConfig
from fedqr.sim.engine import simulate

pytestmark = [pytest.mark.usefixtures("no_leftovers"), pytest.mark.slow]


def _logs(work: Path) -> str:
    return "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-20:])
                     for p in sorted(work.glob("*.log")))


def test_deploy_three_supernodes_three_rounds_reproduces_the_engine(
        tmp_path: Path, data_dir: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    args = ["deploy", "--dataset", "mnist", "--data-dir", str(data_dir / "mnist"),
            "--fraction", "0.02", "--num-clients", "3", "--clients-per-round", "2",
            "--rounds", "3", "--mechanism", "laplace", "--eps", "10", "--clip", "300",
            "--lr", "0.05", "--seed", "3", "--round-timeout", "90", "--connect-timeout", "90",
            "--timeout", "240", "--work-dir", str(work), "--out", str(out)]
    result = CliRunner().invoke(flower_app, args)
    assert result.exit_code == 0, f"{result.output}\n{_logs(work)}"
    doc = json.loads((out / "result.json").read_text())
    assert {"fedqr_result", "dataset", "config", "clients", "runs", "summary", "wall_time_s",
            "flower"} <= set(doc)
    assert doc["flower"]["mode"] == "deployment" and doc["flower"]["missing_replies"] == []
    assert [r["round"] for r in doc["runs"][0]["rounds"]] == [0, 1, 2, 3]
    assert (out / "training.png").is_file()
    cfg = FlowerRunConfig.from_run_config(doc["flower"]["run_config"])
    for i, client in enumerate(doc["clients"]):
        assert client["replies"] == client["replies_received"] == 2
        assert client["epsilon_spent"] == pytest.approx(10.0)  # the whole budget, R_i = 2
        state = read_state(work / "state" / f"client-{i}")  # the client's own ledger, on disk
        assert state is not None and state.ledger.replies == 2
        assert state.ledger.spent()[0] == pytest.approx(10.0)
    ds, part = cfg.load_data()
    engine = simulate(ds, part, cfg.sim_config())
    with np.load(out / "model.npz") as f:
        theta = f["theta"]
    np.testing.assert_allclose(theta, engine.final_theta, atol=1e-5, rtol=0)
    accuracy = doc["summary"]["final_test_accuracy_mean"]
    assert accuracy == pytest.approx(float(engine.final("test_accuracy")[0]), abs=1e-6)
