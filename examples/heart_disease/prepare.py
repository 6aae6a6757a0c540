"""Prepare FLamby's Fed-Heart-Disease benchmark as fedqr data files.

Recipe (FLamby, ``flamby/datasets/fed_heart_disease/dataset.py`` in owkin/FLamby, read at
HEAD edacf54; no code copied):

* the four processed UCI files, one per hospital, in FLamby's client order:
  0 Cleveland, 1 Hungary, 2 Switzerland, 3 Long Beach VA;
* 14 columns ``age, sex, cp, trestbps, chol, fbs, restecg, thalach, exang, oldpeak, slope,
  ca, thal, num``; ``?`` is missing; ``slope``, ``ca`` and ``thal`` are dropped, then every row
  with a missing value: 303 + 261 + 46 + 130 = 740 rows (checked; the script fails otherwise);
* label ``num > 0`` (heart disease), 10 features;
* a fixed per-hospital train/test split: scikit-learn's ``train_test_split`` with
  ``train_size=0.66``, ``random_state=43``, shuffled, stratified by the label when both classes
  have more than 2 rows (not in Switzerland: 45 of its 46 rows are positive). It is
  re-implemented here with numpy's legacy ``RandomState(43)`` and draws the same split;
  199/104, 172/89, 30/16 and 85/45 train/test rows, as FLamby's README states.

Differences from FLamby, on purpose: FLamby one-hot encodes ``cp`` and ``restecg`` (13
features; ``--flamby-dummies`` does the same here) and standardises each hospital by its own
training statistics. The files written here are NOT standardised: fedqr standardises the
features by training statistics itself.

Files written to ``--out``: ``heart_all.csv`` (training rows of all hospitals, ``client``
0..3) and ``heart_all_test.csv``; ``heart_three.csv`` and ``heart_three_test.csv``, the same
without Cleveland (``client`` 1..3: the deployment a plan from Cleveland's public data is
for); per hospital ``hospital_<name>.csv`` and
``hospital_<name>_test.csv`` (``client`` = the hospital's index), and ``hospital_<name>.npz``
with ``x``, ``y``, ``client``, ``x_test``, ``y_test`` for one Flower SuperNode each.

Usage: ``python examples/heart_disease/prepare.py --data-dir DIR --out OUTDIR``.
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

COLUMNS = ("age", "sex", "cp", "trestbps", "chol", "fbs", "restecg", "thalach", "exang",
           "oldpeak", "slope", "ca", "thal", "num")
DROPPED = ("slope", "ca", "thal")
FEATURES = tuple(c for c in COLUMNS[:-1] if c not in DROPPED)
DUMMY_COLUMNS = ("cp", "restecg")  # FLamby's pd.get_dummies(..., drop_first=True)
TRAIN_FRACTION = 0.66
SPLIT_SEED = 43
TOTAL_ROWS = 740


@dataclass(frozen=True)
class Hospital:
    """One FLamby centre: its client index, file and expected sizes after cleaning."""

    index: int
    name: str
    file: str
    n_train: int
    n_test: int


HOSPITALS = (
    Hospital(0, "cleveland", "processed.cleveland.data", 199, 104),
    Hospital(1, "hungary", "processed.hungarian.data", 172, 89),
    Hospital(2, "switzerland", "processed.switzerland.data", 30, 16),
    Hospital(3, "va", "processed.va.data", 85, 45),
)

PUBLIC_HOSPITAL = "cleveland"
"""Public for decades: ``heart_three*.csv`` hold the other hospitals, planned from its rows."""


class PrepareError(Exception):
    """Bad input or data that do not match the recipe; the script exits 2."""


@dataclass(frozen=True)
class Split:
    """One hospital's rows, split: features [n, p] and binary labels."""

    x_train: NDArray[np.float64]
    y_train: NDArray[np.int64]
    x_test: NDArray[np.float64]
    y_test: NDArray[np.int64]


def default_data_dir() -> Path:
    """``$FEDQR_DATA/heart-disease``, else ``../shared/data/heart-disease`` beside the repo."""
    env = os.environ.get("FEDQR_DATA")
    if env:
        return Path(env) / "heart-disease"
    return Path(__file__).resolve().parents[3] / "shared" / "data" / "heart-disease"


def read_hospital(path: Path) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """The complete rows of one processed UCI file: (10 features, label ``num > 0``)."""
    if not path.is_file():
        raise PrepareError(f"--data-dir: file not found: {path}")
    keep = [COLUMNS.index(c) for c in FEATURES]
    rows: list[list[float]] = []
    labels: list[int] = []
    for lineno, line in enumerate(path.read_text(encoding="ascii").splitlines(), start=1):
        fields = line.strip().split(",")
        if fields == [""]:
            continue
        if len(fields) != len(COLUMNS):
            raise PrepareError(f"{path}:{lineno}: expected {len(COLUMNS)} comma-separated "
                               f"fields, got {len(fields)}")
        used = [fields[i] for i in keep] + [fields[-1]]
        if "?" in used:
            continue
        try:
            values = [float(v) for v in used]
        except ValueError as err:
            raise PrepareError(f"{path}:{lineno}: not a number: {err}") from None
        rows.append(values[:-1])
        labels.append(int(values[-1] > 0))
    x = np.asarray(rows, dtype=np.float64).reshape(len(rows), len(FEATURES))
    return x, np.asarray(labels, dtype=np.int64)


def _approximate_mode(counts: NDArray[np.int64], n_draws: int,
                      rng: np.random.RandomState) -> NDArray[np.int64]:
    """Per-class draws: floor of the proportional share, the rest by largest remainder."""
    continuous = counts / counts.sum() * n_draws
    floored = np.floor(continuous)
    need = int(n_draws - floored.sum())
    remainder = continuous - floored
    for value in np.sort(np.unique(remainder))[::-1]:
        if need <= 0:
            break
        (ties,) = np.where(remainder == value)
        take = min(len(ties), need)
        floored[rng.choice(ties, size=take, replace=False)] += 1
        need -= take
    result: NDArray[np.int64] = floored.astype(np.int64)
    return result


def flamby_test_mask(labels: NDArray[np.int64], *, train_fraction: float = TRAIN_FRACTION,
                     seed: int = SPLIT_SEED) -> NDArray[np.bool_]:
    """True for the rows FLamby puts in the test set (its ``train_test_split`` call).

    Same draws as scikit-learn's ``train_test_split(arange(n), train_size=train_fraction,
    test_size=1 - train_fraction, random_state=seed, shuffle=True, stratify=...)``, stratified
    by ``labels`` when every class has more than 2 rows, as FLamby does.
    """
    n = len(labels)
    n_test = math.ceil((1.0 - train_fraction) * n)
    n_train = math.floor(train_fraction * n)
    rng = np.random.RandomState(seed)
    classes, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    test = np.zeros(n, dtype=bool)
    if len(classes) < 2 or counts.min() <= 2:  # FLamby: no stratification
        test[rng.permutation(n)[:n_test]] = True
        return test
    by_class = np.split(np.argsort(inverse, kind="stable"), np.cumsum(counts)[:-1])
    n_i = _approximate_mode(counts, n_train, rng)
    t_i = _approximate_mode(counts - n_i, n_test, rng)
    for members, n_tr, n_te in zip(by_class, n_i, t_i, strict=True):
        shuffled = members[rng.permutation(len(members))]
        test[shuffled[n_tr:n_tr + n_te]] = True
    return test


def flamby_dummies(x: NDArray[np.float64], categories: dict[str, NDArray[np.float64]]
                   ) -> tuple[NDArray[np.float64], list[str]]:
    """FLamby's one-hot ``cp`` and ``restecg`` (first level dropped, dummies appended)."""
    kept = [i for i, c in enumerate(FEATURES) if c not in DUMMY_COLUMNS]
    blocks, names = [x[:, kept]], [FEATURES[i] for i in kept]
    for col in DUMMY_COLUMNS:
        values = x[:, FEATURES.index(col)]
        for level in categories[col][1:]:
            blocks.append((values == level).astype(np.float64)[:, None])
            names.append(f"{col}_{level:g}")
    return np.hstack(blocks), names


def _number(v: float) -> str:
    text = repr(float(v))
    return text[:-2] if text.endswith(".0") else text


def csv_text(client: NDArray[np.int64], y: NDArray[np.int64], x: NDArray[np.float64],
             names: Sequence[str]) -> str:
    """The fedqr CSV format: header ``client,label,<features>``, one row per sample."""
    out = io.StringIO()
    out.write(",".join(["client", "label", *names]) + "\n")
    for c, label, row in zip(client, y, x, strict=True):
        out.write(",".join([str(int(c)), str(int(label)), *map(_number, row)]) + "\n")
    return out.getvalue()


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.part")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def npz_bytes(s: Split, index: int, names: Sequence[str]) -> bytes:
    """One hospital's ``.npz``: x, y, client (= ``index``), x_test, y_test and the columns'
    ``feature_names`` (a public proxy's columns are matched to the deployment's by name)."""
    buf = io.BytesIO()
    np.savez_compressed(buf, x=s.x_train.astype(np.float32), y=s.y_train,
                        client=np.full(len(s.y_train), index, dtype=np.int64),
                        x_test=s.x_test.astype(np.float32), y_test=s.y_test,
                        feature_names=np.asarray(names, dtype=str))
    return buf.getvalue()


def load_splits(data_dir: Path) -> dict[str, Split]:
    """Read, clean and split the four hospitals; fail loudly on any unexpected count."""
    if not data_dir.is_dir():
        raise PrepareError(f"--data-dir: not a folder: {data_dir}")
    splits: dict[str, Split] = {}
    for h in HOSPITALS:
        x, y = read_hospital(data_dir / h.file)
        if len(y) != h.n_train + h.n_test:
            raise PrepareError(f"{data_dir / h.file}: {len(y)} complete rows, FLamby's recipe "
                               f"gives {h.n_train + h.n_test}: not the original UCI file?")
        test = flamby_test_mask(y)
        splits[h.name] = Split(x[~test], y[~test], x[test], y[test])
        if (len(splits[h.name].y_train), int(test.sum())) != (h.n_train, h.n_test):
            raise PrepareError(f"{h.name}: split {len(y) - int(test.sum())}/{int(test.sum())}"
                               f" differs from FLamby's {h.n_train}/{h.n_test}")
    total = sum(len(s.y_train) + len(s.y_test) for s in splits.values())
    if total != TOTAL_ROWS:
        raise PrepareError(f"{total} rows in all after cleaning; FLamby has {TOTAL_ROWS}")
    return splits


def encode(splits: dict[str, Split], *, dummies: bool) -> tuple[dict[str, Split], list[str]]:
    """Optionally one-hot encode as FLamby does, with levels from all 740 rows."""
    if not dummies:
        return splits, list(FEATURES)
    pooled = np.vstack([np.vstack([s.x_train, s.x_test]) for s in splits.values()])
    levels = {c: np.unique(pooled[:, FEATURES.index(c)]) for c in DUMMY_COLUMNS}
    names: list[str] = []
    out: dict[str, Split] = {}
    for name, s in splits.items():
        x_train, names = flamby_dummies(s.x_train, levels)
        x_test, _ = flamby_dummies(s.x_test, levels)
        out[name] = Split(x_train, s.y_train, x_test, s.y_test)
    return out, names


def build_files(splits: dict[str, Split], names: list[str]) -> dict[str, bytes]:
    """Every output file's name and content, built before anything is written."""
    files: dict[str, bytes] = {}
    for part, test in (("", False), ("_test", True)):
        xs, ys, cs = [], [], []
        for h in HOSPITALS:
            s = splits[h.name]
            x, y = (s.x_test, s.y_test) if test else (s.x_train, s.y_train)
            c = np.full(len(y), h.index, dtype=np.int64)
            files[f"hospital_{h.name}{part}.csv"] = csv_text(c, y, x, names).encode()
            xs.append(x)
            ys.append(y)
            cs.append(c)
        files[f"heart_all{part}.csv"] = csv_text(
            np.concatenate(cs), np.concatenate(ys), np.vstack(xs), names).encode()
        rest = [i for i, h in enumerate(HOSPITALS) if h.name != PUBLIC_HOSPITAL]
        files[f"heart_three{part}.csv"] = csv_text(
            np.concatenate([cs[i] for i in rest]), np.concatenate([ys[i] for i in rest]),
            np.vstack([xs[i] for i in rest]), names).encode()
    for h in HOSPITALS:
        files[f"hospital_{h.name}.npz"] = npz_bytes(splits[h.name], h.index, names)
    return files


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--data-dir", type=Path, default=None,
                   help="folder with the processed.*.data files "
                        "(default: $FEDQR_DATA/heart-disease, else ../shared/data/heart-disease)")
    p.add_argument("--out", type=Path, required=True, help="output folder (created)")
    p.add_argument("--flamby-dummies", action="store_true",
                   help="one-hot encode cp and restecg as FLamby does (13 features, not 10)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the script; returns the exit status (2 on bad input, nothing written)."""
    args = _parser().parse_args(argv)
    data_dir: Path = args.data_dir if args.data_dir is not None else default_data_dir()
    try:
        splits, names = encode(load_splits(data_dir), dummies=args.flamby_dummies)
        files = build_files(splits, names)
        if args.out.exists() and not args.out.is_dir():
            raise PrepareError(f"--out: not a folder: {args.out}")
    except PrepareError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for fname, data in files.items():
        _write_atomic(args.out / fname, data)
    print(f"{len(names)} features: {', '.join(names)}")
    print(f"{'client':>6} {'hospital':<12} {'train':>5} {'test':>5} {'pos% train':>10} "
          f"{'pos% test':>9}")
    for h in HOSPITALS:
        s = splits[h.name]
        print(f"{h.index:>6} {h.name:<12} {len(s.y_train):>5} {len(s.y_test):>5} "
              f"{100 * s.y_train.mean():>10.1f} {100 * s.y_test.mean():>9.1f}")
    n_train = sum(len(s.y_train) for s in splits.values())
    print(f"{n_train} train + {TOTAL_ROWS - n_train} test = {TOTAL_ROWS} rows; "
          f"{len(files)} files in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
