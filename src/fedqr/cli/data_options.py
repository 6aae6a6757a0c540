"""The data-file options every command shares (``--data FILE`` instead of ``--dataset``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fedqr._options import (
    ClientColumnOpt,
    HiddenOpt,
    LabelColumnOpt,
    ModelOpt,
    TestShareOpt,
)

if TYPE_CHECKING:
    from fedqr.data import FederatedData
    from fedqr.data.source import OwnData

__all__ = [
    "ClientColumnOpt",
    "DataFileOpt",
    "HiddenOpt",
    "LabelColumnOpt",
    "ModelOpt",
    "ProxyClassesOpt",
    "ProxyDataOpt",
    "StandardizeOpt",
    "TestDataOpt",
    "TestShareOpt",
    "load_own",
    "load_proxy",
    "parse_classes",
    "parse_hidden",
    "select_proxy_classes",
]

DataFileOpt = Annotated[Path | None, typer.Option(
    "--data", help="Your own federated data instead of --dataset: .npz (x, y, client, optional "
                   "x_test, y_test), .csv or .parquet (columns client, label and the features).")]
TestDataOpt = Annotated[Path | None, typer.Option(
    help="With --data: a separate test file in the same format.")]
StandardizeOpt = Annotated[bool, typer.Option(
    "--standardize/--no-standardize",
    help="With --data: standardise every feature by the training rows' mean and std (the "
         "built-in sets are standardised too); --no-standardize uses them as given.")]
ProxyDataOpt = Annotated[Path | None, typer.Option(
    help="public-proxy/private-pilot: a public data file (the --data format), standardised by "
         "its own statistics; its rows are dealt to the N clients by their sizes, its test "
         "set (else 20% of its rows) evaluates the twin.")]
ProxyClassesOpt = Annotated[str | None, typer.Option(
    help="With a public proxy (--proxy-data or --proxy-dataset): the proxy classes kept, e.g. "
         "0-9 or 0,1,5 (relabelled 0..k-1 in that order), or MAP.json, a label map "
         "{\"proxy label\": deployment label}.")]


def parse_hidden(text: str) -> tuple[int, ...]:
    """``"64,32"`` as ``(64, 32)``; a clear error naming ``hidden`` otherwise."""
    try:
        widths = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        widths = ()
    if not widths or min(widths) < 1:
        raise ValueError(f"hidden must be comma-separated widths >= 1, got hidden={text!r}")
    return widths


def parse_classes(text: str) -> dict[int, int]:
    """``--proxy-classes``: the proxy's classes kept and the deployment label of each.

    ``"0-9"`` or ``"0,1,5"`` keeps those classes and relabels them ``0..k-1`` in that order; a
    ``.json`` file holding an object ``{"proxy label": deployment label, ...}`` is a label map
    (several proxy classes may share a deployment label). A clear error naming
    ``proxy_classes`` otherwise.
    """
    if text.strip().lower().endswith(".json"):
        return _read_label_map(Path(text.strip()))
    classes: list[int] = []
    try:
        for part in (p.strip() for p in text.split(",") if p.strip()):
            lo, sep, hi = part.partition("-")
            classes += list(range(int(lo), int(hi) + 1)) if sep else [int(part)]
    except ValueError:
        raise ValueError(f"proxy_classes must look like 0-9 or 0,1,5 or name a .json label "
                         f"map, got proxy_classes={text!r}") from None
    if not classes:
        raise ValueError(f"proxy_classes selects no class, got proxy_classes={text!r}")
    if len(set(classes)) != len(classes):
        raise ValueError(f"proxy_classes must not repeat a class, got proxy_classes={text!r}")
    return {c: i for i, c in enumerate(classes)}


def _read_label_map(path: Path) -> dict[int, int]:
    """A label map file: a JSON object of integer proxy labels to integer deployment labels."""
    import json

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"proxy_classes: label map file not found, got "
                         f"proxy_classes={str(path)!r}") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"proxy_classes: cannot read the label map {str(path)!r}: "
                         f"{e}") from None
    if not isinstance(doc, dict) or not doc:
        raise ValueError(f"proxy_classes: the label map {str(path)!r} must be a non-empty JSON "
                         f"object {{\"proxy label\": deployment label}}, got "
                         f"{type(doc).__name__} {doc!r:.60}")
    mapping: dict[int, int] = {}
    for key, value in doc.items():
        try:
            k = int(key)
        except ValueError:
            k = -1
        if k < 0 or isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"proxy_classes: the label map {str(path)!r} must map integer "
                             f"labels >= 0 to integer labels >= 0, got {key!r}: {value!r}")
        mapping[k] = value
    return mapping


def load_proxy(path: Path, *, classes: str | None, client_column: str, label_column: str,
               seed: int) -> OwnData:
    """``--proxy-data FILE [--proxy-classes ...]``: a public data file, standardised by its own
    statistics; its test set, else 20% of its rows, is the twin's evaluation set."""
    from fedqr.data import FederatedData
    from fedqr.data.source import OwnData
    from fedqr.data.tabular import read_table

    if not path.is_file():
        raise ValueError(f"proxy_data must be an existing .npz, .csv or .parquet file, got "
                         f"proxy_data={str(path)!r} (no such file)")
    try:
        t = read_table(path, client_column=client_column, label_column=label_column)
        data = FederatedData.from_arrays(
            x=t.x, y=t.y, client=t.client, x_test=t.x_test, y_test=t.y_test,
            test_share=None if t.x_test is not None else 0.2, standardize=True,
            num_classes=t.num_classes, seed=seed, name=t.stem, feature_names=t.feature_names)
    except ValueError as e:
        raise ValueError(f"proxy_data {str(path)!r}: {e}") from None
    return OwnData(data=data if classes is None else select_proxy_classes(data, classes),
                   seed=seed)


def select_proxy_classes(data: FederatedData, classes: str) -> FederatedData:
    """The rows of the classes ``--proxy-classes`` keeps, relabelled by it (errors name the
    option)."""
    mapping = parse_classes(classes)
    try:
        return data.relabel(mapping)
    except ValueError as e:
        raise ValueError(f"proxy_classes: {e} (the proxy {data.name!r} has classes "
                         f"0..{data.num_classes - 1}; got proxy_classes={classes!r})") from None


def load_own(path: Path, *, test_data: Path | None, test_share: float | None,
             client_column: str, label_column: str, standardize: bool, seed: int,
             classes: str | None = None) -> OwnData:
    """The :class:`~fedqr.data.source.OwnData` of a data file (and its class selection)."""
    from fedqr.data import FederatedData
    from fedqr.data.source import OwnData

    data = FederatedData.from_file(path, client_column=client_column,
                                   label_column=label_column, test_path=test_data,
                                   test_share=test_share, standardize=standardize, seed=seed)
    if classes is not None:
        data = select_proxy_classes(data, classes)
    return OwnData(data=data, seed=seed)
