"""The twin's forward product ``X theta^T`` per repeat in its two layouts, by logit columns.

A round of the logistic twin with Poisson batches gathers each repeat's rows ``X`` (``(K, m,
p)``) and multiplies them by the running columns' parameters (``(K, c, p)``, c = columns x
classes). For a few columns (one long horizon left running, the common case of a plan's last
rounds) the plain product ``X theta^T`` is slow on CPU and ``(theta X^T)^T`` is not;
``fedqr.models.logreg.NARROW_COLUMNS`` is where the layouts cross. The last columns are the
same products in bfloat16 (``fedqr._precision``: the twin's products where the CPU has
native bfloat16 dot products; the plain layout, and the gradient ``S^T X`` of a round) beside
the float32 gradient. Prints ms per product (the fastest of 100 calls) for MNIST's p = 784
and a round's m = 620 rows.

    PYTHONPATH=src python bench/twin_products.py [--threads 2] [--repeats 3]
"""

from __future__ import annotations

import argparse

import torch
from _timing import best_seconds  # bench/ is on sys.path when run as a script

from fedqr._precision import native_bf16
from fedqr.models.logreg import NARROW_COLUMNS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="K, the twin's repeats")
    ap.add_argument("--rows", type=int, default=620, help="m, rows of a round per repeat")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(args.repeats, args.rows, 784, generator=gen)
    print(f"K = {args.repeats}, m = {args.rows}, p = 784, {args.threads} threads; "
          f"NARROW_COLUMNS = {NARROW_COLUMNS}")
    print(f"native bfloat16: {native_bf16()}")
    print(f"{'columns':>8} {'X theta^T':>10} {'(theta X^T)^T':>14} {'bf16 X theta^T':>15} "
          f"{'S^T X':>8} {'bf16 S^T X':>11}")
    xb = x.to(torch.bfloat16)
    for c in (10, 20, 24, 30, 40, 80):
        th = torch.randn(args.repeats, c, 784, generator=gen)
        res = torch.randn(args.repeats, args.rows, c, generator=gen)
        plain = best_seconds(lambda th=th: torch.bmm(x, th.transpose(1, 2)), 100)
        flipped = best_seconds(
            lambda th=th: torch.bmm(th, x.transpose(1, 2)).transpose(1, 2).contiguous(), 100)
        bf16 = best_seconds(lambda th=th: torch.bmm(
            xb, th.to(torch.bfloat16).transpose(1, 2)).float(), 100)
        grad = best_seconds(lambda res=res: torch.bmm(res.transpose(1, 2), x), 100)
        grad_bf16 = best_seconds(lambda res=res: torch.bmm(
            res.transpose(1, 2).to(torch.bfloat16), xb).float(), 100)
        print(f"{c:>8} {plain * 1e3:>9.3f} {flipped * 1e3:>13.3f} {bf16 * 1e3:>14.3f} "
              f"{grad * 1e3:>8.3f} {grad_bf16 * 1e3:>10.3f}")


if __name__ == "__main__":
    main()
