"""A ``--proxy-data`` file: its classes without rows are a warning in the command line's own
format, checked on the classes ``--proxy-classes`` keeps (no warning when it selects or maps
them), and it needs no client column (its rows are dealt to the deployment's clients by their
sizes, never by its own clients)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedqr.cli import app
from fedqr.data import EmptyClassWarning
from fedqr.data.public import load_proxy

runner = CliRunner()


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))


def _csv(path: Path, labels: tuple[int, ...], *, clients: int = 4, rows: int = 240,
         client_column: bool = True, seed: int = 0) -> Path:
    """Rows of three features whose labels cycle through ``labels``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 3))
    y = np.asarray(labels)[(x[:, 0] > 0).astype(int) + (x[:, 1] > 0).astype(int)
                           if len(labels) == 3 else np.arange(rows) % len(labels)]
    head = ("client," if client_column else "") + "f0,f1,f2,label"
    lines = [head] + [("" if not client_column else f"{i % clients},")
                      + ",".join(f"{v:.4f}" for v in x[i]) + f",{y[i]}" for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def deployment(tmp_path: Path) -> list[str]:
    data = _csv(tmp_path / "d.csv", (0, 1, 2))
    return ["plan", "--data", str(data), "--test-share", "0.25", "--mechanism", "laplace",
            "--eps", "4", "--clip", "5", "--rounds", "10", "--clients-per-round", "2",
            "--twin-repeats", "2", "--no-cache", "--data-use", "public-proxy"]


def _flat(text: str) -> str:
    """``text`` without white space: rich wraps a long path anywhere."""
    return "".join(text.split())


@pytest.mark.parametrize(("labels", "classes"), [((5, 7, 9), "map"), ((1, 2, 3), "1-3"),
                                                 ((5, 7, 9), "5,7,9")])
def test_proxy_classes_that_select_or_map_the_classes_draw_no_warning(
        tmp_path: Path, deployment: list[str], labels: tuple[int, ...], classes: str) -> None:
    proxy = _csv(tmp_path / "p.csv", labels, seed=1)
    if classes == "map":
        classes = str(tmp_path / "map.json")
        Path(classes).write_text(json.dumps({str(c): i for i, c in enumerate(labels)}))
    with warnings.catch_warnings(record=True) as caught:  # nor a Python warning
        warnings.simplefilter("always")
        res = runner.invoke(app, [*deployment, "--proxy-data", str(proxy), "--proxy-classes",
                                  classes])
    assert res.exit_code == 0, res.output
    assert res.stderr == ""
    assert not [w for w in caught if issubclass(w.category, EmptyClassWarning)]
    assert _flat("plan: T=10, b=2") in _flat(res.stdout)


def test_a_gap_in_a_proxys_labels_is_a_warning_line_naming_the_file(
        tmp_path: Path, deployment: list[str]) -> None:
    proxy = _csv(tmp_path / "p.csv", (5, 7, 9), seed=1)
    res = runner.invoke(app, [*deployment, "--proxy-data", str(proxy)])
    assert res.exit_code == 2, res.output  # 10 classes for a model of 3
    text = _flat(res.stderr)
    assert text.startswith(_flat(f"warning: {proxy}: labels should be 0..k-1 with a row of "
                                 "every class, but class(es) 0, 1, 2, 3, 4, 6, 8 of 0..9 have "
                                 "no row")), text
    assert "EmptyClassWarning" not in text and ".py:" not in text
    assert _flat("error: --proxy-data must have the deployment's 3 features and 3 classes (the "
                 "model's input and output), got 3 features and 10 classes; select or map its "
                 "classes with --proxy-classes") in text


def test_a_class_kept_without_rows_is_a_warning_naming_proxy_classes(
        tmp_path: Path, deployment: list[str]) -> None:
    proxy = _csv(tmp_path / "p.csv", (1, 2), seed=1)  # labels 1 and 2: class 0 has no row
    res = runner.invoke(app, [*deployment, "--proxy-data", str(proxy), "--proxy-classes",
                              "0-2"])
    assert res.exit_code == 0, res.output
    said = _flat(f"warning: {proxy}: --proxy-classes='0-2' keeps class(es) [0] of the proxy "
                 "'p', which have no training row: the model's output(s) [0] of 0..2 never "
                 "train on the proxy")
    assert _flat(res.stderr).startswith(said)  # then only the plan's own warning, if any
    rest = _flat(res.stderr)[len(said):]
    assert rest == "" or rest.startswith(_flat("warning: the plan's predicted test loss"))


def test_select_proxy_classes_checks_the_classes_it_keeps(tmp_path: Path) -> None:
    proxy = _csv(tmp_path / "p.csv", (5, 7, 9), seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyClassWarning)
        own = load_proxy(proxy, classes="5,7,9", client_column="client", label_column="label",
                         seed=0)
    assert own.data.num_classes == 3
    with pytest.warns(EmptyClassWarning, match=r"^proxy_classes='4,5,7,9' keeps class\(es\) "
                                               r"\[4\] of the proxy 'p'"):
        load_proxy(proxy, classes="4,5,7,9", client_column="client", label_column="label",
                   seed=0)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_proxy_file_needs_no_client_column(tmp_path: Path, deployment: list[str],
                                             suffix: str) -> None:
    proxy = _csv(tmp_path / "p.csv", (0, 1, 2), client_column=False, seed=1)
    if suffix == ".parquet":
        pa_csv = pytest.importorskip("pyarrow.csv")
        pq = pytest.importorskip("pyarrow.parquet")
        pq.write_table(pa_csv.read_csv(proxy), proxy.with_suffix(".parquet"))
        proxy = proxy.with_suffix(".parquet")
    res = runner.invoke(app, [*deployment, "--proxy-data", str(proxy), "--json"])
    assert res.exit_code == 0, res.output
    used = json.loads(res.stdout)["recommended"]["data_used"]
    assert used["reads_private_data"] is False
    own = load_proxy(proxy, classes=None, client_column="client", label_column="label", seed=0)
    assert own.data.num_clients == 1 and own.data.num_test == 48  # 20% held out of 240


def test_a_proxys_client_column_changes_nothing_but_the_held_out_rows(tmp_path: Path) -> None:
    with_ids = _csv(tmp_path / "a.csv", (0, 1, 2), seed=1)
    without = _csv(tmp_path / "b.csv", (0, 1, 2), client_column=False, seed=1)
    a = load_proxy(with_ids, classes=None, client_column="client", label_column="label", seed=0)
    b = load_proxy(without, classes=None, client_column="client", label_column="label", seed=0)
    assert (a.data.num_clients, b.data.num_clients) == (4, 1)
    assert a.data.num_train + a.data.num_test == b.data.num_train + b.data.num_test == 240
    assert a.data.feature_names == b.data.feature_names == ("f0", "f1", "f2")


def test_a_proxy_without_its_label_column_is_still_refused(tmp_path: Path,
                                                          deployment: list[str]) -> None:
    proxy = tmp_path / "p.csv"
    proxy.write_text("f0,f1,f2,target\n" + "\n".join("0.1,0.2,0.3,1" for _ in range(20)) + "\n")
    res = runner.invoke(app, [*deployment, "--proxy-data", str(proxy)])
    assert res.exit_code == 2, res.output
    assert _flat("has no column 'label'") in _flat(res.stderr)


def test_proxy_columns_in_another_order_plan_as_the_same_proxy(tmp_path: Path,
                                                              deployment: list[str]) -> None:
    proxy = _csv(tmp_path / "p.csv", (0, 1, 2), seed=1)
    lines = proxy.read_text().splitlines()
    swapped = tmp_path / "swapped.csv"  # f0 and f2 exchanged, header and values together
    swapped.write_text("\n".join(",".join([c[0], c[3], c[2], c[1], c[4]])
                                 for c in (line.split(",") for line in lines)) + "\n")
    docs = []
    for path in (proxy, swapped):
        res = runner.invoke(app, [*deployment, "--proxy-data", str(path), "--json"])
        assert res.exit_code == 0, res.output
        docs.append(json.loads(res.stdout)["predictions"])
    assert docs[0] == docs[1]  # matched by name: the same twin, prediction for prediction


def test_a_class_range_beyond_the_proxys_classes_is_refused_before_it_is_spelled_out(
        tmp_path: Path, deployment: list[str]) -> None:
    """``0-99999999999`` used to be expanded first (minutes, then MemoryError, exit 1)."""
    proxy = _csv(tmp_path / "p.csv", (0, 1, 2), seed=1)
    res = runner.invoke(app, [*deployment, "--proxy-data", str(proxy), "--proxy-classes",
                              "0-99999999999"])
    assert res.exit_code == 2, res.output
    assert _flat("--proxy-classes: the range 0-99999999999 reaches beyond the proxy's classes "
                 "0..2") in _flat(res.stderr)
    many = ",".join(str(c) for c in range(40))  # unknown classes: the first ten are named
    res = runner.invoke(app, [*deployment, "--proxy-data", str(proxy), "--proxy-classes", many])
    assert res.exit_code == 2, res.output
    assert _flat("got unknown class(es) [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, ... (37 in all)]") in \
        _flat(res.stderr)


def test_a_proxy_without_column_names_for_named_data_is_a_warning_line(
        tmp_path: Path, deployment: list[str]) -> None:
    """An ``.npz`` proxy without ``feature_names`` for a CSV deployment is taken column by
    column in order: the plan says that nothing checked the order."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(200, 3)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0).astype(np.int64)
    proxy = tmp_path / "unnamed.npz"
    np.savez(proxy, x=x, y=y, client=np.zeros(200, dtype=np.int64))
    res = runner.invoke(app, [*deployment, "--proxy-data", str(proxy)])
    assert res.exit_code == 0, res.output
    assert _flat("warning: --proxy-data: the proxy 'unnamed' has no column names") in \
        _flat(res.stderr)
    named = tmp_path / "named.npz"
    np.savez(named, x=x, y=y, client=np.zeros(200, dtype=np.int64),
             feature_names=np.asarray(["f0", "f1", "f2"]))
    res = runner.invoke(app, [*deployment, "--proxy-data", str(named)])
    assert res.exit_code == 0, res.output
    assert "no column names" not in res.stderr


def test_a_replayed_plan_says_the_warnings_of_the_fresh_one(
        tmp_path: Path, deployment: list[str]) -> None:
    """The answer cache replayed the plan without the proxy's column warning (a tester's
    find); the JSON keeps them under ``warnings``."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(200, 3)).astype(np.float32)
    proxy = tmp_path / "unnamed.npz"
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0).astype(np.int64)
    np.savez(proxy, x=x, y=y, client=np.zeros(200, np.int64))
    cached = [a for a in deployment if a != "--no-cache"]
    said = []
    for _ in range(2):
        res = runner.invoke(app, [*cached, "--proxy-data", str(proxy), "--json"])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        said.append((_flat(res.stderr).count(_flat("has no column names")), doc["warnings"],
                     doc["simulated"] is None))
    assert said[0][0] == said[1][0] == 1 and said[0][1] == said[1][1]
    assert "has no column names" in said[0][1][0]
    assert (said[0][2], said[1][2]) == (False, True)  # the second one was the stored answer
