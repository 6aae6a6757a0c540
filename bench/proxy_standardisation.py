"""A public proxy standardised otherwise than the deployment: how far its plan lands.

A re-creation of a tester's deployment (docs/planner.md, "What the planner gets wrong"): 5%
of MNIST as a data file, 20 clients of 150 rows holding three digits each (50 of each),
MNIST's 10,000 test images as the test set, logistic regression, Gaussian eps 2,
``--sample-rate auto``, planned with ``fedqr plan`` on a clear proxy and on FEMNIST's digits
(``--proxy-dataset femnist --proxy-classes 0-9``). The same rows are written twice: as rows
``[n, 784]`` (standardised pixel by pixel) and as images ``[n, 28, 28]`` (standardised by one
mean and std, as the built-in FEMNIST proxy is). Each file's plans are scored against a real
grid (b in 1, 2, 5, 10, 20 x T in 4 .. 512 doubling until the loss rises by 2% past T = 32,
q = each plan's, 3 repeats, seed 1001, which the planner never used) with ``fedqr.simulate``.

    PYTHONPATH=src python bench/proxy_standardisation.py [--seed 7] [--out runs/proxy-std]

Prints one row per file and data use: the plan, its loss on the grid's seeds and its regret
against the grid's best. Needs ``FEDQR_DATA`` (MNIST and FEMNIST).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

import fedqr
from fedqr.data import load_mnist_arrays

PUBLIC = ["--data-use", "public-proxy", "--proxy-dataset", "femnist", "--proxy-classes", "0-9"]


def deployment(seed: int) -> dict[str, np.ndarray]:
    """20 clients of 150 MNIST rows, three digits of 50 rows each, and MNIST's test set."""
    raw = load_mnist_arrays()
    rng = np.random.default_rng(seed)
    x = raw.x_train.reshape(len(raw.y_train), -1).astype(np.float32) / 255
    y = raw.y_train.astype(np.int64)
    pools = {c: list(rng.permutation(np.flatnonzero(y == c))) for c in range(10)}
    rows, clients = [], []
    for i in range(20):
        for d in rng.choice(10, size=3, replace=False):
            rows += [pools[int(d)].pop() for _ in range(50)]
            clients += [i] * 50
    return {"x": x[rows], "y": y[rows], "client": np.array(clients),
            "x_test": raw.x_test.reshape(len(raw.y_test), -1).astype(np.float32) / 255,
            "y_test": raw.y_test.astype(np.int64)}


def plan(path: Path, extra: list[str]) -> tuple[int, int, float]:
    cmd = [sys.executable, "-c", "from fedqr.cli import app; app()", "plan", "--data",
           str(path), "--model", "logreg", "--mechanism", "gaussian", "--eps", "2",
           "--sample-rate", "auto", "--json", "--no-cache", *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    r = json.loads(done.stdout)["recommended"]
    return int(r["rounds"]), int(r["clients_per_round"]), float(r["sample_rate"])


def run(data: fedqr.FederatedData, t: int, b: int, q: float) -> float:
    result = fedqr.simulate(data=data, model="logreg", mechanism="gaussian", eps=2.0,
                            sample_rate=q, rounds=t, clients_per_round=b, repeats=3, seed=1001)
    return float(result.final_test_loss)


def grid(data: fedqr.FederatedData, q: float) -> dict[tuple[int, int], float]:
    losses: dict[tuple[int, int], float] = {}
    for b in (1, 2, 5, 10, 20):
        prev = None
        for t in (4, 8, 16, 32, 64, 128, 256, 512):
            losses[t, b] = run(data, t, b, q)
            if prev is not None and t >= 32 and losses[t, b] > 1.02 * prev:
                break
            prev = losses[t, b]
    return losses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=Path("runs/proxy-std"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    warnings.simplefilter("ignore")
    arrays = deployment(args.seed)
    files = {"rows [n, 784]": arrays,
             "images [n, 28, 28]": {**arrays, "x": arrays["x"].reshape(-1, 28, 28),
                                    "x_test": arrays["x_test"].reshape(-1, 28, 28)}}
    print("| file | data use | plan (T, b, q) | loss | grid's best | regret |")
    print("|---|---|---|---:|---:|---:|")
    for label, content in files.items():
        path = args.out / f"{'rows' if 'rows' in label else 'images'}.npz"
        np.savez(path, **content)
        data = fedqr.FederatedData.from_file(path)
        plans = {"clear": plan(path, []), "public": plan(path, PUBLIC)}
        grids = {q: grid(data, q) for q in sorted({q for _, _, q in plans.values()})}
        best = min(min(g.values()) for g in grids.values())
        for use, (t, b, q) in plans.items():
            loss = grids[q].get((t, b)) or run(data, t, b, q)
            print(f"| {label} | {use} | ({t}, {b}, {q:g}) | {loss:.4f} | {best:.4f} | "
                  f"{100 * (loss / best - 1):+.1f}% |", flush=True)


if __name__ == "__main__":
    main()
