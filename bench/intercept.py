"""``logreg`` (no intercept, the paper's model) against ``linear`` (an intercept) on real data:
the figures the README, the CHANGELOG and ``docs/planner.md`` quote.

Each case runs both models through ``fedqr.simulate`` on the same deployment, schedule and
seeds (the Adult Laplace case: each model at its own plan's schedule, as ``fedqr plan``
recommended it on 2026-11-27) and prints each model's mean final test loss (+- its standard
error over the runs), its accuracy, and the paired difference ``linear - logreg`` where the
schedules are the same.

    FEDQR_DATA=... PYTHONPATH=src python bench/intercept.py [--only adult-none,...]
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from planner_workloads import deployment  # bench/ is on sys.path as a script

import fedqr


@dataclass(frozen=True)
class Case:
    name: str
    workload: str
    privacy: dict[str, Any]
    schedules: dict[str, tuple[int, int]]  # model -> (T, b)
    lr: float
    seeds: tuple[int, ...]
    repeats: int = 1


CASES = (
    Case("adult-none", "adult", {"mechanism": "none"},
         {"logreg": (300, 20), "linear": (300, 20)}, lr=0.5, seeds=(0,)),
    Case("heart4-none", "heart4", {"mechanism": "none"},
         {"logreg": (300, 4), "linear": (300, 4)}, lr=0.5, seeds=(0,)),
    Case("adult-laplace-eps2-own-plans", "adult",
         {"mechanism": "laplace", "eps": 2.0, "clip": 5.0},
         {"logreg": (128, 6), "linear": (156, 13)}, lr=0.05, seeds=(0,), repeats=3),
    Case("mnist-two-f0.1-gauss-eps2", "mnist_two-f0.1",
         {"mechanism": "gaussian", "eps": 2.0, "clip": 5.0, "sample_rate": 0.02},
         {"logreg": (512, 10), "linear": (512, 10)}, lr=0.05, seeds=tuple(range(5000, 5006))),
)


def _runs(case: Case, model: str) -> tuple[list[float], list[float]]:
    t, b = case.schedules[model]
    losses, accs = [], []
    for seed in case.seeds:
        res = fedqr.simulate(data=deployment(case.workload), model=model, rounds=t,
                             clients_per_round=b, lr=case.lr, repeats=case.repeats, seed=seed,
                             **case.privacy)
        losses.append(res.final_test_loss)
        accs.append(res.final_test_accuracy)
    return losses, accs


def _mean_se(v: list[float]) -> str:
    se = np.std(v, ddof=1) / math.sqrt(len(v)) if len(v) > 1 else math.nan
    return f"{np.mean(v):.4f}" + ("" if math.isnan(se) else f" +- {se:.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=None, help="comma-separated case names")
    args = ap.parse_args()
    for case in CASES:
        if args.only and case.name not in args.only.split(","):
            continue
        out = {m: _runs(case, m) for m in ("logreg", "linear")}
        for m, (loss, acc) in out.items():
            t, b = case.schedules[m]
            print(f"{case.name:30s} {m:7s} T={t:4d} b={b:3d}  test loss {_mean_se(loss)}  "
                  f"accuracy {np.mean(acc):.4f}  ({len(loss)} run(s) x {case.repeats} "
                  f"repeat(s))", flush=True)
        if case.schedules["logreg"] == case.schedules["linear"] and len(case.seeds) > 1:
            diff = list(np.subtract(out["linear"][0], out["logreg"][0]))
            print(f"{case.name:30s} paired linear - logreg: {_mean_se(diff)}", flush=True)


if __name__ == "__main__":
    main()
