"""Redraw every table and figure of a reproduction folder from its stored runs.

``redraw(out)`` needs only ``out/manifest.json`` and ``out/runs/``; it writes CSVs under
``out/data/``, PNGs under ``out/figures/`` and a ``summary.md``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from fedqr._atomic import write_bytes_atomic
from fedqr.experiments import figures
from fedqr.experiments.analysis import (
    curve_rows,
    final_rows,
    load_runs,
    validation_rows,
    write_csv,
)
from fedqr.experiments.sweep import headline_T, read_manifest, target_of
from fedqr.theory import Rounding, constants_from_json
from fedqr.theory.tables import laplace_rows

Table = Mapping[float, Mapping[str, int]]


def table_one_rows(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Table I from the estimated Laplace constants, beside the paper's values."""

    c = constants_from_json(json.dumps(manifest["constants"]["laplace"]))
    table = _table(manifest)
    eps = sorted(table)
    rows, _ = laplace_rows(c, eps, rounding=Rounding.PAPER)
    out = []
    for row in rows:
        paper = table[row["eps"]]
        out.append({
            "eps": row["eps"],
            "T_b5": row["T_star_fix_b"]["5"], "paper_T_b5": paper["T_b5"],
            "T_b10": row["T_star_fix_b"]["10"], "paper_T_b10": paper["T_b10"],
            "b_T50": row["b_star_fix_T"]["50"], "paper_b_T50": paper["b_T50"],
            "joint_T": row["joint"]["T"], "joint_b": row["joint"]["b"],
            "paper_joint_T": paper["T_joint"], "paper_joint_b": 1,
        })  # fmt: skip
    return out


def _table(manifest: dict[str, Any]) -> Table:
    return target_of(manifest).paper_table


def redraw(out: Path) -> list[Path]:
    """Write all CSVs, figures and ``summary.md`` of ``out``; return the files written."""
    manifest = read_manifest(out / "manifest.json")  # DamagedFileError names a damaged file
    docs = load_runs(out, manifest)
    finals = final_rows(manifest, docs)
    grid = [r for r in finals if r["experiment"] == "grid"]
    head_T = partial(headline_T, target_of(manifest))
    headline = [r for r in grid if r["T"] == head_T(r["mechanism"], r["eps"], r["b"])]
    tables = {
        "final": finals,
        "curves": curve_rows(manifest, docs),
        "versus_b": headline,
        "versus_eps": [r for r in headline if r["b"] == max(x["b"] for x in headline)]
        if headline else [],
        "fraction": [r for r in finals if r["experiment"] == "fraction"],
        "validation": validation_rows(manifest, finals),
        "table_one": table_one_rows(manifest),
    }
    written = []
    for name, rows in tables.items():
        write_csv(out / "data" / f"{name}.csv", rows)
        written.append(out / "data" / f"{name}.csv")
    fig = out / "figures"
    draw: list[tuple[str, Callable[[Path], None]]] = [
        ("curves.png", lambda p: figures.curves(tables["curves"], head_T, p)),
        ("versus_b.png", lambda p: figures.versus(
            tables["versus_b"], x="b", path=p,
            title="T = the paper's T*(b) (Laplace), T = 100 (Gaussian)")),
        ("versus_eps.png", lambda p: figures.versus(
            tables["versus_eps"], x="eps", path=p, title="b = N")),
        ("fraction.png", lambda p: figures.heatmaps(tables["fraction"], p)),
        ("validation.png", lambda p: figures.validation(grid, manifest["plans"], p)),
        ("bound_vs_observed.png", lambda p: figures.bound_vs_observed(grid, p)),
    ]
    for name, fn in draw:
        fn(fig / name)
        written.append(fig / name)
    summary = out / "summary.md"
    write_bytes_atomic(summary, _summary(manifest, tables, len(docs)).encode("utf-8"))
    written.append(summary)
    return written


def _md(rows: list[dict[str, Any]], cols: list[str]) -> str:
    def fmt(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    return head + "".join("| " + " | ".join(fmt(r.get(c)) for c in cols) + " |\n" for r in rows)


def _summary(manifest: dict[str, Any], tables: dict[str, list[dict[str, Any]]],
             n_runs: int) -> str:
    lap = manifest["constants"]["laplace"]
    total = len({e["key"] for e in manifest["entries"]})
    name = manifest.get("dataset", "mnist").upper()
    text = [f"# {name} reproduction: {n_runs} of {total} distinct runs stored\n",
            f"Estimated Laplace constants: mu={lap['mu']:.4g}, lambda={lap['lambda']:.4g}, "
            f"G={lap['G']:.4g}, Gamma={lap['Gamma']:.4g}, Y0={lap['Y0']:.4g}\n",
            "## Table I (fedqr from estimated constants, paper rounding; paper_* published)\n",
            _md(tables["table_one"], list(tables["table_one"][0]) if tables["table_one"] else []),
            "\n## Planner validation (final training loss over the (b, T) grid; bound: the "
            "(T, b) minimising U(T, b) on the estimated constants, paper: the paper's)\n",
            _md(tables["validation"], ["mechanism", "eps", "planner", "T", "b", "rank",
                                       "grid_size", "loss", "best_T", "best_b", "best_loss",
                                       "regret", "regret_se", "accuracy", "best_accuracy",
                                       "U_pred", "dist2"]),
            "\n## Accuracy at the plan over data fractions\n",
            _md(tables["fraction"], ["mechanism", "eps", "data_fraction", "b", "T",
                                     "test_accuracy", "test_accuracy_se"])]
    return "\n".join(text)
