"""Benchmark: the non-private optimum theta* of MNIST (``fedqr reproduce``'s L-BFGS), through
the sparse objective against the dense one.

``fedqr.theory.estimate_logreg`` evaluates ``F`` and its gradient through CSR rows with their
background where those products pay (MNIST: 19% non-zero besides the background), else by
dense float64 products. This times one evaluation each way, then ``regularised_optimum`` each
way (the sparse one including its CSR copies), and checks that both reach the same optimum
(objective values within L-BFGS's tolerance); then theta* of the first n rows each way, the
check of the row count below which the dense objective is kept.

    FEDQR_DATA=../shared/data python bench/theta_star.py [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from _timing import best_seconds  # bench/ is on sys.path when run as a script

import fedqr.theory.estimate_logreg as est
from fedqr.data import load_dataset

WEIGHT_DECAY = 0.01  # the reproduction's


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ds = load_dataset("mnist")
    x = np.asarray(ds.x_train, dtype=np.float64)
    y = np.asarray(ds.y_train, dtype=np.int64)
    k = ds.num_classes
    theta = np.random.default_rng(0).normal(size=(x.shape[1], k)) * 0.01
    started = time.perf_counter()
    sparse = est._objective(x, y, k, WEIGHT_DECAY)
    build = time.perf_counter() - started
    print(f"MNIST {x.shape[0]} x {x.shape[1]}, {args.threads} threads; objective: "
          f"{sparse.__name__} (its CSR copies {build:.2f} s)")
    for name, f in (("sparse", sparse), ("dense", lambda t: est.value_and_gradient(
            x, y, t, WEIGHT_DECAY))):
        print(f"  one evaluation, {name}: {best_seconds(lambda f=f: f(theta), 5) * 1e3:.1f} ms")
    optima = {}
    for name, min_rows in (("sparse", est._SPARSE_MIN_ROWS), ("dense", 1 << 62)):
        saved, est._SPARSE_MIN_ROWS = est._SPARSE_MIN_ROWS, min_rows
        try:
            started = time.perf_counter()
            optima[name] = est.regularised_optimum(ds.x_train, ds.y_train, num_classes=k,
                                                   weight_decay=WEIGHT_DECAY)
            print(f"  theta*, {name}: {time.perf_counter() - started:.1f} s")
        finally:
            est._SPARSE_MIN_ROWS = saved
    print("  theta* of the first n rows (where est._SPARSE_MIN_ROWS switches to sparse):")
    for n in (1024, 2048, 4096, 8192):
        times = {}
        for name, min_rows in (("sparse", 1), ("dense", 1 << 62)):
            saved, est._SPARSE_MIN_ROWS = est._SPARSE_MIN_ROWS, min_rows
            try:
                times[name] = best_seconds(lambda n=n: est.regularised_optimum(
                    x[:n], y[:n], num_classes=k, weight_decay=WEIGHT_DECAY), 2)
            finally:
                est._SPARSE_MIN_ROWS = saved
        print(f"    n = {n:5d}: sparse {times['sparse']:.3f} s, dense {times['dense']:.3f} s")
    values = {n: est.value_and_gradient(x, y, t.T.copy(), WEIGHT_DECAY)[0]
              for n, t in optima.items()}
    diff = np.linalg.norm(optima["sparse"] - optima["dense"]) / np.linalg.norm(optima["dense"])
    print(f"  F(theta*): sparse {values['sparse']:.12f}, dense {values['dense']:.12f}; "
          f"relative distance of the two theta* {diff:.1e}")


if __name__ == "__main__":
    main()
