"""Benchmark: the logistic pass and the test evaluation on CSR rows against dense (MNIST).

For R repeats (R k columns), one Laplace pass over the 10 clients of the paper's two-digit
partition (``full_batch_sums``) and one evaluation of the 10,000 test rows (``evaluate``),
each on the dense layout (with constant columns split off) and on CSR rows with their
background (``fedqr.models.sparse_rows``), and which one ``pays`` picks: the check of the
crossing that rule encodes, on this machine. Then the CSR product of the test rows alone at 1
to 16 columns, as given and as computed (zero-padded to ``padded_columns``): the check of the
padding rule.

    FEDQR_DATA=../shared/data python bench/sparse_rows.py [--threads 1] [--repeats 1,2,4,10]
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import torch
from _timing import best_seconds  # bench/ is on sys.path when run as a script

from fedqr.data import load_dataset, make_partition
from fedqr.models.logreg import Norm
from fedqr.models.logreg_eval import evaluate
from fedqr.models.logreg_pass import client_layout, full_batch_sums
from fedqr.models.sparse_rows import SparseCache, SparseRows, background, padded_columns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", default="1,2,4,10")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ds = load_dataset("mnist")
    part = make_partition("two-digits", labels=ds.y_train, num_clients=10,
                          rng=np.random.default_rng(0))
    order = np.concatenate(part.indices)
    x = torch.as_tensor(ds.x_train[order], dtype=torch.float32)
    y = torch.as_tensor(ds.y_train[order], dtype=torch.int64)
    offsets = np.concatenate([[0], np.cumsum(part.sizes)]).astype(np.int64)
    sparse = client_layout(x, y, offsets=offsets, num_classes=10, norm=Norm.L1)
    dense = dataclasses.replace(sparse, sparse=None)
    xt, yt = torch.as_tensor(ds.x_test), torch.as_tensor(ds.y_test)
    test = SparseCache.of(xt, [(0, len(yt))], transpose=False)
    assert sparse.sparse is not None
    print(f"threads={args.threads}; density of the rows less their background: train "
          f"{np.mean([sparse.sparse.density_of(i) for i in range(10)]):.3f} (mean over "
          f"clients), test {test.density_of(0):.3f}")
    print(f"{'R':>3s} {'cols':>5s} | {'pass dense':>10s} {'pass csr':>9s} | "
          f"{'eval dense':>10s} {'eval csr':>9s} | picks")
    for r in (int(v) for v in args.repeats.split(",")):
        theta = 0.01 * torch.randn(r, 10, x.shape[1], generator=torch.Generator().manual_seed(0))
        sel = np.tile(np.arange(10), (r, 1))
        times = []
        for layout in (dense, sparse):
            times.append(1e3 * best_seconds(lambda lay=layout, th=theta, s=sel: full_batch_sums(
                lay, th, s, clip=300.0, norm=Norm.L1, chunk_rows=2048,
                with_train_loss=False), 5))
        for cache in (None, test):
            times.append(1e3 * best_seconds(lambda c=cache, th=theta: evaluate(
                xt, yt, th, chunk_rows=2048, sparse=c), 5))
        picks = "csr" if sparse.sparse.get(0, r * 10) is not None else "dense"
        if picks == "csr" and r == 1:  # every client's copies, built for this pass
            csr_mb = sum(t.nbytes for group in sparse.sparse._built.values()
                         for _, rows in group for m in (rows.csr, rows.csr_t) if m is not None
                         for t in (m.values(), m.col_indices(), m.crow_indices())) / 1e6
            print(f"    CSR copies (rows and transpose): {csr_mb:.0f} MB beside the dense "
                  f"rows' {x.nbytes / 1e6:.0f} MB")
        print(f"{r:3d} {r * 10:5d} | {times[0]:8.1f} ms {times[1]:6.1f} ms | {times[2]:8.1f} ms "
              f"{times[3]:6.1f} ms | {picks}")
    widths(xt)


def widths(xt: torch.Tensor) -> None:
    """The test rows' CSR products at 1 to 16 columns, as given and zero-padded to
    :func:`padded_columns` as :class:`SparseRows` computes them: ``S W`` and the transposed
    ``S^T R`` (the pass's gradient); and whether ``SparseRows.mm`` (the background's term
    added inside the product) gives the bits of the padded product plus that term added after."""
    rows = SparseRows.of(xt, offset=background(xt), transpose=True)
    assert rows.csr_t is not None and rows.offset is not None
    gen = torch.Generator().manual_seed(1)
    print(f"{'cols':>5s} {'padded to':>10s} | {'S W given':>9s} {'padded':>7s} | "
          f"{'S^T R given':>11s} {'padded':>7s} | mm bits as added after")
    for c in range(1, 17):
        w = torch.randn(xt.shape[1], c, generator=gen)
        res = torch.randn(xt.shape[0], c, generator=gen)
        wide, wide_res = _padded(w), _padded(res)
        t = [1e3 * best_seconds(lambda m=m, o=o: m @ o, 20) for m, o in (
            (rows.csr, w), (rows.csr, wide), (rows.csr_t, res), (rows.csr_t, wide_res))]
        after = (rows.csr @ wide)[:, :c] + rows.offset @ w
        same = torch.equal(rows.mm(w), after)
        print(f"{c:5d} {wide.shape[1]:10d} | {t[0]:6.2f} ms {t[1]:4.2f} ms | {t[2]:8.2f} ms "
              f"{t[3]:4.2f} ms | {'same' if same else 'differ'}")


def _padded(a: torch.Tensor) -> torch.Tensor:
    wide = torch.zeros(a.shape[0], padded_columns(a.shape[1]))
    wide[:, :a.shape[1]] = a
    return wide


if __name__ == "__main__":
    main()
