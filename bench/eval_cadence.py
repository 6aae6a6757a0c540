"""Benchmark: ms per MNIST round with the test loss every round, by training-objective cadence.

MNIST (60,000 x 784, N = 10, the paper's two-digits split), softmax regression, b = 10, the
test set (10,000 rows) evaluated every round (``eval_every=1``). Gaussian (q = 0.01: a round
trains on ~600 rows, so a full training objective is a forward pass over all 60,000) and
Laplace (q = 1: the full-batch pass yields the training loss nearly for free). For every
``train_eval`` setting (``every``, ``end``, ``none``, ``sample:N``) it prints the median
steady-state ms per round (setup excluded) over ``--rounds`` rounds, wall-clock and process CPU
time (all threads: steadier than wall time on a shared machine), best of ``--reps`` runs
interleaved over the settings.

    FEDQR_DATA=../shared/data python bench/eval_cadence.py [--threads 2] [--rounds 40]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import numpy as np
import torch

from fedqr.data import load_dataset, make_partition
from fedqr.privacy import Mechanism
from fedqr.sim.config import PrivacyConfig, SimConfig
from fedqr.sim.engine import simulate

try:  # absent before the setting existed: the bench then times today's behaviour only
    from fedqr.sim.config import parse_train_eval
except ImportError:  # pragma: no cover
    parse_train_eval = None

SETTINGS = ("every", "end", "none", "sample:1000", "sample:10000")


def round_ms(ds, part, cfg: SimConfig) -> tuple[float, float]:
    """Median wall and process CPU ms per round of one run (setup and round 1 excluded)."""
    wall: list[float] = []
    cpu: list[float] = []

    def mark(_: int) -> None:
        wall.append(time.perf_counter())
        cpu.append(time.process_time())

    simulate(ds, part, cfg, on_round=mark)
    return (statistics.median(np.diff(wall)) * 1e3, statistics.median(np.diff(cpu)) * 1e3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--settings", default=",".join(SETTINGS),
                    help="comma-separated train_eval settings timed")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ds = load_dataset("mnist")
    part = make_partition("two-digits", labels=ds.y_train, num_clients=10,
                          rng=np.random.default_rng(0))
    mechs = {"gaussian": PrivacyConfig(mechanism=Mechanism.GAUSSIAN, eps=1.0, delta=1e-5,
                                       clip=10.0, sample_rate=0.01),
             "laplace": PrivacyConfig(mechanism=Mechanism.LAPLACE, eps=10.0, clip=300.0,
                                      sample_rate=1.0)}
    settings = args.settings.split(",") if parse_train_eval is not None else ["(today)"]
    configs = {}
    for name, privacy in mechs.items():
        base = SimConfig(num_clients=10, clients_per_round=10, rounds=args.rounds,
                         privacy=privacy, eval_every=1)
        for setting in settings:
            cfg = base
            if parse_train_eval is not None:
                mode, rows = parse_train_eval(setting)
                cfg = dataclasses.replace(base, train_eval=mode, train_eval_rows=rows)
            configs[name, setting] = cfg
    best = {key: (float("inf"), float("inf")) for key in configs}
    for _ in range(args.reps):  # interleaved: a busy spell of the machine hits every setting
        for key, cfg in configs.items():
            wall, cpu = round_ms(ds, part, cfg)
            best[key] = (min(best[key][0], wall), min(best[key][1], cpu))
    print(f"threads={args.threads} rounds={args.rounds} reps={args.reps}: ms per round with "
          "the test loss every round, median over rounds, best of the reps")
    for (name, setting), (wall, cpu) in best.items():
        print(f"{name:8s} b=10  {setting:13s} wall {wall:8.2f}  cpu {cpu:8.2f}")


if __name__ == "__main__":
    main()
