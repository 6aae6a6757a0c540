"""The heart-disease example end to end on the real UCI files: prepare, plan, run the plan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedqr.cli import app

ROOT = Path(__file__).resolve().parents[2]


def test_heart_disease_plan_and_planned_run(data_dir: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "heart"
    subprocess.run([sys.executable, str(ROOT / "examples/heart_disease/prepare.py"),
                    "--data-dir", str(data_dir / "heart-disease"), "--out", str(out)],
                   check=True, capture_output=True)
    data = ["--data", str(out / "heart_all.csv"), "--test-data", str(out / "heart_all_test.csv"),
            "--mechanism", "laplace", "--eps", "4", "--clip", "5"]
    runner = CliRunner()
    plan = runner.invoke(app, ["plan", *data, "--json"])
    assert plan.exit_code == 0, plan.output
    rec = json.loads(plan.stdout[plan.stdout.index("{"):])["recommended"]
    assert rec["useful"] and rec["rounds"] >= 1 and 1 <= rec["clients_per_round"] <= 4
    res = runner.invoke(app, ["run", *data, "--rounds", "auto", "--clients-per-round", "auto",
                              "--repeats", "3", "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "run" / "result.json").read_text())
    assert doc["plan"]["rounds"] == rec["rounds"]
    assert len(doc["clients"]) == 4
    assert doc["summary"]["final_test_accuracy_mean"] > 0.6  # majority class: 0.55
