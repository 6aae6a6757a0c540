"""Benchmark: what a run on the same data saves by sharing its setup (``fedqr.sim.setup_memo``).

MNIST, 10 clients (two digits each), 3 Laplace rounds of b = 10, one repeat: ``fedqr.simulate``
with ``logreg`` and with ``linear`` (the intercept's rows made once too), and ``logreg`` in the
mixed arithmetic with 10 repeats (the full reproduction's runs: the clients' coded blocks made
once too; the bench first says whether the rows, standardised per column, are integer-coded,
and how long that took), each run three times
on the same ``FederatedData``: the first run (sorts the rows, builds their CSR copies), the
second (shares them) and a third after ``setup_memo.clear()`` (builds them again). The
difference of first and second is the setup a sweep no longer repeats.

    FEDQR_DATA=../shared/data python bench/setup_memo.py [--threads 2]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch

import fedqr
from fedqr.data import load_dataset, make_partition
from fedqr.models.logreg_coded import code_rows
from fedqr.sim import setup_memo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ds = load_dataset("mnist")
    part = make_partition("two-digits", labels=ds.y_train, num_clients=10,
                          rng=np.random.default_rng(0))
    client = np.empty(ds.num_train, dtype=np.int64)
    for i, rows in enumerate(part.indices):
        client[rows] = i
    data = fedqr.FederatedData.from_arrays(x=ds.x_train, y=ds.y_train, client=client,
                                           test_share=0.1, seed=0)
    print(f"threads={args.threads}; {ds.num_train} rows, 10 clients, 3 Laplace rounds, b = 10")
    t0 = time.perf_counter()  # the mixed row runs mixed only where the file's rows are coded
    coding = code_rows(data.x)  # (standardised per column; kept: the runs reuse it)
    took = time.perf_counter() - t0
    worst = (0.0 if coding is None else float(np.max(np.abs(
        coding.offset + coding.scale * coding.codes - data.x) / coding.scale)))
    print(f"the rows, standardised per column, integer-coded: {coding is not None} "
          f"(in {took:.2f} s; largest distance to the grid {worst:.1e} of "
          "a step)")
    print(f"{'model':16s} {'first':>8s} {'again':>8s} {'cleared':>8s}  same result")
    for model, arithmetic, repeats in (("logreg", "float32", 1), ("linear", "float32", 1),
                                       ("logreg", "mixed", 10)):
        def run(model: str = model, arithmetic: str = arithmetic,
                repeats: int = repeats) -> tuple[float, np.ndarray]:
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = fedqr.simulate(data=data, model=model, mechanism="laplace", eps=10.0,
                                     clip=300.0, rounds=3, clients_per_round=10, seed=0,
                                     arithmetic=arithmetic, repeats=repeats)
            return time.perf_counter() - t0, out.theta
        setup_memo.clear()
        (first, a), (again, b) = run(), run()
        setup_memo.clear()
        cleared, c = run()
        same = np.array_equal(a, b) and np.array_equal(a, c)
        print(f"{model + ', ' + arithmetic:16s} {first:6.2f} s {again:6.2f} s {cleared:6.2f} s  "
              f"{'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
