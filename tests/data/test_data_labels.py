"""Class labels of FederatedData.from_arrays: labels 0..k-1, unseen test labels, empty classes."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedqr.data import EmptyClassWarning, FederatedData


def _rows(y: list[int], y_test: list[int] | None = None, **kw: Any) -> FederatedData:
    """Two clients, one feature; the test set is ``y_test`` or else ``kw['test_share']``."""
    n = len(y)
    test = {} if y_test is None else {"x_test": np.ones((len(y_test), 1)), "y_test": y_test}
    return FederatedData.from_arrays(x=np.arange(n, dtype=np.float64)[:, None], y=y,
                                     client=np.arange(n) % 2, standardize=False,
                                     **test, **kw)


@contextmanager
def _no_warning() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def _one_warning(**kw: Any) -> str:
    with pytest.warns(EmptyClassWarning) as seen:
        _rows(**kw)
    assert len(seen) == 1, [str(w.message) for w in seen]
    assert seen[0].filename == __file__  # points at the caller, not inside fedqr.data
    return str(seen[0].message)


def test_labels_0_to_k_minus_1_give_no_warning() -> None:
    with _no_warning():
        assert _rows([0, 1, 2, 0, 1, 2], [2, 1, 0]).num_classes == 3
        assert _rows([0, 1, 2, 0, 1, 2], [0, 0]).num_classes == 3  # a class absent from test
        assert _rows([0, 1, 2, 0, 1, 2] * 2, test_share=0.25).num_classes == 3


def test_test_labels_above_every_training_label_are_refused() -> None:
    msg = (r"^y_test \(the test set\) holds label\(s\) 10, 11 that no training row has, but "
           r"the training labels y lie in 0..4: a model trained on these rows could never "
           r"predict them\. .*give num_classes")
    with pytest.raises(ValueError, match=msg):
        _rows([0, 1, 2, 3, 4, 0], [0, 10, 11, 4])
    # every label only in y_test is listed, those in a gap of the training labels too
    with pytest.raises(ValueError, match=r"holds label\(s\) 1, 5 that no training row has, "
                                         r"but the training labels y lie in 0..3"):
        _rows([0, 2, 3, 0], [1, 5])
    many = list(range(3, 20))
    with pytest.raises(ValueError, match=re.escape("3, 4, 5, 6, 7, 8, 9, 10, 11, 12, ... "
                                                   "(17 in all)")):
        _rows([0, 1, 2, 0], many)
    with _no_warning():  # num_classes given (a file's num_classes): the empty classes are meant
        fd = _rows([0, 1, 2, 3, 4, 0], [0, 10, 11, 4], num_classes=12)
    assert fd.num_classes == 12


def test_labels_1_to_k_warn_once_naming_class_0() -> None:
    text = _one_warning(y=[1, 2, 3, 1, 2, 3], y_test=[1, 3])
    assert text == ("labels should be 0..k-1 with a row of every class, but class(es) 0 of "
                    "0..3 have no training row in the labels y: the model gets 4 outputs, 1 of "
                    "them never trained. Relabel the 3 classes as 0..2, or give num_classes "
                    "(FederatedData.from_file(num_classes=K) or from_arrays in Python, an array "
                    "num_classes in an .npz file; a .csv or .parquet file has no column for it) "
                    "to keep empty classes on purpose")
    text = _one_warning(y=[1, 2, 3, 1, 2, 3] * 2, test_share=0.25)
    assert "class(es) 0 of 0..3 have no row in the labels y" in text


def test_a_gap_warns_and_notes_a_class_found_only_in_the_test_set() -> None:
    text = _one_warning(y=[0, 2, 0, 2, 5, 5], y_test=[0, 1, 2])
    assert "class(es) 1, 3, 4 of 0..5 have no training row in the labels y (1 only in y_test)" \
        in text and "Relabel the 3 classes as 0..2" in text
    text = _one_warning(y=[0, 1, 50] + [0] * 48, y_test=[0])  # 48 empty classes: 10 listed
    assert "class(es) 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, ... (48 in all) of 0..50" in text
    with _no_warning():
        assert _rows([0, 2, 0, 2], [1], num_classes=3).num_classes == 3


def test_a_class_held_out_entirely_by_test_share_is_no_empty_class() -> None:
    # label 2 has one row, in a client of two rows that test_share=0.5 splits: for some seed
    # the hold-out takes it, leaving class 2 without a training row, but it is in the data
    y = [0, 1, 0, 1, 0, 1, 2, 0]
    found = False
    for seed in range(20):
        with _no_warning():
            fd = FederatedData.from_arrays(x=np.ones((8, 1)), y=y, test_share=0.5, seed=seed,
                                           client=[0, 0, 1, 1, 2, 2, 3, 3])
        if 2 not in fd.y:
            found = True
            assert 2 in fd.y_test and fd.num_classes == 3
            break
    assert found


def test_a_failing_call_does_not_warn_first() -> None:
    with _no_warning(), pytest.raises(ValueError, match=r"at least 2 classes, got only class 2"):
        _rows([2, 2, 2, 2], [2])


def test_files_name_themselves_and_the_test_file_in_label_errors(tmp_path: Path) -> None:
    x = np.arange(12.0)[:, None]
    np.savez(tmp_path / "big.npz", x=x, y=np.arange(12) % 3, client=np.arange(12) % 2,
             x_test=x[:4], y_test=[0, 10, 11, 2])
    with pytest.raises(ValueError, match=r"^.*big.npz: y_test \(the test set\) holds label\(s\) "
                                         r"10, 11 that no training row has"):
        FederatedData.from_file(tmp_path / "big.npz")
    np.savez(tmp_path / "k.npz", x=x, y=np.arange(12) % 3, client=np.arange(12) % 2,
             x_test=x[:4], y_test=[0, 10, 11, 2], num_classes=12)
    with _no_warning():  # the file's num_classes keeps the empty classes on purpose
        assert FederatedData.from_file(tmp_path / "k.npz").num_classes == 12
    (tmp_path / "a.csv").write_text("client,label,u\n" + "".join(
        f"{i % 2},{i % 2},{i}\n" for i in range(6)))
    (tmp_path / "t.csv").write_text("label,u\n0,1\n2,3\n")
    with pytest.raises(ValueError, match=r"a.csv \(test: .*t.csv\): y_test \(the test set\) "
                                         r"holds label\(s\) 2 that no training row has, but "
                                         r"the training labels y lie in 0..1"):
        FederatedData.from_file(tmp_path / "a.csv", test_path=tmp_path / "t.csv")


def test_a_file_with_labels_1_to_k_warns_once(tmp_path: Path) -> None:
    (tmp_path / "h.csv").write_text("client,label,u\n" + "".join(
        f"{i % 3},{1 + i % 2},{i}\n" for i in range(24)))
    with pytest.warns(EmptyClassWarning) as seen:
        fd = FederatedData.from_file(tmp_path / "h.csv", test_share=0.25)
    assert len(seen) == 1 and seen[0].filename == __file__
    assert "class(es) 0 of 0..2 have no row in the labels y" in str(seen[0].message)
    assert fd.num_classes == 3 and sorted(set(fd.y.tolist())) == [1, 2]
