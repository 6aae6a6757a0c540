"""The planner's Gaussian noise for clients with different budgets: shared RDP orders, PLD starts.

A plan of a Gaussian scenario asks :class:`fedqr.planner.noise.NoiseBook` the noise std of
every client for every schedule it simulates. This bench asks it what a plan of the four
heart-disease hospitals asks (N = 4, b = 1..4, T on a log grid up to 1,000: ratio 1.25 for
RDP, doublings for PLD), for budgets
given per client (``--eps``, default 1, 2, 4, 8), at each sampling rate of ``--qs``, with
every cache empty, in two ways each:

* **RDP** (the default accountant): the budgets' noise tables share each noise multiplier's
  single-step RDP order by order (:func:`fedqr.privacy.rdp_by_order`), against each table
  computing its own curves (``single_step_rdp`` per table, as before 2026-11-29). The stds
  must be the same bit for bit.
* **PLD** (``--accountant pld``): every distinct reply count calibrated exactly, started from
  the RDP table's multiplier (``calibrate_noise_multiplier(near=...)``), against started from
  an exact RDP calibration (the default start, which ``fedqr run`` keeps). The stds must
  agree to dp-accounting's tolerance (relative 1e-5 here).

Prints seconds per way and the largest relative difference of the stds.

    PYTHONPATH=src python bench/noise_budgets.py [--qs 0.05,0.25,0.5] [--eps 1,2,4,8] [--no-pld]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fedqr.planner.noise as noise
import fedqr.privacy.accounting as accounting
import fedqr.privacy.calibrate as calibrate
import fedqr.theory.calibration as calibration
from fedqr.data import DatasetName, DataSpec, PartitionKind
from fedqr.planner import Scenario
from fedqr.planner.grids import log_grid
from fedqr.privacy import Accountant, Mechanism, single_step_rdp

SIZES = np.array([199, 98, 172, 151], dtype=np.int64)  # heart disease's training rows


def _clear() -> None:
    """Every cache of calibrations and RDP curves empty."""
    noise.rdp_table.cache_clear()
    accounting.single_step_rdp.cache_clear()
    accounting._known_orders.cache_clear()
    calibrate._calibrate.cache_clear()


def _ask(sc: Scenario, q: float) -> np.ndarray:
    """What a plan asks: T on a ratio-1.25 grid (RDP) or doublings (PLD, whose every
    distinct reply count is an exact calibration), up to 1,000, for b = 1..4."""
    book = noise.NoiseBook(scenario=sc, sizes=SIZES)
    ratio = 1.25 if sc.accountant is Accountant.RDP else 2.0
    rounds = [int(t) for t in log_grid(1, 1000, ratio=ratio)]
    return np.stack([book.std(b=b, rounds=rounds, sample_rate=q) for b in range(1, 5)])


def _timed(fn: Callable[[], np.ndarray]) -> tuple[float, np.ndarray]:
    _clear()
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _per_table(event: Any, *, orders: tuple[float, ...]) -> np.ndarray:
    return single_step_rdp(event, orders=orders)  # each table its own curves (the old way)


def _exact_start(self: noise.NoiseBook, replies: np.ndarray, sample_rate: float, eps: float,
                 delta: float) -> np.ndarray:
    z = np.zeros(replies.shape)
    for value in np.unique(replies[replies > 0]).tolist():
        z[replies == value] = calibrate.calibrate_noise_multiplier(
            replies=value, sample_rate=sample_rate, eps=eps, delta=delta,
            accountant=Accountant.PLD)
    return z


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qs", default="0.05,0.25,0.5")
    ap.add_argument("--eps", default="1,2,4,8")
    ap.add_argument("--no-pld", action="store_true")
    args = ap.parse_args()
    eps = tuple(float(e) for e in args.eps.split(","))
    data = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.IID,
                    num_clients=len(eps))
    print(f"budgets eps = {eps}, delta 1e-5, N = {len(eps)}, b = 1..4, T log grid to 1,000")
    print("| accountant | q | shared / new start (s) | per table / exact start (s) | "
          "max rel. diff |")
    print("| --- | --- | --- | --- | --- |")
    for q in (float(v) for v in args.qs.split(",")):
        for acct in (Accountant.RDP, *(() if args.no_pld else (Accountant.PLD,))):
            sc = Scenario(data=data, mechanism=Mechanism.GAUSSIAN, eps=eps, clip=1.0,
                          sample_rate=q, accountant=acct)
            new_s, new = _timed(lambda: _ask(sc, q))  # noqa: B023
            if acct is Accountant.RDP:
                saved = calibration.rdp_by_order
                calibration.rdp_by_order = _per_table  # type: ignore[assignment]
                try:
                    old_s, old = _timed(lambda: _ask(sc, q))  # noqa: B023
                finally:
                    calibration.rdp_by_order = saved
            else:
                saved_pld = noise.NoiseBook._multipliers
                noise.NoiseBook._multipliers = _exact_start  # type: ignore[method-assign]
                try:
                    old_s, old = _timed(lambda: _ask(sc, q))  # noqa: B023
                finally:
                    noise.NoiseBook._multipliers = saved_pld  # type: ignore[method-assign]
            pos = old > 0
            diff = float(np.max(np.abs(new[pos] / old[pos] - 1.0))) if pos.any() else 0.0
            same = np.array_equal(new, old)
            print(f"| {acct.value} | {q:g} | {new_s:.1f} | {old_s:.1f} | "
                  f"{'0 (bit for bit)' if same else f'{diff:.1e}'} |", flush=True)
            if acct is Accountant.RDP and not same:
                raise SystemExit("RDP stds differ: shared orders must be bit for bit")
            if diff > 1e-5:
                raise SystemExit(f"PLD stds differ by {diff:.1e} (> 1e-5)")


if __name__ == "__main__":
    main()
