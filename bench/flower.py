"""Benchmark: time per FedSGD-DPC round on Flower against the in-process engine (MNIST).

The same workload three ways: the paper's MNIST setting (N = 10 clients, two digits each,
b = 10, Laplace eps = 10, clip 300, test evaluation every round), run

- in process by fedqr's engine (``noise_seeding="per-reply"``, as the Flower runs),
- in Flower's simulation runtime (SuperLink ``--simulation``, N virtual SuperNodes on Ray),
- on a local deployment (a SuperLink and N SuperNode processes on 127.0.0.1),

and prints steady-state seconds per round (rounds after the first, from the ServerApp's own
round log; start-up excluded and shown apart) and the ratios to the engine. The engine is
timed before and after the Flower runs and the faster figure kept (a shared machine's load
drifts). It also checks that the final models agree.

    FEDQR_DATA=../shared/data python bench/flower.py [--rounds 4] [--modes ...]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from fedqr.data import DatasetName
from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.runner import FlowerRunner, Mode
from fedqr.privacy import Mechanism
from fedqr.sim.engine import simulate


def engine(cfg: FlowerRunConfig) -> tuple[float, float, np.ndarray]:
    """(start-up s, s per round, final model) of the in-process engine."""
    started = time.perf_counter()
    ds, part = cfg.load_data()
    marks: list[float] = []
    res = simulate(ds, part, cfg.sim_config(), on_round=lambda t: marks.append(time.perf_counter()))
    per_round = (marks[-1] - marks[0]) / (len(marks) - 1)
    return marks[0] - started - per_round, per_round, res.final_theta[0]


def flower(cfg: FlowerRunConfig, mode: Mode) -> tuple[float, float, np.ndarray]:
    """(start-up s, s per round, final model) of a Flower run, rounds from the server's log."""
    with tempfile.TemporaryDirectory(prefix="fedqr-bench-") as work:
        started = time.perf_counter()
        with FlowerRunner(cfg, mode=mode, work=Path(work)) as runner:
            runner.start()
            outcome = runner.wait(timeout_s=3600)
            total = time.perf_counter() - started
            lines = runner.progress()
    ends = [line["elapsed_s"] for line in lines]  # seconds since round 0 started
    steps = np.diff(ends)
    per_round = float(statistics.median(steps)) if len(steps) else ends[0]
    return total - ends[-1], per_round, outcome.theta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--num-clients", type=int, default=10)
    parser.add_argument("--clients-per-round", type=int, default=10)
    parser.add_argument("--modes", default="engine,simulation,deployment")
    args = parser.parse_args()
    cfg = FlowerRunConfig(num_clients=args.num_clients, clients_per_round=args.clients_per_round,
                          rounds=args.rounds, dataset=DatasetName.MNIST,
                          mechanism=Mechanism.LAPLACE, eps=(10.0,), clip=300.0, sample_rate=1.0,
                          lr=0.05, seed=0, round_timeout=600.0, connect_timeout=600.0)
    modes = args.modes.split(",")
    print(f"MNIST, N={cfg.num_clients}, b={cfg.clients_per_round}, T={cfg.rounds}, Laplace "
          "eps=10, clip 300; steady-state time per round (median of rounds 2..T)")
    results: dict[str, tuple[float, float, np.ndarray]] = {}
    for mode in modes:
        results[mode] = engine(cfg) if mode == "engine" else flower(cfg, Mode(mode))
        start, per_round, _ = results[mode]
        print(f"  {mode:<11} start-up {start:7.1f} s   per round {per_round * 1e3:9.1f} ms",
              flush=True)
    if "engine" in results and len(modes) > 1:
        again = engine(cfg)
        print(f"  {'engine':<11} start-up {again[0]:7.1f} s   per round {again[1] * 1e3:9.1f} ms"
              " (again)")
        if again[1] < results["engine"][1]:
            results["engine"] = again
    if "engine" in results:
        base = results["engine"][1]
        for mode in modes:
            if mode != "engine":
                print(f"  {mode} / engine: {results[mode][1] / base:8.1f}x per round")
        for mode in modes:
            diff = np.abs(results[mode][2] - results["engine"][2]).max()
            print(f"  max |theta_{mode} - theta_engine| = {diff:.2e}")


if __name__ == "__main__":
    main()
