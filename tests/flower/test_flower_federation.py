"""docs/deployment.md, end to end on loopback: a SuperLink with TLS and node authentication and
three SuperNodes, each with its own --data file and --eps, started with the document's commands.

The run equals ``fedqr run``'s engine on the same client data and seeds; a SuperNode with an
unregistered key is refused; a run asking more than the clients' budgets is refused with a
message naming the budget.
"""

from __future__ import annotations

import json
import re
import ssl
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
from fedqr.sim.engine import simulate

from .conftest import require_flwr, stop_process_groups

pytestmark = pytest.mark.slow
FEDQR = [sys.executable, "-c", "from fedqr.cli import app; app()", "flower"]
DOC = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"
EPS = (1.0, 2.0, 4.0)


def _healthy(port: int, ca: Path) -> bool:
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/health", timeout=1,
                                    context=context) as res:
            return bool(res.status == 200)
    except OSError:
        return False


def _documented(args: list[str]) -> None:
    """The command is in docs/deployment.md (the subcommand and every option)."""
    text = DOC.read_text()
    assert f"fedqr flower {args[0]}" in text, f"fedqr flower {args[0]} not in {DOC}"
    for arg in args:
        if arg.startswith("--"):
            assert arg in text, f"{arg} of fedqr flower {args[0]} not in {DOC}"


def test_federation_over_tls_with_node_authentication(tmp_path: Path) -> None:
    require_flwr()
    procs: list[subprocess.Popen[bytes]] = []
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(name: str, args: list[str]) -> subprocess.Popen[bytes]:
        _documented(args)
        with open(logs / f"{name}.log", "wb") as log:
            proc = subprocess.Popen([*FEDQR, *args], stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=tmp_path)
        procs.append(proc)
        return proc

    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        _documented(args)
        return subprocess.run([*FEDQR, *args], capture_output=True, text=True, cwd=tmp_path,
                              timeout=400, check=False)

    certs, port = tmp_path / "certs", free_port()
    link = f"127.0.0.1:{port}"
    assert run(["certs", str(certs), "--host", "127.0.0.1", "--nodes", "4"]).returncode == 0
    cfg = FlowerRunConfig(num_clients=3, clients_per_round=2, rounds=3,
                          dataset=DatasetName.DIGITS, eps=EPS, seed=3)
    ds, part = cfg.load_data()
    for i in range(3):  # each client's own data file
        idx = part.indices[i]
        np.savez(tmp_path / f"client-{i}.npz", x=ds.x_train[idx], y=ds.y_train[idx])
    try:
        start("superlink", ["superlink", "--host", "127.0.0.1", "--port", str(port),
                            "--certs", str(certs), "--state-dir", str(tmp_path / "link")])
        deadline = time.monotonic() + 120
        while not _healthy(port, certs / "ca.pem"):
            assert time.monotonic() < deadline, (logs / "superlink.log").read_text()
            time.sleep(0.2)
        for i in range(3):
            done = run(["register", str(certs / f"node-{i}.pub"), "--superlink", link,
                        "--root-certificates", str(certs / "ca.pem")])
            assert done.returncode == 0, done.stdout + done.stderr
        for i in range(3):
            start(f"node-{i}", [
                "supernode", "--superlink", link, "--data", str(tmp_path / f"client-{i}.npz"),
                "--eps", str(EPS[i]), "--delta", "1e-5", "--state-dir",
                str(tmp_path / f"st-{i}"), "--root-certificates", str(certs / "ca.pem"),
                "--auth-key", str(certs / f"node-{i}"), "--client-id", str(i),
                "--noise-seed", "3"])
        intruder = start("intruder", [  # node-3's key was never registered
            "supernode", "--superlink", link, "--data", str(tmp_path / "client-0.npz"),
            "--eps", "9", "--state-dir", str(tmp_path / "st-x"), "--root-certificates",
            str(certs / "ca.pem"), "--auth-key", str(certs / "node-3")])
        out = tmp_path / "out"
        done = run(["run", "--superlink", link, "--root-certificates", str(certs / "ca.pem"),
                    "--dataset", "digits", "--num-clients", "3", "--clients-per-round", "2",
                    "--rounds", "3", "--seed", "3", "--connect-timeout", "120",
                    "--out", str(out)])
        assert done.returncode == 0, done.stdout + done.stderr + _tails(logs)
        with np.load(out / "model.npz") as f:
            theta = f["theta"]
        engine = simulate(ds, part, cfg.sim_config())  # fedqr run's engine, same data, seeds
        np.testing.assert_allclose(theta, engine.final_theta, atol=1e-5, rtol=0)
        doc = json.loads((out / "result.json").read_text())
        assert [c["epsilon_spent"] for c in doc["clients"]] == pytest.approx(EPS)
        deadline = time.monotonic() + 30
        while intruder.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert intruder.poll() not in (None, 0), "the unregistered SuperNode was not refused"
        greedy = run(["run", "--superlink", link, "--root-certificates",
                      str(certs / "ca.pem"), "--dataset", "digits", "--num-clients", "3",
                      "--clients-per-round", "2", "--rounds", "3", "--eps", "8",
                      "--out", str(tmp_path / "out2")])
        assert greedy.returncode == 1
        message = " ".join(greedy.stderr.split())
        assert re.search(r"client budget is eps=[124], delta=1e-05; the run asks eps=8",
                         message), message
        assert not (tmp_path / "out2").exists()
    finally:
        stop_process_groups(procs)


def _tails(logs: Path) -> str:
    return "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace")
                                                   .splitlines()[-15:])
                     for p in sorted(logs.glob("*.log")))
