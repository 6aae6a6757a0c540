"""Rich tables of ``fedqr plan``, one row per budget eps (rows: :mod:`fedqr.theory.tables`)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from fedqr.cli._common import out
from fedqr.theory import ProblemConstants
from fedqr.theory.paper import PAPER_TABLE_ONE_MNIST, implied_ratios
from fedqr.theory.tables import Rows


def _source_line(source: dict[str, Any]) -> str:
    if "constants_file" in source:
        return f"constants from {source['constants_file']}"
    warn = source["estimate"]["warning"]
    return f"constants estimated on {source['dataset']} ({warn})"


def _constants_line(c: ProblemConstants) -> str:
    return (f"N={c.N} d={c.d} p={c.p} mu={c.mu:.4g} lambda={c.lam:.4g} gamma={c.gamma:.4g} "
            f"G={c.G:.4g} Gamma={c.Gamma:.4g} Y0={c.Y0:.4g} xi={c.xi:g} q={c.q:g}")


def print_laplace(c: ProblemConstants, rows: Rows, *, compare_paper: bool,
                  source: dict[str, Any]) -> None:
    """Table I (fedqr, and the paper's value after a slash where comparable)."""
    out.print(_source_line(source))
    out.print(_constants_line(c))
    title = "Table I (Laplace): fedqr" + (" / paper" if compare_paper else "")
    table = Table(title=title)
    for col in ("eps", "T*(b=5)", "T*(b=10)", "b*(T=50)", "joint (T*, b*)", "U*",
                "eps spent <= budget"):
        table.add_column(col, justify="right")
    for row in rows:
        paper = PAPER_TABLE_ONE_MNIST.get(row["eps"]) if compare_paper else None

        def cell(v: object, key: str, paper: Any = paper) -> str:
            return f"{'-' if v is None else v}" + (f" / {paper[key]}" if paper else "")

        j = row["joint"]
        joint = f"({j['T']}, {j['b']})" + (f" / ({paper['T_joint']}, 1)" if paper else "")
        table.add_row(f"{row['eps']:g}", cell(row["T_star_fix_b"]["5"], "T_b5"),
                      cell(row["T_star_fix_b"]["10"], "T_b10"),
                      cell(row["b_star_fix_T"]["50"], "b_T50"), joint, f"{j['U']:.4g}",
                      "yes" if row["plan"]["within_budget"] else "[red]NO[/]")
    out.print(table)
    r = rows[0]["ratios"]
    out.print(f"decisive ratios (eps=1 scale): gamma={r['gamma']:.4g}, "
              f"a=C1 eps^2/C2={r['a']:.4g}, c=C3 eps^2/C2={r['c']:.4g}")
    if compare_paper:
        p = implied_ratios()
        out.print(f"the paper's Table I implies gamma={p.gamma:.3g}, a={p.a:.4g}, c={p.c:.4g} "
                  "(least-squares fit of its T* values; gamma = 2 lambda / mu)")


def print_gaussian(c: ProblemConstants, rows: Rows, *, t_max: int,
                   source: dict[str, Any]) -> None:
    """Per eps: the plan, U(0) against U(T_max, N), and whether U still falls at T_max."""
    out.print(_source_line(source))
    out.print(_constants_line(c))
    table = Table(title=f"Gaussian plan (T <= {t_max}, calibrated noise)")
    for col in ("eps", "delta", "T*", "b*", "U*", "U(0)", f"U({t_max}, N)", "falling at T_max",
                "z (client 0)", "eps spent <= budget"):
        table.add_column(col, justify="right")
    for row in rows:
        j, p = row["joint"], row["plan"]
        table.add_row(f"{row['eps']:g}", f"{row['delta']:g}", str(j["T"]), str(j["b"]),
                      f"{j['U']:.4g}", f"{row['U_at_T0']:.4g}", f"{row['U_at_T_max_b_N']:.4g}",
                      "yes" if row["still_falling_at_T_max"] else "no",
                      f"{p['noise_multiplier'][0]:.4g}",
                      "yes" if p["within_budget"] else "[red]NO[/]")
    out.print(table)
