"""FederatedData: built-in round trips, from_arrays semantics, checks, identity, class selection."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from fedqr.data import ClientData, DataSpec, FederatedData, Partition, PartitionKind
from fedqr.data.datasets import DatasetName


def _same_client_data(a: ClientData, b: ClientData) -> None:
    for key in ("x_train", "y_train", "x_test", "y_test"):
        xa, xb = getattr(a.dataset, key), getattr(b.dataset, key)
        assert xa.dtype == xb.dtype and xa.shape == xb.shape
        assert xa.tobytes() == xb.tobytes()  # bit for bit
    assert a.dataset.num_classes == b.dataset.num_classes
    assert a.dataset.image_shape == b.dataset.image_shape
    assert a.dataset.name == b.dataset.name
    assert a.partition.num_clients == b.partition.num_clients
    for ia, ib in zip(a.partition.indices, b.partition.indices, strict=True):
        np.testing.assert_array_equal(ia, ib)


def _round_trip(spec: DataSpec) -> None:
    built = spec.build()
    fd = FederatedData.from_client_data(built)
    assert fd.num_clients == spec.num_clients
    np.testing.assert_array_equal(fd.sizes, built.partition.sizes)
    assert fd.input_shape == built.dataset.image_shape
    _same_client_data(built, fd.to_client_data())
    again = FederatedData.from_client_data(fd.to_client_data())
    for key in ("x", "y", "client", "x_test", "y_test"):
        assert getattr(again, key).tobytes() == getattr(fd, key).tobytes()
    assert again.digest == fd.digest


@pytest.mark.parametrize("kind", [PartitionKind.TWO_DIGITS, PartitionKind.DIRICHLET])
def test_round_trip_of_builtin_digits_is_exact(kind: PartitionKind) -> None:
    _round_trip(DataSpec(dataset=DatasetName.DIGITS, partition=kind, num_clients=7, seed=3))


def test_round_trip_of_real_mnist_is_exact(data_dir: Path) -> None:
    _round_trip(DataSpec(dataset=DatasetName.MNIST, fraction=0.02, num_clients=10, seed=1,
                         data_dir=data_dir))


def _data(n: int = 60, p: int = 4, clients: int = 3, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=(n, p)).astype(np.float32),
            "y": rng.integers(0, 3, size=n), "client": np.arange(n) % clients,
            "x_test": rng.normal(size=(10, p)).astype(np.float32),
            "y_test": rng.integers(0, 3, size=10)}


def test_partition_is_flatnonzero_of_client() -> None:
    client = np.random.default_rng(2).permutation(np.arange(50) % 6)
    fd = FederatedData.from_arrays(**{**_data(n=50), "client": client}, standardize=False)
    part = fd.partition()
    assert part.num_clients == 6
    for i, ix in enumerate(part.indices):
        np.testing.assert_array_equal(ix, np.flatnonzero(client == i))
    np.testing.assert_array_equal(fd.sizes, np.bincount(client))
    assert fd.sizes.dtype == np.int64


def test_client_ids_map_by_sorted_value_and_keep_the_originals() -> None:
    d = _data(n=6)
    fd = FederatedData.from_arrays(**{**d, "client": [10, 3, 7, 3, 10, 7]}, standardize=False)
    np.testing.assert_array_equal(fd.client, [2, 0, 1, 0, 2, 1])  # numeric order, not text
    assert fd.client_names == ("3", "7", "10")
    fd = FederatedData.from_arrays(**{**d, "client": ["b", "a", "b", "c", "a", "c"]},
                                   standardize=False)
    np.testing.assert_array_equal(fd.client, [1, 0, 1, 2, 0, 2])
    assert fd.client_names == ("a", "b", "c")
    fd = FederatedData.from_arrays(**{**d, "client": [1, 0, 2, 2, 1, 0]}, standardize=False)
    assert fd.client_names is None


def test_images_and_int_features_are_flattened_in_row_order() -> None:
    x = np.arange(5 * 2 * 3, dtype=np.int16).reshape(5, 2, 3)
    fd = FederatedData.from_arrays(x=x, y=[0, 1, 0, 1, 0], client=[0, 0, 1, 1, 1],
                                   x_test=x[:2], y_test=[1, 0], standardize=False)
    # a 3-D x [n, H, W] holds 1-channel images, as the built-in MNIST's [n, 1, H, W]
    assert fd.input_shape == (1, 2, 3) and fd.x.dtype == np.float32 and fd.x.flags.c_contiguous
    np.testing.assert_array_equal(fd.x, x.reshape(5, 6).astype(np.float32))
    assert fd.num_classes == 2 and fd.num_features == 6
    assert fd.to_client_data().dataset.image_shape == (1, 2, 3)
    four = FederatedData.from_arrays(x=x[:, None], y=[0, 1, 0, 1, 0], client=[0, 0, 1, 1, 1],
                                     x_test=x[:2, None], y_test=[1, 0], standardize=False)
    assert four.input_shape == (1, 2, 3) and four.digest == fd.digest
    flat = FederatedData.from_arrays(x=x, y=[0, 1, 0, 1, 0], client=[0, 0, 1, 1, 1],
                                     x_test=x[:2], y_test=[1, 0], standardize=False,
                                     input_shape=(6,))  # a given shape is kept
    assert flat.input_shape == (6,) and flat.to_client_data().dataset.image_shape is None


def test_standardisation_uses_training_statistics_and_only_centres_constants() -> None:
    d = _data(n=80, p=3)
    d["x"][:, 1] = 5.0  # constant feature
    d["x"][:, 2] = d["x"][:, 2] * 7.0 + 100.0
    fd = FederatedData.from_arrays(**d)
    x64 = d["x"].astype(np.float64)
    mean, std = x64.mean(axis=0), x64.std(axis=0)
    assert fd.standardization is not None
    np.testing.assert_allclose(fd.standardization.mean, mean, rtol=1e-12)
    np.testing.assert_allclose(fd.standardization.std, std, rtol=1e-12, atol=1e-15)
    assert fd.standardization.std[1] == 0.0
    scale = np.where(std > 0, std, 1.0)
    np.testing.assert_allclose(fd.x, (x64 - mean) / scale, atol=1e-6)
    np.testing.assert_allclose(fd.x_test, (d["x_test"] - mean) / scale, atol=1e-5)
    np.testing.assert_allclose(fd.x.mean(axis=0), 0.0, atol=1e-6)
    np.testing.assert_allclose(fd.x.std(axis=0, dtype=np.float64), [1.0, 0.0, 1.0], atol=1e-6)
    stats = fd.identity()["standardization"]
    assert stats["mean"] == pytest.approx(list(mean)) and stats["constant_features"] == 1
    raw = FederatedData.from_arrays(**d, standardize=False)
    assert raw.x.tobytes() == d["x"].tobytes() and raw.identity()["standardization"] is None


def test_test_share_holds_out_a_stratified_share_of_each_client() -> None:
    rng = np.random.default_rng(4)
    n = 400
    y = rng.integers(0, 4, size=n)
    client = rng.integers(0, 5, size=n)
    client[-1] = 5  # a client of one row keeps it for training
    x = np.column_stack([np.arange(n), rng.normal(size=n)]).astype(np.float32)
    fd = FederatedData.from_arrays(x=x, y=y, client=client, test_share=0.25,
                                   standardize=False, seed=9)
    train_rows, test_rows = fd.x[:, 0].astype(int), fd.x_test[:, 0].astype(int)
    assert np.all(np.diff(train_rows) > 0) and np.all(np.diff(test_rows) > 0)  # order kept
    np.testing.assert_array_equal(np.sort(np.concatenate([train_rows, test_rows])), np.arange(n))
    held = np.isin(np.arange(n), test_rows)
    assert held[-1] == False  # noqa: E712
    assert fd.sizes[5] == 1
    for c in range(5):
        mine = client == c
        assert held[mine].sum() == np.floor(0.25 * mine.sum() + 0.5)
        for label in range(4):
            rows = mine & (y == label)
            assert abs(held[rows].sum() - 0.25 * rows.sum()) < 1.0
    same = FederatedData.from_arrays(x=x, y=y, client=client, test_share=0.25,
                                     standardize=False, seed=9)
    other = FederatedData.from_arrays(x=x, y=y, client=client, test_share=0.25,
                                      standardize=False, seed=10)
    np.testing.assert_array_equal(same.x_test, fd.x_test)
    assert not np.array_equal(other.x_test[:, 0], fd.x_test[:, 0])


def test_test_share_breaks_ties_between_labels_at_random() -> None:
    # 300 clients of labels 0, 1, 2 with one row held out each: every label ties
    y = np.tile([0, 1, 2], 300)
    fd = FederatedData.from_arrays(x=np.random.default_rng(0).normal(size=(900, 2)), y=y,
                                   client=np.repeat(np.arange(300), 3), test_share=1 / 3)
    counts = np.bincount(fd.y_test, minlength=3)
    assert counts.sum() == 300 and counts.min() > 60  # a fixed order would give [300, 0, 0]


def _err(match: str, **kw: Any) -> None:
    with pytest.raises(ValueError, match=match):
        FederatedData.from_arrays(**kw)


def test_bad_test_set_options_are_named() -> None:
    d = _data()
    base = {k: d[k] for k in ("x", "y", "client")}
    _err(r"give a test set or test_share \(--test-share\), .* test_path \(--test-data\), "
         r"or the arrays x_test and y_test .*; got neither", **base)
    _err("not both", **d, test_share=0.2)
    _err("y_test=None", **base, x_test=d["x_test"])
    _err("x_test=None", **base, y_test=d["y_test"])
    _err(r"x_test must have 4 features like x, got 3", **{**d, "x_test": d["x_test"][:, :3]})
    _err(r"y_test must be 1-D of length 10", **{**d, "y_test": d["y_test"][:4]})
    for share in (0, 1, 1.5, -0.1, float("nan")):
        _err(r"test_share \(--test-share\) must be in \(0, 1\)", **base, test_share=share)
    _err(r"test_share \(--test-share\) must be a number", **base, test_share="0.2")
    _err(r"seed must be an integer >= 0, got seed=-1", **base, test_share=0.2, seed=-1)
    _err(r"test_share \(--test-share\) 0.01 holds out no row", **base, test_share=0.01)
    tiny = {"x": np.arange(8.0).reshape(4, 2), "y": np.array([0, 1, 0, 1]),
            "client": np.array([0, 0, 1, 1])}  # two clients of one row per class
    _err(r"test_share \(--test-share\) 0.25 leaves the training rows only class [01]: .*"
         r"seed=0.*smallest client has 2 row", **tiny, test_share=0.25, seed=0)


def test_bad_arrays_are_named() -> None:
    d = _data()
    _err(r"y must be 1-D of length 60 .*y.shape=\(59,\)", **{**d, "y": d["y"][:59]})
    _err(r"client must be 1-D of length 60 .*client.shape=\(61,\)",
         **{**d, "client": np.arange(61)})
    _err(r"x must hold at least 1 row, got x.shape=\(0, 4\)",
         **{**d, "x": np.zeros((0, 4)), "y": [], "client": []})
    _err(r"x must hold at least 1 feature", **{**d, "x": np.zeros((60, 0))})
    _err(r"^x must have shape \(n, features...\) \(at least 2-D: one row per sample\), got "
         r"x.shape=\(60,\)$", **{**d, "x": np.zeros(60)})
    _err(r"x must hold real numbers .*x.dtype=<U1", **{**d, "x": np.full((60, 4), "a")})
    _err(r"client must hold integer or string client ids, got client\[2\]=1.5",
         **{**d, "client": np.r_[0.0, 1.0, 1.5, np.zeros(57)]})
    _err(r"input_shape must be positive and multiply to the 4 features of x, got "
         r"input_shape=\(3, 2\)", **d, input_shape=(3, 2))


def test_non_finite_features_are_counted_with_the_first_row() -> None:
    d = _data()
    d["x"][7, 1] = np.nan
    d["x"][9, 0] = np.inf
    d["x"][9, 3] = -np.inf
    _err(r"x must be finite, got 3 NaN or infinite value\(s\), the first in row 7", **d)
    d = _data()
    d["x_test"][4, 2] = np.nan
    _err(r"x_test must be finite, got 1 NaN .* row 4", **d)


def test_float64_beyond_float32_range_is_one_clean_error() -> None:
    d = _data()
    x = d["x"].astype(np.float64)
    x[5, 2], x[8, 0], x[9, 1] = 1e200, -1e300, np.inf  # the inf is not "beyond the range"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy RuntimeWarning (overflow in cast) first
        _err(r"^x must lie within the float32 range \[-3.403e\+38, 3.403e\+38\], got 2 "
             r"value\(s\) beyond it, the first in row 5, feature 2: 1e\+200 ", **{**d, "x": x})
        _err(r"^x_test must lie within the float32 range .* row 0, feature 3: -4e\+39 ",
             **{**d, "x_test": np.r_[[[0.0, 0.0, 0.0, -4e39]], d["x_test"][1:]]})
        x[5, 2] = x[8, 0] = 3.4e38  # large, but within the range
        _err(r"^x must be finite, got 1 NaN or infinite value\(s\), the first in row 9 "
             r"\(0-based, x\[9\]\)$",
             **{**d, "x": x})


def test_bad_labels_are_named() -> None:
    d = _data()
    _err(r"y must hold integer class labels, got y\[3\]=1.5",
         **{**d, "y": np.r_[0.0, 1.0, 2.0, 1.5, np.zeros(56)]})
    _err(r"y must hold integer class labels, got y.dtype=<U", **{**d, "y": d["y"].astype(str)})
    _err(r"y must hold class labels >= 0, got y\[5\]=-2",
         **{**d, "y": np.r_[0, 1, 2, 0, 1, -2, np.zeros(54, dtype=int)]})
    _err(r"y_test must hold integer class labels, got y_test\[0\]=nan",
         **{**d, "y_test": np.r_[np.nan, np.zeros(9)]})
    _err(r"labels must lie in \[0, 1\] \(num_classes=2\), got a label 2", **d, num_classes=2)
    _err(r"num_classes must be >= 2, got num_classes=1", **d, num_classes=1)
    _err(r"training rows must hold at least 2 classes, got only class 2",
         **{**d, "y": np.full(60, 2)})
    floats = FederatedData.from_arrays(**{**d, "y": d["y"].astype(np.float64)}, num_classes=5)
    np.testing.assert_array_equal(floats.y, d["y"])
    assert floats.y.dtype == np.int64 and floats.num_classes == 5


def _fd(**over: Any) -> FederatedData:
    d = _data(n=12)
    fields: dict[str, Any] = {"x": d["x"], "y": d["y"].astype(np.int64),
                              "client": (np.arange(12) % 3).astype(np.int64),
                              "x_test": d["x_test"], "y_test": d["y_test"].astype(np.int64),
                              "num_classes": 3, "input_shape": (4,)}
    return FederatedData(**{**fields, **over})


def test_direct_construction_is_checked() -> None:
    _fd()  # consistent
    cases: list[tuple[dict[str, Any], str]] = [
        ({"client": np.array([0, 2] * 6, dtype=np.int64)},
         r"every client 0..2 must hold at least 1 training row, got 1 without .*client 1"),
        ({"client": np.array([0, -1] * 6, dtype=np.int64)}, r"client must hold ids >= 0"),
        ({"x": np.zeros((12, 4))}, r"x must be a 2-D float32 numpy array, got .*float64"),
        ({"x": np.zeros((4, 12), dtype=np.float32).T}, r"x must be C-contiguous"),
        ({"y": np.zeros(11, dtype=np.int64)}, r"y must have 12 rows"),
        ({"y_test": np.full(10, 3, dtype=np.int64)}, r"y_test must lie in \[0, 2\]"),
        ({"x_test": np.zeros((0, 4), np.float32), "y_test": np.zeros(0, np.int64)},
         r"x_test must hold at least 1 row"),
        ({"input_shape": (2, 3)}, r"input_shape must be positive and multiply to "
                                  r"num_features=4"),
        ({"client_names": ("a", "b")}, r"client_names must name the 3 clients"),
        ({"feature_names": ("a",)}, r"feature_names must name the 4 features"),
        ({"num_classes": 2}, r"y must lie in \[0, 1\]"),
    ]
    for over, match in cases:
        with pytest.raises(ValueError, match=match):
            _fd(**over)


def test_from_client_data_refuses_a_partition_that_is_not_a_cover() -> None:
    cd = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.IID, num_clients=3).build()
    ix = cd.partition.indices
    gap = ClientData(dataset=cd.dataset, partition=Partition(indices=(ix[0], ix[1][1:], ix[2])))
    with pytest.raises(ValueError, match=rf"1 row\(s\) without a client \(the first: row "
                                         rf"{int(ix[1][0])}\)"):
        FederatedData.from_client_data(gap)
    twice = ClientData(dataset=cd.dataset, partition=Partition(indices=(ix[0], ix[1],
                                                                        np.sort(np.r_[ix[2],
                                                                                      ix[0][:1]]))))
    n = cd.dataset.num_train
    with pytest.raises(ValueError, match=rf"each of the {n} training rows to exactly one "
                                         rf"client, got {n + 1} assignments"):
        FederatedData.from_client_data(twice)
    outside = ClientData(dataset=cd.dataset,
                         partition=Partition(indices=(*ix[:2], np.r_[ix[2], 5000])))
    with pytest.raises(ValueError, match=rf"partition.indices\[2\] must lie in \[0, {n - 1}\]"):
        FederatedData.from_client_data(outside)


def test_identity_is_json_ready_and_its_digest_follows_the_arrays() -> None:
    d = _data()
    fd = FederatedData.from_arrays(**d, name="toy")
    ident = fd.identity()
    assert json.loads(json.dumps(ident, allow_nan=False)) == ident
    assert {k: ident[k] for k in ("name", "num_clients", "num_classes", "num_features",
                                  "input_shape", "num_train", "num_test")} == {
        "name": "toy", "num_clients": 3, "num_classes": 3, "num_features": 4,
        "input_shape": [4], "num_train": 60, "num_test": 10}
    assert re.fullmatch(r"[0-9a-f]{64}", ident["sha256"])
    assert FederatedData.from_arrays(**d, name="toy").identity() == ident
    changed = {**d, "x": d["x"].copy()}
    changed["x"][59, 3] += np.float32(1e-3)
    assert FederatedData.from_arrays(**changed).digest != fd.digest
    moved = {**d, "client": np.roll(d["client"], 1)}
    assert FederatedData.from_arrays(**moved).digest != fd.digest
    assert FederatedData.from_arrays(**d, num_classes=4).digest != fd.digest


def _labelled(n: int = 90) -> tuple[FederatedData, NDArray[np.int64]]:
    """Rows whose first feature is their row id, labels 0..4, client = label // 2 + row % 2."""
    y = np.arange(n) % 5
    client = y // 2 + np.arange(n) % 2
    x = np.column_stack([np.arange(n), np.ones(n)]).astype(np.float32)
    fd = FederatedData.from_arrays(x=x, y=y, client=client, x_test=x[:20], y_test=y[:20],
                                   standardize=False, name="five")
    return fd, y


def test_select_classes_keeps_their_rows_and_relabels_in_the_given_order() -> None:
    fd, y = _labelled()
    sub = fd.select_classes([4, 1])
    rows = sub.x[:, 0].astype(int)
    np.testing.assert_array_equal(rows, np.flatnonzero(np.isin(y, [4, 1])))
    np.testing.assert_array_equal(sub.y, np.where(y[rows] == 4, 0, 1))
    np.testing.assert_array_equal(sub.y_test, np.where(y[:20][np.isin(y[:20], [4, 1])] == 4,
                                                       0, 1))
    assert sub.num_classes == 2 and sub.name == "five"
    # clients of labels 1 (0, 1) and 4 (2, 3) remain; client 1 also holds labels 2, 3 (dropped)
    assert sub.num_clients == 4 and sub.client_names is None
    sub = fd.select_classes([0, 1])  # clients 0 and 1 only: 2 and 3 are dropped, renumbered
    assert sub.num_clients == 2 and sub.client_names == ("0", "1")
    merged = fd.relabel({0: 0, 1: 0, 3: 1, 4: 2})
    assert merged.num_classes == 3
    np.testing.assert_array_equal(np.bincount(merged.y), [36, 18, 18])


def test_select_classes_errors_name_the_culprit() -> None:
    fd, _ = _labelled()
    cases: list[tuple[Any, str]] = [
        ([], r"selection of classes must not be empty"),
        ([1, 7], r"classes must be integers in \[0, 4\] \(num_classes=5\), got unknown "
                 r"class\(es\) \[7\]"),
        ([1, "a"], r"unknown class\(es\) \['a'\]"),
        ([2, 2], r"classes must not repeat a class, got classes=\[2, 2\]"),
        ([3], r"must keep at least 2 classes, got 1"),
    ]
    for classes, match in cases:
        with pytest.raises(ValueError, match=match):
            fd.select_classes(classes)
    with pytest.raises(ValueError, match=r"new labels must be the classes 0..1 without a gap "
                                         r"\(2 distinct new labels given\), got \[0, 2\]"):
        fd.relabel({0: 0, 1: 2})
    sparse = FederatedData.from_arrays(x=np.ones((4, 1)), y=[0, 1, 0, 1], client=[0, 0, 1, 1],
                                       x_test=np.ones((2, 1)), y_test=[0, 3], num_classes=4,
                                       standardize=False)
    with pytest.raises(ValueError, match=r"mapping selects no training row: no row has a label "
                                         r"in \[2, 3\]"):
        sparse.select_classes([2, 3])
