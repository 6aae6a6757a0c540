"""The data-preparation scripts of examples/heart_disease and examples/adult, on the real data."""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from numpy.typing import NDArray
from sklearn.model_selection import train_test_split

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HEART_SCRIPT = EXAMPLES / "heart_disease" / "prepare.py"
ADULT_SCRIPT = EXAMPLES / "adult" / "prepare.py"
# FLamby's README: train/test rows per centre, in client order
FLAMBY_SIZES = {"cleveland": (199, 104), "hungary": (172, 89), "switzerland": (30, 16),
                "va": (85, 45)}


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


heart = _load(HEART_SCRIPT, "examples_heart_prepare")
adult = _load(ADULT_SCRIPT, "examples_adult_prepare")


def _run(script: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), *map(str, args)],
                          capture_output=True, text=True, check=False)


def _read_csv(path: Path) -> tuple[list[str], NDArray[np.int64], NDArray[np.int64],
                                   NDArray[np.float64]]:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], np.asarray(rows[1:], dtype=np.float64)
    return header, body[:, 0].astype(np.int64), body[:, 1].astype(np.int64), body[:, 2:]


@pytest.fixture(scope="module")
def heart_out(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("heart")
    done = _run(HEART_SCRIPT, "--data-dir", data_dir / "heart-disease", "--out", out)
    assert done.returncode == 0, done.stderr
    assert "740 rows" in done.stdout
    return out


@pytest.fixture(scope="module")
def adult_out(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("adult")
    done = _run(ADULT_SCRIPT, "--data-dir", data_dir / "adult", "--out", out)
    assert done.returncode == 0, done.stderr
    return out


# ---------------------------------------------------------------- heart disease


def test_heart_all_files_hold_740_rows_of_four_hospitals(heart_out: Path) -> None:
    header, c_tr, y_tr, x_tr = _read_csv(heart_out / "heart_all.csv")
    header_te, c_te, y_te, x_te = _read_csv(heart_out / "heart_all_test.csv")
    assert header == header_te == ["client", "label", "age", "sex", "cp", "trestbps", "chol",
                                   "fbs", "restecg", "thalach", "exang", "oldpeak"]
    assert x_tr.shape == (486, 10) and x_te.shape == (254, 10)
    assert len(y_tr) + len(y_te) == 740
    assert set(np.unique(np.concatenate([y_tr, y_te]))) == {0, 1}
    for k, (n_train, n_test) in enumerate(FLAMBY_SIZES.values()):
        assert (int(np.sum(c_tr == k)), int(np.sum(c_te == k))) == (n_train, n_test)
    assert set(np.unique(c_tr)) == set(np.unique(c_te)) == {0, 1, 2, 3}


def _raw_complete_rows(path: Path) -> NDArray[np.float64]:
    """age..oldpeak and num > 0 of the rows with no '?' in those columns, sorted."""
    rows = []
    for line in path.read_text().split():
        f = line.split(",")
        used = [*f[:10], f[13]]
        if "?" not in used:
            rows.append([float(v) for v in used[:10]] + [float(float(used[10]) > 0)])
    return np.asarray(sorted(rows))


def test_heart_rows_are_the_raw_complete_rows_unstandardised(heart_out: Path,
                                                             data_dir: Path) -> None:
    for h in heart.HOSPITALS:
        _, _, y_tr, x_tr = _read_csv(heart_out / f"hospital_{h.name}.csv")
        _, _, y_te, x_te = _read_csv(heart_out / f"hospital_{h.name}_test.csv")
        ours = np.hstack([np.vstack([x_tr, x_te]), np.concatenate([y_tr, y_te])[:, None]])
        raw = _raw_complete_rows(data_dir / "heart-disease" / h.file)
        np.testing.assert_array_equal(np.asarray(sorted(ours.tolist())), raw)
    # the known positives of the 740 rows: 139, 98, 45 and 101
    positives = [int(_raw_complete_rows(data_dir / "heart-disease" / h.file)[:, -1].sum())
                 for h in heart.HOSPITALS]
    assert positives == [139, 98, 45, 101]


def test_heart_per_hospital_csv_and_npz_match_the_pooled_files(heart_out: Path) -> None:
    for part in ("", "_test"):
        _, c_all, y_all, x_all = _read_csv(heart_out / f"heart_all{part}.csv")
        for h in heart.HOSPITALS:
            _, c, y, x = _read_csv(heart_out / f"hospital_{h.name}{part}.csv")
            assert np.all(c == h.index)
            np.testing.assert_array_equal(x, x_all[c_all == h.index])
            np.testing.assert_array_equal(y, y_all[c_all == h.index])
        _, c3, y3, x3 = _read_csv(heart_out / f"heart_three{part}.csv")
        rest = c_all != 0  # Cleveland (client 0) left out, the rest in the same order
        np.testing.assert_array_equal(c3, c_all[rest])
        np.testing.assert_array_equal(x3, x_all[rest])
        np.testing.assert_array_equal(y3, y_all[rest])
    for h in heart.HOSPITALS:
        with np.load(heart_out / f"hospital_{h.name}.npz") as z:
            assert sorted(z.files) == ["client", "feature_names", "x", "x_test", "y",
                                       "y_test"]
            names, _, _, _ = _read_csv(heart_out / f"hospital_{h.name}.csv")
            assert z["feature_names"].tolist() == names[2:]  # the CSV's feature columns
            assert z["x"].dtype == np.float32 and z["y"].dtype == np.int64
            assert z["client"].dtype == np.int64 and np.all(z["client"] == h.index)
            _, _, y, x = _read_csv(heart_out / f"hospital_{h.name}.csv")
            _, _, y_te, x_te = _read_csv(heart_out / f"hospital_{h.name}_test.csv")
            np.testing.assert_array_equal(z["x"], x.astype(np.float32))
            np.testing.assert_array_equal(z["x_test"], x_te.astype(np.float32))
            np.testing.assert_array_equal(z["y"], y)
            np.testing.assert_array_equal(z["y_test"], y_te)


def test_heart_split_is_flambys_sklearn_split(data_dir: Path) -> None:
    stratified = []
    for h in heart.HOSPITALS:
        _, y = heart.read_hospital(data_dir / "heart-disease" / h.file)
        _, counts = np.unique(y, return_counts=True)
        strat = y if len(counts) > 1 and counts.min() > 2 else None
        stratified.append(strat is not None)
        _, test = train_test_split(np.arange(len(y)), test_size=1.0 - 0.66, train_size=0.66,
                                   random_state=43, shuffle=True, stratify=strat)
        np.testing.assert_array_equal(np.flatnonzero(heart.flamby_test_mask(y)),
                                      np.sort(test))
    assert stratified == [True, True, False, True]  # both branches are compared


def test_heart_flamby_dummies(heart_out: Path, data_dir: Path, tmp_path: Path) -> None:
    code = heart.main(["--data-dir", str(data_dir / "heart-disease"), "--out", str(tmp_path),
                       "--flamby-dummies"])
    assert code == 0
    header, _, y, x = _read_csv(tmp_path / "heart_all.csv")
    plain_header, _, plain_y, plain = _read_csv(heart_out / "heart_all.csv")
    assert header[2:] == ["age", "sex", "trestbps", "chol", "fbs", "thalach", "exang",
                          "oldpeak", "cp_2", "cp_3", "cp_4", "restecg_1", "restecg_2"]
    np.testing.assert_array_equal(y, plain_y)
    col = {name: plain[:, i] for i, name in enumerate(plain_header[2:])}
    for i, name in enumerate(header[2:]):
        if "_" in name:
            base, level = name.split("_")
            np.testing.assert_array_equal(x[:, i], (col[base] == float(level)).astype(float))
        else:
            np.testing.assert_array_equal(x[:, i], col[name])


def test_heart_default_data_dir_follows_fedqr_data(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("FEDQR_DATA", str(tmp_path))
    assert heart.default_data_dir() == tmp_path / "heart-disease"
    assert adult.default_data_dir() == tmp_path / "adult"


def test_heart_bad_input_exits_2_and_writes_nothing(data_dir: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert heart.main(["--data-dir", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "--data-dir" in capsys.readouterr().err
    src = data_dir / "heart-disease"
    short = tmp_path / "short"
    short.mkdir()
    for h in heart.HOSPITALS:
        lines = (src / h.file).read_text().splitlines(keepends=True)
        (short / h.file).write_text("".join(lines[1:] if h.index == 0 else lines))
    assert heart.main(["--data-dir", str(short), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "processed.cleveland.data" in err and "302" in err and "303" in err
    (short / "processed.cleveland.data").write_text("63.0,1.0,1.0\n")
    assert heart.main(["--data-dir", str(short), "--out", str(out)]) == 2
    assert "processed.cleveland.data:1: expected 14" in capsys.readouterr().err
    assert not out.exists()


# ---------------------------------------------------------------- adult


def _raw_counts(path: Path) -> tuple[int, int]:
    """Rows without '?' and their '>50K' labels, counted from the text lines."""
    lines = [ln for ln in path.read_text().splitlines() if ln.count(",") == 14]
    kept = [ln for ln in lines if "?" not in ln]
    return len(kept), sum(ln.rstrip(".").endswith(">50K") for ln in kept)


def test_adult_shapes_labels_and_row_counts(adult_out: Path, data_dir: Path) -> None:
    with np.load(adult_out / "adult.npz") as z:
        assert sorted(z.files) == ["client", "feature_names", "x", "x_test", "y", "y_test"]
        x, y, x_test, y_test = z["x"], z["y"], z["x_test"], z["y_test"]
    assert x.dtype == x_test.dtype == np.float32 and y.dtype == y_test.dtype == np.int64
    assert (len(y), len(y_test)) == (30162, 15060)  # 32,561 - 2,399 and 16,281 - 1,221
    assert (len(y), int(y.sum())) == _raw_counts(data_dir / "adult" / "adult.data")
    assert (len(y_test), int(y_test.sum())) == _raw_counts(data_dir / "adult" / "adult.test")
    assert set(np.unique(y)) == set(np.unique(y_test)) == {0, 1}
    assert x.shape == (30162, 104) and x_test.shape == (15060, 104)


def test_adult_one_hot_blocks(adult_out: Path, data_dir: Path) -> None:
    train = adult.read_table(data_dir / "adult" / "adult.data")
    _, names = adult.encode(train, adult.fit_categories(train))
    with np.load(adult_out / "adult.npz") as z:
        x, x_test = z["x"], z["x_test"]
        assert z["feature_names"].tolist() == names  # a proxy is matched by these
    assert len(names) == x.shape[1] == x_test.shape[1]
    numeric = [names.index(c) for c in adult.NUMERIC]
    np.testing.assert_array_equal(x[:, names.index("age")][:3], [39, 50, 38])
    for attr in adult.CATEGORICAL:
        cols = [i for i, n in enumerate(names) if n.startswith(f"{attr}=")]
        assert not set(cols) & set(numeric)
        assert np.all(x[:, cols].sum(axis=1) == 1)
        assert np.all(x_test[:, cols].sum(axis=1) <= 1)
        assert set(np.unique(x[:, cols])) == {0.0, 1.0}


def test_adult_unseen_test_category_encodes_as_zeros() -> None:
    row = ["39", "State-gov", "77516", "Bachelors", "13", "Never-married", "Adm-clerical",
           "Not-in-family", "White", "Male", "2174", "0", "40", "United-States"]
    train = adult.Table([row], np.zeros(1, dtype=np.int64))
    test = adult.Table([[*row[:13], "Atlantis"]], np.zeros(1, dtype=np.int64))
    x, names = adult.encode(test, adult.fit_categories(train))
    assert x.shape == (1, 6 + 8)
    assert x[0, names.index("native-country=United-States")] == 0.0
    assert x[0, names.index("sex=Male")] == 1.0 and x[0, names.index("fnlwgt")] == 77516


def test_adult_clients_non_empty_and_reproducible(adult_out: Path, data_dir: Path,
                                                  tmp_path: Path) -> None:
    with np.load(adult_out / "adult.npz") as z:
        client = z["client"]
    assert client.dtype == np.int64
    assert set(np.unique(client)) == set(range(20))
    args = ["--data-dir", str(data_dir / "adult"), "--num-clients", "20"]
    assert adult.main([*args, "--out", str(tmp_path / "again")]) == 0
    assert adult.main([*args, "--out", str(tmp_path / "other"), "--seed", "1"]) == 0
    with np.load(tmp_path / "again" / "adult.npz") as again:
        np.testing.assert_array_equal(again["client"], client)
    with np.load(tmp_path / "other" / "adult.npz") as other:
        assert not np.array_equal(other["client"], client)
        assert np.bincount(other["client"], minlength=20).min() >= 1


def _top_share(groups: NDArray[np.int64], client: NDArray[np.int64], k: int) -> float:
    """Mean over groups of the share of a group's rows held by its largest client."""
    return float(np.mean([np.bincount(client[groups == g], minlength=k).max()
                          / np.sum(groups == g) for g in np.unique(groups)]))


def test_dirichlet_split_alpha_controls_the_skew() -> None:
    groups = np.repeat(np.arange(5), 2000).astype(np.int64)
    shares = {}
    for alpha in (0.05, 1e4):
        client = adult.dirichlet_split(groups, num_clients=10, alpha=alpha,
                                       rng=np.random.default_rng(3))
        assert np.bincount(client, minlength=10).min() >= 1
        shares[alpha] = _top_share(groups, client, 10)
    assert shares[0.05] > 0.5  # each group sits mostly on one client
    assert shares[1e4] < 0.12  # every client gets about 1/10 of every group


def test_dirichlet_split_redraws_empty_clients_and_gives_up_loudly() -> None:
    groups = np.zeros(30, dtype=np.int64)
    first_draw_empty = 0
    for seed in range(20):
        try:
            adult.dirichlet_split(groups, num_clients=3, alpha=0.3,
                                  rng=np.random.default_rng(seed), max_redraws=1)
        except adult.PrepareError:
            first_draw_empty += 1
        client = adult.dirichlet_split(groups, num_clients=3, alpha=0.3,
                                       rng=np.random.default_rng(seed))
        assert np.bincount(client, minlength=3).min() >= 1
    assert first_draw_empty > 0  # the redraw path was taken
    with pytest.raises(adult.PrepareError, match="--alpha"):
        adult.dirichlet_split(np.zeros(50, dtype=np.int64), num_clients=50, alpha=0.01,
                              rng=np.random.default_rng(0), max_redraws=3)


@pytest.mark.parametrize(("option", "value"), [("--num-clients", "0"), ("--alpha", "0"),
                                               ("--alpha", "nan"), ("--seed", "-1")])
def test_adult_bad_option_exits_2_and_writes_nothing(
        option: str, value: str, data_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = adult.main(["--data-dir", str(data_dir / "adult"), "--out", str(out), option, value])
    assert code == 2
    err = capsys.readouterr().err
    assert option in err and value in err
    assert not out.exists()


def test_adult_missing_data_or_too_many_clients_exits_2(
        data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert adult.main(["--data-dir", str(tmp_path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--data-dir" in err and "adult.data" in err
    done = _run(ADULT_SCRIPT, "--data-dir", data_dir / "adult", "--out", out,
                "--num-clients", "30163")
    assert done.returncode == 2
    assert "--num-clients must be >= 1, at most 30162, got 30163" in done.stderr
    assert not out.exists()
