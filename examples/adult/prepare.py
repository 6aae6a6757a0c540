"""Prepare UCI Adult (Census Income) as a federated fedqr data file.

Recipe:

* ``adult.data`` (training rows) and ``adult.test`` (test rows; its first line
  ``|1x3 Cross validator`` is skipped and the trailing ``.`` of its labels removed);
* rows with a missing value (``?``, only in workclass, occupation and native-country) are
  dropped: 30,162 training and 15,060 test rows are left (checked; the script fails otherwise);
* label ``income == ">50K"``;
* the 6 numeric columns (age, fnlwgt, education-num, capital-gain, capital-loss,
  hours-per-week) are kept as given, NOT standardised (fedqr standardises by training
  statistics itself); the 8 categorical columns are one-hot encoded with the categories seen
  in the training file (sorted); a test value never seen in training encodes as all zeros.
  Columns keep the file's order, each categorical one expanded in place: 104 features;
* the training rows are split into ``--num-clients`` clients (default 20). Adult has no
  natural clients, so the split is a choice: a Dirichlet split over the categories of one
  attribute (``--attribute``, default ``education``). For every category its rows are shuffled
  and dealt to the clients in proportions drawn from Dirichlet(``--alpha`` * 1) (default 0.5),
  so clients differ in their mix of that attribute (small alpha: each category concentrates
  on few clients; large alpha: every client gets the global mix). Education is the default
  because it has 16 levels and is strongly tied to income, so the clients also differ in their
  positive rate (0-8% below high school, 75% for doctorates; with the defaults the clients'
  rates range from 15% to 38%): a covariate- and label-skewed federation.
  The draws come from ``numpy.random.default_rng(--seed)``; a draw that leaves a client
  empty is redrawn (at most 100 times, then the script fails).

Writes ``OUT/adult.npz``: ``x`` float32 [n, 104], ``y`` int64, ``client`` int64 (0..N-1),
``x_test`` float32, ``y_test`` int64 (the test set is global, not split by client).

Usage: ``python examples/adult/prepare.py --data-dir DIR --out OUTDIR [--num-clients 20]
[--attribute education] [--alpha 0.5] [--seed 0]``.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

COLUMNS = ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
           "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
           "hours-per-week", "native-country", "income")
NUMERIC = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week")
CATEGORICAL = tuple(c for c in COLUMNS[:-1] if c not in NUMERIC)
LABELS = {"<=50K": 0, ">50K": 1}
EXPECTED_ROWS = {"adult.data": 30162, "adult.test": 15060}  # after dropping '?' rows
MAX_REDRAWS = 100


class PrepareError(Exception):
    """Bad input or data that do not match the recipe; the script exits 2."""


@dataclass(frozen=True)
class Table:
    """Raw rows of one file: the 14 attribute strings per row, and the binary label."""

    rows: list[list[str]]
    y: NDArray[np.int64]

    def column(self, name: str) -> list[str]:
        """The values of one attribute, as strings."""
        i = COLUMNS.index(name)
        return [r[i] for r in self.rows]


def default_data_dir() -> Path:
    """``$FEDQR_DATA/adult``, else ``../shared/data/adult`` beside the repo."""
    env = os.environ.get("FEDQR_DATA")
    if env:
        return Path(env) / "adult"
    return Path(__file__).resolve().parents[3] / "shared" / "data" / "adult"


def read_table(path: Path) -> Table:
    """The complete rows of ``adult.data`` or ``adult.test``."""
    if not path.is_file():
        raise PrepareError(f"--data-dir: file not found: {path}")
    rows: list[list[str]] = []
    labels: list[int] = []
    for lineno, line in enumerate(path.read_text(encoding="ascii").splitlines(), start=1):
        if not line.strip() or (lineno == 1 and line.startswith("|")):
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != len(COLUMNS):
            raise PrepareError(f"{path}:{lineno}: expected {len(COLUMNS)} comma-separated "
                               f"fields, got {len(fields)}")
        if "?" in fields:
            continue
        income = fields[-1].removesuffix(".")
        if income not in LABELS:
            raise PrepareError(f"{path}:{lineno}: income must be one of {sorted(LABELS)}, "
                               f"got {fields[-1]!r}")
        rows.append(fields[:-1])
        labels.append(LABELS[income])
    expected = EXPECTED_ROWS.get(path.name)
    if expected is not None and len(rows) != expected:
        raise PrepareError(f"{path}: {len(rows)} rows without missing values, expected "
                           f"{expected}: not the canonical UCI file?")
    return Table(rows, np.asarray(labels, dtype=np.int64))


def fit_categories(train: Table) -> dict[str, list[str]]:
    """The sorted categories of every categorical attribute, from the training rows."""
    return {c: sorted(set(train.column(c))) for c in CATEGORICAL}


def encode(table: Table, categories: dict[str, list[str]]
           ) -> tuple[NDArray[np.float32], list[str]]:
    """Numeric columns as given, categorical ones one-hot (unseen category: all zeros)."""
    blocks: list[NDArray[np.float32]] = []
    names: list[str] = []
    n = len(table.rows)
    for col in COLUMNS[:-1]:
        values = table.column(col)
        if col in NUMERIC:
            try:
                blocks.append(np.asarray(values, dtype=np.float64).astype(np.float32)[:, None])
            except ValueError as err:
                raise PrepareError(f"column {col}: not a number: {err}") from None
            names.append(col)
            continue
        index = {v: k for k, v in enumerate(categories[col])}
        onehot = np.zeros((n, len(index)), dtype=np.float32)
        codes = np.asarray([index.get(v, -1) for v in values], dtype=np.int64)
        seen = codes >= 0
        onehot[np.flatnonzero(seen), codes[seen]] = 1.0
        blocks.append(onehot)
        names.extend(f"{col}={v}" for v in categories[col])
    return np.hstack(blocks), names


def check_split_args(*, num_clients: int, alpha: float, rows: int | None = None) -> None:
    """Raise :class:`PrepareError` unless 1 <= num_clients (<= rows) and alpha > 0."""
    if num_clients < 1 or (rows is not None and num_clients > rows):
        upper = "" if rows is None else f", at most {rows}"
        raise PrepareError(f"--num-clients must be >= 1{upper}, got {num_clients}")
    if not (math.isfinite(alpha) and alpha > 0):
        raise PrepareError(f"--alpha must be a finite number > 0, got {alpha}")


def dirichlet_split(groups: NDArray[np.int64], *, num_clients: int, alpha: float,
                    rng: np.random.Generator, min_rows: int = 1,
                    max_redraws: int = MAX_REDRAWS) -> NDArray[np.int64]:
    """Client of every row: each group's rows dealt in Dirichlet(alpha) proportions.

    Redraws the whole split while a client has fewer than ``min_rows`` rows, at most
    ``max_redraws`` times; raises :class:`PrepareError` after that.
    """
    check_split_args(num_clients=num_clients, alpha=alpha, rows=len(groups) // max(min_rows, 1))
    client = np.empty(len(groups), dtype=np.int64)
    for _ in range(max_redraws):
        for g in np.unique(groups):
            members = rng.permutation(np.flatnonzero(groups == g))
            shares = rng.dirichlet(np.full(num_clients, alpha))
            cuts = np.floor(np.cumsum(shares) * len(members)).astype(np.int64)
            cuts[-1] = len(members)
            sizes = np.diff(cuts, prepend=0)
            client[members] = np.repeat(np.arange(num_clients), sizes)
        if np.bincount(client, minlength=num_clients).min() >= min_rows:
            return client
    raise PrepareError(f"no Dirichlet draw in {max_redraws} gave every one of {num_clients} "
                       f"clients {min_rows} row(s): raise --alpha or lower --num-clients")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--data-dir", type=Path, default=None,
                   help="folder with adult.data and adult.test "
                        "(default: $FEDQR_DATA/adult, else ../shared/data/adult)")
    p.add_argument("--out", type=Path, required=True, help="output folder (created)")
    p.add_argument("--num-clients", type=int, default=20, help="number of clients (20)")
    p.add_argument("--attribute", choices=CATEGORICAL, default="education",
                   help="categorical attribute the Dirichlet split runs over (education)")
    p.add_argument("--alpha", type=float, default=0.5,
                   help="Dirichlet concentration, > 0; smaller = more skewed (0.5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split (0)")
    return p


def _report(y: NDArray[np.int64], client: NDArray[np.int64], x: NDArray[np.float32],
            x_test: NDArray[np.float32], y_test: NDArray[np.int64], num_clients: int) -> None:
    print(f"x {x.shape}, x_test {x_test.shape}; positives: train {int(y.sum())} "
          f"({100 * y.mean():.1f}%), test {int(y_test.sum())} ({100 * y_test.mean():.1f}%)")
    sizes = np.bincount(client, minlength=num_clients)
    pos = np.bincount(client, weights=y, minlength=num_clients)
    print(f"{'client':>6} {'rows':>6} {'pos%':>6}")
    for k in range(num_clients):
        print(f"{k:>6} {sizes[k]:>6} {100 * pos[k] / sizes[k]:>6.1f}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the script; returns the exit status (2 on bad input, nothing written)."""
    args = _parser().parse_args(argv)
    data_dir: Path = args.data_dir if args.data_dir is not None else default_data_dir()
    try:
        check_split_args(num_clients=args.num_clients, alpha=args.alpha)
        if args.seed < 0:
            raise PrepareError(f"--seed must be >= 0, got {args.seed}")
        if args.out.exists() and not args.out.is_dir():
            raise PrepareError(f"--out: not a folder: {args.out}")
        train = read_table(data_dir / "adult.data")
        test = read_table(data_dir / "adult.test")
        categories = fit_categories(train)
        x, names = encode(train, categories)
        x_test, _ = encode(test, categories)
        groups = np.unique(train.column(args.attribute), return_inverse=True)[1]
        client = dirichlet_split(groups.astype(np.int64), num_clients=args.num_clients,
                                 alpha=args.alpha, rng=np.random.default_rng(args.seed))
    except PrepareError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    buf = io.BytesIO()
    np.savez_compressed(buf, x=x, y=train.y, client=client, x_test=x_test, y_test=test.y,
                        feature_names=np.asarray(names, dtype=str))
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = args.out / ".adult.npz.part"
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, args.out / "adult.npz")
    print(f"split over {args.attribute!r}: {args.num_clients} clients, alpha {args.alpha}, "
          f"seed {args.seed}")
    _report(train.y, client, x, x_test, test.y, args.num_clients)
    print(f"wrote {args.out / 'adult.npz'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
