"""Convergence bounds, planning of ``(T, b)`` and estimation of the problem constants.

- :mod:`fedqr.theory.constants`: :class:`ProblemConstants` and its JSON form.
- :mod:`fedqr.theory.bounds`: Theorem 3 (Laplace) and Theorem 4 (Gaussian) bounds.
- :mod:`fedqr.theory.laplace`: closed-form optima of the Laplace bound (KKT, ACS).
- :mod:`fedqr.theory.calibration`: fast RDP calibration over many reply counts.
- :mod:`fedqr.theory.planner`: :class:`Plan`, Laplace/Gaussian planners, Table I.
- :mod:`fedqr.theory.estimate`: the one estimator of mu, lambda, G, Gamma, Y0, Lambda_i of a
  workload (data and a model kernel: softmax regression or any torch model; no privacy).
"""

from fedqr.theory.constants import ProblemConstants, constants_from_json, constants_to_json
from fedqr.theory.planner import (
    Plan,
    Rounding,
    gaussian_paper_optimum,
    plan_gaussian,
    plan_laplace,
    table_one,
)

__all__ = [
    "Plan",
    "ProblemConstants",
    "Rounding",
    "constants_from_json",
    "constants_to_json",
    "gaussian_paper_optimum",
    "plan_gaussian",
    "plan_laplace",
    "table_one",
]
