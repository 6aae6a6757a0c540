"""What the clients' label counts would buy a public-proxy plan (an oracle, not a feature).

A public proxy is dealt to the deployment's clients by their reported sizes, with a uniform
draw of labels (``fedqr.planner.public.split_by_sizes``): the clients' label counts are not
released. On the three hospitals of heart disease, whose label mixes are far apart, two
held-out public-proxy plans took b = 2 where b = 3 was best (docs/planner.md, "Eleven at
planner version 17"). This plans those deployments again with the proxy dealt so that every
client gets **its true label mix** (read from the clients' data without privacy: the most
that label counts released with DP could tell, as their epsilon grows), and scores both
plans' schedules with the held-out runs' seeds (``bench/planner_suite_models.py``: 3 repeats
from 1000 + the case's index, and 30 from 3000 + it).

    FEDQR_DATA=../shared/data PYTHONPATH=src python bench/public_label_mix.py \
        [--only ho1129b-heart3-logreg-lap-eps4,ho1129-heart3-mlp16-lap-eps4]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
import torch
from numpy.typing import NDArray
from planner_suite_models import (  # bench/ is on sys.path when run as a script
    CASES,
    CONFIRM_SEED,
    HELD_OUT,
    VALIDATION_SEED,
    MCase,
    _run,
)
from planner_workloads import public_proxy

import fedqr.planner.public as public
from fedqr.data import Partition
from fedqr.planner import DataUse, ProxyChoice, make_plan

DEFAULT = "ho1129b-heart3-logreg-lap-eps4,ho1129-heart3-mlp16-lap-eps4"


def mix_split(shares: NDArray[np.float64]) -> Callable[..., Partition]:
    """``split_by_sizes`` dealing client i the label shares ``shares[i]`` (uniform draws
    within a class; a class that runs out is filled from those with rows left)."""
    uniform = public.split_by_sizes

    def split(labels: NDArray[np.int64], sizes: NDArray[np.int64], *,
              rng: np.random.Generator, label_alpha: float | None = None) -> Partition:
        if label_alpha is not None:  # the shift's skewed alternatives stay as they are
            return uniform(labels, sizes, rng=rng, label_alpha=label_alpha)
        m = public._targets(len(labels), np.asarray(sizes, dtype=np.int64))
        classes = np.unique(labels)
        left = [list(rng.permutation(np.flatnonzero(labels == c))) for c in classes]
        parts: list[NDArray[np.int64]] = []
        for i, size in enumerate(m):
            want = np.floor(shares[i] * size).astype(int)
            want[int(np.argmax(shares[i]))] += int(size - want.sum())
            rows: list[int] = []
            for c in range(len(classes)):
                take = min(int(want[c]), len(left[c]))
                rows += left[c][:take]
                left[c] = left[c][take:]
            while len(rows) < size:
                c = int(np.argmax([len(v) for v in left]))
                rows.append(left[c].pop(0))
            parts.append(np.sort(np.asarray(rows, dtype=np.int64)))
        return Partition(indices=tuple(parts))

    return split


def _plan(case: MCase) -> tuple[int, int, float, float]:
    choice = ProxyChoice(use=DataUse.PUBLIC_PROXY, public=public_proxy(str(case.public)),
                         public_label=str(case.public))
    plan = make_plan(case.scenario(), proxy=choice, use_cache=False)
    r = plan.recommended
    return r.rounds, r.clients_per_round, r.sample_rate, r.mean


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=DEFAULT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in args.only.split(","):
        index, case = next((i, c) for i, c in enumerate(HELD_OUT, start=len(CASES))
                           if c.name == name)
        data = case.source().build()
        y, part = data.dataset.y_train, data.partition
        k = data.dataset.num_classes
        shares = np.stack([np.bincount(y[rows], minlength=k) / len(rows)
                           for rows in part.indices])
        print(f"{name}: the clients' positive shares "
              f"{', '.join(f'{s:.2f}' for s in shares[:, -1])}", flush=True)
        plans = {"uniform deal": _plan(case)}
        saved = public.split_by_sizes
        public.split_by_sizes = mix_split(shares)
        try:
            plans["true label mixes"] = _plan(case)
        finally:
            public.split_by_sizes = saved
        kernel = case.kernel()
        for label, (t, b, q, predicted) in plans.items():
            grid = np.mean(_run(case, data, kernel, t, b, q, VALIDATION_SEED + index))
            fresh = _run(case, data, kernel, t, b, q, CONFIRM_SEED + index, repeats=30)
            print(f"  {label:17s} T = {t}, b = {b}: predicted {predicted:.4f}; 3 repeats "
                  f"{grid:.4f}; 30 repeats {np.mean(fresh):.4f} +- "
                  f"{np.std(fresh, ddof=1) / np.sqrt(len(fresh)):.4f}", flush=True)


if __name__ == "__main__":
    main()
