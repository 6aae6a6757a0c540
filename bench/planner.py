"""Planner timings: a Laplace plan from constants (goal < 50 ms) and a Gaussian plan over
T in [0, 1000], b in [1, 10] with a cold calibration cache (goal < 2 s).

Run: ``.venv/bin/python bench/planner.py``.
"""

from __future__ import annotations

import time

from fedqr.privacy.calibrate import _calibrate
from fedqr.theory.constants import ProblemConstants
from fedqr.theory.planner import plan_gaussian, plan_laplace, table_one

BASE = {"N": 10, "d": 60000, "p": 7840, "mu": 0.5, "lam": 1.0, "G": 5.0, "Gamma": 0.5, "Y0": 10.0}


def main() -> None:
    lap = ProblemConstants.uniform(**BASE, xi=300.0, eps=5.0)  # type: ignore[arg-type]
    plan_laplace(lap)  # import warm-up
    t0 = time.perf_counter()
    reps = 20
    for _ in range(reps):
        plan = plan_laplace(lap)
    dt = (time.perf_counter() - t0) / reps
    print(f"laplace plan: {1e3 * dt:.2f} ms (goal < 50 ms): T*={plan.T} b*={plan.b} "
          f"U={plan.predicted_U:.4g} eps_spent={plan.eps_spent[0]:.6g}")  # fmt: skip
    t0 = time.perf_counter()
    table_one(lap, [1.0, 5.0, 10.0])
    print(f"table_one (3 eps): {1e3 * (time.perf_counter() - t0):.2f} ms")
    for eps in (1.0, 0.1):
        gau = ProblemConstants.uniform(  # type: ignore[arg-type]
            **BASE, xi=10.0, eps=eps, delta=1e-5, q=0.01, Lambda2=4.0
        )
        _calibrate.cache_clear()
        t0 = time.perf_counter()
        plan = plan_gaussian(gau, T_max=1000)
        dt = time.perf_counter() - t0
        print(f"gaussian plan eps={eps}: {dt:.2f} s (goal < 2 s, cold): T*={plan.T} b*={plan.b} "
              f"still_falling={plan.still_falling} z={plan.noise_multiplier[0]:.4f} "
              f"eps_spent={plan.eps_spent[0]:.6g}")  # fmt: skip


if __name__ == "__main__":
    main()
