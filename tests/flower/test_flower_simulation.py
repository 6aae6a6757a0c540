"""``fedqr flower simulate``: Flower's simulation runtime reproduces the engine's trajectory
(Gaussian mechanism with Poisson sampling: per-reply batches and noise), same result.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedqr.flower.cli import flower_app
from fedqr.flower.config import FlowerRunConfig
from fedqr.sim.engine import simulate

from ..argv import override

pytestmark = pytest.mark.usefixtures("no_leftovers")


@pytest.mark.slow
def test_simulate_reproduces_the_engine_and_writes_run_s_result(tmp_path: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    args = ["simulate", "--dataset", "digits", "--partition", "dirichlet", "--num-clients", "3",
            "--clients-per-round", "2", "--rounds", "3", "--mechanism", "gaussian",
            "--eps", "2,4,2", "--delta", "1e-5", "--clip", "5", "--sample-rate", "0.2",
            "--lr", "0.5", "--seed", "4", "--timeout", "240", "--work-dir", str(work),
            "--out", str(out)]
    result = CliRunner().invoke(flower_app, args)
    logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in work.glob("*.log"))
    assert result.exit_code == 0, f"{result.output}\n{logs}"
    doc = json.loads((out / "result.json").read_text())
    cfg = FlowerRunConfig.from_run_config(doc["flower"]["run_config"])
    ds, part = cfg.load_data()
    engine = simulate(ds, part, cfg.sim_config())
    with np.load(out / "model.npz") as f:
        assert f["theta"].shape == engine.final_theta.shape  # (1, k, p): fedqr run's layout
        np.testing.assert_allclose(f["theta"], engine.final_theta, atol=1e-5, rtol=0)
    ref = engine.to_json()
    assert doc["flower"]["mode"] == "simulation"
    assert set(doc) == set(ref) | {"flower", "wall_time_s", "provenance"}
    assert doc["provenance"]["model"] == {"name": "logreg", "num_params": 640,
                                          "parameter_shapes": {"theta": [10, 64]}}
    assert doc["config"] == ref["config"]
    assert set(doc["clients"][0]) == set(ref["clients"][0]) | {"replies_received"}
    assert doc["runs"][0]["rounds"][-1].keys() == ref["runs"][0]["rounds"][-1].keys()
    for mine, theirs in zip(doc["clients"], ref["clients"], strict=True):
        assert mine["epsilon_spent"] == pytest.approx(theirs["epsilon_spent"])
        assert mine["noise_std"] == pytest.approx(theirs["noise_std"])
    assert doc["summary"] == pytest.approx(ref["summary"], abs=1e-6)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--clients-per-round", "5"], "--clients-per-round must be in [1, --num-clients=3]"),
        (["--eps", "-1"], "eps must be > 0"),
        (["--eps", "1,2"], "--eps must have 1 value or one per client (3 clients), got 2"),
        (["--round-timeout", "0"], "--round-timeout must be > 0"),
        (["--fraction", "2"], "fraction must be in (0, 1]"),
        (["--timeout", "-3"], "timeout must be > 0"),
    ],
)
def test_bad_input_exits_2_naming_the_parameter_and_writes_nothing(
        tmp_path: Path, extra: list[str], needle: str) -> None:
    out = tmp_path / "out"
    for command in ("simulate", "deploy"):
        args = override([command, "--dataset", "digits", "--num-clients", "3",
                         "--clients-per-round", "2", "--out", str(out)], extra)
        result = CliRunner().invoke(flower_app, args)
        assert result.exit_code == 2, result.output
        assert needle in " ".join(result.output.split())
        assert not out.exists() and list(tmp_path.iterdir()) == []
