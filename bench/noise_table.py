"""The planner's RDP noise table against exact calibration: single-step curves, time, error.

For every ``(q, eps)`` of a grid (delta 1e-5), one :class:`fedqr.theory.calibration.
RdpNoiseTable` answers ``z(R)`` for 16 reply counts R from 1 to 3,072, asked in a shuffled
order (the planner asks as its search goes); the table prints how many single-step RDP curves
it computed (dp-accounting's ``RdpAccountant``, the expensive part), the time, and its worst
relative error against ``fedqr.privacy.calibrate_noise_multiplier`` at R = 1, 3, 13, 100,
1,000 and 3,072. Each configuration starts with dp-accounting's curve cache empty.

Configurations: ``now`` (the table's defaults: a ratio-1.2 grid whose brackets are halved
where the curves bend, and twice below z = 1) and ``fixed`` (a ratio-1.04 grid halved only at
cliffs, the table before 2026-11-27 night; ``--fixed-ratio`` changes its ratio).

    PYTHONPATH=src python bench/noise_table.py [--qs 0.03,0.12,0.3,0.5,0.7] [--eps 0.5,1,4,16]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

import fedqr.privacy.accounting as accounting
import fedqr.theory.calibration as calibration
from fedqr.privacy import calibrate_noise_multiplier

REPLIES = [1, 2, 3, 5, 8, 13, 21, 40, 64, 100, 160, 300, 512, 1000, 2048, 3072]
CHECKED = [1, 3, 13, 100, 1000, 3072]
DELTA = 1e-5


@contextmanager
def _settings(*, split_tol: float, max_depth: int, small_z: float) -> Iterator[None]:
    names = ("_SPLIT_TOL", "_MAX_DEPTH", "_SMALL_Z")
    old = [getattr(calibration, n) for n in names]
    for name, value in zip(names, (split_tol, max_depth, small_z), strict=True):
        setattr(calibration, name, value)
    try:
        yield
    finally:
        for name, value in zip(names, old, strict=True):
            setattr(calibration, name, value)


def _run(q: float, eps: float, ratio: float | None, order: list[int]
         ) -> tuple[int, float, dict[int, float]]:
    accounting.single_step_rdp.cache_clear()
    kwargs = {} if ratio is None else {"ratio": ratio}
    table = calibration.RdpNoiseTable(sample_rate=q, eps=eps, delta=DELTA, **kwargs)
    start = time.perf_counter()
    z = {r: table.noise_multiplier(r) for r in order}
    return table.rdp_evaluations, time.perf_counter() - start, z


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qs", default="0.01,0.03,0.06,0.12,0.2,0.3,0.5,0.7,0.9")
    ap.add_argument("--eps", default="0.5,2,8,16")
    ap.add_argument("--fixed-ratio", type=float, default=1.04)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    qs = [float(v) for v in args.qs.split(",")]
    epss = [float(v) for v in args.eps.split(",")]
    order = [int(r) for r in np.random.default_rng(args.seed).permutation(REPLIES)]
    configs = {"now": (None, calibration._SPLIT_TOL, calibration._MAX_DEPTH,
                       calibration._SMALL_Z),
               "fixed": (args.fixed_ratio, math.inf, 2, 0.0)}
    totals = {name: [0, 0.0, 0.0] for name in configs}
    print("| q | eps | " + " | ".join(f"{n}: curves, s, worst error" for n in configs) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in configs) + " |")
    for q in qs:
        for eps in epss:
            exact = {r: calibrate_noise_multiplier(replies=r, sample_rate=q, eps=eps,
                                                   delta=DELTA) for r in CHECKED}
            cells = []
            for name, (ratio, tol, depth, small_z) in configs.items():
                with _settings(split_tol=tol, max_depth=depth, small_z=small_z):
                    curves, secs, z = _run(q, eps, ratio, order)
                err = max(abs(z[r] / exact[r] - 1) for r in CHECKED)
                tot = totals[name]
                tot[0] += curves
                tot[1] += secs
                tot[2] = max(tot[2], err)
                cells.append(f"{curves}, {secs:.2f}, {err:.1e}")
            print(f"| {q:g} | {eps:g} | " + " | ".join(cells) + " |", flush=True)
    for name, (curves, secs, worst) in totals.items():
        print(f"{name}: {curves} curves, {secs:.1f} s, worst relative error {worst:.2e}")


if __name__ == "__main__":
    main()
