"""FEMNIST loaders on small synthetic LEAF JSON trees and npz files (no real data needed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedqr.data import (
    DataNotFoundError,
    Dataset,
    FemnistFormatError,
    load_dataset,
    load_femnist_arrays,
    locate_femnist,
)
from fedqr.data.femnist import FEMNIST_NPZ


def _user(rng: np.random.Generator, m: int) -> dict[str, list]:
    x = rng.integers(0, 256, size=(m, 784)) / 255.0
    return {"x": x.tolist(), "y": rng.integers(0, 62, size=m).tolist()}


def write_leaf(root: Path, layout: dict[str, dict[str, dict[str, int]]]) -> dict:
    """``layout[split][file][user] = samples``; returns the written user data."""
    rng = np.random.default_rng(0)
    written: dict[str, dict[str, dict]] = {}
    for split, files in layout.items():
        (root / split).mkdir(parents=True, exist_ok=True)
        for name, users in files.items():
            data = {u: _user(rng, m) for u, m in users.items()}
            doc = {"users": list(users), "num_samples": list(users.values()), "user_data": data}
            (root / split / name).write_text(json.dumps(doc))
            written.setdefault(split, {}).update(data)
    return written


LAYOUT = {
    "train": {"a_train_9.json": {"f0001_01": 3, "f0002_02": 2}, "b_train_9.json": {"f0003_03": 4}},
    "test": {"a_test_9.json": {"f0001_01": 1, "f0003_03": 2, "f0004_04": 1}},
}


def test_leaf_json_tree(tmp_path: Path, isolated_env: Path) -> None:
    written = write_leaf(tmp_path / "femnist", LAYOUT)
    raw = load_femnist_arrays(data_dir=tmp_path)  # found in data_dir/femnist
    assert raw.writer_ids == ("f0001_01", "f0002_02", "f0003_03", "f0004_04")
    assert raw.x_train.shape == (9, 28, 28) and raw.x_test.shape == (4, 28, 28)
    assert raw.x_train.dtype == np.float32
    assert raw.writer_train.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert raw.writer_test.tolist() == [0, 2, 2, 3]
    first = np.asarray(written["train"]["f0001_01"]["x"][0], dtype=np.float32)
    np.testing.assert_array_equal(raw.x_train[0].ravel(), 1.0 - first)  # ink-positive
    assert raw.y_test.tolist() == (written["test"]["f0001_01"]["y"]
                                   + written["test"]["f0003_03"]["y"]
                                   + written["test"]["f0004_04"]["y"])
    ds = load_dataset("femnist", data_dir=tmp_path)
    assert ds.name == "femnist" and ds.num_classes == 62
    assert ds.x_train.shape == (9, 784) and ds.image_shape == (1, 28, 28)
    assert ds.writer_train.tolist() == raw.writer_train.tolist()
    assert abs(float(ds.x_train.mean())) < 1e-5


def test_leaf_repository_layout_with_data_subfolder(tmp_path: Path, isolated_env: Path) -> None:
    write_leaf(tmp_path / "data", LAYOUT)
    source = locate_femnist(data_dir=tmp_path)
    assert source.kind == "leaf" and source.path == tmp_path / "data"


def _write_npz(path: Path, n: int = 12, **override: np.ndarray) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    arrays = {
        "x": rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8),
        "y": rng.integers(0, 62, size=n).astype(np.int16),
        "writer": (np.arange(n) % 3).astype(np.int32),
        "writer_ids": np.array(["w_a", "w_b", "w_c"]),
        "split": (np.arange(n) % 4 == 3).astype(np.uint8),
        "writer_complete": np.arange(n) % 3 != 2,
    }
    arrays.update(override)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return arrays


def test_npz_polarity_split_and_writers(tmp_path: Path, isolated_env: Path) -> None:
    arrays = _write_npz(tmp_path / "femnist" / FEMNIST_NPZ)
    raw = load_femnist_arrays(data_dir=tmp_path)
    train = arrays["split"] == 0
    assert raw.x_train.dtype == np.uint8 and raw.x_train.shape == (9, 28, 28)
    np.testing.assert_array_equal(raw.x_train, 255 - arrays["x"][train])
    np.testing.assert_array_equal(raw.writer_test, arrays["writer"][~train])
    assert raw.writer_ids == ("w_a", "w_b", "w_c")
    complete = load_femnist_arrays(data_dir=tmp_path / "femnist" / FEMNIST_NPZ,
                                   complete_only=True)
    assert complete.y_train.size + complete.y_test.size == 8
    assert 2 not in complete.writer_train.tolist()


def test_fedqr_data_env_then_cache(tmp_path: Path, isolated_env: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _write_npz(isolated_env / "fedqr" / "femnist" / FEMNIST_NPZ)
    assert locate_femnist().path.parent == isolated_env / "fedqr" / "femnist"
    _write_npz(tmp_path / "env" / "femnist" / FEMNIST_NPZ)
    monkeypatch.setenv("FEDQR_DATA", str(tmp_path / "env"))
    assert locate_femnist().path == tmp_path / "env" / "femnist" / FEMNIST_NPZ


def test_nothing_found_names_every_place(tmp_path: Path, isolated_env: Path) -> None:
    with pytest.raises(DataNotFoundError) as info:
        load_dataset("femnist", data_dir=tmp_path)
    msg = str(info.value)
    assert str(tmp_path) in msg and str(tmp_path / "femnist") in msg
    assert str(isolated_env / "fedqr" / "femnist") in msg
    assert "no public download URL" in msg and FEMNIST_NPZ in msg


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"users": ["u"], "num_samples": [1]}, "unknown layout: a LEAF file needs keys"),
        ([1, 2], "unknown layout"),
        ({"users": ["u"], "user_data": {"u": {"x": [[0.5] * 783], "y": [1]}}},
         r"x \[m, 784\] floats"),
        ({"users": ["u"], "user_data": {"u": {"x": [[1.5] * 784], "y": [1]}}},
         r"x must lie in \[0, 1\]"),
        ({"users": ["u"], "user_data": {"u": {"x": [[0.5] * 784], "y": [62]}}},
         r"y must lie in \[0, 61\]"),
        ({"users": ["u"], "num_samples": [2], "user_data": {"u": {"x": [[0.5] * 784],
                                                                  "y": [1]}}},
         "num_samples"),
        ({"users": ["u"], "user_data": {"v": {}}}, r"user_data\['u'\] must hold 'x' and 'y'"),
    ],
)
def test_malformed_leaf_files(tmp_path: Path, isolated_env: Path, doc: object,
                              message: str) -> None:
    write_leaf(tmp_path, {"train": {"a.json": {"u": 1}}})
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "a.json").write_text(json.dumps(doc))
    with pytest.raises(FemnistFormatError, match=message):
        load_femnist_arrays(data_dir=tmp_path)


def test_half_a_leaf_layout_or_empty_split_is_an_error(tmp_path: Path,
                                                       isolated_env: Path) -> None:
    write_leaf(tmp_path, {"train": {"a.json": {"u": 1}}})
    with pytest.raises(FemnistFormatError, match="only one of train/ and test/"):
        load_femnist_arrays(data_dir=tmp_path)
    (tmp_path / "test").mkdir()
    with pytest.raises(FemnistFormatError, match=r"no \*.json files"):
        load_femnist_arrays(data_dir=tmp_path)
    (tmp_path / "test" / "a.json").write_text("{not json")
    with pytest.raises(FemnistFormatError, match="not a readable JSON file"):
        load_femnist_arrays(data_dir=tmp_path)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"x": np.zeros((12, 28, 27), dtype=np.uint8)}, r"x must be uint8 \[12, 28, 28\]"),
        ({"x": np.zeros((12, 28, 28), dtype=np.float32)}, "key 'x' must have dtype kind"),
        ({"y": np.full(12, 62, dtype=np.int16)}, r"y must lie in \[0, 61\]"),
        ({"writer": np.full(12, 3, dtype=np.int32)}, "writer must index writer_ids"),
        ({"split": np.full(12, 2, dtype=np.uint8)}, "split must hold 0"),
        ({"split": np.zeros(11, dtype=np.uint8)}, r"split must have shape \(12,\)"),
    ],
)
def test_malformed_npz(tmp_path: Path, isolated_env: Path, override: dict[str, np.ndarray],
                       message: str) -> None:
    _write_npz(tmp_path / FEMNIST_NPZ, **override)
    with pytest.raises(FemnistFormatError, match=message):
        load_femnist_arrays(data_dir=tmp_path)


def test_npz_with_unknown_keys_or_not_an_npz(tmp_path: Path, isolated_env: Path) -> None:
    np.savez(tmp_path / FEMNIST_NPZ, images=np.zeros((2, 28, 28), dtype=np.uint8))
    with pytest.raises(FemnistFormatError, match=r"unknown layout, missing keys \['x'"):
        load_femnist_arrays(data_dir=tmp_path)
    (tmp_path / "f.npz").write_bytes(b"garbage")
    with pytest.raises(FemnistFormatError, match="not a readable npz file"):
        load_femnist_arrays(data_dir=tmp_path / "f.npz")
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(FemnistFormatError, match=r"data_dir must be a folder or a \.npz file"):
        load_femnist_arrays(data_dir=tmp_path / "f.txt")
    _write_npz(tmp_path / "c.npz")
    np.savez(tmp_path / "d.npz", **{k: v for k, v in np.load(tmp_path / "c.npz").items()
                                    if k != "writer_complete"})
    with pytest.raises(FemnistFormatError, match="complete_only=True needs key"):
        load_femnist_arrays(data_dir=tmp_path / "d.npz", complete_only=True)


def test_fraction_keeps_writers_aligned(tmp_path: Path, isolated_env: Path) -> None:
    arrays = _write_npz(tmp_path / FEMNIST_NPZ, n=40, y=np.arange(40).astype(np.int16) % 4)
    ds = load_dataset("femnist", data_dir=tmp_path, fraction=0.5, rng=np.random.default_rng(0))
    train = arrays["split"] == 0
    assert ds.num_train == 15 and ds.writer_train.shape == (15,)
    pairs = set(zip(arrays["y"][train].tolist(), arrays["writer"][train].tolist(), strict=True))
    assert set(zip(ds.y_train.tolist(), ds.writer_train.tolist(), strict=True)) <= pairs


def test_dataset_checks_writers_and_image_shape() -> None:
    x, y = np.zeros((3, 4), dtype=np.float32), np.zeros(3, dtype=np.int64)
    base = {"name": "t", "x_train": x, "y_train": y, "x_test": x, "y_test": y, "num_classes": 2}
    with pytest.raises(ValueError, match=r"writer_train must have length 3, got"):
        Dataset(**base, writer_train=np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match=r"writer_test must lie in \[0, 0\], got values in"):
        Dataset(**base, writer_test=np.array([0, 1, 0]), writer_ids=("a",))
    with pytest.raises(ValueError, match="writer_train must be a 1-D int64 array or None"):
        Dataset(**base, writer_train=np.zeros(3, dtype=np.int32))
    with pytest.raises(ValueError, match=r"image_shape must multiply to num_features=4"):
        Dataset(**base, image_shape=(1, 3, 3))
    assert Dataset(**base, image_shape=(1, 2, 2)).image_shape == (1, 2, 2)
