"""``result.json``'s companion ``model.npz`` (fedqr.sim.result.write_model): one writer for
``fedqr run``, the Python API and Flower."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedqr.api_results import SimulationResult
from fedqr.flower.results import write_result
from fedqr.sim.result import write_model


def test_run_the_api_and_flower_write_model_npz_alike(tmp_path: Path) -> None:
    """``theta`` keeps the repeat axis, ``(R, *param_shape)``: a Flower run's one repeat is
    ``(1, k, p)`` as ``fedqr run``'s, never ``(k, p)``."""
    theta = np.arange(3 * 4, dtype=np.float32).reshape(1, 3, 4)
    write_model(tmp_path / "run" / "model.npz", theta)
    SimulationResult(document={}, theta=theta).save_model(tmp_path / "api" / "model.npz")
    write_result(tmp_path / "flower", doc={"summary": {"x": float("nan")}}, theta=theta)
    for name in ("run", "api", "flower"):
        with np.load(tmp_path / name / "model.npz") as f:
            assert list(f) == ["theta"] and f["theta"].shape == (1, 3, 4)
            np.testing.assert_array_equal(f["theta"], theta)
    assert json.loads((tmp_path / "flower" / "result.json").read_text()) == {
        "summary": {"x": None}}
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(
        ["run", "api", "flower", "model.npz", "model.npz", "model.npz", "result.json"])
