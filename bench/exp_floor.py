"""Benchmark: the softmax's exp floor (``fedqr.models.logreg.EXP_FLOOR``) against subnormals.

A noisy model's logits spread over hundreds, so many shifted logits ``l_j - max_l`` fall
between -103 and -87, where ``exp`` gives subnormal floats, which x86 CPUs handle in slow
microcode (in ``exp`` and in every operation after it). The floor raises them to -80 first.
Timed with the floor and without it (``-inf``: the same operations, nothing raised), in one
process and alternating:

* one MNIST-sized client's clipped residuals (6,000 rows, 10 repeats, 10 classes) from logits
  of spread 3 (a trained model) and 300 (a noisy one), checking that the residuals agree
  to 1e-30;
* Laplace runs of the paper's MNIST setting (10 repeats, mixed arithmetic) at eps = 10 and at
  eps = 1 (the noisy one), b = 10 for 100 rounds and b = 1 for 500: milliseconds per round,
  and the final mean test losses (equal where the floor changes nothing a sum holds).

    FEDQR_DATA=../shared/data python bench/exp_floor.py [--threads 2] [--rounds 10:100,1:500]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from _timing import best_seconds  # bench/ is on sys.path when run as a script

from fedqr._precision import Arithmetic
from fedqr.data import load_dataset, make_partition
from fedqr.models import logreg, logreg_eval
from fedqr.models.logreg import Norm, clipped_residual
from fedqr.privacy import Mechanism
from fedqr.sim.config import EvalTrain, PrivacyConfig, SimConfig
from fedqr.sim.engine import simulate


def set_floor(value: float) -> None:
    logreg.EXP_FLOOR = value
    logreg_eval.EXP_FLOOR = value


def residual_ms(spread: float) -> tuple[float, float, float]:
    """Residuals of one client with and without the floor (ms) and their largest difference."""
    c, r, k = 6000, 10, 10
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(c, r, k, generator=g) * spread
    y = torch.randint(0, k, (c,), generator=g)[:, None].expand(c, r)
    x_norm = torch.rand(c, 1, generator=g) * 100 + 50

    def f() -> torch.Tensor:
        out = clipped_residual(logits, y, x_norm=x_norm, clip=300.0, norm=Norm.L1,
                               metrics=False)
        assert out.residual is not None
        return out.residual

    floor = logreg.EXP_FLOOR
    t_on, a = best_seconds(f, 20), f()
    set_floor(-float("inf"))
    t_off, b = best_seconds(f, 20), f()
    set_floor(floor)
    return t_on * 1e3, t_off * 1e3, float((a - b).abs().max())


def round_ms(ds, part, *, b: int, eps: float, rounds: int) -> tuple[float, float]:
    """Steady milliseconds per round and the final mean test loss of one Laplace run."""
    cfg = SimConfig(num_clients=10, clients_per_round=b, rounds=rounds, repeats=10, seed=0,
                    eval_every=rounds, train_eval=EvalTrain.END, arithmetic=Arithmetic.MIXED,
                    privacy=PrivacyConfig(mechanism=Mechanism.LAPLACE, eps=eps, clip=300.0,
                                          sample_rate=1.0))
    marks: list[float] = []
    res = simulate(ds, part, cfg, on_round=lambda t: marks.append(time.perf_counter()))
    ms = (marks[-1] - marks[0]) / (len(marks) - 1) * 1e3
    return ms, float(np.mean(res.final("test_loss")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", default="10:100,1:500", help="b:T of the runs")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    floor = logreg.EXP_FLOOR
    print(f"threads={args.threads}; floor {floor}")
    for spread in (3.0, 300.0):
        on, off, diff = residual_ms(spread)
        assert diff < 1e-30, diff
        print(f"residuals of one client, logits of spread {spread:g}: floor {on:.2f} ms, "
              f"none {off:.2f} ms ({off / on:.2f}x); largest difference {diff:.1e}")
    ds = load_dataset("mnist")
    part = make_partition("two-digits", labels=ds.y_train, num_clients=10,
                          rng=np.random.default_rng(0))
    round_ms(ds, part, b=1, eps=1.0, rounds=3)  # warm-up
    for b, rounds in (map(int, bt.split(":")) for bt in args.rounds.split(",")):
        for eps in (10.0, 1.0):
            on, loss_on = round_ms(ds, part, b=b, eps=eps, rounds=rounds)
            set_floor(-float("inf"))
            off, loss_off = round_ms(ds, part, b=b, eps=eps, rounds=rounds)
            set_floor(floor)
            print(f"Laplace b = {b:2d}, T = {rounds}, eps = {eps:4g}: floor {on:6.1f} ms a "
                  f"round, none {off:6.1f} ms ({off / on:.2f}x); final test loss {loss_on:.6g} / "
                  f"{loss_off:.6g}")


if __name__ == "__main__":
    main()
