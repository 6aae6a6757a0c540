"""Plan rows per budget, JSON-ready: Table I (Laplace) and calibrated Gaussian plans.

Shared by ``fedqr plan`` and the reproduction reports; each row carries the plan's privacy
check (``eps_spent`` from a ledger charged with the exact round-robin replies).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedqr.privacy import BUDGET_RTOL, Accountant
from fedqr.theory.constants import ProblemConstants
from fedqr.theory.laplace import Rounding, t_star
from fedqr.theory.paper import laplace_ratios
from fedqr.theory.planner import Plan, plan_gaussian, plan_laplace, table_one

__all__ = ["gaussian_rows", "laplace_rows"]

FIXED_B = (5, 10)
FIXED_T = (50,)

Rows = list[dict[str, Any]]
Panels = list[dict[str, Any]]


def _privacy(p: Plan) -> dict[str, Any]:
    over = [s > e * (1 + BUDGET_RTOL) for s, e in zip(p.eps_spent, p.eps_budget, strict=True)]
    return {
        "replies": list(p.replies),
        "noise_scale": list(p.noise_scale),
        "noise_multiplier": list(p.noise_multiplier),
        "eps_spent": list(p.eps_spent),
        "within_budget": not any(over),
    }


def _panel(p: Plan, title: str) -> dict[str, Any]:
    return {"title": title, "T": p.grid_T, "b": p.grid_b, "U": p.grid_U, "opt": (p.T, p.b)}


def laplace_rows(base: ProblemConstants, eps_list: list[float], *,
                 rounding: Rounding) -> tuple[Rows, Panels]:
    """Table I (``T*(b=5)``, ``T*(b=10)``, ``b*(T=50)``, joint) and the plan for each eps."""
    fixed_b = tuple(b for b in FIXED_B if b <= base.N)
    table = table_one(base, eps_list, rounding=rounding, fixed_b=fixed_b, fixed_T=FIXED_T)
    rows, panels = [], []
    for eps, entry in zip(eps_list, table, strict=True):
        c = base.with_budget(eps=eps)
        ratios = laplace_ratios(c)
        t_hint = max(2 * entry["joint"]["T"], 100)
        p = plan_laplace(c, rounding=rounding, grid_T=np.arange(t_hint + 1))
        rows.append({
            "eps": eps,
            "T_star_fix_b": {str(b): entry["T_star_fix_b"].get(b) for b in FIXED_B},
            "b_star_fix_T": {str(t): v for t, v in entry["b_star_fix_T"].items()},
            "joint": entry["joint"],
            "T_star_real": {str(b): t_star(c, b=float(b)) for b in (1, *fixed_b)},
            "U_at_T0": float(p.grid_U[0, -1]),
            "ratios": {"gamma": ratios.gamma, "a": ratios.a, "c": ratios.c},
            "plan": {"T": p.T, "b": p.b, "U": p.predicted_U, **_privacy(p)},
        })  # fmt: skip
        panels.append(_panel(p, f"Laplace eps={eps:g}"))
    return rows, panels


def gaussian_rows(base: ProblemConstants, eps_list: list[float], *, t_max: int,
                  accountant: Accountant) -> tuple[Rows, Panels]:
    """Gaussian plan per eps: (T*, b*), U(0) against U(T_max, N), and the privacy check."""
    rows, panels = [], []
    for eps in eps_list:
        c = base.with_budget(eps=eps)
        p = plan_gaussian(c, T_max=t_max, accountant=accountant)
        rows.append({
            "eps": eps,
            "delta": c.delta_i[0],
            "joint": {"T": p.T, "b": p.b, "U": p.predicted_U},
            "U_at_T0": float(p.grid_U[0, -1]),
            "U_at_T_max_b_N": float(p.grid_U[-1, -1]),
            "still_falling_at_T_max": p.still_falling,
            "plan": _privacy(p),
        })  # fmt: skip
        panels.append(_panel(p, f"Gaussian eps={eps:g}, delta={c.delta_i[0]:g}"))
    return rows, panels
