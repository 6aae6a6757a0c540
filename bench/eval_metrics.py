"""Benchmark: the test metrics' sums over MNIST's 10,000 test rows, by layout of the logits.

``fedqr.models.logreg_eval.summed_metrics`` (summed cross-entropy and number correct of R
repeats) lays the logits out class-major, ``(R, k, c)``, so that every reduction over the k =
10 classes is an elementwise operation along the rows. The row-major formulation it replaced
(``ROW_MAJOR`` below: ``max(dim=-1)`` with indices and a log-sum-exp over the last
dimension) is timed beside it on the same logits, and both beside the CSR product of the
test rows (``evaluate`` as a whole): how much of an evaluation the sums take. The two must
count the same rows correct and agree on the loss to float32 rounding (checked).

    FEDQR_DATA=../shared/data python bench/eval_metrics.py [--threads 2] [--repeats 1,3,10]
"""

from __future__ import annotations

import argparse

import torch
from _timing import best_seconds  # bench/ is on sys.path when run as a script
from torch import Tensor

from fedqr.data import load_dataset
from fedqr.models.logreg_eval import evaluate, summed_metrics
from fedqr.models.sparse_rows import SparseCache


def row_major(logits: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """The formulation before the class-major layout (finite logits only)."""
    c, r, _ = logits.shape
    top, first = logits.max(dim=-1)
    picked = logits.gather(-1, y.view(c, 1, 1).expand(c, r, 1)).squeeze(-1)
    lse = (logits - top.unsqueeze(-1)).exp_().sum(dim=-1).log_()
    return lse.add_(top).sub_(picked).sum(dim=0), (first == y[:, None]).sum(dim=0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", default="1,3,10")
    ap.add_argument("--calls", type=int, default=200, help="timed calls per figure (fastest)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ds = load_dataset("mnist")
    x = torch.as_tensor(ds.x_test, dtype=torch.float32)
    y = torch.as_tensor(ds.y_test, dtype=torch.int64)
    k, c = ds.num_classes, x.shape[0]
    cache = SparseCache.of(x, [(0, c)], transpose=False)  # the test set's CSR, as the engine's
    gen = torch.Generator().manual_seed(0)
    print(f"MNIST test rows: {c}, k = {k}, {args.threads} threads; microseconds, fastest of "
          f"{args.calls} calls")
    print(f"{'R':>3} {'row-major':>10} {'class-major':>12} {'gain':>6} {'evaluate':>9} "
          f"{'same':>5}")
    for r in (int(v) for v in args.repeats.split(",")):
        theta = torch.randn(r, k, x.shape[1], generator=gen) * 0.05
        logits = (x @ theta.reshape(r * k, -1).T).view(c, r, k)
        old = best_seconds(lambda logits=logits: row_major(logits.clone(), y), args.calls)
        new = best_seconds(lambda logits=logits: summed_metrics(logits, y), args.calls)
        whole = best_seconds(lambda theta=theta: evaluate(x, y, theta, chunk_rows=c,
                                                          sparse=cache), args.calls)
        a, b = row_major(logits.clone(), y), summed_metrics(logits, y)
        same = bool(torch.equal(a[1], b[1])) and bool(torch.allclose(a[0], b[0], rtol=1e-6))
        print(f"{r:3d} {old * 1e6:10.0f} {new * 1e6:12.0f} {old / new:5.2f}x "
              f"{whole * 1e6:9.0f} {'yes' if same else 'NO':>5}")


if __name__ == "__main__":
    main()
