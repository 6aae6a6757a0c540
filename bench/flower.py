"""Benchmark: seconds per FedSGD-DPC round on Flower against the in-process engine, and memory.

Workloads (``--workloads``, comma-separated):

- ``digits3``: digits, N = b = 3, Gaussian (eps 1, q 0.01), the issue's smallest federation;
- ``mnist10``: MNIST, N = b = 10, two digits each, Gaussian;
- ``mnist100``, ``mnist1000``: MNIST, N = 100 / 1,000 clients, b = 10, simulation only.

Each runs in-process (``fedqr run``'s engine, per-reply seeding), in Flower's simulation
runtime (``fedqr flower simulate``) and on a local deployment (``fedqr flower deploy``: a
SuperLink and N SuperNodes on 127.0.0.1). Printed: start-up seconds, the median seconds per
round of rounds 2..T (from the ServerApp's own round log), and the peak memory: the largest sum
of the resident set sizes of this process and all its descendants (sampled every 0.2 s).
The final models are compared with the engine's.

    FEDQR_DATA=../shared/data python bench/flower.py [--rounds 5] [--workloads digits3,...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from fedqr.data import DatasetName
from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.procs import _descendants
from fedqr.flower.runner import FlowerRunner, Mode
from fedqr.privacy import Mechanism
from fedqr.sim.engine import simulate

WORKLOADS = {  # name: (data set, N, b, modes)
    "digits3": (DatasetName.DIGITS, 3, 3, ("engine", "simulation", "deployment")),
    "mnist10": (DatasetName.MNIST, 10, 10, ("engine", "simulation", "deployment")),
    "mnist100": (DatasetName.MNIST, 100, 10, ("engine", "simulation")),
    "mnist1000": (DatasetName.MNIST, 1000, 10, ("engine", "simulation")),
}


class PeakMemory:
    """Largest summed RSS (bytes) of this process and its descendants while in the block."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        total = 0
        for pid in [os.getpid(), *_descendants(os.getpid())]:
            try:
                with open(f"/proc/{pid}/statm", encoding="utf-8") as fh:
                    total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, ValueError, IndexError):
                continue
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(0.2)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def engine(cfg: FlowerRunConfig) -> tuple[float, float, np.ndarray]:
    """(start-up s, s per round, final model) of the in-process engine."""
    started = time.perf_counter()
    ds, part = cfg.load_data()
    marks: list[float] = []
    res = simulate(ds, part, cfg.sim_config(), on_round=lambda t: marks.append(time.perf_counter()))
    per_round = float(statistics.median(np.diff(marks)))
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
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workloads", default="digits3,mnist10,mnist100,mnist1000")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; Gaussian eps 1, delta 1e-5, clip 10, q 0.01; "
          f"T={args.rounds}; seconds per round: median of rounds 2..T")
    for name in args.workloads.split(","):
        dataset, n, b, modes = WORKLOADS[name]
        cfg = FlowerRunConfig(num_clients=n, clients_per_round=b, rounds=args.rounds,
                              dataset=dataset, mechanism=Mechanism.GAUSSIAN, eps=(1.0,),
                              sample_rate=0.01, seed=0, round_timeout=600.0,
                              connect_timeout=1200.0)
        thetas = {}
        for mode in modes:
            with PeakMemory() as mem:
                start, per_round, thetas[mode] = (engine(cfg) if mode == "engine"
                                                  else flower(cfg, Mode(mode)))
            diff = np.abs(thetas[mode] - thetas["engine"]).max()
            print(f"  {name:<10} {mode:<11} start-up {start:7.1f} s   per round "
                  f"{per_round:8.3f} s   peak memory {mem.peak / 2**20:8.0f} MiB   "
                  f"max|theta - engine| {diff:.1e}", flush=True)


if __name__ == "__main__":
    main()
