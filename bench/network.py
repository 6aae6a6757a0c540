"""Benchmark: seconds per FedSGD-DPC round of the paper's CNN on real FEMNIST (N = b = 10).

Times :func:`fedqr.sim.network.simulate_network` on the 57,180 training samples of the
compact FEMNIST subset (10 clients by writer) for the paper's two mechanisms: Laplace
(xi1 = 200, every client clips all its ~5,700 samples) and Gaussian (xi2 = 10, q = 0.01).
Each configuration is timed with and without test evaluation (16,374 samples, in chunks of
``--eval-rows``), so the cost of each part shows; ``--channels-last`` compares layouts.

    FEDQR_DATA=../shared/data python bench/network.py [--threads 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from fedqr.data import load_dataset, make_partition
from fedqr.privacy import Mechanism
from fedqr.sim.config import EvalTrain, PrivacyConfig, SimConfig
from fedqr.sim.network import NetworkOptions, evaluate_model, paper_cnn_factory, simulate_network

SETTINGS = {
    "laplace": PrivacyConfig(mechanism=Mechanism.LAPLACE, eps=10.0, clip=200.0,
                             sample_rate=1.0),
    "gaussian": PrivacyConfig(mechanism=Mechanism.GAUSSIAN, eps=1.0, delta=1e-5, clip=10.0,
                              sample_rate=0.01),
}


def round_seconds(ds, part, privacy: PrivacyConfig, *, rounds: int, evaluate: bool,
                  opts: NetworkOptions, device: str) -> float:
    """Best seconds of rounds 2..T+1 (between progress callbacks: setup, calibration and the
    round-0 evaluation excluded); with ``evaluate`` each includes one test evaluation."""
    stamps: list[float] = []
    cfg = SimConfig(num_clients=10, clients_per_round=10, rounds=rounds + 1, privacy=privacy,
                    eval_every=1 if evaluate else 10**9, train_eval=EvalTrain.NONE)
    simulate_network(ds, part, cfg, options=opts, device=device,
                     on_round=lambda _: stamps.append(time.perf_counter()))
    return float(np.diff(stamps).min())


def _peak_mb(reset: bool = False) -> float:
    """Peak resident memory (VmHWM, Linux) in MB; ``reset`` restarts the high-water mark."""
    if reset:
        Path("/proc/self/clear_refs").write_text("5")
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def eval_seconds(ds, *, rows: int, channels_last: bool, device: str) -> float:
    model = paper_cnn_factory(ds)(torch.Generator().manual_seed(0)).to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    x = torch.as_tensor(ds.x_test, device=device).view(-1, 1, 28, 28)
    y = torch.as_tensor(ds.y_test, device=device)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        evaluate_model(model, x, y, chunk_rows=rows, channels_last=channels_last)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--eval-rows", type=int, default=256)
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--only", choices=sorted(SETTINGS), help="one mechanism")
    parser.add_argument("--no-eval-table", action="store_true",
                        help="skip timing the test evaluation by chunk size and layout")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ds = load_dataset("femnist")
    part = make_partition("by-writer", labels=ds.y_train, writers=ds.writer_train,
                          num_clients=10, rng=np.random.default_rng(0))
    print(f"FEMNIST: {ds.num_train} train / {ds.num_test} test, client sizes "
          f"{part.sizes.min()}-{part.sizes.max()}; {args.device}, {args.threads} threads")
    print(f"  resident after loading: {_peak_mb(reset=True):.0f} MB")
    for cl in () if args.no_eval_table else (False, True):
        for rows in (250, 1000, 4000):
            s = eval_seconds(ds, rows=rows, channels_last=cl, device=args.device)
            print(f"  test evaluation, chunks of {rows:4d}, channels_last={cl!s:5}: {s:.2f} s")
    opts = NetworkOptions(chunk_rows=args.chunk, eval_rows=args.eval_rows,
                          channels_last=args.channels_last)
    for name, privacy in SETTINGS.items():
        if args.only and name != args.only:
            continue
        for evaluate in (False, True):
            base = _peak_mb(reset=True)
            s = round_seconds(ds, part, privacy, rounds=args.rounds, evaluate=evaluate,
                              opts=opts, device=args.device)
            what = "with test evaluation" if evaluate else "training only"
            print(f"  {name:8s} b=10 round, {what:21s}: {s:6.2f} s  "
                  f"(peak resident +{_peak_mb() - base:.0f} MB)")


if __name__ == "__main__":
    main()
