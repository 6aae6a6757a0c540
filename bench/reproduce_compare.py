"""How far two reproductions' results are apart: the rows of ``data/final.csv``, per mechanism.

Reads ``A/data/final.csv`` and ``B/data/final.csv`` (two ``fedqr reproduce`` output folders,
for example ``--arithmetic float32`` and ``--arithmetic mixed`` with the same seeds) and prints,
per mechanism and metric (final training loss, test loss, test accuracy), over the rows both
hold: the largest and the median ``|B - A|`` in standard errors of A's repeats, and the largest
relative difference.

    python bench/reproduce_compare.py A B
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path

KEY = ("experiment", "mechanism", "eps", "b", "T", "fraction")
METRICS = ("train_loss", "test_loss", "test_accuracy")


def _rows(folder: Path) -> dict[tuple[str, ...], dict[str, str]]:
    with open(folder / "data" / "final.csv", newline="") as f:
        return {tuple(r[k] for k in KEY): r for r in csv.DictReader(f)}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    args = ap.parse_args()
    a, b = _rows(args.a), _rows(args.b)
    both = sorted(set(a) & set(b))
    print(f"{len(both)} rows in both ({len(a)} in A, {len(b)} in B)")
    for mech in sorted({k[1] for k in both}):
        for col in METRICS:
            in_se, rel = [], []
            for k in (k for k in both if k[1] == mech):
                va, vb, se = float(a[k][col]), float(b[k][col]), float(a[k][col + "_se"])
                if se > 0:
                    in_se.append(abs(vb - va) / se)
                if va:
                    rel.append(abs(vb - va) / abs(va))
            if in_se:
                print(f"{mech:9s} {col:14s} rows {len(in_se):3d}: |B - A| at most "
                      f"{max(in_se):.2g} standard errors (median {statistics.median(in_se):.1e}),"
                      f" at most {max(rel):.1e} relative")


if __name__ == "__main__":
    main()
