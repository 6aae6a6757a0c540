"""A public data file as the planner's proxy: ``--proxy-data FILE [--proxy-classes ...]``.

Used by ``fedqr plan`` (:mod:`fedqr.cli`) and by a Flower server that plans a federation
(:mod:`fedqr.flower.auto`): the file is read, standardised by its own statistics, and its
classes selected or relabelled to the deployment's. Errors name the option
(``proxy_data``, ``proxy_classes``).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from fedqr.data._cells import column_difference
from fedqr.data._labels import EmptyClassWarning
from fedqr.data.federated import FederatedData
from fedqr.data.proxy_prep import Preparation
from fedqr.data.source import OwnData
from fedqr.data.tabular import TableData, read_table

__all__ = ["ProxyColumnsWarning", "align_features", "load_proxy", "parse_classes",
           "select_proxy_classes"]


class ProxyColumnsWarning(UserWarning):
    """A public proxy's columns are taken in the deployment's order because one side names its
    columns and the other does not: nothing checks that the i-th columns are one feature."""


def parse_classes(text: str, *, num_classes: int | None = None) -> dict[int, int]:
    """``--proxy-classes``: the proxy's classes kept and the deployment label of each.

    ``"0-9"`` or ``"0,1,5"`` keeps those classes and relabels them ``0..k-1`` in that order; a
    ``.json`` file holding an object ``{"proxy label": deployment label, ...}`` is a label map
    (several proxy classes may share a deployment label). A clear error naming
    ``proxy_classes`` otherwise; with the proxy's ``num_classes``, a range reaching beyond its
    classes is refused before it is spelled out (``0-99999999999`` would not fit in memory).
    """
    if text.strip().lower().endswith(".json"):
        return _read_label_map(Path(text.strip()))
    classes: list[int] = []
    try:
        parts = [p.strip() for p in text.split(",")]
        if any(parts) and not all(parts):  # "0,,1": an item left out, not read as "0,1"
            raise ValueError(text)
        for part in (p for p in parts if p):
            lo, sep, hi = part.partition("-")
            if sep and num_classes is not None and int(hi) >= num_classes:
                raise _Beyond(f"proxy_classes: the range {part} reaches beyond the proxy's "
                              f"classes 0..{num_classes - 1}, got proxy_classes={text!r}")
            classes += list(range(int(lo), int(hi) + 1)) if sep else [int(part)]
    except _Beyond as e:
        raise ValueError(str(e)) from None
    except ValueError:
        raise ValueError(f"proxy_classes must look like 0-9 or 0,1,5 or name a .json label "
                         f"map, got proxy_classes={text!r}") from None
    if not classes:
        raise ValueError(f"proxy_classes selects no class, got proxy_classes={text!r}")
    if len(set(classes)) != len(classes):
        raise ValueError(f"proxy_classes must not repeat a class, got proxy_classes={text!r}")
    return {c: i for i, c in enumerate(classes)}


class _Beyond(Exception):
    """A class range beyond the proxy's classes (kept apart from int()'s ValueError)."""


def _read_label_map(path: Path) -> dict[int, int]:
    """A label map file: a JSON object of integer proxy labels to integer deployment labels."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_Pairs)
    except FileNotFoundError:
        raise ValueError(f"proxy_classes: label map file not found, got "
                         f"proxy_classes={str(path)!r}") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"proxy_classes: cannot read the label map {str(path)!r}: "
                         f"{e}") from None
    if not isinstance(doc, _Pairs) or not doc:
        got = "an empty object" if isinstance(doc, _Pairs) else \
            f"{type(doc).__name__} {doc!r:.60}"
        raise ValueError(f"proxy_classes: the label map {str(path)!r} must be a non-empty JSON "
                         f"object {{\"proxy label\": deployment label}}, got {got}")
    mapping: dict[int, int] = {}
    for key, value in doc:
        try:
            k = int(key)
        except ValueError:
            k = -1
        if k < 0 or isinstance(value, bool) or not isinstance(value, int) or value < 0:
            shown = dict(value) if isinstance(value, _Pairs) else value
            raise ValueError(f"proxy_classes: the label map {str(path)!r} must map integer "
                             f"labels >= 0 to integer labels >= 0, got {key!r}: {shown!r}")
        if k in mapping:  # JSON keeps the last of a repeated key: a silent choice
            raise ValueError(f"proxy_classes: the label map {str(path)!r} names proxy label "
                             f"{k} twice, got {key!r}: {value!r} after {mapping[k]!r}")
        mapping[k] = value
    return mapping


class _Pairs(list[tuple[str, object]]):
    """A JSON object's ``(key, value)`` pairs in order, repeated keys kept (a label map
    naming a proxy label twice is refused, not read as its last value)."""


def load_proxy(path: Path, *, classes: str | None, client_column: str, label_column: str,
               seed: int, name: str = "proxy_data", like: Preparation | None = None) -> OwnData:
    """``--proxy-data FILE [--proxy-classes ...]``: a public data file, standardised by its own
    statistics as ``like`` says the deployment's rows were (per channel for images, per
    feature for rows, or not at all; default: standardised, its own shape deciding); its test
    set, else 20% of its rows, is the twin's evaluation set.

    A proxy needs no client column (an ``.npz`` file no ``client`` array): the planner pools
    its rows and deals them to the deployment's clients by their sizes
    (:mod:`fedqr.planner.public`);
    where it has one, the 20% are held out of every client's rows, else of all rows.
    ``name``: the parameter that gave ``path``, as messages name it (``fedqr.plan``'s
    ``proxy``).

    Warns
    -----
    fedqr.data.EmptyClassWarning
        For a class without rows: of the file's labels, or with ``classes`` of those kept
        (:func:`select_proxy_classes`).
    """
    if not path.is_file():
        what = "a folder, not a file" if path.is_dir() else "no such file"
        raise ValueError(f"{name} must be an existing .npz, .csv or .parquet file, got "
                         f"{name}={str(path)!r} ({what})")
    try:
        t = read_table(path, client_column=client_column, label_column=label_column,
                       option=(name, "--proxy-data"), need_client=False)
        x, y, client, x_test, y_test, k = t.x, t.y, t.client, t.x_test, t.y_test, t.num_classes
        if classes is not None:  # selected and relabelled before the split and the statistics
            kept = _selected(t, classes, seed=seed)
            x, y, client, k = kept.x, kept.y, kept.client, kept.num_classes
            x_test, y_test = (None, None) if t.x_test is None else (kept.x_test, kept.y_test)
        with warnings.catch_warnings():
            if classes is not None:  # said of the proxy's own class numbers by _selected
                warnings.simplefilter("ignore", EmptyClassWarning)
            like = like or Preparation()
            data = FederatedData.from_arrays(
                x=x, y=y, client=client, x_test=x_test, y_test=y_test,
                test_share=None if x_test is not None else 0.2, standardize=like.standardize,
                num_classes=k, seed=seed, name=t.stem, feature_names=t.feature_names,
                input_shape=like.shape_for(int(np.prod(np.shape(x)[1:]))))
    except ValueError as e:
        raise ValueError(f"{name} {str(path)!r}: {e}") from None
    return OwnData(data=data, seed=seed)


def _selected(t: TableData, classes: str, *, seed: int) -> FederatedData:
    """The file's rows (and test rows) of the classes ``classes`` keeps, relabelled, before any
    split or standardisation: a label map and a file already relabelled the same way give the
    same proxy, the same held-out rows and the same statistics."""
    with warnings.catch_warnings():  # the file's labels may have gaps: checked once selected
        warnings.simplefilter("ignore", EmptyClassWarning)
        whole = FederatedData.from_arrays(
            x=t.x, y=t.y, client=t.client, x_test=t.x if t.x_test is None else t.x_test,
            y_test=t.y if t.y_test is None else t.y_test, standardize=False,
            num_classes=t.num_classes, seed=seed, name=t.stem, feature_names=t.feature_names)
    return select_proxy_classes(whole, classes)


def select_proxy_classes(data: FederatedData, classes: str) -> FederatedData:
    """The rows of the classes ``--proxy-classes`` keeps, relabelled by it (errors name the
    option).

    Warns
    -----
    fedqr.data.EmptyClassWarning
        When a class kept has no training row: the model's output for it never trains.
    """
    mapping = parse_classes(classes, num_classes=data.num_classes)
    try:
        kept = data.relabel(mapping)
    except ValueError as e:
        present = np.unique(np.concatenate([data.y, data.y_test]))
        raise ValueError(f"proxy_classes: {e} (the proxy {data.name!r} has labels "
                         f"{_ranges(present)} on its rows, num_classes={data.num_classes}; got "
                         f"proxy_classes={classes!r})") from None
    empty = sorted(set(range(kept.num_classes)) - {int(c) for c in np.unique(kept.y)})
    if empty:
        proxy = sorted(c for c, v in mapping.items() if v in empty)
        warnings.warn(f"proxy_classes={classes!r} keeps class(es) {proxy} of the proxy "
                      f"{data.name!r}, which have no training row: the model's output(s) "
                      f"{empty} of 0..{kept.num_classes - 1} never train on the proxy",
                      EmptyClassWarning, stacklevel=2)
    return kept


def _ranges(labels: NDArray[np.int64]) -> str:
    """Sorted labels as runs: ``10..35`` or ``0, 2..4``."""
    runs: list[list[int]] = []
    for v in (int(x) for x in labels):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(f"{a}..{b}" if b > a else f"{a}" for a, b in runs)


def align_features(proxy: FederatedData, names: tuple[str, ...] | None) -> FederatedData:
    """The proxy's feature columns in the order of the deployment's ``names``, matched by name.

    Where either side has no column names (an ``.npz`` file without ``feature_names``, a
    built-in set), the columns are taken in order; where only one side has them, a
    :class:`ProxyColumnsWarning` says that the order is trusted. Two named files must name the
    same columns (any order): a proxy whose columns are renamed or swapped would feed one
    feature in as another.

    Raises
    ------
    ValueError
        Naming the columns the proxy lacks and those it has beyond the deployment's.
    """
    have = proxy.feature_names
    if (names is None) != (have is None):
        unnamed = "the deployment's data" if names is None else f"the proxy {proxy.name!r}"
        warnings.warn(f"proxy_data: {unnamed} has no column names (an .npz file without a "
                      f"feature_names array, or arrays given without feature_names), so the "
                      f"proxy's {proxy.x.shape[1]} feature columns are taken in the "
                      f"deployment's order, unchecked; give both sides column names (a CSV "
                      f"header, feature_names in the .npz or in FederatedData.from_arrays) to "
                      f"match them by name", ProxyColumnsWarning, stacklevel=2)
    if names is None or have is None or tuple(have) == tuple(names):
        return proxy
    differ = column_difference(names, have)
    if differ:
        raise ValueError(f"proxy_data must have the deployment's feature columns (matched by "
                         f"name, any order): the proxy {proxy.name!r} {differ}")
    order = [have.index(c) for c in names]
    stats = proxy.standardization
    return replace(proxy, x=np.ascontiguousarray(proxy.x[:, order]),
                   x_test=np.ascontiguousarray(proxy.x_test[:, order]),
                   feature_names=tuple(names),
                   standardization=None if stats is None else replace(
                       stats, mean=stats.mean[order], std=stats.std[order]))
