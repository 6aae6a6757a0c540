"""Data files of FederatedData.from_file: .npz/.csv/.parquet round trips and every bad file."""

from __future__ import annotations

import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fedqr.data import DataNotFoundError, DataSpec, FederatedData, PartitionKind, _memory
from fedqr.data.datasets import DatasetName
from fedqr.data.tabular import DataTooLargeError, write_csv, write_npz, write_parquet


@pytest.fixture(scope="module")
def digits() -> FederatedData:
    spec = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.DIRICHLET,
                    num_clients=6, seed=2)
    return FederatedData.from_client_data(spec.build())


def _same(a: FederatedData, b: FederatedData) -> None:
    for key in ("x", "y", "client", "x_test", "y_test"):
        xa, xb = getattr(a, key), getattr(b, key)
        assert xa.dtype == xb.dtype and xa.shape == xb.shape
        assert xa.tobytes() == xb.tobytes(), key
    assert a.num_classes == b.num_classes and a.client_names == b.client_names


def test_npz_round_trip_reproduces_the_builtin_bit_for_bit(digits: FederatedData,
                                                          tmp_path: Path) -> None:
    path = tmp_path / "digits.npz"
    digits.to_npz(path)
    back = FederatedData.from_file(path, standardize=False)
    _same(back, digits)
    assert back.input_shape == (1, 8, 8) and back.name == "digits"
    assert back.digest == digits.digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digits.npz"]  # no temporary left
    with np.load(path) as npz:
        assert sorted(npz.files) == ["client", "num_classes", "x", "x_test", "y", "y_test"]
        assert npz["x"].shape == (digits.num_train, 1, 8, 8)


def test_npz_keeps_string_client_ids(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    fd = FederatedData.from_arrays(x=rng.normal(size=(30, 3)), y=np.arange(30) % 3,
                                   client=np.array(["w07", "w10", "a"])[np.arange(30) % 3],
                                   test_share=0.2)
    write_npz(tmp_path / "w.npz", fd)
    back = FederatedData.from_file(tmp_path / "w.npz", standardize=False)
    _same(back, fd)
    assert back.client_names == ("a", "w07", "w10")


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_column_files_round_trip_identical_arrays(fmt: str, digits: FederatedData,
                                                  tmp_path: Path) -> None:
    write = write_csv if fmt == "csv" else write_parquet
    train, test = tmp_path / f"d.{fmt}", tmp_path / f"t.{fmt}"
    write(train, digits, test_path=test)
    back = FederatedData.from_file(train, test_path=test, standardize=False)
    _same(back, digits)
    assert back.input_shape == (64,) and back.feature_names == tuple(f"x{j}" for j in range(64))
    assert back.name == "d"
    sites = np.array([f"site {c}" for c in range(6)])[digits.client]
    renamed = FederatedData.from_arrays(x=digits.x, y=digits.y, client=sites,
                                        x_test=digits.x_test, y_test=digits.y_test,
                                        standardize=False)
    write(train, renamed, test_path=test, client_column="who", label_column="digit")
    again = FederatedData.from_file(train, test_path=test, standardize=False,
                                    client_column="who", label_column="digit")
    _same(again, renamed)


def test_csv_with_quotes_string_clients_and_a_test_share(tmp_path: Path) -> None:
    lines = ["age,client,label,score"]
    lines += [f'{20 + i},"site, {"AB"[i % 2]}",{i % 3},{i * 0.5}' for i in range(24)]
    (tmp_path / "s.csv").write_text("\n".join(lines) + "\n")
    fd = FederatedData.from_file(tmp_path / "s.csv", test_share=0.25, seed=1)
    assert fd.client_names == ("site, A", "site, B") and fd.num_classes == 3
    assert fd.feature_names == ("age", "score")
    assert fd.num_train == 18 and fd.num_test == 6
    np.testing.assert_allclose(fd.x.mean(axis=0), 0.0, atol=1e-6)  # standardised by default


@pytest.mark.parametrize(("ids", "names"), [
    (["1.0", "2.0", "10.0"], ("1", "2", "10")),  # a float column, as pandas writes it
    (["1", "2", "10"], ("1", "2", "10")),
    (["07", "2", "10"], ("07", "10", "2")),  # a leading zero: text
    (["1.5", "2", "10"], ("1.5", "10", "2")),
])
def test_csv_client_ids_sort_as_numbers_when_each_is_an_integer(
        tmp_path: Path, ids: list[str], names: tuple[str, ...]) -> None:
    """Client ids 1.0, 2.0, 10.0 are the integers 1, 2, 10, as in an .npz (the order of the
    clients decides which gets which of the per-client budgets)."""
    lines = ["client,label,a"] + [f"{ids[i % 3]},{i % 2},{i}" for i in range(12)]
    (tmp_path / "f.csv").write_text("\n".join(lines) + "\n")
    fd = FederatedData.from_file(tmp_path / "f.csv", test_share=0.25, seed=0)
    assert fd.client_names == names
    # the same ids as strings in arrays and in an .npz: the same clients in the same order
    rows = np.array([ids[i % 3] for i in range(12)])
    arrays = FederatedData.from_arrays(x=np.arange(12.0)[:, None], y=np.arange(12) % 2,
                                       client=rows, test_share=0.25, seed=0)
    assert arrays.client_names == names
    np.savez(tmp_path / "f.npz", x=np.arange(12.0)[:, None], y=np.arange(12) % 2, client=rows)
    assert FederatedData.from_file(tmp_path / "f.npz", test_share=0.25,
                                   seed=0).client_names == names


def test_csv_with_a_byte_order_mark_and_crlf_lines(tmp_path: Path) -> None:
    text = "client,label, a ,b\r\n0,0, 1.5,2\r\n0,1,3,4\r\n1,0,5,6\r\n1,1,7,8\r\n"
    (tmp_path / "w.csv").write_bytes(text.encode("utf-8-sig"))
    (tmp_path / "t.csv").write_bytes(b"label,a,b\r\n1,9,10\r\n")
    fd = FederatedData.from_file(tmp_path / "w.csv", test_path=tmp_path / "t.csv",
                                 standardize=False)
    assert fd.feature_names == ("a", "b")
    np.testing.assert_array_equal(fd.x, [[1.5, 2], [3, 4], [5, 6], [7, 8]])
    np.testing.assert_array_equal(fd.y_test, [1])


def test_test_file_columns_are_matched_by_name(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("client,label,u,v\n0,0,1,2\n1,1,3,4\n0,1,5,6\n")
    (tmp_path / "b.csv").write_text("v,label,u\n20,1,10\n")
    fd = FederatedData.from_file(tmp_path / "a.csv", test_path=tmp_path / "b.csv",
                                 standardize=False)
    np.testing.assert_array_equal(fd.x_test, [[10, 20]])
    (tmp_path / "c.csv").write_text("label,u,w\n1,10,20\n")
    with pytest.raises(ValueError, match=r"c.csv must have the feature columns of the training "
                                         r"file; it lacks \['v'\] and has unexpected \['w'\]"):
        FederatedData.from_file(tmp_path / "a.csv", test_path=tmp_path / "c.csv")


def _from(path: Path, **kw: Any) -> FederatedData:
    return FederatedData.from_file(path, **kw)


def test_missing_unknown_and_unreadable_paths_are_named(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match=r"^path \(--data\) must be an existing data "
                                                r"file, got path='.*nope.npz' \(no such file\)"):
        _from(tmp_path / "nope.npz")
    (tmp_path / "a.csv").write_text("client,label,u\n0,0,1\n1,1,2\n")
    with pytest.raises(DataNotFoundError, match=r"^test_path \(--test-data\) .*test_path=.*t.csv"):
        _from(tmp_path / "a.csv", test_path=tmp_path / "t.csv")
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(ValueError, match=r"^path \(--data\) must end in .npz, .csv, .parquet, "
                                         r"got path='.*a.txt'"):
        _from(tmp_path / "a.txt")
    (tmp_path / "dir.csv").mkdir()
    with pytest.raises(ValueError, match=r"^path \(--data\) must be a data file, got "
                                         r"path='.*dir.csv' \(a folder, not a file\)$"):
        _from(tmp_path / "dir.csv")
    with pytest.raises(ValueError, match=r"^test_path \(--test-data\) must be a data file, "
                                         r"got .*dir.csv' \(a folder, not a file\)$"):
        _from(tmp_path / "a.csv", test_path=tmp_path / "dir.csv")
    (tmp_path / "t.parquet").write_bytes(b"")
    with pytest.raises(ValueError, match=r"^test_path \(--test-data\) must be a .csv file like "
                                         r"path \(--data\) '.*a.csv', got test_path="
                                         r"'.*t.parquet'$"):
        _from(tmp_path / "a.csv", test_path=tmp_path / "t.parquet")
    (tmp_path / "bad.npz").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match=r"bad.npz is not a readable .npz file"):
        _from(tmp_path / "bad.npz")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 garbage")
    with pytest.raises(ValueError, match=r"bad.parquet is not a readable Parquet file"):
        _from(tmp_path / "bad.parquet")
    (tmp_path / "latin.csv").write_bytes("client,label,é\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin.csv is not a readable CSV file"):
        _from(tmp_path / "latin.csv")


def _npz(path: Path, **arrays: Any) -> Path:
    np.savez(path, **arrays)
    return path


def test_npz_keeps_the_feature_names_of_a_table(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    path.write_text("client,label,age,chol\n" + "".join(f"{i % 3},{i % 2},{40 + i},{200 + i}\n"
                                                       for i in range(30)))
    table = FederatedData.from_file(path, test_share=0.2, standardize=False)
    table.to_npz(tmp_path / "h.npz")
    back = FederatedData.from_file(tmp_path / "h.npz", standardize=False)
    assert table.feature_names == back.feature_names == ("age", "chol")
    _same(back, table)
    x, y, c = np.ones((20, 2)), np.arange(20) % 2, np.arange(20) // 10
    bad = _npz(tmp_path / "b.npz", x=x, y=y, client=c, feature_names=np.array([1, 2]))
    with pytest.raises(ValueError, match=r"array feature_names must be a 1-D array of strings"):
        _from(bad, test_share=0.5)
    short = _npz(tmp_path / "s.npz", x=x, y=y, client=c, feature_names=np.array(["age"]))
    with pytest.raises(ValueError, match=r"feature_names must name the 2 features, got 1"):
        _from(short, test_share=0.5)


def test_npz_with_wrong_arrays_names_them(tmp_path: Path) -> None:
    x, y, c = np.ones((4, 2)), np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1])
    p = _npz(tmp_path / "k.npz", X=x, y=y, client=c)
    with pytest.raises(ValueError, match=r"lacks array\(s\) \['x'\] and holds unexpected "
                                         r"array\(s\) \['X'\].*found \['X', 'y', 'client'\]"):
        _from(p, test_share=0.5)
    p = _npz(tmp_path / "t.npz", x=x, y=y, client=c, x_test=x)
    with pytest.raises(ValueError, match=r"holds x_test alone: give x_test and y_test"):
        _from(p)
    p = _npz(tmp_path / "o.npz", x=x, y=y, client=np.array([0, "a", None, 1], dtype=object))
    with pytest.raises(ValueError, match=r"o.npz is not a valid .npz data file"):
        _from(p, test_share=0.5)
    p = _npz(tmp_path / "n.npz", x=x, y=y, client=c, num_classes=np.array([2]))
    with pytest.raises(ValueError, match=r"array num_classes must be a 0-d integer"):
        _from(p, test_share=0.5)
    p = _npz(tmp_path / "ok.npz", x=x, y=y, client=c, x_test=x, y_test=y)
    with pytest.raises(ValueError, match=r"ok.npz holds a test set .* give no test_path "
                                         r"\(--test-data\) with it, got test_path='.*ok.npz'"):
        _from(p, test_path=p)
    with pytest.raises(ValueError, match=r"give a test set .* or test_share, not both "
                                         r"\(--test-data or --test-share\); got test_share=0.5 "
                                         r"and a test set: the arrays x_test and y_test of "):
        _from(p, test_share=0.5)
    with pytest.raises(ValueError, match=r"client_column and label_column apply to .csv"):
        _from(p, client_column="site")
    bad = _npz(tmp_path / "nan.npz", x=np.array([[1.0], [np.nan], [2.0], [3.0]]), y=y,
               client=c, x_test=x[:, :1], y_test=y)
    with pytest.raises(ValueError, match=r"nan.npz: x must be finite, got 1 NaN .* row 1"):
        _from(bad)
    huge = _npz(tmp_path / "huge.npz", x=x * 1e200, y=y, client=c, x_test=x, y_test=y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy "overflow encountered in cast" first
        with pytest.raises(ValueError, match=r"huge.npz: x must lie within the float32 range "
                                             r".* got 8 value\(s\) beyond it"):
            _from(huge)
    flat = _npz(tmp_path / "flat.npz", x=np.ones(4), y=y, client=c, x_test=x, y_test=y)
    with pytest.raises(ValueError, match=r"flat.npz: x must have shape \(n, features...\) "
                                         r"\(at least 2-D: one row per sample\), got "
                                         r"x.shape=\(4,\)$"):
        _from(flat)


def test_bad_csv_contents_name_column_and_line(tmp_path: Path) -> None:
    cases = [
        ("client,label,u,v\n0,0,1,2\n1,1,3,oops\n", r"feature column 'v' must be numeric, "
                                                    r"got 'oops' on line 3"),
        ("client,label,u,v\n0,0,1,2\n1,1,3,\n", r"feature column 'v' must be numeric, got '' "
                                               r"on line 3"),
        ("client,label,u\n0,0,1\n1,1,3,4\n", r"line 3 has 4 fields, the header 3"),
        ("client,u\n0,1\n", r"has no column 'label' \(label_column='label'\); its columns: "
                           r"\['client', 'u'\]"),
        ("label,u\n0,1\n", r"has no column 'client' \(client_column='client'\)"),
        ("client,label\n0,1\n", r"has no feature column"),
        ("client,label,u,u\n0,1,2,3\n", r"repeats the column name\(s\) \['u'\]"),
        ("client,label,u\n0,<=50K,1\n", r"column 'label' must hold integer class labels, got "
                                        r"'<=50K' on line 2"),
        ("client,label,u\n0,1,1\n0,1.5,2\n", r"column 'label' must hold integer class labels "
                                             r">= 0, got 1.5 on line 3"),
        ("client,label,u\n", r"has a header but no data rows"),
        ("", r"is empty: a CSV data file needs a header row"),
    ]
    for i, (text, match) in enumerate(cases):
        path = tmp_path / f"c{i}.csv"
        path.write_text(text)
        with pytest.raises(ValueError, match=rf"c{i}.csv.*{match}"):
            _from(path, test_share=0.5)


def _parquet(path: Path, **cols: Any) -> Path:
    pq.write_table(pa.table(cols), path)
    return path


def test_bad_parquet_contents_name_the_column(tmp_path: Path) -> None:
    ok = {"client": [0, 0, 1, 1], "label": [0, 1, 0, 1]}
    cases = [
        ({**ok, "u": ["a", "b", "c", "d"]}, r"column 'u' must be numeric, got type string"),
        ({**ok, "u": pa.array([1.0, None, 2.0, 3.0])},
         r"column 'u' must have no missing values, got 1"),
        ({**ok, "label": ["x", "y", "x", "y"], "u": [1, 2, 3, 4]},
         r"column 'label' must be numeric, got type string"),
        ({**ok, "label": [0.0, 1.0, 2.5, 1.0], "u": [1, 2, 3, 4]},
         r"column 'label' must hold integer class labels >= 0, got 2.5 on row 2"),
        ({**ok, "client": [0.5, 0.5, 1.0, 1.0], "u": [1, 2, 3, 4]},
         r"client must hold integer or string client ids"),
        ({"client": [0, 1], "u": [1.0, 2.0]}, r"has no column 'label'"),
    ]
    for i, (cols, match) in enumerate(cases):
        path = _parquet(tmp_path / f"p{i}.parquet", **cols)
        with pytest.raises(ValueError, match=rf"p{i}.parquet.*{match}"):
            _from(path, test_share=0.5)
    good = _parquet(tmp_path / "g.parquet", client=["b", "a"] * 4, label=[0, 0, 1, 1] * 2,
                    u=pa.array(range(8), pa.int8()), v=np.arange(8) + 0.5)
    fd = _from(good, test_share=0.5, standardize=False)
    assert fd.client_names == ("a", "b") and fd.feature_names == ("u", "v")
    assert fd.num_train == 4 and sorted(fd.y.tolist()) == [0, 0, 1, 1]  # stratified


def test_available_memory_is_measured_and_bounded_by_a_cgroup_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    avail = _memory.available_memory()
    assert avail is not None and avail > 2**20
    (tmp_path / "meminfo").write_text("MemTotal: 9000 kB\nMemAvailable:    4000 kB\n")
    monkeypatch.setattr(_memory, "_MEMINFO", tmp_path / "meminfo")
    monkeypatch.setattr(_memory, "_CGROUP", tmp_path)
    assert _memory.available_memory() == 4000 * 1024  # no cgroup files
    (tmp_path / "memory.max").write_text("max\n")
    assert _memory.available_memory() == 4000 * 1024
    (tmp_path / "memory.max").write_text("3000000\n")
    (tmp_path / "memory.current").write_text("1000000\n")
    assert _memory.available_memory() == 2_000_000


def test_files_too_large_for_memory_are_refused_before_reading(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.npz"
    np.savez_compressed(path, x=np.zeros((2048, 256), np.float32), y=np.zeros(2048, np.int64),
                        client=np.zeros(2048, np.int64))
    assert path.stat().st_size < 100_000  # compressed: only the zip headers tell its size
    with zipfile.ZipFile(path) as z:
        need = sum(i.file_size for i in z.infolist())
    assert need > 2048 * 256 * 4
    monkeypatch.setattr(_memory, "available_memory", lambda: 2 * need - 2)
    with pytest.raises(DataTooLargeError, match=rf"big.npz is too large to load: it needs about "
                                                rf".*\({need} bytes\) of memory, more than half "
                                                rf"of the .*\({2 * need - 2} bytes\) available"):
        _from(path, test_share=0.5)
    (tmp_path / "big.csv").write_text("client,label,u\n" + "0,0,1\n" * 1000)
    monkeypatch.setattr(_memory, "available_memory", lambda: 1000)
    with pytest.raises(DataTooLargeError, match=r"big.csv is too large"):
        _from(tmp_path / "big.csv", test_share=0.5)
    monkeypatch.setattr(_memory, "available_memory", lambda: 2 * need)  # exactly half: fine
    with pytest.raises(ValueError, match=r"at least 2 classes"):  # read, then checked
        _from(path, test_share=0.5)


def test_writers_refuse_wrong_paths_and_clashing_names(digits: FederatedData,
                                                       tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"path must end in .npz, got path='.*d.zip'"):
        write_npz(tmp_path / "d.zip", digits)
    with pytest.raises(ValueError, match=r"feature names must differ from the columns "
                                         r"\['x0', 'label'\], got feature\(s\) named \['x0'\]"):
        write_csv(tmp_path / "d.csv", digits, test_path=tmp_path / "t.csv", client_column="x0")
    assert list(tmp_path.iterdir()) == []


def test_a_test_file_and_a_test_share_name_the_test_file(tmp_path: Path) -> None:
    train, test = tmp_path / "train.csv", tmp_path / "test.csv"
    train.write_text("client,label,age\n" + "".join(f"{i % 3},{i % 2},{40 + i}\n"
                                                     for i in range(30)))
    test.write_text("client,label,age\n" + "".join(f"0,{i % 2},{50 + i}\n" for i in range(6)))
    with pytest.raises(ValueError, match=r"got test_share=0.2 and a test set: "
                                         r"test_path='.*test.csv'"):
        FederatedData.from_file(train, test_path=test, test_share=0.2)


def test_an_npz_without_client_is_one_client_only_where_clients_are_not_needed(
        tmp_path: Path) -> None:
    """A public proxy (``need_client=False``) may leave out the ``client`` array, as a CSV
    proxy may leave out its column; a deployment's file still needs it."""
    from fedqr.data.tabular import read_table

    x, y = np.arange(12.0).reshape(6, 2), np.array([0, 1, 0, 1, 1, 0])
    p = _npz(tmp_path / "public.npz", x=x, y=y)
    t = read_table(p, need_client=False)
    np.testing.assert_array_equal(t.client, np.zeros(6, dtype=np.int64))
    np.testing.assert_array_equal(t.x, x)
    with pytest.raises(ValueError, match=r"lacks array\(s\) \['client'\]"):
        read_table(p)
