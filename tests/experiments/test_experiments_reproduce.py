"""``fedqr reproduce mnist --quick`` end to end on a small real-MNIST subset, ``fedqr plot``,
and a reproduce killed midway that resumes without recomputing or losing a finished run."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedqr._precision import arithmetic_of
from fedqr.cli import app
from fedqr.experiments import sweep
from fedqr.experiments.sweep import MNIST, Settings, is_curve
from fedqr.theory.paper import PAPER_TABLE_ONE_MNIST

runner = CliRunner()
SMALL = ["--quick", "--fraction", "0.02", "--device", "cpu"]
RESUME_GRID = Settings(repeats=2, T_grid=(10,), b_grid=(1, 10), laplace_eps=(10.0,),
                       gaussian_eps=(1.0,), fractions=(1.0,), curve_points=5,
                       estimate_proxy=0.2)
"""The --quick grid of the resume test: killing and resuming does not depend on the grid's
size, only on it holding more than 4 distinct runs (it holds 10); a smaller grid than
``QUICK`` (32 runs, end to end above) keeps the test's CPU time down."""


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def _stored(runs: Path) -> list[Path]:
    """The stored run files: not the atomic writer's hidden temporary files (``.NAME.*.json``,
    left behind when SIGKILL interrupts a write; pathlib's ``*`` matches them too)."""
    return [p for p in runs.glob("*.json") if not p.name.startswith(".")]


def _snapshot(runs: Path) -> dict[str, tuple[int, str]]:
    return {p.name: (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in _stored(runs)}


@pytest.mark.slow
def test_quick_reproduce_end_to_end_and_plot(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "rq"
    res = runner.invoke(app, ["reproduce", "mnist", *SMALL, "--out", str(out),
                              "--data-dir", str(data_dir / "mnist")])
    assert res.exit_code == 0, res.output
    assert "wall time" in res.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    keys = {e["key"] for e in manifest["entries"]}
    assert {p.stem for p in _stored(out / "runs")} == keys
    for name in ("curves", "versus_b", "versus_eps", "fraction", "validation", "table_one"):
        assert _rows(out / "data" / f"{name}.csv"), name
    for fig in ("curves", "versus_b", "versus_eps", "fraction", "validation",
                "bound_vs_observed"):
        assert (out / "figures" / f"{fig}.png").stat().st_size > 5000, fig
    # runs drawn per round are evaluated curve_points times; the others at t = 0 and t = T only
    settings = manifest["settings"]
    curves = _rows(out / "data" / "curves.csv")
    for e in (e for e in manifest["entries"] if e["experiment"] == "grid" and e["T"] > 0):
        run = json.loads((out / "runs" / f"{e['key']}.json").read_text())
        rounds = [r["round"] for r in run["runs"][0]["rounds"]]
        drawn = is_curve(MNIST, e, manifest["base_fraction"])
        assert rounds[0] == 0 and rounds[-1] == e["T"]
        every = max(1, e["T"] // settings["curve_points"])
        assert rounds == (list(range(0, e["T"], every)) if drawn else [0]) + [e["T"]], e
        if drawn:
            assert sum(1 for r in curves if r["mechanism"] == e["mechanism"]
                       and float(r["eps"]) == e["eps"] and int(r["b"]) == e["b"]
                       and int(r["T"]) == e["T"]) == len(rounds)
    assert any(is_curve(MNIST, e, manifest["base_fraction"]) for e in manifest["entries"])
    table = _rows(out / "data" / "table_one.csv")
    assert [int(r["paper_joint_T"]) for r in table] == [
        PAPER_TABLE_ONE_MNIST[e]["T_joint"] for e in sorted(PAPER_TABLE_ONE_MNIST)]
    val = _rows(out / "data" / "validation.csv")
    assert {r["planner"] for r in val} == {"bound", "paper"}  # the manifest's "fedqr"
    for r in val:
        assert 1 <= int(r["rank"]) <= int(r["grid_size"])
        assert float(r["regret"]) >= -1e-12  # the grid best is the minimum over the grid
    # redraw from the stored runs only: no run file is touched
    before = _snapshot(out / "runs")
    for fig in (out / "figures").iterdir():
        fig.unlink()
    res = runner.invoke(app, ["plot", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "figures" / "validation.png").is_file()
    assert _snapshot(out / "runs") == before


@pytest.mark.slow
def test_reproduce_killed_midway_resumes(tmp_path: Path, data_dir: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "rk"
    monkeypatch.setattr(sweep, "QUICK", RESUME_GRID)  # the resumed run below, in process
    code = (f"from fedqr.experiments import sweep; sweep.QUICK = sweep.{RESUME_GRID!r}; "
            "from fedqr.cli import app; app()")
    cmd = [sys.executable, "-c", code, "reproduce", "mnist",
           *SMALL, "--out", str(out), "--data-dir", str(data_dir / "mnist")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 300
    try:
        while len(_stored(out / "runs")) < 4:
            assert proc.poll() is None, "reproduce ended before it could be killed"
            assert time.monotonic() < deadline, "no runs stored within 300 s"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = _snapshot(out / "runs")
    for p in _stored(out / "runs"):  # every stored run is complete JSON
        json.loads(p.read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    auto = arithmetic_of("auto").value  # reproduce's default arithmetic on this CPU
    assert sweep.settings_from(manifest["settings"]) == replace(RESUME_GRID, arithmetic=auto)
    total = len({e["key"] for e in manifest["entries"]})
    assert 4 <= len(done) < total
    manifest_stamp = (out / "manifest.json").stat().st_mtime_ns
    res = runner.invoke(app, ["reproduce", "mnist", *SMALL, "--out", str(out),
                              "--data-dir", str(data_dir / "mnist")])
    assert res.exit_code == 0, res.output
    assert f"{total - len(done)} computed now, {len(done)} already stored" in res.stdout
    after = _snapshot(out / "runs")
    assert len(after) == total
    assert {k: after[k] for k in done} == done  # finished runs neither recomputed nor lost
    # nor the constants and plans: the stored manifest is reused as it is
    assert (out / "manifest.json").stat().st_mtime_ns == manifest_stamp
