"""Tables of the MNIST reproduction, computed from the manifest and the stored runs only.

Every figure's data is one of these tables (a list of flat dict rows, written as CSV). Means
are over the repeats; ``*_se`` are standard errors (sample std / sqrt(R)).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import numpy as np

from fedqr._atomic import write_file_atomic
from fedqr.experiments.runs import RunStore, read_run

Row = dict[str, Any]


def _mean_se(values: list[float]) -> tuple[float, float]:
    v = np.asarray(values, dtype=np.float64)
    se = float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else 0.0
    return float(v.mean()), se


def load_runs(out: Path, manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Stored run documents by key (missing runs are absent)."""
    docs = {}
    for entry in manifest["entries"]:
        path = RunStore(out).dir / f"{entry['key']}.json"
        if path.is_file():
            docs[entry["key"]] = read_run(path)  # DamagedFileError names a damaged file
    return docs


def final_rows(manifest: dict[str, Any], docs: dict[str, dict[str, Any]]) -> list[Row]:
    """One row per finished run: its settings and final metrics (mean, se over repeats)."""
    rows = []
    for e in manifest["entries"]:
        doc = docs.get(e["key"])
        if doc is None:
            continue
        row: Row = {k: e[k] for k in ("experiment", "mechanism", "eps", "b", "T", "fraction")}
        row["data_fraction"] = e.get("data_fraction", 1.0)
        for key in ("train_loss", "test_loss", "test_accuracy"):
            row[key], row[f"{key}_se"] = _mean_se(
                [run["rounds"][-1][key] for run in doc["runs"]])
        dist = doc.get("extra", {}).get("dist2_to_opt")
        if dist:
            row["dist2"], row["dist2_se"] = _mean_se(dist)
        if "U_pred" in e:
            row["U_pred"] = e["U_pred"]
        row["repeats"] = len(doc["runs"])
        rows.append(row)
    return rows


def curve_rows(manifest: dict[str, Any], docs: dict[str, dict[str, Any]]) -> list[Row]:
    """Loss and accuracy per evaluated round of every grid run (mean and se over repeats)."""
    rows = []
    for e in manifest["entries"]:
        doc = docs.get(e["key"])
        if doc is None or e["experiment"] != "grid":
            continue
        n_points = len(doc["runs"][0]["rounds"])
        for i in range(n_points):
            row: Row = {k: e[k] for k in ("mechanism", "eps", "b", "T")}
            row["round"] = doc["runs"][0]["rounds"][i]["round"]
            for key in ("train_loss", "test_accuracy"):
                row[key], row[f"{key}_se"] = _mean_se([r["rounds"][i][key] for r in doc["runs"]])
            rows.append(row)
    return rows


PLANNER_LABEL = {"fedqr": "bound"}
"""How the reproduction's tables and figures name a plan of the manifest (its key ``fedqr`` is
the bound's choice, not the twin planner's)."""


def validation_rows(manifest: dict[str, Any], finals: list[Row]) -> list[Row]:
    """Per mechanism and eps: rank and regret (final training loss) of the bound's ``(T, b)``
    (fedqr's minimiser of U(T, b) on the estimated constants: ``planner`` "bound"; the twin
    planner is not part of the reproduction) and of the paper's among the whole (b, T) grid."""
    out = []
    grid = [r for r in finals if r["experiment"] == "grid"]
    for mech, plans in manifest["plans"].items():
        for eps_key, plan in plans.items():
            eps = float(eps_key)
            cells = [r for r in grid if r["mechanism"] == mech and r["eps"] == eps]
            if not cells:
                continue
            ranked = sorted(cells, key=lambda r: r["train_loss"])
            best = ranked[0]
            for who in ("fedqr", "paper"):
                if plan.get(who) is None:
                    continue
                T, b = plan[who]
                mine = [r for r in cells if r["T"] == T and r["b"] == b]
                if not mine:
                    continue
                m = mine[0]
                out.append({
                    "mechanism": mech, "eps": eps, "planner": PLANNER_LABEL.get(who, who),
                    "T": T, "b": b,
                    "rank": 1 + ranked.index(m), "grid_size": len(cells),
                    "loss": m["train_loss"], "loss_se": m["train_loss_se"],
                    "accuracy": m["test_accuracy"],
                    "best_T": best["T"], "best_b": best["b"], "best_loss": best["train_loss"],
                    "best_accuracy": best["test_accuracy"],
                    "regret": m["train_loss"] - best["train_loss"],
                    "regret_se": math.hypot(m["train_loss_se"], best["train_loss_se"]),
                    "U_pred": m.get("U_pred"), "dist2": m.get("dist2"),
                })  # fmt: skip
    return out


def write_csv(path: Path, rows: list[Row]) -> None:
    """Write ``rows`` (union of their keys as columns) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=cols)
            w.writeheader()
            w.writerows(rows)

    write_file_atomic(path, write)


def read_csv(path: Path) -> list[Row]:
    """Rows of a CSV written by :func:`write_csv`, numbers parsed back."""
    with path.open() as fh:
        return [{k: _num(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def _num(v: str) -> Any:
    if v == "":
        return None
    try:
        f = float(v)
    except ValueError:
        return v
    return int(f) if f.is_integer() and "." not in v and "e" not in v.lower() else f
