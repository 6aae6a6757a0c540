"""Which runs of the sweep are evaluated along the way, and manifests of older versions."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict
from pathlib import Path

from fedqr.experiments.sweep import (
    FEMNIST,
    MNIST,
    QUICK,
    build_manifest,
    headline_T,
    is_curve,
    spec_of,
)
from fedqr.sim.config import EvalTrain
from fedqr.theory.paper import PAPER_TABLE_ONE_FEMNIST, PAPER_TABLE_ONE_MNIST


def _entry(mech: str, eps: float, b: int, T: int, fraction: float = 1.0) -> dict[str, object]:
    return {"experiment": "grid", "mechanism": mech, "eps": eps, "b": b, "T": T,
            "fraction": fraction}


def test_headline_T_is_the_papers_T_star_of_b_or_100() -> None:
    assert headline_T(MNIST, "laplace", 5.0, 1) == PAPER_TABLE_ONE_MNIST[5.0]["T_joint"]
    assert headline_T(MNIST, "laplace", 5.0, 5) == PAPER_TABLE_ONE_MNIST[5.0]["T_b5"]
    assert headline_T(FEMNIST, "laplace", 10.0, 10) == PAPER_TABLE_ONE_FEMNIST[10.0]["T_b10"]
    assert headline_T(MNIST, "laplace", 2.0, 5) is None  # eps not in Table I
    assert headline_T(MNIST, "laplace", 1.0, 3) is None  # b not in Table I
    assert headline_T(MNIST, "gaussian", 0.5, 3) == 100


def test_only_drawn_runs_are_curves() -> None:
    t_b5 = PAPER_TABLE_ONE_MNIST[10.0]["T_b5"]
    assert is_curve(MNIST, _entry("laplace", 10.0, 5, t_b5), 1.0)
    assert is_curve(MNIST, _entry("laplace", 10.0, 5, 100), 1.0)
    assert not is_curve(MNIST, _entry("laplace", 10.0, 5, 50), 1.0)
    assert not is_curve(MNIST, _entry("laplace", 10.0, 5, t_b5, fraction=0.5), 1.0)
    assert not is_curve(MNIST, _entry("laplace", 10.0, 5, 0), 1.0)
    assert is_curve(MNIST, _entry("gaussian", 0.5, 10, 100), 1.0)
    assert not is_curve(MNIST, _entry("gaussian", 0.5, 10, 50), 1.0)
    # the cadence follows: curve_points evaluations for a curve, one at the end otherwise
    on = spec_of(MNIST, _entry("laplace", 10.0, 5, 100), QUICK, base=1.0).config
    off = spec_of(MNIST, _entry("laplace", 10.0, 5, 50), QUICK, base=1.0).config
    assert (on.eval_every, off.eval_every) == (100 // QUICK.curve_points, 50)


def test_same_configuration_same_run_across_experiments() -> None:
    grid = _entry("laplace", 1.0, 1, PAPER_TABLE_ONE_MNIST[1.0]["T_joint"])
    fraction = {**grid, "experiment": "fraction", "data_fraction": 1.0}
    assert (spec_of(MNIST, grid, QUICK, base=1.0).key()
            == spec_of(MNIST, fraction, QUICK, base=1.0).key())


def test_reproduce_runs_evaluate_the_training_objective_at_every_evaluation() -> None:
    """The figures plot the training objective along the way: ``every``, and the stored key
    (what runs stored before the setting existed are found by) leaves it out."""
    spec = spec_of(MNIST, _entry("gaussian", 1.0, 10, 100), QUICK, base=1.0)
    assert spec.config.train_eval is EvalTrain.EVERY
    assert "train_eval" not in spec.identity()["config"]
    end = dataclasses.replace(spec, config=dataclasses.replace(spec.config,
                                                               train_eval=EvalTrain.END))
    assert end.identity()["config"]["train_eval"] == "end"
    assert end.key() != spec.key()


def test_manifest_of_an_older_version_is_rekeyed(tmp_path: Path) -> None:
    entries = [_entry("laplace", 1.0, 1, 10), _entry("gaussian", 1.0, 10, 100)]
    doc = {"dataset": "mnist", "settings": asdict(QUICK), "base_fraction": 1.0,
           "constants": {}, "plans": {}, "entries": [{**e, "key": "stale"} for e in entries]}
    (tmp_path / "manifest.json").write_text(json.dumps(doc))

    def no_status(msg: str) -> None:
        raise AssertionError(f"the manifest was rebuilt: {msg}")

    got = build_manifest(tmp_path, MNIST, QUICK, base=1.0, data_dir=None, status=no_status)
    want = [spec_of(MNIST, e, QUICK, base=1.0).key() for e in entries]
    assert [e["key"] for e in got["entries"]] == want
    stored = json.loads((tmp_path / "manifest.json").read_text())
    assert [e["key"] for e in stored["entries"]] == want
