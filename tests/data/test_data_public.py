"""The proxy file of --proxy-data (fedqr.data.public.load_proxy): messages name the option."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedqr.data import FederatedData
from fedqr.data.public import align_features, load_proxy


def _load(path: Path) -> object:
    return load_proxy(path, classes=None, client_column="client", label_column="label", seed=0)


def test_a_missing_file_a_folder_and_a_wrong_suffix_name_proxy_data(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^proxy_data must be an existing .npz, .csv or "
                                         r".parquet file, got proxy_data='.*nope.csv' "
                                         r"\(no such file\)$"):
        _load(tmp_path / "nope.csv")
    (tmp_path / "dir.csv").mkdir()
    with pytest.raises(ValueError, match=r"proxy_data='.*dir.csv' \(a folder, not a file\)$"):
        _load(tmp_path / "dir.csv")
    (tmp_path / "p.txt").write_text("x")
    with pytest.raises(ValueError, match=r"proxy_data '.*p.txt': proxy_data \(--proxy-data\) "
                                         r"must end in .npz, .csv, .parquet"):
        _load(tmp_path / "p.txt")


def test_a_proxy_file_is_read_with_a_held_out_test_set(tmp_path: Path) -> None:
    np.savez(tmp_path / "p.npz", x=np.arange(20.0)[:, None], y=np.arange(20) % 2,
             client=np.zeros(20, dtype=np.int64))
    own = load_proxy(tmp_path / "p.npz", classes=None, client_column="client",
                     label_column="label", seed=0)
    assert own.data.num_classes == 2 and own.data.num_test == 4  # 20% held out


def test_proxy_columns_are_matched_by_name_not_by_position() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3)).astype(np.float32) * np.array([1.0, 10.0, 100.0], np.float32)
    y, client = (x[:, 0] > 0).astype(np.int64), np.arange(40) % 2
    proxy = FederatedData.from_arrays(x=x, y=y, client=client, test_share=0.25,
                                      feature_names=("a", "b", "c"))
    swapped = align_features(proxy, ("c", "a", "b"))
    assert swapped.feature_names == ("c", "a", "b")
    np.testing.assert_array_equal(swapped.x, proxy.x[:, [2, 0, 1]])
    np.testing.assert_array_equal(swapped.x_test, proxy.x_test[:, [2, 0, 1]])
    assert proxy.standardization is not None and swapped.standardization is not None
    np.testing.assert_array_equal(swapped.standardization.std, proxy.standardization.std[[2, 0, 1]])
    assert align_features(proxy, ("a", "b", "c")) is proxy
    assert align_features(proxy, None) is proxy  # an .npz deployment: columns in order
    with pytest.raises(ValueError, match=r"lacks \['d'\] and has unexpected \['c'\]"):
        align_features(proxy, ("a", "b", "d"))
    # a column more or less is named too, and only what differs is said
    with pytest.raises(ValueError, match=r"the proxy '.*' has unexpected \['c'\]$"):
        align_features(proxy, ("a", "b"))
    with pytest.raises(ValueError, match=r"the proxy '.*' lacks \['d'\]$"):
        align_features(proxy, ("a", "b", "c", "d"))


def test_a_label_map_gives_the_proxy_of_the_file_relabelled_the_same_way(
        tmp_path: Path) -> None:
    """The map was applied after the 20% test split (stratified by the file's five labels)
    and after the statistics: Cleveland mapped 0 -> 0, 1..4 -> 1 planned (31, 3) predicting
    0.572, the same rows relabelled in the file (32, 5) predicting 0.498."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 3)).astype(np.float32)
    y = rng.integers(0, 5, size=120)
    np.savez(tmp_path / "five.npz", x=x, y=y, client=np.zeros(120, dtype=np.int64))
    np.savez(tmp_path / "two.npz", x=x, y=(y > 0).astype(np.int64),
             client=np.zeros(120, dtype=np.int64))
    (tmp_path / "map.json").write_text('{"0": 0, "1": 1, "2": 1, "3": 1, "4": 1}')
    mapped = load_proxy(tmp_path / "five.npz", classes=str(tmp_path / "map.json"),
                        client_column="client", label_column="label", seed=3).data
    plain = load_proxy(tmp_path / "two.npz", classes=None, client_column="client",
                       label_column="label", seed=3).data
    for a, b in ((mapped.x, plain.x), (mapped.y, plain.y), (mapped.x_test, plain.x_test),
                 (mapped.y_test, plain.y_test)):
        np.testing.assert_array_equal(a, b)
    # a selection drops the other classes' rows before the split and the statistics
    keep = y <= 1
    np.savez(tmp_path / "01.npz", x=x[keep], y=y[keep], client=np.zeros(keep.sum(), np.int64))
    kept = load_proxy(tmp_path / "five.npz", classes="0,1", client_column="client",
                      label_column="label", seed=3).data
    alone = load_proxy(tmp_path / "01.npz", classes=None, client_column="client",
                       label_column="label", seed=3).data
    np.testing.assert_array_equal(kept.x, alone.x)
    np.testing.assert_array_equal(kept.x_test, alone.x_test)


def test_a_label_map_with_a_gap_says_what_the_proxy_holds(tmp_path: Path) -> None:
    """A map onto labels 0 and 5 was refused as 'must be exactly 0..1', naming the proxy's
    classes '0..35' where its rows hold labels 10..35 (FEMNIST letters, a QA run)."""
    rng = np.random.default_rng(1)
    y = np.concatenate([np.arange(10, 36), rng.integers(10, 36, size=34)])
    np.savez(tmp_path / "letters.npz", x=rng.normal(size=(60, 4)).astype(np.float32), y=y)
    (tmp_path / "map.json").write_text('{"10": 0, "11": 5}')
    with pytest.raises(ValueError, match=r"proxy_classes: the new labels must be the classes "
                                         r"0..1 without a gap \(2 distinct new labels given\), "
                                         r"got \[0, 5\]: a label map names every class of the "
                                         r"deployment.*has labels 10..35 on its rows, "
                                         r"num_classes=36"):
        load_proxy(tmp_path / "letters.npz", classes=str(tmp_path / "map.json"),
                   client_column="client", label_column="label", seed=0)
