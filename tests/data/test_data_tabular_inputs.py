"""Bad values in data files: huge labels, empty client ids, unnamed columns, image arrays,
non-finite and out-of-range features, and where each message says the bad value is."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fedqr.data import FederatedData

_ROWS = [f"{i % 3},{i % 2},{i * 0.5},{i % 5}" for i in range(12)]  # client,label,u,v


def _csv(path: Path, *lines: str, header: str = "client,label,u,v") -> Path:
    path.write_text("\n".join([header, *lines]) + "\n")
    return path


def _refused(path: Path, match: str, **kw: Any) -> None:
    with pytest.raises(ValueError, match=match):
        FederatedData.from_file(path, **kw)


def _parquet(path: Path, **cols: Any) -> Path:
    pq.write_table(pa.table(cols), path)
    return path


_OK = {"client": [0, 0, 1, 1], "label": [0, 1, 0, 1], "u": [1.0, 2.0, 3.0, 4.0]}


def test_a_label_implying_more_classes_than_training_rows_is_refused(tmp_path: Path) -> None:
    p = _csv(tmp_path / "h.csv", "0,10000000000,1,2", *_ROWS)
    _refused(p, r"^.*h.csv: column 'label' must hold the class labels 0..k-1 with k at most "
                r"the 10 training rows \(a model output per class\), got a label 10000000000, "
                r"which makes 10000000001 classes: number the classes 0..k-1$", test_share=0.25)
    x = np.ones((6, 2))
    np.savez(tmp_path / "y.npz", x=x, y=[0, 1, 2**40, 0, 1, 0], client=[0, 1] * 3,
             x_test=x[:2], y_test=[0, 1])
    _refused(tmp_path / "y.npz", r"y.npz: y must hold the class labels 0..k-1 with k at most the "
                                 r"6 training rows .* got a label 1099511627776")
    np.savez(tmp_path / "k.npz", x=x, y=[0, 1, 2, 0, 1, 0], client=[0, 1] * 3,
             x_test=x[:2], y_test=[0, 1], num_classes=2**40)
    _refused(tmp_path / "k.npz", r"k.npz: num_classes \(the file's array num_classes\) must "
                                 r"leave a model with an output per class within memory .* "
                                 r"got num_classes=1099511627776$")
    # a given count may keep classes without rows (more than the rows) where the model fits
    kept = FederatedData.from_arrays(x=x, y=[0, 1, 2, 0, 1, 0], client=[0, 1] * 3,
                                     x_test=x[:2], y_test=[0, 1], num_classes=7)
    assert kept.num_classes == 7
    # as many classes as rows, labels coded 1..k: still the documented EmptyClassWarning
    with pytest.warns(UserWarning, match=r"class\(es\) 0 of 0..6 have no training row"):
        fd = FederatedData.from_arrays(x=np.ones((7, 1)), y=[1, 2, 3, 4, 5, 6, 1],
                                       client=[0, 1] * 3 + [0], x_test=x[:1, :1], y_test=[1])
    assert fd.num_classes == 7


def test_labels_beyond_int64_are_refused_not_wrapped(tmp_path: Path) -> None:
    p = _csv(tmp_path / "b.csv", *_ROWS[:3], "1,99999999999999999999,1,2")
    _refused(p, r"b.csv: column 'label' must hold integer class labels in "
                r"\[0, 9223372036854775807\] \(int64\), got 99999999999999999999 on line 5$",
             test_share=0.25)
    _parquet(tmp_path / "b.parquet", **{**_OK, "label": pa.array([0, 2**63, 1, 0], pa.uint64())})
    _refused(tmp_path / "b.parquet", r"column 'label' must hold integer class labels in \[0, "
                                     r"9223372036854775807\] \(int64\), got 9223372036854775808 "
                                     r"on row 1 \(0-based\)$", test_share=0.5)
    x = np.ones((4, 1))
    for y, shown in ((np.array([0, 1e30, 1, 0]), "y\\[1\\]=1e\\+30"),
                     (np.array([0, 1, 2**64 - 1, 0], np.uint64), "y\\[2\\]=18446744073709551615")):
        with pytest.raises(ValueError, match=rf"^y must hold integer class labels within the "
                                             rf"int64 range, got {shown}$"):
            FederatedData.from_arrays(x=x, y=y, client=[0, 1, 0, 1], test_share=0.5)
    # float client ids beyond int64 would all become the same client
    with pytest.raises(ValueError, match=r"^client must hold integer or string client ids within "
                                         r"the int64 range, got client\[0\]=1e\+30$"):
        FederatedData.from_arrays(x=x, y=[0, 1, 0, 1], client=[1e30, 2e30, 1e30, 2e30],
                                  test_share=0.5)


def test_labels_are_shown_as_written_and_integral_text_is_read(tmp_path: Path) -> None:
    p = _csv(tmp_path / "n.csv", *_ROWS[:3], "1,-1,1,2", *_ROWS[3:])
    _refused(p, r"n.csv: column 'label' must hold integer class labels >= 0, got -1 on line 5$",
             test_share=0.25)
    p = _csv(tmp_path / "f.csv", *_ROWS[:3], "1,-1.0,1,2")
    _refused(p, r"got -1.0 on line 5$", test_share=0.25)
    p = _csv(tmp_path / "ok.csv", "0,1.0,1,2", "1, 2 ,3,4", "0,0,5,6", "1,1e0,7,8", "0,2,1,1",
             "1,0,2,2")
    fd = FederatedData.from_file(p, test_share=0.3, standardize=False)
    assert sorted([*fd.y.tolist(), *fd.y_test.tolist()]) == [0, 0, 1, 1, 2, 2]


def test_an_empty_client_id_is_refused_with_its_line_or_row(tmp_path: Path) -> None:
    for cell in ("", "  ", '""', "nan", "NaN"):  # nan: a float column's missing value
        p = _csv(tmp_path / "e.csv", *_ROWS[:2], f"{cell},1,2,3", *_ROWS[2:])
        _refused(p, r"e.csv: column 'client' must have no missing values \(a client id on every "
                    r"line\), got 1 empty or NaN cell\(s\), the first on line 4$",
                 test_share=0.25)
    p = _csv(tmp_path / "s.csv", *_ROWS[:2], ",1,2,3", header="site,label,u,v")
    _refused(p, r"column 'site' must have no missing values", test_share=0.25,
             client_column="site")
    # a test file's client column is ignored, empty cells too
    test = _csv(tmp_path / "t.csv", ",1,2,3", "7,0,1,1")
    fd = FederatedData.from_file(_csv(tmp_path / "a.csv", *_ROWS), test_path=test)
    assert fd.num_test == 2
    _parquet(tmp_path / "n.parquet", **{**_OK, "client": pa.array([0, 1, None, 1])})
    _refused(tmp_path / "n.parquet", r"n.parquet: column 'client' must have no missing values, "
                                     r"got 1, the first in row 2 \(0-based\)$", test_share=0.5)


def test_a_3d_x_is_one_channel_images_like_a_4d_one(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x, xt = rng.normal(size=(24, 4, 4)), rng.normal(size=(6, 4, 4))
    y, c = np.arange(24) % 3, np.arange(24) % 2
    np.savez(tmp_path / "i3.npz", x=x, y=y, client=c, x_test=xt, y_test=np.arange(6) % 3)
    np.savez(tmp_path / "i4.npz", x=x[:, None], y=y, client=c, x_test=xt[:, None],
             y_test=np.arange(6) % 3)
    three = FederatedData.from_file(tmp_path / "i3.npz")
    four = FederatedData.from_file(tmp_path / "i4.npz")
    assert three.input_shape == four.input_shape == (1, 4, 4)
    assert three.to_client_data().dataset.image_shape == (1, 4, 4)
    assert three.digest == four.digest
    # x_test from a test file of [m, H, W] images
    np.savez(tmp_path / "train.npz", x=x, y=y, client=c)
    np.savez(tmp_path / "test.npz", x=xt, y=np.arange(6) % 3)
    sep = FederatedData.from_file(tmp_path / "train.npz", test_path=tmp_path / "test.npz")
    assert sep.input_shape == (1, 4, 4) and sep.digest == three.digest


@pytest.mark.parametrize("name", ["", "Unnamed: 0", " Unnamed: 12 "])
def test_an_unnamed_csv_column_a_saved_index_is_refused(name: str, tmp_path: Path) -> None:
    lines = [f"{i},{row}" for i, row in enumerate(_ROWS)]
    p = _csv(tmp_path / "i.csv", *lines, header=f"{name},client,label,u,v")
    msg = (rf"i.csv: column 1 of the header has no name \(got {re.escape(repr(name.strip()))}"
           r"\), probably a saved row index \(pandas writes one unless index=False\), which "
           r"would be used as a feature: drop that column or give it a name$")
    _refused(p, msg, test_share=0.25)


def test_unnamed_columns_anywhere_and_a_parquet_index_are_refused(tmp_path: Path) -> None:
    p = _csv(tmp_path / "t.csv", *(f"{r}," for r in _ROWS), header="client,label,u,v,")
    _refused(p, r"column 5 of the header has no name \(got ''\)", test_share=0.25)
    _parquet(tmp_path / "p.parquet", **_OK, __index_level_0__=[5, 6, 7, 8])
    _refused(tmp_path / "p.parquet", r"p.parquet: column 4 of the header has no name \(got "
                                     r"'__index_level_0__'\), probably a saved row index",
             test_share=0.5)
    fd = FederatedData.from_file(_csv(tmp_path / "ok.csv", *_ROWS), test_share=0.25)
    assert fd.feature_names == ("u", "v")


def test_csv_errors_name_the_file_line_whatever_the_check(tmp_path: Path) -> None:
    # a blank line and a quoted client spanning two lines: data rows are not lines
    lines = ['"a', 'b",0,1,2', "", "1,1,3,4", "0,0,5,6", "1,1,nan,8", "0,0,9,10"]
    _refused(_csv(tmp_path / "n.csv", *lines), r"n.csv: feature column 'u' must be finite, got "
                                               r"nan on line 7$", test_share=0.25)
    lines[5] = "1,1,7,-inf"
    _refused(_csv(tmp_path / "i.csv", *lines), r"feature column 'v' must be finite, got -inf on "
                                               r"line 7$", test_share=0.25)
    lines[5] = "1,oops,7,8"
    _refused(_csv(tmp_path / "l.csv", *lines), r"column 'label' must hold integer class labels, "
                                               r"got 'oops' on line 7 ", test_share=0.25)
    lines[5] = "1,1,7,"
    _refused(_csv(tmp_path / "e.csv", *lines), r"feature column 'v' must be numeric, got '' on "
                                               r"line 7$", test_share=0.25)
    p = _csv(tmp_path / "f.csv", "0,0,inf,1", *_ROWS)
    _refused(p, r"feature column 'u' must be finite, got inf on line 2$", test_share=0.25)
    test = _csv(tmp_path / "t.csv", "0,1,2", "1,nan,3", header="label,u,v")
    _refused(_csv(tmp_path / "a.csv", *_ROWS), r"t.csv: feature column 'u' must be finite, got "
                                               r"nan on line 3$", test_path=test)
    _parquet(tmp_path / "n.parquet", **{**_OK, "u": [1.0, 2.0, np.nan, 4.0]})
    _refused(tmp_path / "n.parquet", r"n.parquet: feature column 'u' must be finite, got nan on "
                                     r"row 2 \(0-based\) \(1 NaN or infinite value\(s\) in the "
                                     r"column\)$", test_share=0.5)


def test_features_beyond_float32_are_named_as_such(tmp_path: Path) -> None:
    p = _csv(tmp_path / "b.csv", *_ROWS[:4], "1,1,-1e300,8", *_ROWS[4:])
    _refused(p, r"b.csv: feature column 'u' must lie within the float32 range \[-3.403e\+38, "
                r"3.403e\+38\], got -1e300 on line 6 \(rescale that feature\)$", test_share=0.25)
    _parquet(tmp_path / "b.parquet", **{**_OK, "u": [1.0, 1e300, 2.0, 1e39]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy "overflow encountered in cast" first
        _refused(tmp_path / "b.parquet", r"b.parquet: feature column 'u' must lie within the "
                                         r"float32 range .* got 1e\+300 on row 1 \(0-based\), 2 "
                                         r"value\(s\) beyond it in the column \(rescale that "
                                         r"feature\)$", test_share=0.5)


def test_dictionary_encoded_parquet_columns_are_read_as_their_values(tmp_path: Path) -> None:
    p = _parquet(tmp_path / "d.parquet",
                 client=pa.array(["h1", "h0", "h1", "h0"] * 2).dictionary_encode(),
                 label=pa.array([0, 1, 1, 0] * 2).dictionary_encode(),
                 u=pa.array([1.5, 2.5, 1.5, 3.5] * 2).dictionary_encode())
    fd = FederatedData.from_file(p, test_share=0.25, standardize=False)
    assert fd.client_names == ("h0", "h1") and fd.feature_names == ("u",)
    assert sorted([*fd.y.tolist(), *fd.y_test.tolist()]) == [0] * 4 + [1] * 4
    assert sorted([*fd.x[:, 0].tolist(), *fd.x_test[:, 0].tolist()]) == [1.5] * 4 + [2.5] * 2 + [
        3.5] * 2
    _parquet(tmp_path / "s.parquet", **{**_OK, "u": pa.array(list("abab")).dictionary_encode()})
    _refused(tmp_path / "s.parquet", r"column 'u' must be numeric, got type "
                                     r"dictionary<values=string", test_share=0.5)
    _parquet(tmp_path / "n.parquet",
             **{**_OK, "client": pa.array(["a", None, "b", "a"]).dictionary_encode()})
    _refused(tmp_path / "n.parquet", r"column 'client' must have no missing values, got 1, the "
                                     r"first in row 1 \(0-based\)$", test_share=0.5)
