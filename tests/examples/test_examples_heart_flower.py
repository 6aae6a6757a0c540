"""The heart-disease federation on Flower, on the real UCI files (README "On Flower").

1. ``fedqr flower simulate --data heart_all.csv``: equals the simulator with per-reply noise
   seeding to the last bit, and has ``fedqr run --data``'s data, sizes, noise scales and
   budgets (the two draw their noise from different generators).
2. Four SuperNodes, each holding only its ``hospital_<name>.npz`` (``--standardize``: local
   statistics), and ``fedqr flower run --test-data``, started with the README's commands:
   equals the simulator on the hospitals' locally standardised rows; no hospital spends more
   than its epsilon.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedqr.data import Dataset, Partition
from fedqr.flower.client_data import input_shape, run_kernel
from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.node_data import read_node_rows
from fedqr.flower.procs import free_port
from fedqr.privacy import Mechanism
from fedqr.sim.loop import run_rounds

from ..flower.conftest import flower_processes, require_flwr, stop_process_groups

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "examples" / "heart_disease" / "README.md"
FEDQR = [sys.executable, "-c", "from fedqr.cli import app; app()"]
HOSPITALS = ("cleveland", "hungary", "switzerland", "va")
SCHEDULE = ["--mechanism", "laplace", "--clip", "5", "--rounds", "3", "--clients-per-round",
            "3", "--seed", "7", "--model", "logreg"]  # the README's model (a file's: linear)


@pytest.fixture(scope="module")
def heart(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("heart")
    subprocess.run([sys.executable, str(ROOT / "examples/heart_disease/prepare.py"),
                    "--data-dir", str(data_dir / "heart-disease"), "--out", str(out)],
                   check=True, capture_output=True)
    return out


UNDOCUMENTED = ("--seed", "--work-dir", "--connect-timeout", "--noise-seed")
"""Options the test adds to the README's commands (to recompute the run, to keep logs)."""


def _documented(args: list[str]) -> None:
    """The command and each of its other options are in the example's README."""
    text = README.read_text()
    assert f"fedqr {' '.join(args[:2])}" in text, args[:2]
    for arg in args:
        if arg.startswith("--") and arg not in UNDOCUMENTED:
            assert arg in text, f"{arg} not in {README}"


def test_simulation_equals_the_simulator_and_fedqr_run_s_setup(heart: Path,
                                                               tmp_path: Path) -> None:
    require_flwr()
    data = ["--data", str(heart / "heart_all.csv"), "--test-data",
            str(heart / "heart_all_test.csv")]
    sim_args = ["flower", "simulate", *data, *SCHEDULE, "--eps", "4", "--out",
                str(tmp_path / "sim"), "--work-dir", str(tmp_path / "work")]
    _documented(sim_args)
    runner = CliRunner()
    from fedqr.cli import app

    done = runner.invoke(app, sim_args)
    logs = "\n".join(p.read_text(errors="replace")[-3000:]
                     for p in (tmp_path / "work").glob("*.log"))
    assert done.exit_code == 0, f"{done.output}\n{logs}"
    assert not flower_processes()
    doc = json.loads((tmp_path / "sim" / "result.json").read_text())
    assert "dataset" not in doc["flower"]["run_config"]  # the data file is the run's data
    cfg = FlowerRunConfig.from_run_config(doc["flower"]["run_config"])
    ds, part = cfg.load_data()
    kernel = run_kernel("logreg", input_shape=input_shape(ds), num_classes=2)
    loop = run_rounds(ds, part, cfg.sim_config(), kernel)  # per-reply noise seeding
    with np.load(tmp_path / "sim" / "model.npz") as f:
        np.testing.assert_array_equal(f["theta"].reshape(1, -1), loop.final_theta)
    ref = loop.to_json()
    assert doc["summary"]["final_test_loss_mean"] == ref["summary"]["final_test_loss_mean"]
    assert doc["summary"]["final_test_loss_mean"] < np.log(2)  # below a coin's loss
    done = runner.invoke(app, ["run", *data, *SCHEDULE, "--eps", "4", "--out",
                               str(tmp_path / "run")])
    assert done.exit_code == 0, done.output
    run = json.loads((tmp_path / "run" / "result.json").read_text())
    assert doc["data"] == run["data"]  # the same rows, standardisation and digest
    assert doc["provenance"]["model"] == run["provenance"]["model"]
    for key in ("num_clients", "clients_per_round", "rounds", "privacy", "lr", "weight_decay"):
        assert doc["config"][key] == run["config"][key], key
    for mine, theirs in zip(doc["clients"], run["clients"], strict=True):
        for key in ("num_samples", "replies", "noise_std", "epsilon_spent"):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-12), key
        assert mine["epsilon_spent"] <= 4.0 * (1 + 1e-12)


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as res:
            return bool(res.status == 200)
    except OSError:
        return False


def test_four_supernodes_each_with_its_hospital_s_file(heart: Path, tmp_path: Path) -> None:
    require_flwr()
    eps = {"cleveland": 4.0, "hungary": 4.0, "switzerland": 2.0, "va": 3.0}
    procs: list[subprocess.Popen[bytes]] = []
    port = free_port()
    link = f"127.0.0.1:{port}"

    def start(name: str, args: list[str]) -> None:
        _documented(args)
        with open(tmp_path / f"{name}.log", "wb") as log:
            procs.append(subprocess.Popen([*FEDQR, *args], stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True,
                                          cwd=tmp_path))

    try:
        start("superlink", ["flower", "superlink", "--insecure", "--port", str(port),
                            "--state-dir", str(tmp_path / "link")])
        deadline = time.monotonic() + 120
        while not _healthy(port):
            assert time.monotonic() < deadline, (tmp_path / "superlink.log").read_text()
            time.sleep(0.2)
        for i, h in enumerate(HOSPITALS):
            start(h, ["flower", "supernode", "--superlink", link, "--insecure", "--data",
                      str(heart / f"hospital_{h}.npz"), "--standardize", "--eps", str(eps[h]),
                      "--state-dir", str(tmp_path / f"node-{h}"), "--client-id", str(i),
                      "--noise-seed", "7"])  # fixed only to recompute the run below
        args = ["flower", "run", "--superlink", link, "--insecure", "--test-data",
                str(heart / "heart_all_test.csv"), "--num-clients", "4", *SCHEDULE,
                "--connect-timeout", "120", "--out", str(tmp_path / "out")]
        _documented(args)
        done = subprocess.run([*FEDQR, *args], capture_output=True, text=True, cwd=tmp_path,
                              timeout=400, check=False)
        tails = "\n".join(p.read_text(errors="replace")[-2000:]
                          for p in tmp_path.glob("*.log"))
        assert done.returncode == 0, done.stdout + done.stderr + tails
    finally:
        stop_process_groups(procs)
    doc = json.loads((tmp_path / "out" / "result.json").read_text())
    spent = [c["epsilon_spent"] for c in doc["clients"]]
    assert spent == pytest.approx([eps[h] for h in HOSPITALS], rel=1e-9)
    assert all(s <= eps[h] * (1 + 1e-12) for s, h in zip(spent, HOSPITALS, strict=True))
    assert [c["num_samples"] for c in doc["clients"]] == [199, 172, 30, 85]
    final = doc["runs"][0]["rounds"][-1]
    assert final["train_loss"] is None  # the server holds no training rows
    assert final["test_loss"] < np.log(2)
    # the same run in the simulator: each hospital's rows standardised by its own statistics,
    # the server's test file by its own, every reply's noise seeded by the nodes' seed 7
    rows = [read_node_rows(heart / f"hospital_{h}.npz", standardize=True) for h in HOSPITALS]
    test = read_node_rows(heart / "heart_all_test.csv", standardize=True, one_client=False)
    ends = np.cumsum([0, *(len(r.y) for r in rows)])
    ds = Dataset(name="heart", x_train=np.concatenate([r.x for r in rows]),
                 y_train=np.concatenate([r.y for r in rows]), x_test=test.x, y_test=test.y,
                 num_classes=2)
    part = Partition(indices=tuple(np.arange(ends[i], ends[i + 1]) for i in range(4)))
    cfg = FlowerRunConfig(num_clients=4, clients_per_round=3, rounds=3,
                          mechanism=Mechanism.LAPLACE,
                          eps=tuple(eps[h] for h in HOSPITALS), clip=5.0, sample_rate=1.0,
                          seed=7)
    loop = run_rounds(ds, part, cfg.sim_config(),
                      run_kernel("logreg", input_shape=(10,), num_classes=2))
    with np.load(tmp_path / "out" / "model.npz") as f:
        np.testing.assert_array_equal(f["theta"].reshape(1, -1), loop.final_theta)
    assert final["test_loss"] == loop.to_json()["summary"]["final_test_loss_mean"]
