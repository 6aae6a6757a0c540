"""Benchmark: the privacy audit's lower bounds and wall time, Laplace and Gaussian, eps 1, 4, 10.

Runs ``fedqr.audit.run_audit`` (all three audits: replies, final model, one reply with the
canary in its batch) on the scenarios below at each epsilon and prints a Markdown table (the
one in docs/privacy.md):

- ``one reply``: N = 10, b = 1, T = 10, so the audited client replies once (R = 1);
  Laplace, Gaussian without sampling (q = 1), Gaussian with q = 0.01;
- ``run default``: ``fedqr run``'s N = 10, b = 10, T = 100 (R = 100), Laplace and Gaussian
  with their default q (1 and 0.01);
- ``large`` (with ``--large``): N = 100, b = 10, T = 1000 (R = 100, 10,000 replies in the
  final model), the done-when check that one scenario audits in <= 5 minutes on 2 cores.

``ceiling`` is the largest bound the evaluation trials can give at all (every trial right):
``log(a^(1/n) / (1 - a^(1/n)))`` with ``n = trials / 2`` and ``a = (1 - confidence) / 2``.

    python bench/audit.py [--threads 2] [--trials 10000] [--one-reply-trials 4000000]
                          [--eps 1 4 10] [--large] [--only NAME]
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from fedqr.audit import AuditConfig, run_audit
from fedqr.privacy import Mechanism

L, G = Mechanism.LAPLACE, Mechanism.GAUSSIAN
SCENARIOS = [  # name, mechanism, q, N, b, T
    ("one reply", L, 1.0, 10, 1, 10),
    ("one reply", G, 1.0, 10, 1, 10),
    ("one reply", G, 0.01, 10, 1, 10),
    ("run default", L, 1.0, 10, 10, 100),
    ("run default", G, 0.01, 10, 10, 100),
]
LARGE = [("large", L, 1.0, 100, 10, 1000), ("large", G, 0.01, 100, 10, 1000)]


def ceiling(trials: int, confidence: float) -> float:
    """The bound of a perfect distinguisher on ``trials // 2`` evaluation trials per world."""
    n = trials - trials // 2
    lo = ((1 - confidence) / 2) ** (1 / n)
    return math.log(lo / (1 - lo))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--one-reply-trials", type=int, default=4_000_000)
    ap.add_argument("--eps", type=float, nargs="+", default=[1.0, 4.0, 10.0])
    ap.add_argument("--large", action="store_true", help="add the large scenarios")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="run only the scenarios whose name has this")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch threads {torch.get_num_threads()}, trials {args.trials} per world "
          f"(one reply: {args.one_reply_trials}), confidence 0.95 for all three bounds "
          f"together (each at {1 - 0.05 / 3:.4f}); ceiling of the whole-run audits "
          f"{ceiling(args.trials, 1 - 0.05 / 3):.2f}\n")
    print("| scenario | mechanism | q | N, b, T | R | eps | eps >= (replies) "
          "| eps >= (final model) | one reply: claim | one reply: eps >= | wall s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, mech, q, n, b, t in SCENARIOS + (LARGE if args.large else []):
        if args.only not in name:
            continue
        for eps in args.eps:
            config = AuditConfig(mechanism=mech, eps=eps, sample_rate=q, num_clients=n,
                                 clients_per_round=b, rounds=t, trials=args.trials,
                                 one_reply_trials=args.one_reply_trials,
                                 clip=300.0 if mech is L else 10.0, seed=args.seed)
            started = time.perf_counter()
            rep = run_audit(config)
            wall = time.perf_counter() - started
            rep_r, fin_r, one_r = rep.results
            print(f"| {name} | {mech.value} | {q:g} | {n}, {b}, {t} | {rep.replies} | "
                  f"{eps:g} | {rep_r.epsilon_lower_bound:.2f} | "
                  f"{fin_r.epsilon_lower_bound:.2f} | {one_r.epsilon_claimed:.3g} | "
                  f"{one_r.epsilon_lower_bound:.3g} | {wall:.1f} |", flush=True)


if __name__ == "__main__":
    main()
