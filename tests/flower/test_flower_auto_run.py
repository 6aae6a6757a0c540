"""``fedqr flower run --clients-per-round auto`` on loopback (insecure, loopback only): the
SuperNodes report their sizes and budgets, the server plans on public digits and runs the
plan; result.json records the plan, and no client spends more than its own budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from fedqr.data import DatasetName
from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.procs import free_port

from .conftest import require_flwr, stop_process_groups

pytestmark = pytest.mark.slow
# the console script's entry (its quick exit included), as a deployment runs the commands
FEDQR = [sys.executable, "-c", "from fedqr.cli import main; main()", "flower"]
EPS = (4.0, 6.0, 8.0)


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as res:
            return bool(res.status == 200)
    except OSError:
        return False


def test_run_auto_plans_from_reports_and_runs_the_plan(tmp_path: Path) -> None:
    require_flwr()
    procs: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, "FEDQR_CACHE": str(tmp_path / "cache")}

    def start(name: str, args: list[str]) -> None:
        with open(tmp_path / f"{name}.log", "wb") as log:
            procs.append(subprocess.Popen([*FEDQR, *args], stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True, cwd=tmp_path, env=env))

    port = free_port()
    cfg = FlowerRunConfig(num_clients=3, clients_per_round=3, rounds=1,
                          dataset=DatasetName.DIGITS, seed=5)
    ds, part = cfg.load_data()
    for i in range(3):
        idx = part.indices[i]
        np.savez(tmp_path / f"c{i}.npz", x=ds.x_train[idx], y=ds.y_train[idx])
    try:
        start("superlink", ["superlink", "--port", str(port), "--insecure", "--state-dir",
                            str(tmp_path / "link")])
        deadline = time.monotonic() + 120
        while not _healthy(port):
            assert time.monotonic() < deadline, (tmp_path / "superlink.log").read_text()
            time.sleep(0.2)
        for i in range(3):
            start(f"node-{i}", ["supernode", "--superlink", f"127.0.0.1:{port}", "--insecure",
                                "--data", str(tmp_path / f"c{i}.npz"), "--eps", str(EPS[i]),
                                "--state-dir", str(tmp_path / f"st-{i}"), "--client-id",
                                str(i)])
        out = tmp_path / "out"
        done = subprocess.run(
            [*FEDQR, "run", "--superlink", f"127.0.0.1:{port}", "--insecure", "--dataset",
             "digits", "--num-clients", "3", "--rounds", "2", "--clients-per-round", "auto",
             "--proxy-dataset", "digits", "--mechanism", "laplace", "--clip", "20", "--lr",
             "0.3", "--connect-timeout", "120", "--out", str(out)],
            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=400, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        doc = json.loads((out / "result.json").read_text())
        plan = doc["plan"]
        assert plan["reported"] == {"sizes": [int(v) for v in part.sizes], "eps": list(EPS),
                                    "delta": [1e-5] * 3}
        assert plan["data_used"]["kind"] == "public-proxy"
        assert not plan["data_used"]["reads_private_data"]
        assert plan["rounds"] == doc["config"]["rounds"] == 2  # fixed, not planned
        assert plan["clients_per_round"] == doc["config"]["clients_per_round"]
        assert plan["achieved_test_loss"] == doc["summary"]["final_test_loss_mean"]
        spent = [c["epsilon_spent"] for c in doc["clients"]]
        assert all(s <= e * (1 + 1e-9) for s, e in zip(spent, EPS, strict=True)), spent
        assert "plan: T=2" in done.stdout
    finally:
        stop_process_groups(procs)
